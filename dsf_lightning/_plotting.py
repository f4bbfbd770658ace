"""matplotlib for the PNGs the library writes (analysis figures, reproduction curves): the Agg backend (no
display needed) and one way to save a figure. matplotlib is optional: ``pip install 'dsf-lightning[plots]'``."""

from __future__ import annotations

from pathlib import Path

PLOTS_EXTRA = "pip install 'dsf-lightning[plots]' (or matplotlib)"


def pyplot(what: str = "this plot"):
    """``matplotlib.pyplot`` on the Agg backend; an ImportError that names ``what`` and the install command."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f"{what} needs matplotlib: {PLOTS_EXTRA}") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path, dpi: int = 100) -> Path:
    """Write ``fig`` to ``path`` as PNG (its folder made if missing), close it, return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    pyplot().close(fig)
    return path
