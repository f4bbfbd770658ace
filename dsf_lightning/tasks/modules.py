"""LightningModules for sequence tasks: :class:`SequenceClassifier` (one class per sequence) and
:class:`SequenceTagger` (one class per step), over any registered cell.

Input -> cell -> readout -> linear classifier, trained with cross-entropy (Adam by default; the sr-RNN
paper's RMSprop is ``optimizer="rmsprop"``). Inputs are token ids (``input_mode="embedding"``: a
learned embedding, the paper's default, sec. 4; ``"one-hot"``) or float features (``"values"``, e.g.
pixels). Padded batches are run with a per-step mask, so every sequence stops at its own length and
its state is exactly what an unpadded run would give.

Start and end tokens (sr-RNN paper sec. 3.3): the data encodes ``<s> x_1 .. x_T </s>``. The start token
is an ordinary first step (for an sr-RNN it moves the state to a centroid, the start state). With
``end_token=True`` the last real position of every sequence is the end token and is applied *without*
the stochastic component (:meth:`~dsf_lightning.cells.state_reg.StateRegularizedCell.unregularized_step`;
a plain step for other cells) before the classifier, which then sees both the hidden and the cell state.

For state-regularized cells the classifier also exposes what DFA extraction needs
(:func:`dsf_lightning.tasks.dfa.extract_dfa`): :meth:`SequenceClassifier.transition_trace` (the
transition probabilities of every step), :meth:`~SequenceClassifier.centroid_decisions` and
:meth:`~SequenceClassifier.centroid_transitions` (the network read at exactly each centroid).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._modes import evaluating
from ..cells import build_cell
from ..cells.base import State
from ..hub.mixin import PretrainedModelMixin
from ..ops.one_hot import one_hot
from ..training.optim import FusedClipping, build_optimizer, fused_allowed
from ..training.policy import TrainingPolicy, module_callbacks
from .data import IGNORE_INDEX, pad_ids

INPUT_MODES = ("embedding", "one-hot", "values")
READOUTS = ("hidden", "cell", "hidden+cell")
OPTIMIZERS = ("adam", "rmsprop", "sgd")


class _RecurrentSequenceModule(FusedClipping, L.LightningModule):
    """Input encoding, the cell run under a length mask, metrics bookkeeping and the optimizer."""

    #: what :meth:`configure_callbacks` adds to the trainer (:mod:`~dsf_lightning.training.policy`);
    #: ``TrainingPolicy.off()`` or ``TrainingPolicy(nonfinite_guard=False)`` opts out (not saved in checkpoints)
    training_policy: TrainingPolicy = TrainingPolicy()

    def __init__(
        self,
        num_classes: int,
        input_mode: str,
        vocab_size: int,
        input_size: int,
        embedding_size: int | None,
        cell: str,
        hidden_size: int,
        cell_options: dict[str, Any] | None,
        optimizer: str,
        lr: float,
        weight_decay: float,
        momentum: float,
    ) -> None:
        super().__init__()
        if input_mode not in INPUT_MODES:
            raise ValueError(f"input_mode must be one of {INPUT_MODES}, got {input_mode!r}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        if input_mode in ("embedding", "one-hot") and vocab_size < 1:
            raise ValueError(f"input_mode={input_mode!r} needs vocab_size >= 1 (the DataModule's vocab_size)")
        if input_mode == "values" and input_size < 1:
            raise ValueError("input_mode='values' needs input_size >= 1 (the DataModule's input_size)")
        self.input_mode = input_mode
        self.embedding: nn.Embedding | None = None
        if input_mode == "embedding":
            self.embedding = nn.Embedding(vocab_size, embedding_size or hidden_size)
            cell_input = self.embedding.embedding_dim
        elif input_mode == "one-hot":
            cell_input = vocab_size
        else:
            cell_input = input_size
        self.cell = build_cell(cell, cell_input, hidden_size, **dict(cell_options or {}))
        self._sums: dict[tuple[str, int], Tensor] = {}

    # -- the network ------------------------------------------------------------------------------
    def encode(self, inputs: Tensor) -> Tensor:
        """Token ids ``[B, T]`` (or features ``[B, T, F]``) -> cell inputs ``[B, T, I]``."""
        if self.input_mode == "embedding":
            return self.embedding(inputs)
        if self.input_mode == "one-hot":
            return one_hot(inputs, self.hparams.vocab_size, self.cell_dtype)
        return inputs.to(self.cell_dtype)

    @property
    def cell_dtype(self) -> torch.dtype:
        return next(self.cell.parameters()).dtype

    @property
    def is_state_regularized(self) -> bool:
        return hasattr(self.cell, "centroids") and hasattr(self.cell, "regularized_recur")

    def run_cell(
        self, x: Tensor, lengths: Tensor, state: State | None = None, collect_probs: bool = False,
        window: int | None = None,
    ) -> tuple[list[Tensor], Tensor, State, list[Tensor]]:
        """Run the cell over ``x [B, T, I]``, each sequence for ``lengths[b]`` steps.

        Returns (outputs of every step, each ``[B, O]``; the output at each sequence's last step;
        the state after it; the transition probabilities ``[B, k]`` of every step if ``collect_probs``).
        A sequence whose steps are over keeps its state (the mask), so padding never leaks in.
        ``window``: truncated BPTT, the state is carried into every ``window``-th step (0, w, 2w, ...,
        counted from each sequence's start) detached, so values are unchanged and gradients stop there.
        """
        cell = self.cell
        B = x.shape[0]
        if state is None:
            state = cell.init_state(B, x.device, x.dtype)
        steps = int(lengths.max()) if B else 0
        # one matmul for every step; unbind, not projected[:, t]: the backward of T separate slices
        # would build T full-size gradients of `projected` (quadratic in T), unbind's builds one
        projected = cell.project_inputs(x[:, :steps]).unbind(1) if steps else ()
        last = x.new_zeros(B, cell.output_size)
        outputs, probs = [], []
        for t in range(steps):
            if window and t and t % window == 0:  # only where a sequence goes on: an ended one keeps its graph
                going = (lengths > t)[:, None]
                state = tuple(torch.where(going, s.detach(), s) for s in state)
            if collect_probs:
                out, new_state, alpha = cell.regularized_recur(projected[t], state)
                probs.append(alpha)
            else:
                out, new_state = cell.recur(projected[t], state)
            live = (lengths > t)[:, None]
            state = tuple(torch.where(live, n, o) for n, o in zip(new_state, state))
            last = torch.where(live, out, last)
            outputs.append(out)
        return outputs, last, state, probs

    # -- metrics ----------------------------------------------------------------------------------
    def _accumulate(self, stage: str, index: int, loss_sum: Tensor, correct: Tensor, count: Tensor, *extra: Tensor) -> None:
        values = torch.stack([loss_sum.detach().double(), correct.double(), count.double(), *(e.double() for e in extra)])
        key = (stage, index)
        self._sums[key] = self._sums[key] + values if key in self._sums else values

    def _stage_names(self, stage: str) -> list[str]:
        if stage == "test":
            dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
            names = list(getattr(dm, "test_set_names", []) or [])
            return names
        return []

    def _sums_width(self) -> int:
        """Entries of a stage's sums: loss sum, correct, count (plus what a subclass adds)."""
        return 3

    def _stage_keys(self, stage: str) -> list[tuple[str, int]]:
        """Every (stage, dataloader) whose sums are logged: the Trainer's dataloaders of the stage, so every
        process reduces the same keys even when it scored no batch of one (DDP: uneven splits)."""
        trainer = self._trainer
        counts = None
        if trainer is not None:
            counts = {"val": "num_val_batches", "test": "num_test_batches"}.get(stage)
            counts = getattr(trainer, counts, None) if counts else [1]
            if trainer.sanity_checking and stage == "val":
                counts = trainer.num_sanity_val_batches
        if counts is None:  # no Trainer (or an older one): what this process has
            return sorted(k for k in self._sums if k[0] == stage)
        n = len(counts) if isinstance(counts, (list, tuple)) else 1
        return [(stage, i) for i in range(n)]

    def _log_sums(self, stage: str) -> None:
        """Log ``{stage}_loss`` / ``_acc`` / ``_error`` (per test set) from exact float64 sums, added over all
        DDP processes first: the numbers of the whole set, whichever process scored which sequence."""
        names = self._stage_names(stage)
        keys = self._stage_keys(stage)
        world = self._trainer.world_size if self._trainer is not None else 1
        for key in keys:
            sums = self._sums.pop(key, None)
            if world > 1:  # a collective: every process reduces the same keys, in the same order
                if sums is None:
                    sums = torch.zeros(self._sums_width(), dtype=torch.float64, device=self.device)
                sums = self.trainer.strategy.reduce(sums, reduce_op="sum")
            if sums is None or float(sums[2]) == 0:
                continue
            index = key[1]
            suffix = ""
            if stage == "test" and (len(keys) > 1 or (names and names[0] != "test")):
                suffix = "/" + (names[index] if index < len(names) else str(index))
            metrics = self._metrics_from_sums(stage, sums)
            self.log_dict({f"{k}{suffix}": v for k, v in metrics.items()}, prog_bar=stage == "val", add_dataloader_idx=False)

    def _metrics_from_sums(self, stage: str, sums: Tensor) -> dict[str, Tensor]:
        loss, correct = sums[0] / sums[2], sums[1] / sums[2]
        return {f"{stage}_loss": loss.float(), f"{stage}_acc": correct.float(), f"{stage}_error": (1 - correct).float()}

    def on_validation_epoch_end(self) -> None:
        self._log_sums("val")

    def on_test_epoch_end(self) -> None:
        self._log_sums("test")

    def on_validation_epoch_start(self) -> None:
        for key in [k for k in self._sums if k[0] == "val"]:
            del self._sums[key]

    def on_test_epoch_start(self) -> None:
        for key in [k for k in self._sums if k[0] == "test"]:
            del self._sums[key]

    def configure_callbacks(self) -> list[L.Callback]:
        """The training policy (:func:`~dsf_lightning.training.policy.module_callbacks`), as ``dsf fit`` trains:
        a plain ``lightning.Trainer`` gets it too; a callback of a type the trainer has is not added."""
        return module_callbacks(self)

    def configure_optimizers(self):
        hp = self.hparams
        return build_optimizer(hp.optimizer, self.parameters(), lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay,
                               fused=fused_allowed(self._trainer))


class SequenceClassifier(PretrainedModelMixin, _RecurrentSequenceModule):
    """One class per sequence (accept / reject, sentiment, digit) from the final state of a cell.

    A text classifier goes to and from a hub folder like the language models (``save_pretrained``,
    ``from_pretrained``, ``push_to_hub``; :mod:`dsf_lightning.hub.classifier`), and
    :class:`dsf_lightning.classification.TextClassifier` classifies raw text with one.

    Args:
        num_classes: number of classes (2 for accept / reject; class 1 = accept).
        input_mode: ``"embedding"`` (default), ``"one-hot"`` or ``"values"``.
        vocab_size: for token inputs (the DataModule's ``vocab_size``).
        input_size: features per step for ``"values"`` (the DataModule's ``input_size``).
        embedding_size: embedding width (default: ``hidden_size``).
        cell: any registered cell name (``sr-gru``, ``sr-lstm-p``, ``lstm``, ``delta-rnn``, ...).
        hidden_size: the cell's hidden size.
        cell_options: the cell's keyword options (e.g. ``{"k": 10, "tau": 1.0}`` for sr cells).
        readout: what the classifier reads after the last step: ``"hidden"`` (the cell's output),
            ``"cell"`` (the second state tensor, e.g. the LSTM cell state ``c``; appendix F, Figure 18)
            or ``"hidden+cell"`` (both, concatenated: the paper's pixel-MNIST classifier, sec. 4.3).
        end_token: the last real position of each sequence is the end token, applied without the
            stochastic component (sec. 3.3); must match the DataModule's ``start_end_tokens``.
        bptt_window: truncated BPTT over a whole sequence: it is read in windows of this many steps
            (from ``<s>``), the state carried from window to window but the gradient stopped at every
            window's start, the loss still at the end of the sequence (so only the last window, and
            the end token, learn from it). ``None`` (default): back-propagate through every step. One
            reading of the sr-RNN paper's IMDB Figure 9 ("training only on truncated sequences of
            length 10"): its Theano scan's ``truncate_gradient``; the paper's text does not say more.
        optimizer, lr, weight_decay, momentum: ``"adam"`` (default), ``"rmsprop"`` (the paper: lr 0.01,
            momentum 0.9) or ``"sgd"``.
    """

    _hub_task = "text-classification"  # the kind of hub folder it saves to and loads from

    def __init__(
        self,
        num_classes: int = 2,
        input_mode: Literal["embedding", "one-hot", "values"] = "embedding",
        vocab_size: int = 0,
        input_size: int = 0,
        embedding_size: int | None = None,
        cell: str = "sr-gru",
        hidden_size: int = 32,
        cell_options: dict[str, Any] | None = None,
        readout: Literal["hidden", "cell", "hidden+cell"] = "hidden",
        end_token: bool = True,
        bptt_window: int | None = None,
        optimizer: Literal["adam", "rmsprop", "sgd"] = "adam",
        lr: float = 1e-2,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
    ) -> None:
        super().__init__(
            num_classes, input_mode, vocab_size, input_size, embedding_size, cell, hidden_size, cell_options,
            optimizer, lr, weight_decay, momentum,
        )
        self.save_hyperparameters()
        if readout not in READOUTS:
            raise ValueError(f"readout must be one of {READOUTS}, got {readout!r}")
        if readout != "hidden" and len(self.cell.state_sizes) < 2:
            raise ValueError(
                f"readout={readout!r} reads the second state tensor (a cell state), but cell {cell!r} has "
                f"state sizes {self.cell.state_sizes}; use readout='hidden'"
            )
        if bptt_window is not None and bptt_window < 1:
            raise ValueError(f"bptt_window must be >= 1 (steps per truncated-BPTT window) or null, got {bptt_window}")
        self.readout = readout
        self.end_token = end_token
        self.bptt_window = bptt_window
        width = {"hidden": self.cell.output_size}.get(readout)
        if width is None:
            c = self.cell.state_sizes[1]
            width = c if readout == "cell" else self.cell.output_size + c
        self.classifier = nn.Linear(width, num_classes)

    # -- forward ----------------------------------------------------------------------------------
    def _end_step(self, end_x: Tensor, state: State) -> tuple[Tensor, State]:
        """The end token: one cell application without the stochastic component (sec. 3.3)."""
        if hasattr(self.cell, "unregularized_step"):
            return self.cell.unregularized_step(end_x, state)
        return self.cell.step(end_x, state)

    def _readout(self, out: Tensor, state: State) -> Tensor:
        if self.readout == "hidden":
            return out
        if self.readout == "cell":
            return state[1]
        return torch.cat([out, state[1]], dim=-1)

    def _body(self, inputs: Tensor, lengths: Tensor, collect_probs: bool = False):
        x = self.encode(inputs)
        lengths = lengths.to(x.device)
        window = self.bptt_window
        if not self.end_token:
            _, last, state, probs = self.run_cell(x, lengths, collect_probs=collect_probs, window=window)
            return x, lengths, last, state, probs
        if bool((lengths < 1).any()):
            raise ValueError("with end_token=True every sequence needs at least its end token")
        _, last, state, probs = self.run_cell(x, lengths - 1, collect_probs=collect_probs, window=window)
        return x, lengths, last, state, probs

    def forward(self, inputs: Tensor, lengths: Tensor) -> Tensor:
        """Class logits ``[B, num_classes]`` of padded ``inputs`` with real ``lengths``."""
        x, lengths, last, state, _ = self._body(inputs, lengths)
        if self.end_token:
            end_x = x[torch.arange(x.shape[0], device=x.device), lengths - 1]
            last, state = self._end_step(end_x, state)
        return self.classifier(self._readout(last, state))

    # -- Lightning --------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        data_tokens = getattr(dm, "start_end_tokens", None)
        if data_tokens is not None and bool(data_tokens) != bool(self.end_token):
            raise ValueError(
                f"the DataModule has start_end_tokens={data_tokens} but the model end_token={self.end_token}: "
                "they must agree (the model treats the last position as the end token)"
            )

    def _step(self, batch: dict[str, Tensor], stage: str, index: int = 0) -> Tensor:
        logits = self(batch["inputs"], batch["lengths"])
        labels = batch["labels"]
        loss = F.cross_entropy(logits.float(), labels)
        correct = (logits.argmax(-1) == labels).sum()
        self._accumulate(stage, index, loss * labels.numel(), correct, torch.tensor(labels.numel(), device=labels.device))
        return loss

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self._step(batch, "train")
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=batch["labels"].shape[0])
        return loss

    def on_train_epoch_end(self) -> None:
        self._log_sums("train")

    def on_train_epoch_start(self) -> None:
        for key in [k for k in self._sums if k[0] == "train"]:
            del self._sums[key]

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._step(batch, "val", dataloader_idx)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._step(batch, "test", dataloader_idx)

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> Tensor:
        return self(batch["inputs"], batch["lengths"]).argmax(-1)

    @torch.no_grad()
    def predict_strings(self, strings: Sequence, vocab: Any, batch_size: int = 512) -> Tensor:
        """The predicted class of raw strings (encoded with ``vocab``), in their order."""
        out = torch.empty(len(strings), dtype=torch.long)
        with evaluating(self):
            for lo in range(0, len(strings), batch_size):
                inputs, lengths = pad_ids([vocab.encode(s) for s in strings[lo : lo + batch_size]], vocab.pad_id)
                out[lo : lo + len(lengths)] = self(inputs.to(self.device), lengths.to(self.device)).argmax(-1).cpu()
        return out

    # -- state-regularized cells: what DFA extraction reads ------------------------------------------
    def _require_sr(self) -> None:
        if not self.is_state_regularized:
            raise TypeError(f"cell {self.hparams.cell!r} is not state-regularized (no centroids): use an sr-* cell")

    def transition_trace(self, inputs: Tensor, lengths: Tensor) -> Tensor:
        """The transition probabilities ``alpha [B, T', k]`` of every step before the end token.

        Position 0 is the start token (its argmax is the start state), position t the t-th symbol;
        positions past a sequence's end are padding (their values are meaningless).
        """
        self._require_sr()
        _, _, _, _, probs = self._body(inputs, lengths, collect_probs=True)
        return torch.stack(probs, dim=1)

    def _encode_ids(self, ids: Tensor | int, n: int) -> Tensor:
        if self.input_mode == "values":
            if not torch.is_tensor(ids) or ids.dim() != 1:
                raise ValueError("with input_mode='values' pass the input as a feature vector [input_size]")
            return ids.to(self.device, self.cell_dtype).expand(n, -1)
        ids = torch.as_tensor(ids, device=self.device).long().reshape(1, 1).expand(n, 1)
        return self.encode(ids)[:, 0]

    def _centroid_state(self) -> State:
        if len(self.cell.state_sizes) != 1:
            raise TypeError(
                "reading the network at a centroid needs a memory-less cell (state = the hidden state only, "
                f"e.g. sr-gru); this cell's state sizes are {self.cell.state_sizes}"
            )
        return (self.cell.centroids,)

    @torch.no_grad()
    def centroid_decisions(self, end_input: Tensor | int) -> Tensor:
        """Class probabilities ``[k, num_classes]`` when the state is exactly centroid i and the end
        token ``end_input`` (its id, or its feature vector for ``"values"``) is read."""
        self._require_sr()
        state = self._centroid_state()
        k = self.cell.k
        if self.end_token:
            out, state = self._end_step(self._encode_ids(end_input, k), state)
        else:
            out = state[0]
        return torch.softmax(self.classifier(self._readout(out, state)).float(), -1)

    @torch.no_grad()
    def centroid_transitions(self, symbol_inputs: Sequence[int] | Sequence[Tensor]) -> Tensor:
        """Transition probabilities ``[k, S, k]``: from exactly centroid i, reading symbol s."""
        self._require_sr()
        state = self._centroid_state()
        k, rows = self.cell.k, []
        for s in symbol_inputs:
            x = self._encode_ids(s, k)
            _, _, alpha = self.cell.regularized_recur(self.cell.project_inputs(x), state)
            rows.append(alpha)
        return torch.stack(rows, dim=1)


class SequenceTagger(_RecurrentSequenceModule):
    """One class per step (the copying-memory task): a linear classifier on the cell's every output.

    The loss (and ``*_loss``) is the mean cross-entropy over all real positions (appendix C: "the
    average categorical cross entropy at each time step"); ``*_acc`` is per-step accuracy. With
    ``score_last=n``, ``*_last_acc`` is the accuracy on the last ``n`` positions of each sequence (the
    copied symbols). Options as :class:`SequenceClassifier` (no start / end tokens here).
    """

    def __init__(
        self,
        num_classes: int = 10,
        input_mode: Literal["embedding", "one-hot", "values"] = "embedding",
        vocab_size: int = 0,
        input_size: int = 0,
        embedding_size: int | None = None,
        cell: str = "sr-lstm-p",
        hidden_size: int = 128,
        cell_options: dict[str, Any] | None = None,
        score_last: int | None = None,
        optimizer: Literal["adam", "rmsprop", "sgd"] = "adam",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
    ) -> None:
        super().__init__(
            num_classes, input_mode, vocab_size, input_size, embedding_size, cell, hidden_size, cell_options,
            optimizer, lr, weight_decay, momentum,
        )
        self.save_hyperparameters()
        self.classifier = nn.Linear(self.cell.output_size, num_classes)
        self.score_last = score_last

    def forward(self, inputs: Tensor, lengths: Tensor) -> Tensor:
        """Per-step logits ``[B, T, num_classes]`` (positions past a sequence's length are padding)."""
        x = self.encode(inputs)
        outputs, _, _, _ = self.run_cell(x, lengths.to(x.device))
        return self.classifier(torch.stack(outputs, dim=1))

    def _step(self, batch: dict[str, Tensor], stage: str, index: int = 0) -> Tensor:
        logits = self(batch["inputs"], batch["lengths"])
        labels = batch["labels"][:, : logits.shape[1]]
        flat = logits.float().reshape(-1, logits.shape[-1])
        loss_sum = F.cross_entropy(flat, labels.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum")
        real = labels != IGNORE_INDEX
        count = real.sum()
        pred = logits.argmax(-1)
        correct = ((pred == labels) & real).sum()
        extra = []
        if self.score_last:
            lengths = batch["lengths"].to(labels.device)
            pos = torch.arange(labels.shape[1], device=labels.device)[None, :]
            last = real & (pos >= (lengths[:, None] - self.score_last))
            extra = [((pred == labels) & last).sum(), last.sum()]
        self._accumulate(stage, index, loss_sum, correct, count, *extra)
        return loss_sum / count.clamp(min=1)

    def _sums_width(self) -> int:
        return 5 if self.score_last else 3

    def _metrics_from_sums(self, stage: str, sums: Tensor) -> dict[str, Tensor]:
        metrics = super()._metrics_from_sums(stage, sums)
        if len(sums) > 3:
            metrics[f"{stage}_last_acc"] = (sums[3] / sums[4]).float()
        return metrics

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self._step(batch, "train")
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=batch["labels"].shape[0])
        return loss

    def on_train_epoch_end(self) -> None:
        self._log_sums("train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._step(batch, "val", dataloader_idx)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._step(batch, "test", dataloader_idx)

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> Tensor:
        return self(batch["inputs"], batch["lengths"]).argmax(-1)
