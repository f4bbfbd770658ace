"""PNG plots of the analysis results (matplotlib, Agg backend: no display needed).

Every function takes a result of the analysis modules and a path, draws one figure of exactly
``figsize`` inches at ``dpi`` (so the PNG is ``figsize * dpi`` pixels: never ``bbox_inches="tight"``,
which would change the size) and returns the path written. matplotlib is an optional dependency
(``pip install dsf-lightning[plots]``); without it these raise :class:`ImportError` with the fix.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .._plotting import pyplot, save_png

__all__ = [
    "DEFAULT_DPI",
    "plot_centroids",
    "plot_completion",
    "plot_influence",
    "plot_state_deltas",
    "plot_symbol_transitions",
    "plot_timescales",
    "plot_trajectories",
    "plot_trajectory_heatmap",
]

DEFAULT_DPI = 100


def _pyplot():
    return pyplot("the analysis plots")


_save = save_png


def _figure(figsize: tuple[float, float], dpi: int, **kw):
    plt = _pyplot()
    return plt.subplots(figsize=figsize, dpi=dpi, layout="constrained", **kw)


def _short(token: str, n: int = 14) -> str:
    return token if len(token) <= n else token[: n - 1] + "\u2026"


def _title_suffix(model: dict | None) -> str:
    if not model:
        return ""
    if model.get("freshly_trained"):
        tr = model.get("training") or {}
        steps = tr.get("steps")
        return f"\n(freshly trained small {model.get('cell')} model, {steps} steps: a demonstration, not a trained result)"
    return f"\n(model: {model.get('source') or model.get('cell')})"


# ------------------------------------------------------------------------------------------- state delta
def plot_state_deltas(result: Any, path: Path, *, model: dict | None = None, figsize=(10.0, 4.0), dpi: int = DEFAULT_DPI) -> Path:
    """Bars of the min-max normalized L1 score per word with a polynomial trend line (DSF Fig. 2)."""
    fig, ax = _figure(figsize, dpi)
    n = len(result.tokens)
    xs = np.arange(n)
    ax.bar(xs, result.score, color="#4a7ab5", edgecolor="#2c4a70")
    if n >= 3:
        degree = min(3, n - 1)
        coef = np.polyfit(xs, np.asarray(result.score, dtype=float), degree)
        fine = np.linspace(0, n - 1, 200)
        ax.plot(fine, np.polyval(coef, fine), "r--", linewidth=1.5, label=f"polynomial trend (degree {degree})")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xticks(xs)
    ax.set_xticklabels([_short(t) for t in result.tokens], rotation=45, ha="right", fontsize=9)
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("normalized L1 of state delta")
    ax.set_title(
        f"State-delta score ||h_t - h_(t-1)||_1, min-max normalized (layer {result.layer}, state {result.state})"
        + _title_suffix(model),
        fontsize=10,
    )
    return _save(fig, path, dpi)


# ------------------------------------------------------------------------------------------- influence
def plot_influence(result: Any, path: Path, *, model: dict | None = None, figsize=(12.0, 4.5), dpi: int = DEFAULT_DPI) -> Path:
    """The sentence on a line with an arrow from every word to its most influential predecessor (RAN Fig. 1)."""
    from matplotlib.patches import FancyArrowPatch

    fig, ax = _figure(figsize, dpi)
    n = len(result.tokens)
    xs = np.arange(n, dtype=float)
    for x, tok in zip(xs, result.tokens):
        ax.text(x, 0.0, _short(tok), ha="center", va="top", fontsize=10, rotation=30 if n > 12 else 0)
    strengths = [s for s in result.strength if s is not None]
    top = max(strengths) if strengths else 1.0
    max_span = max([abs(t - j) for t, j in result.arrows()] or [1])
    for t, j in result.arrows():
        span = t - j
        strength = result.strength[t] / top if top > 0 else 1.0
        arrow = FancyArrowPatch(
            (xs[t], 0.08), (xs[j], 0.08), connectionstyle=f"arc3,rad={0.5 if span > 0 else -0.5}",
            arrowstyle="-|>", mutation_scale=12, linewidth=0.8 + 1.7 * strength,
            color=(0.75 * (1 - strength), 0.25, 0.6 + 0.4 * strength),
        )
        ax.add_patch(arrow)
    ax.set_xlim(-0.8, n - 0.2)
    ax.set_ylim(-0.35, 0.2 + 0.27 * max_span)
    ax.axis("off")
    ax.set_title(
        f"RAN: most influential predecessor of each word, argmax_j max_m w_j^t(m) (eq. 7; layer {result.layer})"
        + _title_suffix(model),
        fontsize=10,
    )
    return _save(fig, path, dpi)


# ------------------------------------------------------------------------------------------- timescales
def plot_timescales(result: Any, path: Path, *, model: dict | None = None, figsize=(8.0, 5.0), dpi: int = DEFAULT_DPI) -> Path:
    """Histogram of the IRLM timescales -1/log|r| on a log axis (IRLM Fig. 1), LCUs stacked apart."""
    fig, ax = _figure(figsize, dpi)
    ts = np.asarray(result.timescale, dtype=float)
    lcu = np.asarray(result.long_context, dtype=bool)
    positive = ts > 0
    zeros = int((~positive).sum())
    if positive.any():
        lo, hi = ts[positive].min(), ts[positive].max()
        lo, hi = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi) + 1e-9)
        if hi <= lo:
            hi = lo * 10
        bins = np.logspace(math.log10(lo), math.log10(hi), 30)
        groups = [ts[positive & ~lcu], ts[positive & lcu]]
        labels = [f"short-context units ({len(groups[0])})", f"long-context units ({len(groups[1])})"]
        keep = [i for i, g in enumerate(groups) if len(g)]
        ax.hist([groups[i] for i in keep], bins=bins, stacked=True, label=[labels[i] for i in keep],
                color=[["#4a7ab5", "#d9822b"][i] for i in keep])
        ax.set_xscale("log")
        ax.legend(fontsize=8)
    ax.set_xlabel("timescale -1/log|r| (words)")
    ax.set_ylabel("units")
    note = f"; {zeros} unit(s) with r = 0 not shown" if zeros else ""
    ax.set_title(f"IRLM timescales ({len(ts)} units{note})" + _title_suffix(model), fontsize=10)
    return _save(fig, path, dpi)


# ------------------------------------------------------------------------------------------- centroids
def plot_centroids(
    stats: Any, path: Path, *, title: str = "", model: dict | None = None, max_symbols: int = 30,
    figsize=(13.0, 6.0), dpi: int = DEFAULT_DPI,
) -> Path:
    """Left: the centroid transition counts (i -> j); right: the mean transition probability into each
    centroid per input symbol (the prototypes: a column's brightest rows), for the most frequent symbols."""
    fig, (left, right) = _figure(figsize, dpi, ncols=2)
    im = left.imshow(stats.transitions, cmap="viridis", aspect="auto")
    k = stats.k
    ticks = list(range(k)) if k <= 30 else list(range(0, k, max(1, k // 15)))
    left.set_xticks(ticks)
    left.set_yticks(ticks)
    left.set_xlabel("to centroid j")
    left.set_ylabel("from centroid i")
    left.set_title(f"transition counts ({int(stats.transitions.sum())} transitions)", fontsize=10)
    if k <= 12:
        for i in range(k):
            for j in range(k):
                v = int(stats.transitions[i, j])
                if v:
                    left.text(j, i, str(v), ha="center", va="center", fontsize=7, color="w")
    fig.colorbar(im, ax=left, shrink=0.8)
    order = np.argsort(-stats.symbol_counts, kind="stable")[:max_symbols]
    mp = stats.mean_prob[order]
    im2 = right.imshow(mp, cmap="magma", aspect="auto", vmin=0, vmax=1)
    right.set_yticks(range(len(order)))
    right.set_yticklabels([f"{_short(stats.symbols[n])} ({int(stats.symbol_counts[n])})" for n in order], fontsize=8)
    right.set_xticks(ticks)
    right.set_xlabel("centroid")
    right.set_title("mean transition probability into each centroid, per input symbol", fontsize=10)
    fig.colorbar(im2, ax=right, shrink=0.8)
    fig.suptitle((title or "sr-RNN centroids") + _title_suffix(model), fontsize=11)
    return _save(fig, path, dpi)


def plot_symbol_transitions(
    stats: Any, path: Path, *, max_symbols: int = 6, model: dict | None = None, figsize=(13.0, 4.5), dpi: int = DEFAULT_DPI
) -> Path:
    """One heat map per input symbol (the ``max_symbols`` most frequent): counts of centroid i -> j when
    that symbol is read (for a DFA-like sr-RNN, one bright cell per row: its transition function)."""
    order = [int(n) for n in np.argsort(-stats.symbol_transitions.sum(axis=(1, 2)), kind="stable")[:max_symbols]]
    order = [n for n in order if stats.symbol_transitions[n].sum() > 0] or order[:1]
    fig, axes = _figure(figsize, dpi, ncols=len(order), squeeze=False)
    for ax, n in zip(axes[0], order):
        counts = stats.symbol_transitions[n]
        ax.imshow(counts, cmap="viridis", aspect="equal")
        ax.set_title(f"reading {_short(stats.symbols[n])!r} ({int(counts.sum())})", fontsize=9)
        ax.set_xlabel("to", fontsize=8)
        ax.set_ylabel("from", fontsize=8)
        ticks = list(range(stats.k)) if stats.k <= 12 else list(range(0, stats.k, max(1, stats.k // 6)))
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        ax.tick_params(labelsize=7)
    fig.suptitle("centroid transitions per input symbol (counts, following the most probable centroid)"
                 + _title_suffix(model), fontsize=10)
    return _save(fig, path, dpi)


# ------------------------------------------------------------------------------------------- trajectories
def plot_trajectories(result: Any, path: Path, *, model: dict | None = None, figsize=(12.0, 5.5), dpi: int = DEFAULT_DPI) -> Path:
    """One panel per state tensor (h, and c for the LSTM family): the 2-D PCA path, words annotated."""
    n = len(result.states)
    fig, axes = _figure(figsize, dpi, ncols=n, squeeze=False)
    for ax, st in zip(axes[0], result.states):
        pts = st.points.numpy()
        ax.plot(pts[:, 0], pts[:, 1], "-", color="#999999", linewidth=1, zorder=1)
        sc = ax.scatter(pts[:, 0], pts[:, 1], c=np.arange(len(pts)), cmap="viridis", s=30, zorder=2)
        for t, label in enumerate(result.labels):
            ax.annotate(_short(label), (pts[t, 0], pts[t, 1]), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ev = st.explained
        ax.set_xlabel(f"PC1 ({100 * ev[0]:.0f}% of variance)")
        ax.set_ylabel(f"PC2 ({100 * ev[1]:.0f}%)")
        ax.set_title(f"state {st.name} ({st.values.shape[1]} units)", fontsize=10)
        fig.colorbar(sc, ax=ax, shrink=0.8, label="step")
    fig.suptitle(f"State trajectories over the sentence, PCA to 2-D (layer {result.layer})" + _title_suffix(model), fontsize=11)
    return _save(fig, path, dpi)


def plot_trajectory_heatmap(
    result: Any, path: Path, *, max_units: int = 64, model: dict | None = None, figsize=(12.0, 7.0), dpi: int = DEFAULT_DPI
) -> Path:
    """Units x time heat maps of every state tensor (the ``max_units`` units that vary most)."""
    n = len(result.states)
    fig, axes = _figure(figsize, dpi, nrows=n, squeeze=False)
    for ax, st in zip(axes[:, 0], result.states):
        values = st.values.numpy()  # [T+1, H]
        var = values.var(0)
        units = np.sort(np.argsort(-var, kind="stable")[:max_units])
        data = values[:, units].T  # [units, T+1]
        lim = float(np.abs(data).max()) or 1.0
        im = ax.imshow(data, cmap="RdBu_r", aspect="auto", vmin=-lim, vmax=lim, interpolation="nearest")
        ax.set_xticks(range(len(result.labels)))
        ax.set_xticklabels([_short(t, 10) for t in result.labels], rotation=45, ha="right", fontsize=8)
        ax.set_ylabel(f"{st.name}: {len(units)} of {values.shape[1]} units")
        fig.colorbar(im, ax=ax, shrink=0.9)
    fig.suptitle(f"State values per unit over time (layer {result.layer}; units that vary most)" + _title_suffix(model), fontsize=11)
    return _save(fig, path, dpi)


# ------------------------------------------------------------------------------------------- completion
def plot_completion(result: Any, path: Path, *, model: dict | None = None, max_questions: int = 20,
                    figsize=(10.0, 6.0), dpi: int = DEFAULT_DPI) -> Path:
    """Per question (up to ``max_questions``): every candidate's score relative to the best one;
    the chosen candidate, and the answer when known, marked."""
    fig, ax = _figure(figsize, dpi)
    rows = list(zip(result.questions, result.scores, result.choices))[:max_questions]
    for q_index, (q, scores, choice) in enumerate(rows):
        best = scores[choice]
        for c, s in enumerate(scores):
            marker = "o"
            color = "#999999"
            if c == choice:
                color = "#2e8b57" if q.answer in (None, c) else "#c0392b"
                marker = "D"
            if q.answer == c and c != choice:
                color, marker = "#2e8b57", "*"
            ax.scatter(s - best, q_index, color=color, marker=marker, s=40, zorder=2)
    ax.axvline(0, color="k", linewidth=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_short(q.sentence, 40) for q, _, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("candidate score - chosen score (log-probability)")
    acc = result.accuracy
    acc_text = f"accuracy {acc:.3f} on {result.num_answered} answered" if acc is not None else "no answers given"
    ax.set_title(
        f"Sentence completion by LM score ({len(result.questions)} questions, {acc_text})\n"
        "diamond: chosen (green right, red wrong); star: the answer when missed" + _title_suffix(model),
        fontsize=10,
    )
    return _save(fig, path, dpi)
