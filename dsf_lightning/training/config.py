"""The training options of :class:`~dsf_lightning.training.LanguageModelModule` as one dataclass,
:class:`TrainConfig`, beside the model's :class:`~dsf_lightning.model.LMConfig`; how a checkpoint records both
(:data:`FORMAT`, under :data:`CONFIG_KEY`); and :func:`migrate_hparams`, the one place where a checkpoint written
before that record existed is read.

A checkpoint's ``hyper_parameters`` stay flat, the module's keyword arguments (the names of the recipes'
``model:`` keys and of ``dsf fit --model.*``; LightningCLI resumes ``--ckpt_path`` from them), and the module
writes ``checkpoint["dsf_config"] = {"format": 2, "model": {...}, "train": {...}}`` beside them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from .._checks import check_bool
from ..model import LMConfig, ModelConfigError

#: the version of the ``dsf_config`` record; a checkpoint without one is format 1 (flat ``hyper_parameters`` only)
FORMAT = 2
#: the optimizers the ``optimizer`` option names (``dsf fit --optimizer`` takes any allowed ``torch.optim`` class)
OPTIMIZER_CHOICES = ("adam", "sgd")
#: the checkpoint entry holding ``{"format": FORMAT, "model": LMConfig.to_dict(), "train": TrainConfig.to_dict()}``
CONFIG_KEY = "dsf_config"


class TrainConfigError(ModelConfigError):
    """A training option, or a combination of them, is impossible (the message names the options). A
    :class:`~dsf_lightning.model.ModelConfigError`, so ``dsf fit`` prints it as the user's one line."""


@dataclass
class TrainConfig:
    """How a :class:`~dsf_lightning.model.RecurrentLM` is trained (``LanguageModelModule``'s options that are not
    :class:`~dsf_lightning.model.LMConfig` fields), checked on construction.

    The line between the two: ``LMConfig`` is what a pretrained folder's ``config.json`` holds, enough to build
    the model and score with it; everything else is here, including ``init_from`` and ``parameter_budget``,
    which say how the model config is *arrived at* (architecture from a pretrained model, hidden size from a
    budget): the module resolves them into its ``model_config``, which records the result.
    """

    optimizer: Literal["adam", "sgd"] = "adam"
    """``"adam"`` (the DSF paper's) or ``"sgd"`` (the SCRN / awd-lstm baselines); ``dsf fit --optimizer`` replaces it."""
    lr: float = 1e-3
    """The learning rate of every parameter that no ``param_group_lr`` key matches."""
    momentum: float = 0.0
    """SGD's momentum (Adam takes none)."""
    weight_decay: float = 0.0
    """The optimizer's L2 weight decay."""
    param_group_lr: dict[str, float] | None = None
    """Learning rates of the parameters whose name contains a key, e.g. ``{"rho": 1e-6}`` (IRLM paper)."""
    lr_halving_patience: int | None = None
    """Multiply the learning rate by ``lr_decay_factor`` when ``val_loss`` has not improved for this many validations."""
    lr_decay_factor: float = 0.5
    """The factor of the two learning-rate schedules, in (0, 1] (0.5: halving)."""
    lr_decay_after_epoch: int | None = None
    """Multiply the learning rate by ``lr_decay_factor`` at every epoch end from this epoch on (Zaremba et al.)."""
    lr_halving_threshold: float = 1e-4
    """With ``lr_halving_patience``: a validation counts as an improvement only when ``val_loss`` falls below
    the best so far times ``1 - lr_halving_threshold`` (torch's ``ReduceLROnPlateau`` threshold, relative)."""
    iterative_inference_step: float = 0.0
    """Lambda of DSF sec. 2.5: the carried state steps along the gradient of the window's summed NLL (0: off)."""
    sobolev_weight: float = 0.0
    """Beta of the Sobolev penalty on ||dh_t/dh_{t-1}||_F^2 (SCRN paper eq. 10; 0: off)."""
    sobolev_layers: list[int] | None = None
    """The layers the Sobolev penalty covers (None: all)."""
    l1_weight: float = 0.0
    """Strength of an L1 penalty on every weight matrix (IRLM paper Table 2; 0: off)."""
    sampled_loss: Literal["nce", "sampled_softmax"] | None = None
    """Train with NCE or sampled softmax instead of the full softmax (evaluation always uses the full one)."""
    sampled_loss_samples: int = 1024
    """The number of noise words a sampled loss draws per step."""
    sampled_loss_noise: Literal["unigram", "log-uniform", "uniform"] = "unigram"
    """The noise distribution of a sampled loss (``"unigram"``: add-one counts of the training split)."""
    sampled_loss_epochs: float | None = None
    """With ``sampled_loss``: train with it for this many epochs (fractions count), then with the full softmax
    (None: throughout)."""
    nce_log_z: float | Literal["learned"] = 0.0
    """NCE's log-normalizer: a number, or ``"learned"`` (a parameter of the module)."""
    seed: int = 0
    """Base of the per-window RNG seeds (dropout masks, state resets): a resumed run draws the same."""
    state_reset_prob: float = 0.0
    """The probability that a training stream starts a window from zeros instead of its carried state (0: off)."""
    carry_state_after_step: int | None = None
    """Carry the state after this many steps of a training window into the next one (None: after the last)."""
    compile: bool = False
    """Run the model through ``torch.compile`` (the same results up to float round-off)."""
    fused_loss: bool = True
    """The training loss through ``linear_cross_entropy`` (the plain path's loss to round-off, less memory)."""
    init_from: str | None = None
    """Start from a pretrained model (a published name, a Hub repo id or a folder): its architecture and weights."""
    parameter_budget: int | str | None = None
    """Size every layer to a parameter budget: an int, or ``"CELL:H"`` for that reference model's count."""

    def __post_init__(self) -> None:
        """Check every option; the error names the option at fault and what it must be."""
        if self.optimizer not in OPTIMIZER_CHOICES:  # build_optimizer's check, before anything is built
            raise TrainConfigError(f"optimizer must be one of {OPTIMIZER_CHOICES}, got {self.optimizer!r}")
        f = self.lr_decay_factor
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 < f <= 1.0:
            raise TrainConfigError(f"lr_decay_factor must be in (0, 1], got {f!r}")
        _check_int("seed", self.seed, low=None)
        _check_int("sampled_loss_samples", self.sampled_loss_samples, low=1)
        for name in ("lr_halving_patience", "lr_decay_after_epoch"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), low=0, none="None: off")
        if isinstance(self.l1_weight, bool) or not isinstance(self.l1_weight, (int, float)) or not self.l1_weight >= 0:
            raise TrainConfigError(f"l1_weight must be a number >= 0, got {self.l1_weight!r}")
        check_bool("compile", self.compile, TrainConfigError)
        check_bool("fused_loss", self.fused_loss, TrainConfigError)
        p = self.state_reset_prob
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
            raise TrainConfigError(f"state_reset_prob must be a probability in [0, 1) (0: off), got {p!r}")
        t = self.lr_halving_threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t < 1.0:
            raise TrainConfigError(f"lr_halving_threshold must be a relative improvement in [0, 1) (e.g. 0.002: val_loss "
                                   f"must fall by 0.2 %), got {t!r}")
        e = self.sampled_loss_epochs
        if e is not None:
            if isinstance(e, bool) or not isinstance(e, (int, float)) or not math.isfinite(e) or e <= 0:
                raise TrainConfigError(f"sampled_loss_epochs must be a number of epochs > 0 (None: the sampled loss "
                                       f"throughout), got {e!r}")
            if self.sampled_loss is None:
                raise TrainConfigError("sampled_loss_epochs says for how long the sampled loss trains, but sampled_loss "
                                       "is not set: give sampled_loss (nce or sampled_softmax) too, or drop it")
            if self.nce_log_z == "learned":
                raise TrainConfigError("sampled_loss_epochs with nce_log_z 'learned': after the switch the learned "
                                       "normalizer gets no gradient (DDP stops on an unused parameter); fix it "
                                       "(nce_log_z 0) or train with NCE throughout")
        if self.lr_decay_after_epoch is not None and self.lr_halving_patience is not None:
            raise TrainConfigError("lr_decay_after_epoch and lr_halving_patience are two schedules: set only one (to drop "
                                   "a recipe's, give it as null: --model.lr_decay_after_epoch null)")
        k = self.carry_state_after_step
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise TrainConfigError("carry_state_after_step must be a number of steps >= 1 (None: carry the "
                                       f"window's last state), got {k!r}")
            if self.iterative_inference_step:
                raise TrainConfigError("carry_state_after_step and iterative_inference_step cannot be combined: "
                                       "iterative inference refines the window's last state; set one of them")
        if self.param_group_lr is not None and not isinstance(self.param_group_lr, dict):
            raise TrainConfigError("param_group_lr must map a parameter-name fragment to its learning rate (e.g. "
                                   f"{{'rho': 1e-6}}) or be None, got {self.param_group_lr!r:.80}")
        _check_finite_options(lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay,
                              iterative_inference_step=self.iterative_inference_step, sobolev_weight=self.sobolev_weight,
                              **{f"param_group_lr[{k!r}]": v for k, v in (self.param_group_lr or {}).items()},
                              **({} if isinstance(self.nce_log_z, str) else {"nce_log_z": (self.nce_log_z, None)}))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """The config :meth:`to_dict` gave; an unknown field raises :class:`ValueError` naming it."""
        if not isinstance(data, dict):
            raise TrainConfigError(f"a training config must be a dict of fields, got {type(data).__name__} {data!r:.80}")
        unknown = sorted(set(data) - _field_names(cls), key=str)
        if unknown:
            raise TrainConfigError(f"unknown training config field(s) {unknown}; known: {sorted(_field_names(cls))}")
        return cls(**data)

    @classmethod
    def from_hparams(cls, hparams: dict[str, Any]) -> TrainConfig:
        """The training options inside a flat mapping (the module's arguments, a checkpoint's ``hyper_parameters``
        after :func:`migrate_hparams`): the fields of this class are taken, the rest (the model's) ignored."""
        return cls(**{k: v for k, v in hparams.items() if k in _field_names(cls)})


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _check_int(name: str, value: Any, low: int | None, none: str = "") -> None:
    """Raise :class:`TrainConfigError` unless ``value`` is an int (not a bool) of at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        bound = "an integer" if low is None else f"an integer >= {low}"
        raise TrainConfigError(f"{name} must be {bound}{f' ({none})' if none else ''}, got {value!r:.80}")


def _check_finite_options(**options) -> None:
    """Raise :class:`TrainConfigError` for an option that is not a finite number (a YAML ``.inf`` / ``.nan``
    would train every weight into NaN) or below its minimum (0, unless given as ``(value, None)``)."""
    for name, value in options.items():
        value, low = value if isinstance(value, tuple) else (value, 0.0)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (low is not None and value < low):
            bound = "" if low is None else f" >= {low:g}"
            raise TrainConfigError(f"{name} must be a finite number{bound}, got {value!r}")


# ----------------------------------------------------------------------------------------------- older checkpoints
#: Format 1 (no ``dsf_config``): the options added since the first checkpoints were written whose default is not
#: what the code computed before they existed, with that value (an option added with an "off" default, such as
#: ``l1_weight``, ``compile``, ``state_reset_prob`` or ``carry_state_after_step``, takes its default). A new option
#: whose default changes what is computed gets its entry here.
BEFORE_THE_OPTION: dict[str, Any] = {
    "fused_loss": False,  # on by default, but a run written before it computed the loss the plain way
}


def migrate_hparams(hparams: dict[str, Any]) -> dict[str, Any]:
    """A ``LanguageModelModule`` checkpoint's flat ``hyper_parameters`` of any format as those of today: every
    :class:`~dsf_lightning.model.LMConfig` and :class:`TrainConfig` field present (an option the checkpoint
    predates: :data:`BEFORE_THE_OPTION`, else the field's default); other keys (``_class_path``) kept. The one
    place where older checkpoints are read differently from new ones."""
    if not isinstance(hparams, dict):
        raise ValueError(f"hyper_parameters must be a dict of the module's options, got {type(hparams).__name__}")
    migrated = dict(hparams)
    for name, value in BEFORE_THE_OPTION.items():
        migrated.setdefault(name, value)
    defaults = {**LMConfig.__dataclass_fields__, **TrainConfig.__dataclass_fields__}
    for name, f in defaults.items():
        if name not in migrated and f.default is not dataclasses.MISSING:
            migrated[name] = f.default
        elif name not in migrated and f.default_factory is not dataclasses.MISSING:
            migrated[name] = f.default_factory()
    return migrated


def checkpoint_configs(checkpoint: dict[str, Any]) -> tuple[LMConfig, TrainConfig]:
    """The model and training configs a ``LanguageModelModule`` checkpoint was written with: its ``dsf_config``
    record (format 2), else its ``hyper_parameters`` through :func:`migrate_hparams`. A record of a newer format
    than this installation reads is a :class:`ValueError` saying to upgrade."""
    record = checkpoint.get(CONFIG_KEY)
    if record is None:
        hparams = migrate_hparams(checkpoint.get("hyper_parameters"))
        return LMConfig.from_hparams(hparams), TrainConfig.from_hparams(hparams)
    check_config_record(record)
    return LMConfig.from_dict(record["model"]), TrainConfig.from_dict(record["train"])


def check_config_record(record: Any) -> None:
    """Raise :class:`ValueError` unless ``record`` (a checkpoint's :data:`CONFIG_KEY` entry) is absent (format 1)
    or of the format this installation reads."""
    if record is None:
        return
    version = record.get("format") if isinstance(record, dict) else None
    if version != FORMAT:
        raise ValueError(
            f"{CONFIG_KEY} format {version!r}: this dsf-lightning reads format {FORMAT} (or a checkpoint without "
            f"{CONFIG_KEY}); a newer format was written by a newer dsf-lightning: upgrade it"
        )


def config_record(model_config: LMConfig, train_config: TrainConfig) -> dict[str, Any]:
    """What a checkpoint holds under :data:`CONFIG_KEY`: both configs, plain and JSON-serializable, and the format."""
    return {"format": FORMAT, "model": model_config.to_dict(), "train": train_config.to_dict()}
