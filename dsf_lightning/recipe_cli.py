"""The LightningCLI that trains a recipe: ``dsf fit | validate | test | predict`` and every ``dsf reproduce`` row
call :func:`lightning_cli` (the one training entry point below the command line; the ``dsf`` commands keep their
argv, help and error handling in :mod:`dsf_lightning.cli.lightning`).

Two recipe forms: a language model (plain ``model:`` / ``data:`` keys, ``data.vocab_size`` linked into the model)
and the sequence tasks (``model:`` / ``data:`` by ``class_path``, subclass mode, the DataModule's ``vocab_size``,
``input_size`` and ``num_classes`` linked in). Everything is parsed, instantiated and run under the recipe policy
(:mod:`dsf_lightning.training.recipe_guard`: allowed classes only, bounded YAML, no URL unless
``allow_remote_paths``, no recipe-named write outside the run directory, weights-only checkpoints).

The training policy comes with the module (:mod:`dsf_lightning.training.policy`); the CLI adds its callbacks to
the trainer it builds like any user could (so they are in ``cli.trainer.callbacks`` before ``fit``), with
``--nonfinite_guard false`` turning the guard off, and the atomic checkpoint writer as a Trainer plugin unless one
is given.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from functools import partial
from typing import Optional

from .training.recipe_guard import ALLOW_REMOTE_FLAG  # noqa: F401 - the command line's flag for allow_remote_paths


def is_task_recipe(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (its ``--config`` files, ``--model`` / ``--data`` values) names the model or the
    data by ``class_path``: the sequence-task form (``SequenceClassifier`` + a task DataModule) rather
    than the language-model form (plain ``model:`` / ``data:`` keys)."""
    from .training.recipe_guard import config_source as _config_source
    from .training.recipe_guard import names_a_class

    args = [str(a) for a in argv]
    for i, arg in enumerate(args):
        key, value = (arg.split("=", 1) + [None])[:2] if arg.startswith("--") else (arg, None)
        if value is None and i + 1 < len(args) and not args[i + 1].startswith("--"):
            value = args[i + 1]
        key = key.lstrip("-")
        if key in ("model.class_path", "data.class_path"):
            return True
        if value is None:
            continue
        if key in ("model", "data"):
            parsed, _ = _config_source(value)
            if names_a_class(parsed):
                return True
        elif key in ("c", "config"):
            parsed, _ = _config_source(value)
            if isinstance(parsed, dict) and any(
                isinstance(parsed.get(group), (dict, str)) and names_a_class(parsed.get(group)) for group in ("model", "data")
            ):
                return True
    return False


def _data_option(name: str):
    """``compute_fn`` for a link from the instantiated task DataModule: one of its ``model_options()``
    (read there, not from an attribute: IMDB knows its vocabulary only once its reviews are read)."""

    def compute(data):
        options = data.model_options() if hasattr(data, "model_options") else {}
        default = {"vocab_size": 0, "input_size": 0}.get(name)
        value = options.get(name, getattr(data, name, default))
        return default if value is None else value

    compute.__name__ = f"model_options()[{name!r}]"
    return compute


def _check_resume_options(cli, argv: Sequence[str]) -> None:
    """``dsf fit --ckpt_path``: LightningCLI replaces the model options with the checkpoint's
    ``hyper_parameters``. A model option set to another value than the checkpoint's (on the command line,
    or in a config to a value other than its default) is a
    :class:`~dsf_lightning.training.resume.ResumeMismatchError` instead; options left out are the checkpoint's."""
    from .training.resume import ARCHITECTURE_HPARAMS, check_hyperparameters

    sub = cli.config.get("subcommand")
    if sub != "fit" or not cli.config[sub].get("ckpt_path") or task_mode_of(cli):
        return
    before = getattr(cli, "_model_before_ckpt", None)
    after = cli.config[sub].get("model")
    if before is None or after is None:
        return
    before, after = before.as_dict(), after.as_dict()
    defaults = {n: p.default for n, p in inspect.signature(cli.model_class).parameters.items()}
    named = {a.split("=", 1)[0][len("--model."):].split(".")[0] for a in map(str, argv) if a.startswith("--model.")}
    given = {k: v for k, v in before.items() if k in named or (k in defaults and v != defaults[k])}
    budget = after.get("parameter_budget") is not None or before.get("parameter_budget") is not None
    if budget:
        given.pop("hidden_sizes", None)  # replaced by the size the budget gives (as recorded)
    # an architecture option left out is the default model's, not the checkpoint's: a resume that would train
    # another model than the recipe asks for is refused (init_from: the pretrained model decides them)
    defaulted = set() if before.get("init_from") is not None else {
        k for k in ARCHITECTURE_HPARAMS if k in before and k not in given and not (budget and k == "hidden_sizes")}
    given.update({k: before[k] for k in defaulted})
    empty = ("cell_options",)  # None and {} both mean "no options"
    saved = {k: (None if k in empty and not after.get(k) else after.get(k)) for k in given}
    given = {k: (None if k in empty and not v else v) for k, v in given.items()}
    check_hyperparameters(saved, given, source=f"checkpoint {cli.config[sub]['ckpt_path']}", defaulted=defaulted)


def _class_spec(value) -> dict | None:
    """A parsed ``--optimizer`` / ``--lr_scheduler`` value as ``{class_path, init_args}`` (None: not given)."""
    if not value:
        return None
    value = value.as_dict() if hasattr(value, "as_dict") else dict(value)
    return value if value.get("class_path") else None


def _cli_optimization(model, optimizer_init, scheduler_init) -> None:
    """``dsf fit --optimizer CLASS`` / ``--lr_scheduler CLASS`` (LightningCLI's keys, classes from the recipe
    allowlist) on top of the module's own ``configure_optimizers``:

    * ``--optimizer``: a module with ``optimizer_factory`` (:class:`~dsf_lightning.training.LanguageModelModule`)
      builds it over its own parameter groups (``param_group_lr``) and keeps its own schedule; its
      ``model.optimizer`` / ``lr`` / ``momentum`` / ``weight_decay`` are replaced by the class's init_args. Other
      modules get it over all their parameters;
    * ``--lr_scheduler``: stepped on the module's optimizer (or ``--optimizer``'s) every epoch; a
      ``ReduceLROnPlateau`` (the DSF paper's "halve when validation does not improve") after every validation on
      ``val_loss``. A module that sets its own schedule (``model.lr_halving_patience``,
      ``model.lr_decay_after_epoch``) is a :class:`~dsf_lightning.model.ModelConfigError`: one schedule at a time.
    """
    from functools import partial, update_wrapper
    from types import MethodType

    from lightning.pytorch.cli import instantiate_class

    optimizer_init, scheduler_init = _class_spec(optimizer_init), _class_spec(scheduler_init)
    if optimizer_init is None and scheduler_init is None:
        return
    if optimizer_init is not None:
        if hasattr(model, "optimizer_factory"):
            model.optimizer_factory = partial(instantiate_class, init=optimizer_init)
            optimizer_init = None
    if scheduler_init is not None:
        from .model import ModelConfigError

        own = type(model).configure_optimizers(model)  # a probe: does the module set a schedule of its own?
        if isinstance(own, dict) and own.get("lr_scheduler") is not None:
            hp = getattr(model, "hparams", {})
            options = [f"model.{k}={hp.get(k)!r}" for k in ("lr_halving_patience", "lr_decay_after_epoch")
                       if hp.get(k) is not None]
            raise ModelConfigError(
                f"--lr_scheduler {scheduler_init['class_path']} and the model's own schedule ({', '.join(options) or 'configure_optimizers'}) "
                "would both set the learning rate: drop --lr_scheduler, or turn the model's off "
                "(--model.lr_halving_patience null / --model.lr_decay_after_epoch null)"
            )
    configure = partial(_configure_optimizers, optimizer_init=optimizer_init, scheduler_init=scheduler_init)
    update_wrapper(configure, type(model).configure_optimizers)
    model.configure_optimizers = MethodType(configure, model)


def _configure_optimizers(model, optimizer_init=None, scheduler_init=None):
    """``configure_optimizers`` of a module under :func:`_cli_optimization`."""
    import torch
    from lightning.pytorch.cli import instantiate_class

    result = type(model).configure_optimizers(model)
    if optimizer_init is not None:  # a module without optimizer_factory: LightningCLI's own behaviour
        return _with_schedule(instantiate_class(model.parameters(), optimizer_init), scheduler_init)
    if scheduler_init is None:
        return result
    optimizer = result["optimizer"] if isinstance(result, dict) else result
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"--lr_scheduler needs one optimizer from {type(model).__name__}.configure_optimizers, got {result!r}")
    return _with_schedule(optimizer, scheduler_init)


def _with_schedule(optimizer, scheduler_init):
    from lightning.pytorch.cli import instantiate_class

    from .training.optim import with_schedule

    # LanguageModelModule steps plateau schedules itself after every validation; Lightning steps them at epoch
    # ends for other modules
    return with_schedule(optimizer, None if scheduler_init is None else instantiate_class(optimizer, scheduler_init))


#: the loggers that need a package dsf-lightning does not install: (importable names, the extra that installs one)
LOGGER_EXTRAS = {"TensorBoardLogger": (("tensorboard", "tensorboardX"), "tensorboard"), "WandbLogger": (("wandb",), "wandb")}


class LoggerPackageError(ModuleNotFoundError):
    """A recipe or command line names a logger whose package is not installed (the message names the extra)."""


def check_logger_packages(trainer) -> None:
    """Raise :class:`LoggerPackageError` when ``trainer.logger`` (one spec or a list) names a logger of
    :data:`LOGGER_EXTRAS` none of whose packages is importable, before Lightning fails on it mid-parse."""
    import importlib.util

    value = trainer.get("logger") if trainer is not None and hasattr(trainer, "get") else None
    for spec in value if isinstance(value, (list, tuple)) else [value]:
        path = spec.get("class_path") if hasattr(spec, "get") else spec if isinstance(spec, str) else None
        name = str(path).rsplit(".", 1)[-1] if path else None
        if name not in LOGGER_EXTRAS:
            continue
        packages, extra = LOGGER_EXTRAS[name]
        if not any(importlib.util.find_spec(p) is not None for p in packages):
            raise LoggerPackageError(
                f"trainer.logger {name} needs the {' or '.join(repr(p) for p in packages)} package, which is not "
                f"installed: pip install 'dsf-lightning[{extra}]' (or choose lightning.pytorch.loggers.CSVLogger, "
                "which needs nothing more)"
            )


class ClusterEnvironmentError(ValueError):
    """``trainer.plugins`` names a cluster's environment (SLURM, torchelastic) but the process does not run there."""


#: the variables Lightning's SLURMEnvironment reads (a KeyError outside a SLURM job)
SLURM_VARIABLES = ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID")


def check_cluster_environments(plugins) -> None:
    """Raise :class:`ClusterEnvironmentError` for a ``ClusterEnvironment`` plugin whose cluster this process is
    not part of (``SLURMEnvironment`` without SLURM's variables, another whose ``detect()`` is false), before
    Lightning reads a missing variable. ``LightningEnvironment`` (the default, anywhere) always passes."""
    import os

    from lightning.fabric.plugins.environments import ClusterEnvironment, LightningEnvironment, SLURMEnvironment

    for plugin in plugins:
        if not isinstance(plugin, ClusterEnvironment) or isinstance(plugin, LightningEnvironment):
            continue
        name = type(plugin).__name__
        if isinstance(plugin, SLURMEnvironment):
            missing = [v for v in SLURM_VARIABLES if v not in os.environ]
            if not missing:
                continue
            why = f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set"
            todo = "launch it with srun inside a SLURM job"
        elif type(plugin).detect():
            continue
        else:
            why, todo = "its variables are not set", "launch it the way that cluster starts processes"
        raise ClusterEnvironmentError(
            f"trainer.plugins {name}: this process does not run under that cluster ({why}): drop the plugin "
            f"(Lightning detects a cluster it runs in by itself), or {todo}"
        )


def _one_line_parse_error(parser, error, report: Callable[[str], None], message: str, ex: Exception | None = None):
    """A parse error handed to ``report`` (the ``dsf`` command's one line, exit 2) instead of jsonargparse's usage
    block, tip and a message that may span lines (YAML's); parses that only probe (``exit_on_error`` off) still
    raise, as jsonargparse's own ``error`` does. A parse the recipe policy refused (a URL, a class not allowed,
    unbounded YAML) exits without a line here: :func:`~dsf_lightning.training.recipe_guard.guarded` raises it as
    one error (for a class not allowed, jsonargparse's message, which names the class as the recipe gave it even
    nested in ``init_args``, then the classes allowed)."""
    from .training.recipe_guard import active_policy

    if not parser.exit_on_error:
        return error(message, ex)
    policy = active_policy()
    if policy is not None and policy.message() is not None:
        policy.parse_error = " ".join(str(message).split())
        raise SystemExit(2)
    report(" ".join(str(message).split()))
    raise SystemExit(2)


def task_mode_of(cli) -> bool:
    return bool(getattr(cli, "subclass_mode_model", False))


def lightning_cli(argv: Sequence[str], run: bool = True, allow_remote_paths: bool = False,
                  report_parse_error: Callable[[str], None] | None = None):
    """Run a LightningCLI subcommand (``fit``, ``validate``, ``test``, ``predict``); with
    ``run=False`` ``argv`` holds no subcommand and the CLI only parses and instantiates (recipe tests, and
    :func:`dsf_lightning.reproduce.runner.run_row`, which fits and tests the row itself).
    ``allow_remote_paths``: URLs allowed as paths and config includes (``dsf fit --allow-remote-paths``;
    never from a recipe, :func:`~dsf_lightning.training.recipe_guard.check_paths`).
    ``report_parse_error(message)``: called with a parse error as one line before ``SystemExit(2)`` (the ``dsf``
    command's ``dsf fit: error: ...``); None: jsonargparse's own usage and message.

    Two recipe forms:

    * language models (plain ``model:`` / ``data:`` keys): :class:`~dsf_lightning.training.LanguageModelModule`
      over :class:`~dsf_lightning.training.datamodule.LanguageModelDataModule`, ``data.vocab_size`` linked in;
    * sequence tasks (``model:`` / ``data:`` with a ``class_path``, the sr-RNN paper's tasks): subclass mode
      over :class:`~dsf_lightning.tasks.SequenceClassifier` / ``SequenceTagger`` and the task DataModules
      (:class:`~dsf_lightning.tasks.SequenceDataModule`), with the DataModule's ``vocab_size``,
      ``input_size`` and ``num_classes`` linked into the model.
    """
    from lightning.pytorch.cli import LightningCLI

    from .training import LanguageModelModule
    from .training.checkpoint_io import AtomicCheckpointIO, check_checkpoint_file
    from .training.datamodule import LanguageModelDataModule
    from .training.guards import check_trainer_counts
    from .training.policy import policy_callbacks
    from .training.recipe_guard import (
        check_checkpoint,
        check_parsed_config,
        check_paths,
        command_line_values,
        force_weights_only,
        guarded,
    )
    from .training.saved_config import SafeSaveConfigCallback, config_inputs

    task_mode = is_task_recipe(argv)

    class DSFCLI(LightningCLI):
        def __init__(self, *args, **kwargs) -> None:
            # parse, instantiate and run under the recipe policy: only the allowed classes are imported,
            # nothing is built from Any values, YAML is bounded (recipe_guard; UnsafeRecipeError otherwise)
            guarded(super().__init__, *args, allow_remote_paths=allow_remote_paths, **kwargs)

        def init_parser(self, **kwargs):
            parser = super().init_parser(**kwargs)
            if report_parse_error is not None:
                parser.error = partial(_one_line_parse_error, parser, parser.error, report_parse_error)
            return parser

        def add_arguments_to_parser(self, parser) -> None:
            from .training.precision import allow_auto_precision

            allow_auto_precision(parser)  # --trainer.precision auto: resolved in instantiate_trainer
            parser.add_argument(
                "--nonfinite_guard", type=bool, default=True,
                help="add NonFiniteGuard (skip NaN / inf steps, stop on non-finite weights) unless trainer.callbacks "
                "has one; false: train without it",
            )
            if task_mode:
                # what the data decides (vocabulary, features, classes): a YAML value for these is ignored.
                # `end_token` is not linked (SequenceTagger has none); SequenceClassifier.setup checks it
                # against the data's start_end_tokens.
                for name in ("vocab_size", "input_size", "num_classes"):
                    parser.link_arguments("data", f"model.init_args.{name}", compute_fn=_data_option(name),
                                          apply_on="instantiate")
                return
            # the vocabulary is known only once the corpus is read: a YAML value here is ignored
            parser.link_arguments("data.vocab_size", "model.vocab_size", apply_on="instantiate")
            # fine-tuning: the data is encoded with the vocabulary of the model it starts from
            parser.link_arguments("model.init_from", "data.vocab_from", apply_on="parse")

        def _prepare_subcommand_parser(self, klass, subcommand: str, **kwargs):
            parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
            if subcommand == "predict" and not task_mode:
                # the lines go to a file as they are scored (TokenLogprobWriter), not into a list in memory
                parser.set_defaults({"return_predictions": False})
                parser.add_argument(
                    "--predict_output", type=Optional[str], default=None,  # noqa: UP045 - a runtime type for jsonargparse
                    help="JSON-lines file for the per-token log-probabilities (default: predictions.jsonl in "
                    "trainer.default_root_dir); ignored when trainer.callbacks has a TokenLogprobWriter",
                )
            return parser

        def _parse_ckpt_path(self) -> None:
            # LightningCLI parses the checkpoint's hyper_parameters into the config: weights-only and bounded
            # first (recipe_guard.check_checkpoint); their class paths then meet the allowlist like a recipe's
            config = self.config.get(str(self.config.get("subcommand")), None) if self.config.get("subcommand") else None
            if config is not None and config.get("ckpt_path"):
                check_checkpoint_file(str(config.get("ckpt_path")))  # missing, a folder, not a checkpoint: one line
                check_checkpoint(str(config.get("ckpt_path")))
            super()._parse_ckpt_path()

        def parse_arguments(self, parser, args) -> None:
            import warnings

            with warnings.catch_warnings():
                # `args` is always dsf's own command line (or a `dsf reproduce` row), never a second one
                # beside sys.argv: LightningCLI's warning about getting both would be printed by every command
                warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
                super().parse_arguments(parser, args)
            sub = self.config.get("subcommand")  # the model options as given, before --ckpt_path replaces them
            model = self.config.get(sub, {}).get("model") if sub else None
            self._model_before_ckpt = model.clone() if hasattr(model, "clone") else None

        def _add_configure_optimizers_method_to_model(self, subcommand) -> None:
            # LightningCLI's --optimizer / --lr_scheduler, combined with the module's own optimizer options
            # instead of replacing its configure_optimizers (which dropped param_group_lr and the schedule, and
            # ignored an --lr_scheduler given without --optimizer)
            _cli_optimization(self.model, self._get(self.config_init, "optimizer"), self._get(self.config_init, "lr_scheduler"))

        def before_instantiate_classes(self) -> None:
            _check_resume_options(self, argv)  # --ckpt_path: model options the checkpoint would silently replace
            # Lightning lists `devices` indices up front: refuse absurd counts (ValueError) before that
            config = self.config.get(str(self.subcommand), self.config) if self.subcommand else self.config
            check_parsed_config(config)  # no class spec left half-parsed in a plain-data option
            check_paths(config, argv, allow_remote_paths)  # no URL; no recipe-named write outside the run directory
            force_weights_only(config)  # a checkpoint is never unpickled, whatever weights_only says
            check_logger_packages(config.get("trainer"))  # a logger whose package is missing: name the extra
            check_trainer_counts(config.get("trainer"))

        def instantiate_trainer(self, **kwargs):
            # atomic, fsynced checkpoint files and weights-only resume, unless a CheckpointIO is given
            from lightning.pytorch.plugins.io import CheckpointIO

            config = self._get(self.config_init, "trainer", default={})
            plugins = kwargs.get("plugins", config.get("plugins"))
            plugins = [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
            check_cluster_environments(plugins)  # a cluster's plugin outside that cluster: one line, not a KeyError
            if not any(isinstance(p, CheckpointIO) for p in plugins):
                kwargs["plugins"] = [*plugins, AtomicCheckpointIO()]  # as a user would; the module's policy keeps it
            # the module's training policy (training/policy.py: NaN / inf steps skipped, non-finite weights stop the
            # run before their checkpoint, a max_steps run validates, last.ckpt after every validation ...), added
            # here as any user could, so it is in cli.trainer.callbacks before fit; the module adds no type twice
            import dataclasses

            callbacks = kwargs.get("callbacks", config.get("callbacks"))
            callbacks = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
            policy = getattr(self.model, "training_policy", None)
            if policy is not None:
                if not self._get(self.config_init, "nonfinite_guard", default=True):
                    policy = self.model.training_policy = dataclasses.replace(policy, nonfinite_guard=False)
                kwargs["callbacks"] = callbacks = [*callbacks, *policy_callbacks(policy, callbacks, self.subcommand == "fit")]
            if self.subcommand == "predict" and not task_mode:  # dsf predict: per-token JSON lines
                from .training.prediction import TokenLogprobWriter

                if not any(isinstance(c, TokenLogprobWriter) for c in callbacks):
                    output = self._get(self.config_init, "predict_output", default=None)
                    # an existing file is replaced only when the command line itself names it, never a recipe
                    named = any(key == "predict_output" for key, _ in command_line_values(argv))
                    kwargs["callbacks"] = [*callbacks, TokenLogprobWriter(output, overwrite=named)]
            from .training.precision import resolve_auto_precision  # precision auto: timed here (Lightning takes none)

            kwargs.update(resolve_auto_precision(config, self.model, self.datamodule))
            return super().instantiate_trainer(**kwargs)

    if task_mode:
        from .tasks.data import SequenceDataModule
        from .tasks.modules import _RecurrentSequenceModule

        return DSFCLI(
            _RecurrentSequenceModule,
            SequenceDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            args=list(argv),
            run=run,
            seed_everything_default=0,
            trainer_defaults={"use_distributed_sampler": False},  # the task DataModules split batches per rank
            save_config_callback=SafeSaveConfigCallback,  # never over a file no run wrote (the user's config.yaml)
            save_config_kwargs={"inputs": config_inputs(argv)},
        )
    return DSFCLI(
        LanguageModelModule,
        LanguageModelDataModule,
        args=list(argv),
        run=run,
        seed_everything_default=0,
        trainer_defaults={"use_distributed_sampler": False},
        save_config_callback=SafeSaveConfigCallback,  # never over a file no run wrote (the user's config.yaml)
        save_config_kwargs={"inputs": config_inputs(argv)},
    )


def error_kinds() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """``(user errors, failures)`` of :func:`lightning_cli`: what a bad recipe, option, checkpoint or input file
    raises (a command says it in one line, exit 2), and what a run that failed raises (diverged: exit 1). Anything
    else (a ValueError inside a training step) is a bug and keeps its traceback."""
    from .data.corpora.files import CorpusError
    from .data.tokenizers import TokenizerError
    from .data.vocab import VocabularyError
    from .model import ModelConfigError
    from .training.checkpoint_io import CheckpointLoadError, CheckpointWriteError, NonFiniteCheckpointError
    from .training.guards import NonFiniteError
    from .training.recipe_guard import UnsafeRecipeError
    from .training.resume import ResumeMismatchError
    from .training.saved_config import ConfigSaveError

    user = (UnsafeRecipeError, ResumeMismatchError, ModelConfigError, LoggerPackageError, CheckpointLoadError,
            CheckpointWriteError, ConfigSaveError, ClusterEnvironmentError, CorpusError, VocabularyError, TokenizerError)
    return user, (NonFiniteError, NonFiniteCheckpointError)
