"""Sampled training objectives for large vocabularies (the exact full softmax stays for evaluation).

* Noise-contrastive estimation (``kind="nce"``): the IRLM paper (Pachitariu & Sahani 2013,
  "Regularization and nonlinearities for neural language models: when are they needed?", sec. 5.2) trains its
  text8 and Gutenberg models with NCE "adapted for neural language modelling by [15]" (Mnih & Teh, 2012; Gutmann &
  Hyvarinen, 2010). With the model's unnormalized score ``s(w) = z_w . h + b_w - log Z``, k noise
  words from the noise distribution q, and ``Delta(w) = s(w) - log(k q(w))``, the loss of one
  position with target t and noise words n_1..n_k is the logistic loss of telling data from noise::

      -log sigmoid(Delta(t)) - sum_j log(1 - sigmoid(Delta(n_j)))
        = softplus(-Delta(t)) + sum_j softplus(Delta(n_j))

  ``log Z`` is fixed at 0 (self-normalized: Mnih & Teh found fixing the normalizers to 1 works, and
  the trained model's ``exp(s)`` is then close to normalized) or learned (one scalar parameter).
* Sampled softmax (``kind="sampled_softmax"``): Jean, Cho, Memisevic & Bengio (2015), the importance-
  sampling softmax of Bengio & Senecal: a softmax over the target and k words drawn from a proposal q
  (unigram or log-uniform), each logit corrected by ``- log q(w)``, with sampled copies of the target
  ("accidental hits") removed from that position's candidates.

Noise words are drawn once per call and shared by all positions of the batch (k samples, with
replacement), so the cost is ``[N, k]`` scores, never ``[N, V]``. Both objectives are computed in
float32 even under autocast.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

KINDS = ("nce", "sampled_softmax")
NAMED_NOISE = ("log-uniform", "uniform")

DecoderWeight = Tensor | tuple[Tensor, ...]


def _rows(weight: DecoderWeight, index: Tensor) -> Tensor:
    """Rows ``index`` of the decoder matrix, given whole or as column blocks ``(W_1, W_2, ...)``
    concatenated along the feature dimension (so a tied / partly tied decoder is never concatenated
    in full)."""
    if isinstance(weight, Tensor):
        return weight[index]
    return torch.cat([w[index] for w in weight], dim=-1)


def _num_rows(weight: DecoderWeight) -> int:
    return weight.shape[0] if isinstance(weight, Tensor) else weight[0].shape[0]


def decoder_parameters(model) -> tuple[DecoderWeight, Tensor | None]:
    """The decoder of a :class:`~dsf_lightning.model.RecurrentLM` as ``(weight, bias)`` for
    :meth:`SampledLoss.forward`: ``logits = features @ weight.T + bias`` equals ``model.decode``.

    Untied: ``(decoder.weight [V, D], decoder.bias)``. Tied (SCRN sec. 4.4): the embedding ``[V, E]``
    reads the last E features and an untied matrix the leading ones, given as the column blocks
    ``(untied_decoder.weight, embedding.weight)`` with ``decoder_bias``."""
    if model.decoder is not None:
        return model.decoder.weight, model.decoder.bias
    if model.untied_decoder is not None:
        return (model.untied_decoder.weight, model.embedding.weight), model.decoder_bias
    return model.embedding.weight, model.decoder_bias


class SampledLoss(nn.Module):
    """A sampled training loss over a large vocabulary: NCE or sampled softmax (see the module doc).

    Args:
        kind: ``"nce"`` (Mnih & Teh 2012, as used in the IRLM paper sec. 5.2) or
            ``"sampled_softmax"`` (Jean et al. 2015).
        num_samples: k, the noise / proposal samples per call (>= 1), shared by all positions.
        noise: the noise (NCE) or proposal (sampled softmax) distribution q: a tensor of unigram
            counts ``[V]`` (normalized here; a word with count 0 is never sampled, and as a target its
            ``log q`` correction is huge, so smooth the counts, e.g. add 1, if some words never occur),
            ``"log-uniform"`` (Zipfian, ``q(w) = log((w + 2) / (w + 1)) / log(V + 1)``, for vocabularies
            sorted by decreasing frequency, V read from the decoder) or ``"uniform"``.
        log_z: NCE only: the fixed log-normalizer (0: self-normalized) or ``"learned"`` (a scalar
            parameter, initialized at 0; register this module in the LightningModule so the optimizer
            sees it).
        remove_accidental_hits: sampled softmax only: drop sampled copies of a position's target from
            its candidates (Jean et al.); NCE keeps them, as its estimator assumes.

    ``forward(features [N, D], targets [N], decoder_weight [V, D], decoder_bias [V] | None)`` returns
    the mean loss over the N positions (float32). Only evaluate with the exact full softmax.
    """

    def __init__(
        self,
        kind: Literal["nce", "sampled_softmax"] = "sampled_softmax",
        num_samples: int = 1024,
        noise: Tensor | str = "log-uniform",
        *,
        log_z: float | Literal["learned"] = 0.0,
        remove_accidental_hits: bool = True,
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
        self.kind, self.num_samples = kind, num_samples
        self.remove_accidental_hits = bool(remove_accidental_hits)
        if isinstance(noise, str):
            if noise not in NAMED_NOISE:
                raise ValueError(f"noise must be a tensor of unigram counts or one of {NAMED_NOISE}, got {noise!r}")
            self.noise_kind = noise
            self.register_buffer("noise_probs", None)
        elif isinstance(noise, Tensor):
            counts = noise.detach().double()
            if counts.dim() != 1 or counts.numel() < 1:
                raise ValueError(f"noise counts must be a 1-d tensor [V], got shape {tuple(noise.shape)}")
            if not torch.isfinite(counts).all() or (counts < 0).any() or counts.sum() <= 0:
                raise ValueError("noise counts must be finite, non-negative and not all zero")
            self.noise_kind = "unigram"
            # derived from the data, not learned: kept out of the state_dict (checkpoints stay loadable without it)
            self.register_buffer("noise_probs", (counts / counts.sum()).float(), persistent=False)
        else:
            raise ValueError(f"noise must be a tensor of unigram counts or one of {NAMED_NOISE}, got {noise!r}")
        if log_z == "learned":
            if kind != "nce":
                raise ValueError("log_z='learned' is for kind='nce' only")
            self.log_z = nn.Parameter(torch.zeros(()))
        elif isinstance(log_z, (int, float)) and not isinstance(log_z, bool) and math.isfinite(log_z):
            self.register_buffer("log_z", torch.tensor(float(log_z)), persistent=False)
        else:
            raise ValueError(f"log_z must be a finite number or 'learned', got {log_z!r}")

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, num_samples={self.num_samples}, noise={self.noise_kind!r}"

    # -- the noise distribution ------------------------------------------------------------------
    def _vocab_size(self, V: int) -> int:
        if self.noise_probs is not None and self.noise_probs.numel() != V:
            raise ValueError(f"noise counts cover {self.noise_probs.numel()} words but the decoder has {V} rows")
        return V

    def log_noise(self, words: Tensor, vocab_size: int) -> Tensor:
        """``log q(w)`` for word ids ``words`` (float32, same shape)."""
        V = self._vocab_size(vocab_size)
        if self.noise_kind == "uniform":
            return torch.full(words.shape, -math.log(V), device=words.device)
        if self.noise_kind == "log-uniform":
            w = words.double()
            return (torch.log(torch.log1p(1.0 / (w + 1.0))) - math.log(math.log(V + 1.0))).float()
        return torch.log(self.noise_probs[words].clamp_min(1e-30))

    def sample(self, vocab_size: int, device: torch.device | None = None) -> Tensor:
        """``num_samples`` word ids drawn from q with replacement ``[k]`` (global torch RNG)."""
        V, k = self._vocab_size(vocab_size), self.num_samples
        if self.noise_kind == "uniform":
            return torch.randint(0, V, (k,), device=device)
        if self.noise_kind == "log-uniform":  # inverse CDF: P(w < n) = log(n + 1) / log(V + 1)
            u = torch.rand(k, device=device, dtype=torch.float64)
            return (torch.exp(u * math.log(V + 1.0)).floor().long() - 1).clamp_(0, V - 1)
        return torch.multinomial(self.noise_probs, k, replacement=True).to(device)

    # -- the loss --------------------------------------------------------------------------------
    def forward(
        self, features: Tensor, targets: Tensor, decoder_weight: DecoderWeight, decoder_bias: Tensor | None = None
    ) -> Tensor:
        if features.dim() != 2 or targets.dim() != 1 or targets.shape[0] != features.shape[0]:
            raise ValueError(
                f"features must be [N, D] and targets [N], got {tuple(features.shape)} and {tuple(targets.shape)}"
            )
        V = _num_rows(decoder_weight)
        samples = self.sample(V, features.device)  # [k]
        log_q_t = self.log_noise(targets, V)  # [N]
        log_q_s = self.log_noise(samples, V)  # [k]
        with torch.autocast(device_type=features.device.type, enabled=False):
            h = features.float()
            w_t, w_s = _rows(decoder_weight, targets).float(), _rows(decoder_weight, samples).float()
            s_t = (h * w_t).sum(-1)  # [N]
            s_s = h @ w_s.t()  # [N, k]
            if decoder_bias is not None:
                s_t = s_t + decoder_bias[targets].float()
                s_s = s_s + decoder_bias[samples].float()
            if self.kind == "nce":
                log_k = math.log(self.num_samples)
                log_z = self.log_z.float()
                delta_t = s_t - log_z - (log_k + log_q_t)
                delta_s = s_s - log_z - (log_k + log_q_s)
                loss = F.softplus(-delta_t) + F.softplus(delta_s).sum(-1)
            else:
                logits_s = s_s - log_q_s
                if self.remove_accidental_hits:
                    hits = samples.unsqueeze(0) == targets.unsqueeze(1)  # [N, k]
                    logits_s = logits_s.masked_fill(hits, float("-inf"))
                logits = torch.cat(((s_t - log_q_t).unsqueeze(1), logits_s), dim=1)  # target first
                loss = torch.logsumexp(logits, dim=1) - logits[:, 0]
        return loss.mean()
