"""The LightningModule that trains a :class:`~dsf_lightning.model.RecurrentLM` with truncated BPTT.

Each training batch is one window ``(inputs [b, T], targets [b, T], window_index)`` of this rank's
contiguous streams (:class:`~dsf_lightning.data.streams.StreamWindows`). The module carries the final
state of a window, detached and in fp32, into the next one; window 0 starts from zeros, so the state
resets at every epoch. With padded sentence batches (:class:`~dsf_lightning.data.sentences.SentenceBatches`,
``data.batching: sentences``) a window has a fourth element, ``reset`` [b]: those rows start from zeros (a
batch's first window), and the losses, the token counts and iterative inference count only the targets that
are not padding (``IGNORE_INDEX``). Validation and test carry their own state. Corpus metrics are exact float64
sums of cross-entropy and token counts, reduced over all ranks before PPL / BPC are formed.

Exact resume: a checkpoint holds the carried state of every rank (gathered), the position of the run
(epoch, windows trained, whether the epoch's validation ran: :mod:`~dsf_lightning.training.resume`, which
also rewrites Lightning's loop counters on load so that a checkpoint of an epoch's last window, or of a
run that had itself resumed, neither loses a validation nor replays the epoch), and every training step
seeds the RNG from (seed, epoch, window, rank), so a resumed run draws the same dropout masks as one that
never stopped. The plateau schedule steps after every validation (not at Lightning's epoch end, which a
resumed epoch skips). Resuming with other model options is a
:class:`~dsf_lightning.training.resume.ResumeMismatchError`.

Iterative inference (DSF paper sec 2.5, off by default): after the backward pass the carried state
takes one gradient step ``h_T <- h_T - lambda * dL/dh_T`` (lambda in {0.05, 0.1, 0.15} in the paper),
with ``L`` the window's *summed* negative log-likelihood, the paper's eq. 15 (so each stream's state
moves along the gradient of its own loss, whatever the batch size and window length; the optimizer
sees the mean per token, which Adam does not mind but a step on the state would: 1 / (B T) smaller).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from ..data.sentences import IGNORE_INDEX
from ..model import LMConfig, ModelState, RecurrentLM, count_parameters, detach_state
from ..ops.linear_cross_entropy import linear_cross_entropy
from ..regularizers import l1_penalty, sobolev_penalty
from .callbacks import epochs_trained
from .config import CONFIG_KEY, OPTIMIZER_CHOICES, TrainConfig, TrainConfigError, check_config_record, config_record
from .optim import FusedClipping, build_optimizer, fused_allowed, with_schedule
from .policy import TrainingPolicy, module_callbacks
from .sampled_softmax import SampledLoss, decoder_parameters

LN2 = math.log(2.0)


def refine_carried_state(
    model: RecurrentLM, final_state: ModelState, carried: ModelState, step: float, grad_scale: float = 1.0
) -> ModelState:
    """One step of iterative inference (DSF sec. 2.5): ``carried - step * dL/dh_T`` for every state tensor,
    reading ``dL/dh_T`` as ``grad_scale`` times ``final_state``'s ``.grad`` (``retain_grad`` before the
    backward pass; ``grad_scale`` turns the gradient of the loss that was back-propagated into that of
    ``L``, e.g. tokens / AMP loss scale). A state the last output does not read has ``dL/dh_T = 0`` and stays;
    one it reads but that got no gradient is a bug of the path that produced it (a final state cut off
    the loss graph), raised as :class:`RuntimeError` rather than silently skipped."""
    refined = []
    for i, (layer, states, kept) in enumerate(zip(model.layers, final_state, carried)):
        new = []
        for j, (s, c) in enumerate(zip(states, kept)):
            if s.grad is not None:
                new.append(c - step * (s.grad.float() * grad_scale))
            elif layer.output_reads_state(j):
                raise RuntimeError(
                    f"iterative inference: no gradient reached the final state {j} of layer {i} ({layer.cell_name or type(layer).__name__}), "
                    "which the last output reads: the forward path that returned it left it off the loss graph"
                    + ("" if s.requires_grad else " (it does not require grad: are the layer's parameters frozen?)")
                )
            else:
                new.append(c)
        refined.append(tuple(new))
    return tuple(refined)

class LanguageModelModule(FusedClipping, L.LightningModule):
    """Train, validate and test a stacked recurrent LM on stream windows.

    Built from two configs, :meth:`from_configs` (``model_config``: a :class:`~dsf_lightning.model.LMConfig`;
    ``train_config``: a :class:`~dsf_lightning.training.config.TrainConfig`), or from their fields as keyword
    arguments (the names of the recipes' ``model:`` keys and of ``dsf fit --model.*``). A checkpoint records both
    (``dsf_config``, format 2) beside the flat ``hyper_parameters``; one written before is read through
    :func:`~dsf_lightning.training.config.migrate_hparams`.

    Args:
        vocab_size: linked from the DataModule by the CLI.
        init: the initialization scheme, ``{scheme: uniform, scale: r}`` (SCRN paper) or ``{scheme: normal,
            std: sigma}`` (DSF paper); None (default): each cell's own (:class:`~dsf_lightning.model.LMConfig`).
        cell, hidden_sizes, cell_options, embedding_size, tie_weights, dropout_*, variational: the
            model (see :class:`~dsf_lightning.model.LMConfig`).
        optimizer: ``"adam"`` (the DSF paper's choice) or ``"sgd"`` (the SCRN / awd-lstm baselines); LightningCLI's
            ``--optimizer`` (any allowed ``torch.optim`` class) replaces it and ``lr`` / ``momentum`` /
            ``weight_decay`` (:attr:`optimizer_factory`), keeping the ``param_group_lr`` groups and the schedule.
        lr, momentum, weight_decay: optimizer settings.
        param_group_lr: learning rates for parameters whose name contains a key, e.g.
            ``{"rho": 1e-6}`` for the IRLM paper's 1000-fold smaller rate on the self-connections (with
            the cell option ``r_parametrization: direct``, so that it is the rate of r itself).
        lr_halving_patience: halve the learning rate when ``val_loss`` has not improved for this many
            validations (None: never).
        iterative_inference_step: lambda of DSF sec 2.5 (0: off): the carried state steps by lambda times
            the gradient of the window's summed NLL (eq. 15; see the module docstring).
        sobolev_weight: beta of the Sobolev penalty on ||dh_t/dh_{t-1}||_F^2 (SCRN paper sec 7, eq. 10;
            0: off), over ``sobolev_layers`` (None: all).
        l1_weight: strength of an L1 penalty on every weight matrix (IRLM paper Table 2, "IRLM (L1 reg)";
            0: off), added to the mean per-token loss.
        sampled_loss: train with ``"nce"`` (IRLM sec 5.2) or ``"sampled_softmax"`` instead of the full
            softmax, with ``sampled_loss_samples`` noise words drawn from ``sampled_loss_noise``
            (``"unigram"`` from the training split, ``"log-uniform"`` or ``"uniform"``); evaluation always
            uses the exact full softmax. ``nce_log_z``: NCE's log-normalizer (a number, or ``"learned"``).
            ``sampled_loss_epochs``: the sampled loss for the first this many epochs (fractions count, as
            ``epoch + window / windows``), the full softmax after (None: the sampled loss throughout): cheap
            windows while the model is far from good, the exact objective once it is.
        seed: base of the per-window RNG seeds (dropout masks).
        parameter_budget: a fixed parameter budget (the DSF paper's Table 2): an int, or ``"CELL:H"``
            for the parameter count of that reference model (e.g. ``"lstm:100"``; cell options in
            parentheses, ``"lstm(peepholes=matrix):100"`` for the DSF paper's LSTM) with the same
            vocabulary, layers, embedding size and tying. When set, the size of every layer in
            ``hidden_sizes`` is replaced by the one whose model count is closest to the budget
            (:func:`~dsf_lightning.model.budget.hidden_size_for_budget`; the number of layers is
            kept). The chosen size is logged and is what ``hparams.hidden_sizes`` records.
        lr_decay_factor: the factor of the learning-rate schedules below (0.5: halving).
        lr_decay_after_epoch: multiply the learning rate by ``lr_decay_factor`` at the end of every
            epoch from this many epochs on (Zaremba et al. 2014's schedule, used by the SCRN and RAN
            papers; None: off). Cannot be combined with ``lr_halving_patience``.
        lr_halving_threshold: with ``lr_halving_patience``, the relative fall of ``val_loss`` below its best
            that counts as an improvement (torch's ``ReduceLROnPlateau`` threshold; 1e-4 by default; e.g.
            0.002, about 1 % of perplexity at a loss of 4.7, divides the rate once gains become that small).
        compile: run the model through ``torch.compile`` (default off): the features (the recurrent layers)
            and the decoder with the loss in training, the whole forward in evaluation, each compiled on
            first use (seconds to tens of seconds per new window shape). What it gains on a CPU is measured
            by ``python -m benchmarks --only 7``; the results equal the uncompiled model's up to float
            round-off.
        fused_loss: compute the training loss with
            :func:`~dsf_lightning.ops.linear_cross_entropy.linear_cross_entropy` (default on): the decoder's
            logits buffer becomes the softmax and then its own gradient, instead of three more [B*T, V]
            buffers and a second ``exp`` pass (~15% of a PTB word step on one CPU thread). The loss equals
            the plain path to round-off; off, or where it does not apply (a sampled loss, ``compile``,
            autocast, a decoder split into blocks), it is ``F.cross_entropy`` of the decoder's logits.
        init_from: start from a pretrained model (a published name such as ``delta-rnn-ptb``, a Hub
            repo id or a pretrained folder; :mod:`dsf_lightning.training.finetune`). The architecture
            (``cell``, ``hidden_sizes``, ``cell_options``, ``embedding_size``, ``tie_weights``) then
            comes from the pretrained config: an argument left at its default takes the pretrained
            value, a different explicit value is an error; regularization (dropouts, the Delta-RNN's
            ``cell_options.dropout``) stays as given. The data must be encoded with the pretrained
            vocabulary (the CLI links ``model.init_from`` to ``data.vocab_from``).
        state_reset_prob: the probability that a training stream starts a window from the zero state
            instead of the state its last window left (drawn per stream and window from the window's seed;
            0: off, the default). Evaluation and scoring start from zeros, training with the carried state
            hardly ever does; a model can then learn a regime of its state that zeros never reach (measured:
            a one-hot PTB-char Delta-RNN, 1.45 nats a character from its carried state, 5.2 from zeros and
            not recovering within 2,500 steps). Resets teach it the cold start (the DSF paper's models read
            padded sentences from a zero state).
        carry_state_after_step: carry the state after this many steps of each training window into the next
            window, instead of the state after its last step (None, the default: the last). The SCRN
            paper's released TensorFlow script (zh3nis/scrn, ``SCRN-Word-baseline.py``: ``self.state =
            outputs[4]``) does this with 5: every training window but the first starts from the state 65 of
            its 70 steps stale. The loss is that of the whole window either way; evaluation always carries
            the last state. A window no longer than this carries its last state. Cannot be combined with
            ``iterative_inference_step`` (which refines the last state).
    """

    #: ``groups -> optimizer`` used by :meth:`configure_optimizers` instead of ``optimizer`` / ``lr`` when set
    #: (``dsf fit --optimizer``: the CLI sets it; not a hyper-parameter, so not in checkpoints)
    optimizer_factory = None
    #: what :meth:`configure_callbacks` adds to the trainer (:mod:`~dsf_lightning.training.policy`: the non-finite
    #: guard, atomic checkpoints, ...); ``TrainingPolicy(nonfinite_guard=False)`` or ``TrainingPolicy.off()`` opts out
    #: (not a hyper-parameter, so not in checkpoints)
    training_policy: TrainingPolicy = TrainingPolicy()

    def __init__(
        self,
        vocab_size: int = 0,
        cell: str = "delta-rnn",
        hidden_sizes: list[int] | int = 256,
        cell_options: dict[str, Any] | None = None,
        embedding_size: int | None = None,
        tie_weights: bool = False,
        dropout_embedding: float = 0.0,
        dropout_input: float = 0.0,
        dropout_hidden: float = 0.0,
        dropout_output: float = 0.0,
        dropout_output_context: bool = True,
        variational: bool = False,
        init: dict[str, Any] | None = None,
        optimizer: Literal["adam", "sgd"] = "adam",
        lr: float = 1e-3,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        param_group_lr: dict[str, float] | None = None,
        lr_halving_patience: int | None = None,
        iterative_inference_step: float = 0.0,
        sobolev_weight: float = 0.0,
        sobolev_layers: list[int] | None = None,
        l1_weight: float = 0.0,
        sampled_loss: Literal["nce", "sampled_softmax"] | None = None,
        sampled_loss_samples: int = 1024,
        sampled_loss_noise: Literal["unigram", "log-uniform", "uniform"] = "unigram",
        sampled_loss_epochs: float | None = None,
        nce_log_z: float | Literal["learned"] = 0.0,
        seed: int = 0,
        parameter_budget: int | str | None = None,
        lr_decay_factor: float = 0.5,
        lr_decay_after_epoch: int | None = None,
        lr_halving_threshold: float = 1e-4,
        init_from: str | None = None,
        compile: bool = False,
        fused_loss: bool = True,
        state_reset_prob: float = 0.0,
        carry_state_after_step: int | None = None,
    ) -> None:
        super().__init__()
        # the options are checked first (TrainConfig), before a pretrained model is loaded or a budget solved
        train_config = TrainConfig.from_hparams(locals())  # the arguments that are its fields
        pretrained = None
        # what the model is built with where it is not the arguments: the pretrained architecture (init_from),
        # the hidden size that meets a parameter budget; recorded in hparams, which LMConfig.from_hparams reads
        built: dict[str, Any] = {}
        if init_from is not None:
            from .finetune import load_for_finetuning, merge_architecture

            pretrained = load_for_finetuning(init_from)
            built = merge_architecture(
                pretrained.config,
                dict(cell=cell, hidden_sizes=hidden_sizes, cell_options=cell_options,
                     embedding_size=embedding_size, tie_weights=tie_weights),
                vocab_size=vocab_size, parameter_budget=parameter_budget, source=init_from,
            )
        budget_sizes = None
        if parameter_budget is not None:
            from ..model.budget import hidden_size_for_budget

            layers = len(hidden_sizes) if isinstance(hidden_sizes, list) else 1
            size = hidden_size_for_budget(
                cell, parameter_budget, vocab_size, layers=layers, embedding_size=embedding_size,
                tie_weights=tie_weights, cell_options=cell_options,
            )
            built["hidden_sizes"] = budget_sizes = [size] * layers
        self.save_hyperparameters()
        self.hparams.update(built)  # under LightningCLI the hparams are the arguments as given
        self.config = LMConfig.from_hparams(self.hparams)  # the model as built (see model_config)
        self.train_config = train_config
        self.model = RecurrentLM(self.config)
        self.budget_hidden_sizes = budget_sizes
        if budget_sizes is not None:
            rank_zero_info(f"parameter_budget {parameter_budget}: hidden_sizes {budget_sizes}, "
                           f"{count_parameters(self.model):,} parameters")
        if pretrained is not None:
            self.model.load_state_dict(pretrained.model.state_dict(), strict=True)
            rank_zero_info(f"initialized from {init_from} ({count_parameters(self.model):,} parameters)")
        self.sampled_loss: SampledLoss | None = None
        if sampled_loss is not None:
            noise = "uniform" if sampled_loss_noise == "unigram" else sampled_loss_noise  # unigram: in setup
            self.sampled_loss = SampledLoss(sampled_loss, sampled_loss_samples, noise, log_z=nce_log_z)
        self._sampled_now = self.sampled_loss is not None  # whether this training window takes the sampled loss
        self._carried: dict[str, ModelState | None] = {"train": None, "val": None, "test": None, "predict": None}
        self._sums: dict[str, Tensor] = {}
        self._restored_train_state: list[Tensor] | None = None
        self._final_state: ModelState | None = None
        self._reset_pending: set[str] = set()  # stages whose next window starts from zeros
        self._warned_state = False  # the carried-state warning of on_validation_epoch_end is said once
        self._validated_at_step: int | None = None  # global step of the last validation while fitting

    @classmethod
    def from_configs(cls, model_config: LMConfig, train_config: TrainConfig | None = None) -> LanguageModelModule:
        """The module of a model config and a training config (default: :class:`TrainConfig`'s defaults), e.g.
        those of :func:`~dsf_lightning.training.config.checkpoint_configs`; the same as passing their fields as
        keyword arguments (with ``init_from``, the model config's architecture is given explicitly)."""
        train_config = TrainConfig() if train_config is None else train_config
        return cls(**model_config.to_dict(), **train_config.to_dict())

    # -- helpers -------------------------------------------------------------------------------
    @property
    def model_config(self) -> LMConfig:
        """The model as built: the arguments, with the pretrained architecture (``init_from``) and the hidden
        size of a ``parameter_budget`` resolved."""
        return self.config

    @property
    def num_parameters(self) -> int:
        return count_parameters(self.model)

    def _state_dtype(self) -> torch.dtype:
        """The carried state's dtype: the weights' (float32 under mixed precision, float64 under
        ``precision="64-true"``)."""
        return next((p.dtype for p in self.model.parameters() if p.is_floating_point()), torch.float32)

    def _to_carry(self, final_state: ModelState) -> ModelState:
        """A window's final state as the next window's start: detached, in :meth:`_state_dtype`."""
        dtype = self._state_dtype()
        return tuple(tuple(s.to(dtype) for s in layer) for layer in detach_state(final_state))

    def _state_for(self, stage: str, index: int, batch_size: int) -> ModelState:
        """The carried state for this window: zeros at window 0, else what the last window left."""
        if stage in getattr(self, "_reset_pending", ()):  # reset_carried_state() with nothing carried
            self._reset_pending.discard(stage)
            if stage == "train":
                self._restored_train_state = None
            return self.model.init_state(batch_size, self.device, self._state_dtype())
        state = self._carried[stage]
        if stage == "train" and index > 0 and state is None and self._restored_train_state is not None:
            state = self._unflatten_state(self._restored_train_state)
            self._restored_train_state = None
        if index == 0 or state is None:
            if index > 0:
                raise RuntimeError(
                    f"{stage} window {index} arrived without the carried state of window {index - 1}: "
                    "resume from a checkpoint written by this module, or start the epoch from window 0"
                )
            state = self.model.init_state(batch_size, self.device, self._state_dtype())
        return state

    def _seed_window(self, index: int) -> None:
        rank = self.trainer.global_rank if self._trainer is not None else 0
        torch.manual_seed((self.train_config.seed * 1_000_003 + self.current_epoch * 100_003 + index * 97 + rank) % 2**63)

    def _compiled(self, fn):
        """``fn`` (the model or one of its methods) through ``torch.compile`` when the ``compile`` option is
        on, compiled once and kept (outside the module's state: nothing of it reaches a checkpoint)."""
        if not self.train_config.compile:
            return fn
        cache = self.__dict__.setdefault("_compiled_fns", {})
        key = getattr(fn, "__name__", type(fn).__name__)
        if key not in cache:
            cache[key] = torch.compile(fn)
        return cache[key]

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())
        state.pop("_compiled_fns", None)  # compiled code does not pickle (ddp_spawn): rebuilt on first use
        return state

    def _decoded_nll(self, y: Tensor, targets: Tensor) -> Tensor:
        """The summed NLL of ``targets`` under the decoder's logits of the top-layer outputs ``y``."""
        if self._fused_loss_applies(y):
            weight, bias = decoder_parameters(self.model)
            return linear_cross_entropy(y.reshape(-1, y.shape[-1]), weight, bias, targets.reshape(-1))
        return self._nll(self.model.decode(y), targets)

    def _fused_loss_applies(self, y: Tensor) -> bool:
        """Whether the training loss takes ``linear_cross_entropy`` (the ``fused_loss`` option)."""
        return (self.train_config.fused_loss
                and not self.train_config.compile
                and isinstance(weight := decoder_parameters(self.model)[0], Tensor)
                and weight.shape[-1] == y.shape[-1]
                and y.dtype in (torch.float32, torch.float64)
                and not torch.is_autocast_enabled(y.device.type))

    def _nll(self, logits: Tensor, targets: Tensor) -> Tensor:
        """Summed cross-entropy in fp32 or wider (the softmax never runs in half precision; a float64 model's
        in float64)."""
        if logits.dtype != torch.float64:
            logits = logits.float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")

    # -- training ------------------------------------------------------------------------------
    def configure_callbacks(self) -> list[L.Callback]:
        """The training policy (:func:`~dsf_lightning.training.policy.module_callbacks`), so a plain
        ``lightning.Trainer`` trains as ``dsf fit`` does; a callback of a type the trainer has is not added."""
        return module_callbacks(self)

    def setup(self, stage: str) -> None:
        """Unigram noise for the sampled loss: add-one counts of the training split. (The glibc allocator
        tuning, :func:`~dsf_lightning.training.allocator.keep_freed_memory`, is a part of the training policy,
        :meth:`configure_callbacks`: it changes the whole process, so ``TrainingPolicy(keep_freed_memory=False)``
        turns it off.)"""
        hp = self.train_config
        if stage == "fit" and getattr(getattr(self._trainer, "datamodule", None), "batching", "streams") == "sentences":
            self._check_sentence_batches()  # before any batch is read
        if self.budget_hidden_sizes is not None and self.logger is not None:
            self.logger.log_hyperparams({"budget_hidden_sizes": self.budget_hidden_sizes,
                                         "num_parameters": self.num_parameters})
        if stage == "fit" and self.sampled_loss is not None and hp.sampled_loss_noise == "unigram":
            corpus = getattr(getattr(self._trainer, "datamodule", None), "corpus", None)
            if corpus is None:
                raise TrainConfigError(
                    "sampled_loss_noise 'unigram' counts the words of the training split, which only a datamodule with a "
                    "corpus has (LanguageModelDataModule): fit with datamodule=..., or choose sampled_loss_noise "
                    "'log-uniform' or 'uniform'")
            train = corpus.splits["train"]
            counts = torch.bincount(train, minlength=self.config.vocab_size).float() + 1
            self.sampled_loss = SampledLoss(hp.sampled_loss, hp.sampled_loss_samples, counts, log_z=hp.nce_log_z)

    def _features_to_carry(self, inputs: Tensor, state: ModelState) -> tuple[Tensor, ModelState]:
        """The window's top-layer outputs and the state the next window starts from: the last step's, or the
        one after ``carry_state_after_step`` steps (the window then runs as two chunks, which continue the
        state exactly)."""
        features = self._compiled(self.model.features)
        k = self.train_config.carry_state_after_step
        if k is None or k >= inputs.shape[1]:
            return features(inputs, state)
        y_head, carry = features(inputs[:, :k], state)
        y_tail, _ = features(inputs[:, k:], carry)
        return torch.cat((y_head, y_tail), dim=1), carry

    def _training_loss(self, inputs: Tensor, targets: Tensor, state: ModelState,
                       padded: bool = False) -> tuple[Tensor, ModelState]:
        """Mean NLL per target token (full softmax, or the sampled objective) plus the Sobolev term, and the
        state the next window starts from. ``padded`` (sentence batches): only the targets that are not
        ``IGNORE_INDEX`` count, and only their outputs reach the decoder."""
        hp = self.train_config
        y, next_state = self._features_to_carry(inputs, state)
        tokens: Tensor | int = targets.numel()
        if padded:
            y, targets, tokens = self._real_targets(y, targets)
        if self.sampled_loss is not None and self._sampled_now:
            weight, bias = decoder_parameters(self.model)
            if targets.numel():
                loss = self.sampled_loss(y.reshape(-1, y.shape[-1]), targets.reshape(-1), weight, bias)
                loss = loss * (targets.numel() / tokens) if padded else loss  # its mean is over this rank's targets
            else:  # a rank whose rows of this window are all padding
                loss = y.sum() * 0.0
        else:
            loss = self._compiled(self._decoded_nll)(y, targets) / tokens
        self._window_tokens = tokens
        if hp.sobolev_weight > 0:
            penalty = sobolev_penalty(self.model, inputs, state, layers=hp.sobolev_layers)
            self.log("train_sobolev", penalty, on_step=True, on_epoch=False)
            loss = loss + hp.sobolev_weight * penalty.float()
        if hp.l1_weight > 0:
            penalty = l1_penalty(self.model)
            self.log("train_l1", penalty, on_step=True, on_epoch=False)
            loss = loss + hp.l1_weight * penalty
        return loss, next_state

    def _real_targets(self, y: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The outputs ``[N, D]`` and targets ``[N]`` of the real (not padded) positions, and the denominator of
        the mean: their number, under DDP the mean number over the ranks (each rank's loss is its sum over
        that, so the gradient DDP averages is the one of the sum over all ranks' real targets over their
        number)."""
        real = targets != IGNORE_INDEX
        tokens = real.sum()
        trainer = self._trainer
        if trainer is not None and trainer.world_size > 1:
            tokens = trainer.strategy.reduce(tokens.float(), reduce_op="sum") / trainer.world_size
        return y[real], targets[real], tokens

    def _check_sentence_batches(self) -> None:
        """Refuse the options that do not mean anything, or would be wrong, with padded sentence batches."""
        hp = self.train_config
        refused = {
            "sobolev_weight": (hp.sobolev_weight > 0, "its penalty runs over every step of a window, padding included"),
            "state_reset_prob": (hp.state_reset_prob > 0, "every sentence batch already starts from zeros"),
            "carry_state_after_step": (hp.carry_state_after_step is not None,
                                       "a sentence longer than a window must continue from its own last step"),
        }
        for name, (on, why) in refused.items():
            if on:
                raise ValueError(f"model.{name} cannot be used with data.batching sentences ({why}): "
                                 f"leave model.{name} at its default or use data.batching streams")

    def _sentence_batch(self, batch, training: bool = False) -> Tensor | None:
        """The ``reset`` flags of a sentence batch (:class:`~dsf_lightning.data.sentences.SentenceBatches`),
        None for a stream window; the first one trained on checks the options."""
        if len(batch) < 4:
            return None
        if training and not getattr(self, "_sentence_options_checked", False):
            self._check_sentence_batches()
            self._sentence_options_checked = True
        return batch[3]

    @staticmethod
    def _zero_rows(state: ModelState, reset: Tensor) -> ModelState:
        """``state`` with the rows where ``reset`` is True replaced by zeros (a sentence batch's first window)."""
        return tuple(tuple(s.masked_fill(reset.view(-1, *([1] * (s.dim() - 1))), 0) for s in layer) for layer in state)

    def training_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> Tensor:
        inputs, targets, index = batch[:3]
        reset = self._sentence_batch(batch, training=True)
        index = int(index)
        self._seed_window(index)
        state = self._reset_some_streams(self._state_for("train", index, inputs.shape[0]))
        self._sampled_now = self._sampled_loss_in_force(batch_idx)
        if reset is None:
            loss, final_state = self._training_loss(inputs, targets, state)
        else:
            loss, final_state = self._training_loss(inputs, targets, self._zero_rows(state, reset), padded=True)
        self._carried["train"] = self._to_carry(final_state)
        if self.train_config.iterative_inference_step > 0 and torch.is_grad_enabled():
            for layer in final_state:
                for s in layer:
                    if s.requires_grad:
                        s.retain_grad()
            self._final_state = final_state
            # the loss is a mean over these: eq. 15 sums them
            self._final_tokens = targets.numel() if reset is None else self._window_tokens
        loader = self.trainer.train_dataloader if self._trainer is not None else None
        if hasattr(loader, "mark_trained"):
            loader.mark_trained(index)
            self._trained_epoch = self.current_epoch  # the epoch those windows belong to (checkpoint position)
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=False)
        return loss

    @property
    def epochs_on_sampled_loss(self) -> float:
        """How many epochs train with the sampled loss: none without one, all (``inf``) without
        ``sampled_loss_epochs``, else ``sampled_loss_epochs`` (the full softmax after them)."""
        if self.sampled_loss is None:
            return 0.0
        epochs = self.train_config.sampled_loss_epochs
        return math.inf if epochs is None else float(epochs)

    def objective_epochs(self, max_epochs: int | None) -> dict[str, float]:
        """How many of a run's ``max_epochs`` epochs (Lightning's 1,000 when not given) train each objective:
        ``{"sampled": k, "full": E - k}`` (:attr:`epochs_on_sampled_loss`); objectives with no epochs left out."""
        total = float(max_epochs) if isinstance(max_epochs, int) and max_epochs > 0 else 1000.0
        sampled = min(self.epochs_on_sampled_loss, total)
        return {name: epochs for name, epochs in (("sampled", sampled), ("full", total - sampled)) if epochs > 0}

    def _sampled_loss_in_force(self, batch_idx: int) -> bool:
        """Whether window ``batch_idx`` of this epoch trains with the sampled loss (:attr:`epochs_on_sampled_loss`)."""
        epochs = self.epochs_on_sampled_loss
        if epochs in (0.0, math.inf):
            return epochs > 0
        position = epochs_trained(self.trainer, batch_idx)
        if position >= epochs and self._sampled_now:
            rank_zero_info(f"sampled_loss_epochs {epochs:g}: the full softmax from here on (epoch {position:.2f})")
        return position < epochs

    def _reset_some_streams(self, state: ModelState) -> ModelState:
        """``state_reset_prob``: each stream's carried state replaced by zeros with that probability (drawn
        after :meth:`_seed_window`, so a resumed run draws the same streams)."""
        p = self.train_config.state_reset_prob
        if not p:
            return state
        first = state[0][0]
        reset = torch.rand(first.shape[0], device=first.device) < p  # [B]
        return self._zero_rows(state, reset)

    def on_after_backward(self) -> None:
        """DSF sec 2.5: one step of iterative inference on the carried state along dL/dh_T."""
        if self._final_state is None:
            return
        step = self.train_config.iterative_inference_step
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        scale = float(scaler.get_scale()) if scaler is not None else 1.0
        # back-propagated: mean NLL per token / accumulate_grad_batches * AMP scale; wanted: the summed NLL
        grad_scale = self._final_tokens * self.trainer.accumulate_grad_batches / scale
        self._carried["train"] = refine_carried_state(
            self.model, self._final_state, self._carried["train"], step, grad_scale
        )
        self._final_state = None

    # -- evaluation ----------------------------------------------------------------------------
    def _evaluation_step(self, stage: str, batch: tuple[Tensor, ...]) -> None:
        inputs, targets, index = batch[:3]
        reset = self._sentence_batch(batch)
        state = self._state_for(stage, int(index), inputs.shape[0])
        if reset is not None:
            state = self._zero_rows(state, reset)
        logits, final_state = self._compiled(self.model)(inputs, state)
        self._carried[stage] = self._to_carry(final_state)
        sums = self._sums.setdefault(stage, torch.zeros(2, dtype=torch.float64, device=self.device))
        sums[0] += self._nll(logits, targets).double()  # cross_entropy ignores padded targets (-100)
        sums[1] += targets.numel() if reset is None else (targets != IGNORE_INDEX).sum()

    def validation_step(self, batch, batch_idx):
        self._evaluation_step("val", batch)

    def test_step(self, batch, batch_idx):
        self._evaluation_step("test", batch)

    def predict_step(self, batch, batch_idx) -> dict[str, Tensor]:
        """``dsf predict``: every target's log-probability (float64, from an fp32 softmax) in this window of
        the predict split, the state carried as in test; :class:`~dsf_lightning.training.prediction.TokenLogprobWriter`
        writes them as JSON lines."""
        from .prediction import predict_logprobs

        inputs, targets, index = batch
        state = self._state_for("predict", int(index), inputs.shape[0])
        logits, final_state = self.model(inputs, state)
        self._carried["predict"] = self._to_carry(final_state)
        return {"logprobs": predict_logprobs(logits, targets).cpu(), "targets": targets.cpu(), "window": int(index)}

    def on_predict_epoch_start(self) -> None:
        self._carried["predict"] = None

    def on_validation_epoch_start(self) -> None:
        self._sums.pop("val", None)
        self._carried["val"] = None

    def on_test_epoch_start(self) -> None:
        self._sums.pop("test", None)
        self._carried["test"] = None

    def _log_corpus_metrics(self, stage: str) -> Tensor | None:
        """Log ``{stage}_loss`` / ``_ppl`` / ``_bpc`` (not for a word corpus) / ``_tokens``; return the logged loss
        (None: no batches)."""
        sums = self._sums.pop(stage, None)
        if sums is None:
            return None
        sums = self.trainer.strategy.reduce(sums, reduce_op="sum")  # exact over all ranks
        nll = sums[0] / sums[1]  # nats per token, float64
        metrics = {f"{stage}_loss": nll.float(), f"{stage}_ppl": torch.exp(nll).float(), f"{stage}_bpc": (nll / LN2).float(),
                   f"{stage}_tokens": sums[1].float()}
        if self._tokenizer_name() == "word":  # bits per *character* of a word is no number anyone reads
            del metrics[f"{stage}_bpc"]
        self.log_dict(metrics, prog_bar=stage == "val", sync_dist=False)
        return nll.float()

    def _tokenizer_name(self) -> str | None:
        """The training corpus's tokenizer (``word``, ``char``, ``subword``), None when the data says none."""
        corpus = getattr(getattr(self._trainer, "datamodule", None), "corpus", None)
        return getattr(getattr(corpus, "tokenizer", None), "name", None) or None

    def on_validation_epoch_end(self) -> None:
        val_loss = self._log_corpus_metrics("val")
        trainer = self._trainer
        if val_loss is None or trainer is None or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self._validated_at_step = trainer.global_step  # a checkpoint now says this epoch's validation has run
        self._warn_if_it_needs_its_carried_state(float(val_loss), trainer.callback_metrics.get("train_loss"))
        # The plateau schedule steps here, after every validation, rather than at Lightning's epoch end:
        # Lightning skips that step at the end of an epoch resumed from a checkpoint (it has no metric
        # there), so a resumed run would halve the learning rate at other epochs than an uninterrupted one.
        for config in trainer.lr_scheduler_configs:
            if isinstance(config.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                config.scheduler.step(val_loss)

    def _warn_if_it_needs_its_carried_state(self, val_loss: float, train_loss) -> None:
        """Validation worse than a uniform guess while training is far better: the sign of a model that
        reads text only from its carried training state (validation starts from zeros); said once."""
        uniform = math.log(self.config.vocab_size)
        if train_loss is None or self._warned_state:
            return
        if val_loss > uniform and float(train_loss) < 0.75 * uniform:
            self._warned_state = True
            rank_zero_warn(
                f"val_loss {val_loss:.3f} is worse than a uniform guess (ln V = {uniform:.3f}) while train_loss is "
                f"{float(train_loss):.3f}: the model may read text well only from the state training carries "
                "(validation, test and scoring start from zeros). Train with --model.state_reset_prob 0.05 "
                "(streams restart from zeros at random) and check a window from zeros."
            )

    def lr_scheduler_step(self, scheduler, metric) -> None:
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            return  # stepped in on_validation_epoch_end
        super().lr_scheduler_step(scheduler, metric)

    def on_test_epoch_end(self) -> None:
        self._log_corpus_metrics("test")

    # -- optimization --------------------------------------------------------------------------
    def configure_optimizers(self):
        hp = self.train_config
        named = list(self.named_parameters())  # the model, and a learned NCE normalizer if any
        groups, claimed = [], set()
        for key, lr in (hp.param_group_lr or {}).items():
            matched = [(n, p) for n, p in named if key in n and n not in claimed]
            if not matched:
                known = ", ".join(n for n, _ in named)
                raise ValueError(f"param_group_lr key {key!r} matches no parameter; parameters: {known}")
            claimed.update(n for n, _ in matched)
            groups.append({"params": [p for _, p in matched], "lr": lr})
        groups.insert(0, {"params": [p for n, p in named if n not in claimed], "lr": hp.lr})
        if self.optimizer_factory is not None:  # `dsf fit --optimizer ...`: that optimizer, at its own lr
            del groups[0]["lr"]  # the param_group_lr groups keep theirs
            optimizer = self.optimizer_factory(groups)
        else:
            optimizer = build_optimizer(hp.optimizer, groups, lr=hp.lr, momentum=hp.momentum,
                                        weight_decay=hp.weight_decay, choices=OPTIMIZER_CHOICES,
                                        fused=fused_allowed(self._trainer))
        scheduler = None
        if hp.lr_decay_after_epoch is not None:
            start, factor = hp.lr_decay_after_epoch, hp.lr_decay_factor
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: factor ** max(epoch + 1 - start, 0))
        elif hp.lr_halving_patience is not None:  # stepped by this module after every validation
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, mode="min", factor=hp.lr_decay_factor, patience=hp.lr_halving_patience,
                threshold=hp.lr_halving_threshold, threshold_mode="rel",
            )
        return with_schedule(optimizer, scheduler)

    # -- checkpoints: carried state of every rank ------------------------------------------------
    def _flatten_state(self, state: ModelState) -> list[Tensor]:
        return [s for layer in state for s in layer]

    def _unflatten_state(self, flat: list[Tensor]) -> ModelState:
        per_rank = flat[0].shape[0] // self.trainer.world_size
        rank = self.trainer.global_rank
        it = iter(t[rank * per_rank : (rank + 1) * per_rank].to(self.device) for t in flat)
        return tuple(tuple(next(it) for _ in layer.state_sizes) for layer in self.model.layers)

    def reset_carried_state(self, stage: str = "train") -> None:
        """Make the next window of ``stage`` (``"train"``, ``"val"`` or ``"test"``) start from the zero
        state, as window 0 of an epoch does, instead of the state the last window left (e.g. after a
        non-finite loss poisoned it: :class:`~dsf_lightning.training.guards.NonFiniteGuard`).

        The carried state is replaced by zeros of the same shape, so a checkpoint written now stores
        them and a resumed run continues exactly; with nothing carried yet, the next window of the
        stage starts from zeros whatever its index (also across a checkpoint)."""
        if stage not in self._carried:
            raise ValueError(f"stage must be one of {sorted(self._carried)}, got {stage!r}")
        state = self._carried[stage]
        if stage == "train":
            self._final_state = None  # no iterative-inference refinement of a discarded state
        if state is None:
            self._reset_pending.add(stage)
            return
        self._carried[stage] = self.model.init_state(state[0][0].shape[0], state[0][0].device, self._state_dtype())

    def _train_loader(self):
        """This rank's training :class:`~dsf_lightning.data.streams.StreamWindows` (None if not known)."""
        trainer = self._trainer
        if trainer is None:
            return None
        loader = getattr(trainer.fit_loop, "_combined_loader", None)
        loaders = getattr(loader, "flattened", None) or []
        if not loaders and getattr(trainer, "datamodule", None) is not None and hasattr(trainer.datamodule, "train_dataloader"):
            try:
                loaders = [trainer.datamodule.train_dataloader()]
            except Exception:  # a datamodule without a training split: nothing to resume in it
                return None
        return loaders[0] if len(loaders) == 1 and hasattr(loaders[0], "trained") else None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CONFIG_KEY] = config_record(self.config, self.train_config)  # beside the flat hyper_parameters
        loader = self._train_loader()
        if loader is not None and self.trainer.state.fn == "fit":
            # where the run is (training/resume.py): Lightning's counters cannot tell a finished epoch, or
            # one whose validation is still to run, from others
            trained, windows = loader.trained, len(loader)
            # the epoch of the windows trained (after a fit that max_steps ended, current_epoch is the next)
            epoch = getattr(self, "_trained_epoch", None) if trained else None
            checkpoint["dsf_position"] = {
                "epoch": self.current_epoch if epoch is None else epoch,
                "trained": trained,
                "windows": windows,
                "validated": trained == windows and getattr(self, "_validated_at_step", None) == self.trainer.global_step,
                "global_step": self.trainer.global_step,
            }
        if "train" in getattr(self, "_reset_pending", ()):
            checkpoint["dsf_reset_train_state"] = True
        state = self._carried["train"]
        if state is None:
            if self._restored_train_state is not None:  # resumed, no window trained since: still the state
                checkpoint["dsf_carried_train_state"] = _own_cpu_copies(self._restored_train_state)
            return
        flat = self._flatten_state(state)
        if self.trainer.world_size > 1:  # a collective: every rank runs this hook
            flat = [self.all_gather(t).reshape(-1, t.shape[-1]) for t in flat]
        checkpoint["dsf_carried_train_state"] = _own_cpu_copies(flat)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        check_config_record(checkpoint.get(CONFIG_KEY))  # a newer format than this installation reads: say so
        trainer = self._trainer
        if trainer is not None and trainer.state.fn == "fit":
            from .resume import check_hyperparameters, infer_position, normalize_fit_loop

            check_hyperparameters(checkpoint.get("hyper_parameters"), dict(self.hparams))
            position = checkpoint.get("dsf_position")
            if position is None:  # written before positions were recorded
                loader = self._train_loader()
                position = infer_position(checkpoint, len(loader)) if loader is not None else None
            if position is not None:
                every = trainer.check_val_every_n_epoch
                due = trainer.enable_validation and (every is None or (int(position["epoch"]) + 1) % every == 0)
                normalize_fit_loop(checkpoint, position, validation_due=due)
                self._validated_at_step = position["global_step"] if position.get("validated") else None
                self._trained_epoch = int(position["epoch"])
        self._restored_train_state = checkpoint.get("dsf_carried_train_state")
        if checkpoint.get("dsf_reset_train_state"):
            self._reset_pending.add("train")


def _own_cpu_copies(tensors: list[Tensor]) -> list[Tensor]:
    """CPU copies that own just their elements: a carried state is often a view into the window's outputs,
    and ``torch.save`` writes a view's whole storage (``.cpu()`` of a CPU tensor is the view itself). One copy
    each, also from a GPU."""
    return [t.detach().to("cpu", memory_format=torch.contiguous_format, copy=True) for t in tensors]
