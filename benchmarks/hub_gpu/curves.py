"""The validation curves of the hub's GPU runs (RESULTS.md): logs/<run>/metrics.csv -> curves.csv, curves.png.

    python benchmarks/hub_gpu/curves.py    # after train.sh, from the repository root
"""

import csv
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = {  # run -> (what, unit): word runs in perplexity, character runs in bits per character
    "D64": ("delta-rnn-ptb: Delta-RNN, 64 streams, Adam 3e-3", "ppl"),
    "L64": ("lstm-ptb: LSTM, 64 streams, Adam 3e-3", "ppl"),
    "D32": ("Delta-RNN, 32 streams, Adam 2e-3", "ppl"),
    "L32": ("LSTM, 32 streams, Adam 2e-3", "ppl"),
    "C128": ("delta-rnn-ptb-char: 128 streams", "bpc"),
    "C64": ("characters, 64 streams", "bpc"),
}


def read(run: str) -> list[tuple[float, float]]:
    """(epochs trained, validation value) of every validation of ``run``, its resumed sitting included."""
    points, windows = {}, None  # windows per epoch: one more than the last step logged in epoch 0
    for path in sorted((HERE / "logs" / run).glob("*/metrics.csv")):
        with path.open() as f:
            rows = list(csv.DictReader(f))
        if windows is None:
            windows = 1 + max(int(r["step"]) for r in rows if r["epoch"] == "0")
        for r in rows:
            if r["val_loss"]:
                nats = float(r["val_loss"])
                points[int(r["step"])] = math.exp(nats) if RUNS[run][1] == "ppl" else nats / math.log(2)
    return [((step + 1) / windows, value) for step, value in sorted(points.items())]


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {run: read(run) for run in RUNS}
    with (HERE / "curves.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["run", "what", "epochs", "valid_ppl_or_bpc"])
        for run, points in curves.items():
            out.writerows([run, RUNS[run][0], f"{e:.2f}", f"{v:.4f}"] for e, v in points)
    fig, (words, chars) = plt.subplots(1, 2, figsize=(11, 4))
    for run, points in curves.items():
        ax = words if RUNS[run][1] == "ppl" else chars
        ax.plot(*zip(*points), marker=".", label=RUNS[run][0])
    words.set(xlabel="epochs", ylabel="validation perplexity", ylim=(90, 150), title="PTB words, 8 min 15 s each")
    chars.set(xlabel="epochs", ylabel="validation bits per character", ylim=(1.4, 1.9),
              title="PTB characters, 8 min 15 s each (128 streams: resumed to 11 min 15 s)")
    for ax in (words, chars):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "curves.png", dpi=110)


if __name__ == "__main__":
    main()
