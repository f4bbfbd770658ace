"""``dsf analyze <tool>``: the analysis tools from the command line; PNG plots plus JSON / CSV data.

    dsf analyze state-delta --text "the government said the economy grew" --out out/
    dsf analyze influence --text "the man who sold the car left" --out out/      # trains a small RAN
    dsf analyze influence --model ./my-ran --text "..." --out out/
    dsf analyze timescales --out out/                                            # trains a small IRLM
    dsf analyze centroids --out out/                                             # sr-GRU on Tomita 2
    dsf analyze centroids --model ./my-sr-lstm-lm --file sentences.txt --out out/
    dsf analyze trajectories --text "the market rose sharply" --out out/
    dsf analyze complete --questions questions.jsonl --out out/
    dsf analyze complete --model ./my-irlm --questions q.jsonl --units lcu --unnormalized --out out/

``--model`` takes a published name (``dsf list models``), a hub repo id, a pretrained folder or a
Lightning checkpoint (``.ckpt``; its corpus is read again from ``--data-root`` for the vocabulary).
The tools that need a particular cell (influence: RAN, timescales: IRLM, centroids: an sr-RNN) train
a small one for ``--train-steps`` steps when no ``--model`` is given, and say so in the plot title and
the data (``"freshly_trained": true``); ``--save-model DIR`` keeps that model as a pretrained folder.

Each tool writes ``<out>/<tool>.png`` (one PNG per text when several ``--text`` are given:
``<tool>_1.png``, ...; ``trajectories`` adds ``*_heatmap.png``, ``centroids`` adds
``centroids_per_symbol.png``), ``<out>/<tool>.json`` and a CSV. Errors (unknown tool, a model without the
needed cell, empty text, a malformed questions file) are one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..analysis._common import AnalysisError, describe_model, load_model
from .errors import guard, standalone_main
from .score import DEFAULT_MODEL  # the bundled language model, as for dsf score

TOOLS = ("state-delta", "influence", "timescales", "centroids", "trajectories", "complete")


# ------------------------------------------------------------------------------------------- parser
def _common(p: argparse.ArgumentParser, *, model_default: str | None, model_help: str) -> None:
    p.add_argument("--model", "-m", default=model_default, metavar="NAME_OR_PATH", help=model_help)
    p.add_argument("--out", "-o", default="dsf-analysis", metavar="DIR",
                   help="folder for the PNG, JSON and CSV files (created; default ./dsf-analysis)")
    p.add_argument("--data-root", default=None, metavar="DIR",
                   help="corpus data root (for --model CHECKPOINT.ckpt and for training a small model; "
                        "default $DSF_DATA_ROOT)")
    p.add_argument("--dpi", type=int, default=100, help="PNG resolution (the figure sizes are fixed in inches)")


def _texts(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--text", "-t", action="append", default=[], required=required, metavar="SENTENCE",
                   help="a sentence to analyse (repeat for several)")


def _fresh(p: argparse.ArgumentParser, *, steps: int, hidden: int, what: str) -> None:
    g = p.add_argument_group(f"training a small {what} when no --model is given")
    g.add_argument("--train-steps", type=int, default=steps, help=f"training steps (default {steps})")
    g.add_argument("--hidden-size", type=int, default=hidden, help=f"hidden units (default {hidden})")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--save-model", metavar="DIR", default=None, help="also save the trained model in DIR")


def _corpus(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default="ptb", help="corpus to train the small model on (default ptb)")
    p.add_argument("--corpus-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a corpus option (VALUE read as JSON when it parses, else as a string), e.g. path=/data/mytext")


def add_analyze_parser(subparsers, help: str | None = None) -> argparse.ArgumentParser:
    """Add ``analyze`` (with one subcommand per tool) to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p = subparsers.add_parser(
        "analyze",
        help=help,
        description="Analysis tools of the papers; each writes PNG plots and JSON / CSV data to --out.",
    )
    tools = p.add_subparsers(dest="tool", required=True, metavar="TOOL")

    t = tools.add_parser("state-delta", help="min-max normalized L1 state-delta score per word (DSF Fig. 2)",
                         description="The L1 norm of the change of the hidden state at every word, min-max "
                         "normalized over the sentence (DSF paper Fig. 2, footnote 15).")
    _common(t, model_default=DEFAULT_MODEL, model_help=f"the language model (default: the bundled {DEFAULT_MODEL})")
    _texts(t)
    t.add_argument("--layer", type=int, default=-1, help="layer (default -1: the top one)")
    t.add_argument("--state-index", type=int, default=0, help="which state tensor of the layer (default 0: h)")
    t.set_defaults(handler=_guard(_state_delta))

    t = tools.add_parser("influence", help="RAN: each word's most influential predecessor (RAN eq. 7)",
                         description="Arrows from every word to the earlier word with the largest weight "
                         "w_j^t = i_j prod_k f_k in the RAN cell state (RAN paper eq. 7, Fig. 1).")
    _common(t, model_default=None, model_help="a RAN language model (default: train a small RAN on --corpus)")
    _texts(t)
    t.add_argument("--layer", type=int, default=-1, help="RAN layer (default -1: the top one)")
    _fresh(t, steps=100, hidden=128, what="RAN")
    t.add_argument("--cell", choices=("ran", "ran-simple"), default="ran", help="the small model's cell (default ran)")
    _corpus(t)
    t.set_defaults(handler=_guard(_influence))

    t = tools.add_parser("timescales", help="IRLM timescales -1/log|r| as a histogram (IRLM Fig. 1)",
                         description="Histogram (log axis) of every IRLM unit's timescale -1/log|r| "
                         "(IRLM paper sec. 5.1, Fig. 1).")
    _common(t, model_default=None, model_help="an IRLM language model (default: train a small IRLM on --corpus)")
    _fresh(t, steps=100, hidden=128, what="IRLM")
    t.add_argument("--long-context-units", type=int, default=None,
                   help="LCUs of the small IRLM (default: 3/4 of --hidden-size, as the paper's 384 of 512)")
    _corpus(t)
    t.set_defaults(handler=_guard(_timescales))

    t = tools.add_parser("centroids", help="sr-RNN centroid prototypes and transition heat map",
                         description="Which inputs lead to each centroid (sr-RNN paper sec. 5 prototypes) and how "
                         "often the network moves from centroid i to j, following the most probable centroid.")
    _common(t, model_default=None,
            model_help="an sr language model (e.g. cell sr-lstm); default: train an sr-GRU on a Tomita grammar")
    _texts(t, required=False)
    t.add_argument("--file", "-f", default=None, metavar="PATH", help="sentences to run an sr LM on, one per line")
    t.add_argument("--layer", type=int, default=None, help="sr layer of an LM (default: the lowest one)")
    t.add_argument("--top", type=int, default=5, help="prototype symbols kept per centroid (default 5)")
    t.add_argument("--min-count", type=int, default=1, help="ignore symbols read fewer times (default 1)")
    _fresh(t, steps=300, hidden=16, what="sr-GRU")
    t.add_argument("--grammar", type=int, default=2, help="Tomita grammar 1-7 of the small sr-GRU (default 2)")
    t.add_argument("--k", type=int, default=10, help="centroids of the small sr-GRU (default 10)")
    t.set_defaults(handler=_guard(_centroids))

    t = tools.add_parser("trajectories", help="hidden / cell state trajectories (2-D PCA) and units x time heat map",
                         description="Every state tensor of a layer after each word, projected to 2-D by PCA, and "
                         "the units x time values as a heat map.")
    _common(t, model_default=DEFAULT_MODEL, model_help=f"the language model (default: the bundled {DEFAULT_MODEL})")
    _texts(t)
    t.add_argument("--layer", type=int, default=-1, help="layer (default -1: the top one)")
    t.add_argument("--max-units", type=int, default=64, help="units in the heat map (those that vary most; default 64)")
    t.set_defaults(handler=_guard(_trajectories))

    t = tools.add_parser("complete", help="sentence completion by LM score (MRSC protocol of the IRLM paper)",
                         description="Fill every candidate into the blank (___), score each whole sentence and pick "
                         "the highest log-probability; reports accuracy when the questions carry answers. "
                         "Questions: JSON Lines {\"sentence\": \"... ___ ...\", \"candidates\": [...], \"answer\": ...}.")
    _common(t, model_default=DEFAULT_MODEL, model_help=f"the language model (default: the bundled {DEFAULT_MODEL})")
    t.add_argument("--questions", "-q", required=True, metavar="FILE", help="the questions, JSON Lines")
    t.add_argument("--units", default=None,
                   help="score with these top-layer units only (others zeroed): 'lcu' (IRLM long-context units), "
                   "'short', or indices like '0-383,400'")
    t.add_argument("--unit-mode", choices=("decoder", "state"), default="decoder",
                   help="zero the other units before the decoder (default) or also in the recurrent state")
    t.add_argument("--unnormalized", action="store_true",
                   help="score by the raw target logits instead of log-softmax (the paper's LCU scoring)")
    t.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass (default 32)")
    t.set_defaults(handler=_guard(_complete))
    return p


# ------------------------------------------------------------------------------------------- plumbing
def _guard(run):
    """The one error policy (:mod:`.errors`), the tool named: ``dsf analyze TOOL: error: ...``."""
    return guard(lambda args: f"analyze {args.tool}", AnalysisError)(run)


def _out(args) -> Path:
    out = Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    return out


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(_clean(data), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def _write_csv(path: Path, rows: list[list]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return path


def _report(written: list[Path], lines: Sequence[str] = ()) -> int:
    for line in lines:
        print(line)
    for path in written:
        print(f"wrote {path}")
    return 0


def _check_texts(texts: list[str]) -> list[str]:
    if not texts:
        raise AnalysisError('nothing to analyse: give a sentence with --text "..."')
    for n, text in enumerate(texts):
        if not text.strip():
            raise AnalysisError(f'empty text (--text number {n + 1}): give a sentence, e.g. --text "the market rose"')
    return texts


def _names(tool: str, n: int) -> list[str]:
    stem = tool.replace("-", "_")
    return [stem] if n == 1 else [f"{stem}_{i + 1}" for i in range(n)]


def _corpus_options(items: list[str]) -> dict:
    options = {}
    for item in items:
        if "=" not in item:
            raise AnalysisError(f"--corpus-option takes KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def _model_or_fresh(args, cell: str, cell_options: dict | None = None):
    """(pretrained, model description): --model, or a small model trained now."""
    if args.model:
        pretrained = load_model(args.model, data_root=args.data_root)
        return pretrained, describe_model(pretrained, str(args.model))
    from ..analysis.fresh import train_small_lm

    print(f"no --model given: training a small {cell} language model on {args.corpus} for {args.train_steps} steps ...",
          file=sys.stderr)
    pretrained = train_small_lm(
        cell, corpus=args.corpus, data_root=args.data_root, corpus_options=_corpus_options(args.corpus_option),
        steps=args.train_steps, hidden_size=args.hidden_size, cell_options=cell_options, seed=args.seed,
    )
    if args.save_model:
        from ..model.pretrained import save_pretrained

        save_pretrained(pretrained, args.save_model)
        print(f"saved the small model in {args.save_model}", file=sys.stderr)
    return pretrained, describe_model(pretrained, f"freshly trained {cell} ({args.corpus})")


# ------------------------------------------------------------------------------------------- tools
def _state_delta(args) -> int:
    from ..analysis.plots import plot_state_deltas
    from ..analysis.state_delta import state_deltas

    texts = _check_texts(args.text)
    pretrained = load_model(args.model, data_root=args.data_root)
    model = describe_model(pretrained, str(args.model))
    results = [state_deltas(pretrained, t, layer=args.layer, state_index=args.state_index) for t in texts]
    out = _out(args)
    written = []
    rows = [["sentence", "position", "token", "l1", "score"]]
    for n, (name, r) in enumerate(zip(_names(args.tool, len(results)), results)):
        written.append(plot_state_deltas(r, out / f"{name}.png", model=model, dpi=args.dpi))
        rows += [[n + 1, *row] for row in r.to_csv_rows()[1:]]
    written.append(_write_json(out / "state_delta.json", {"model": model, "sentences": [r.to_dict() for r in results]}))
    written.append(_write_csv(out / "state_delta.csv", rows))
    lines = []
    for r in results:
        lines.append("  ".join(f"{t}:{s:.2f}" for t, s in zip(r.tokens, r.score)))
    return _report(written, lines)


def _influence(args) -> int:
    from ..analysis.influence import ran_influence
    from ..analysis.plots import plot_influence

    texts = _check_texts(args.text)
    pretrained, model = _model_or_fresh(args, getattr(args, "cell", "ran"))
    results = [ran_influence(pretrained, t, layer=args.layer) for t in texts]
    out = _out(args)
    written, rows = [], [["sentence", "position", "token", "predecessor", "predecessor_token", "strength", "unit"]]
    for n, (name, r) in enumerate(zip(_names(args.tool, len(results)), results)):
        written.append(plot_influence(r, out / f"{name}.png", model=model, dpi=args.dpi))
        rows += [[n + 1, *row] for row in r.to_csv_rows()[1:]]
    written.append(_write_json(out / "influence.json", {"model": model, "sentences": [r.to_dict() for r in results]}))
    written.append(_write_csv(out / "influence.csv", rows))
    lines = [" ".join(f"{tok}<-{'' if p is None else r.tokens[p]}" for tok, p in zip(r.tokens, r.predecessor)) for r in results]
    return _report(written, lines)


def _timescales(args) -> int:
    from ..analysis.plots import plot_timescales
    from ..analysis.timescales import irlm_timescales

    options = None
    if not args.model:
        lcu = args.long_context_units
        if lcu is None:
            lcu = (3 * args.hidden_size) // 4
        options = {"long_context_units": lcu}
    pretrained, model = _model_or_fresh(args, "irlm", options)
    result = irlm_timescales(pretrained)
    out = _out(args)
    written = [
        plot_timescales(result, out / "timescales.png", model=model, dpi=args.dpi),
        _write_json(out / "timescales.json", {"model": model, **result.to_dict()}),
        _write_csv(out / "timescales.csv", result.to_csv_rows()),
    ]
    s = result.summary()
    return _report(written, [
        f"{s['units']} units ({s['long_context_units']} long-context): timescale median {s['median']:.2f}, "
        f"90th percentile {s['p90']:.2f}, max {s['max']:.2f} words"
    ])


def _centroids(args) -> int:
    from ..analysis.centroids import centroid_statistics, classifier_transition_traces, lm_transition_traces
    from ..analysis.plots import plot_centroids, plot_symbol_transitions

    if args.top < 1 or args.min_count < 1:
        raise AnalysisError("--top and --min-count must be positive")
    if args.model:
        texts = list(args.text)
        if args.file:
            try:
                lines = Path(args.file).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as err:
                raise AnalysisError(f"cannot read {args.file}: {err}") from None
            texts += [line for line in lines if line.strip()]
        if not texts:
            raise AnalysisError("an sr language model needs sentences to run: give --text and/or --file")
        _check_texts(texts)
        pretrained = load_model(args.model, data_root=args.data_root)
        model = describe_model(pretrained, str(args.model))
        traces = lm_transition_traces(pretrained, texts, layer=args.layer)
        title = f"sr-RNN centroids: {model['cell']} language model, {len(texts)} sentence(s)"
    else:
        if args.text or args.file:
            raise AnalysisError("--text / --file are for an sr language model given with --model; "
                                "without --model an sr-GRU is trained on a Tomita grammar and its training strings are used")
        from ..analysis.fresh import train_tomita_sr

        print(f"no --model given: training an sr-GRU on Tomita grammar {args.grammar} for {args.train_steps} steps ...",
              file=sys.stderr)
        fresh = train_tomita_sr(args.grammar, steps=args.train_steps, hidden_size=args.hidden_size, k=args.k, seed=args.seed)
        if args.save_model:
            print("note: --save-model saves language models only; the Tomita classifier is not saved", file=sys.stderr)
        traces = classifier_transition_traces(fresh.module, fresh.strings, fresh.vocab)
        model = {"source": f"freshly trained sr-GRU (Tomita {args.grammar})", "cell": "sr-gru", "freshly_trained": True,
                 "task": fresh.info["task"], "language": fresh.info["language"], "training": fresh.info["fresh_training"]}
        title = (f"sr-GRU centroids on Tomita {args.grammar} ({fresh.info['language']}), {len(traces)} training strings, "
                 f"train accuracy {fresh.info['fresh_training']['train_accuracy']:.3f}")
    stats = centroid_statistics(traces, top=args.top, min_count=args.min_count)
    out = _out(args)
    written = [
        plot_centroids(stats, out / "centroids.png", title=title, model=model, dpi=args.dpi),
        plot_symbol_transitions(stats, out / "centroids_per_symbol.png", model=model, dpi=args.dpi),
        _write_json(out / "centroids.json", {"model": model, **stats.to_dict()}),
        _write_csv(out / "centroids_prototypes.csv", stats.prototype_csv_rows()),
        _write_csv(out / "centroids_transitions.csv", stats.transition_csv_rows()),
    ]
    lines = [f"{stats.num_steps} steps over {stats.num_sequences} sequences; centroids used: {stats.used}"]
    for i in stats.used:
        top = ", ".join(f"{s} ({p:.2f})" for s, p, _ in stats.prototypes[i])
        lines.append(f"  centroid {i} ({int(stats.visits[i])} visits): {top}")
    return _report(written, lines)


def _trajectories(args) -> int:
    from ..analysis.plots import plot_trajectories, plot_trajectory_heatmap
    from ..analysis.trajectories import state_trajectories

    texts = _check_texts(args.text)
    if args.max_units < 1:
        raise AnalysisError("--max-units must be positive")
    pretrained = load_model(args.model, data_root=args.data_root)
    model = describe_model(pretrained, str(args.model))
    results = [state_trajectories(pretrained, t, layer=args.layer) for t in texts]
    out = _out(args)
    written, rows = [], None
    for n, (name, r) in enumerate(zip(_names(args.tool, len(results)), results)):
        written.append(plot_trajectories(r, out / f"{name}.png", model=model, dpi=args.dpi))
        written.append(plot_trajectory_heatmap(r, out / f"{name}_heatmap.png", max_units=args.max_units, model=model, dpi=args.dpi))
        body = r.to_csv_rows()
        rows = [["sentence", *body[0]]] if rows is None else rows
        rows += [[n + 1, *row] for row in body[1:]]
    written.append(_write_json(out / "trajectories.json", {"model": model, "sentences": [r.to_dict() for r in results]}))
    written.append(_write_csv(out / "trajectories.csv", rows))
    lines = [
        f"{r.text}: " + ", ".join(f"{s.name} PCA explains {100 * sum(s.explained):.0f}%" for s in r.states) for r in results
    ]
    return _report(written, lines)


def _complete(args) -> int:
    from ..analysis.plots import plot_completion
    from ..analysis.sentence_completion import complete_questions, load_questions

    if args.batch_size < 1:
        raise AnalysisError("--batch-size must be positive")
    questions = load_questions(args.questions)
    pretrained = load_model(args.model, data_root=args.data_root)
    model = describe_model(pretrained, str(args.model))
    result = complete_questions(
        pretrained, questions, units=args.units, unit_mode=args.unit_mode, normalize=not args.unnormalized,
        batch_size=args.batch_size,
    )
    out = _out(args)
    written = [
        plot_completion(result, out / "complete.png", model=model, dpi=args.dpi),
        _write_json(out / "complete.json", {"model": model, **result.to_dict()}),
        _write_csv(out / "complete.csv", result.to_csv_rows()),
    ]
    acc = result.accuracy
    summary = (f"accuracy {acc:.4f} ({sum(c for c in result.correct if c)}/{result.num_answered} answered questions)"
               if acc is not None else f"{len(result.questions)} questions answered (no answers given: no accuracy)")
    lines = [summary]
    oov = sorted({c for bad in result.oov_candidates for c in bad})
    if oov:
        lines.append(f"note: {len(oov)} candidate(s) outside the model's vocabulary, scored as its unknown symbol: "
                     + ", ".join(oov[:10]) + (" ..." if len(oov) > 10 else ""))
    return _report(written, lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dsf_lightning.cli.analyze TOOL ...`` (the same as ``dsf analyze TOOL ...``)."""
    return standalone_main("analyze", add_analyze_parser, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
