"""``dsf export`` (a pretrained folder of a language model or a text classifier, or ``--format onnx``), ``dsf push``
and ``dsf list models``: argparse parts the ``dsf`` CLI registers.

Each ``add_*_parser(subparsers)`` adds one subcommand with ``set_defaults(handler=...)``; handlers return
an exit code and report the user's errors as one line on stderr (:mod:`dsf_lightning.cli.errors`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..auto import list_models
from ..export.language_model import export_checkpoint
from ..hub.folder import STORAGE_DTYPES
from ..training.read_checkpoint import WEIGHTS
from .errors import guard


def _json_arg(text: str | None, what: str) -> Any:
    """A JSON value given inline or as the path of a JSON file."""
    if text is None:
        return None
    source = text
    path = Path(text).expanduser()
    if not text.lstrip().startswith(("[", "{")) and path.is_file():
        source = path.read_text(encoding="utf-8")
    try:
        return json.loads(source)
    except json.JSONDecodeError as err:
        raise ValueError(f"{what}: not JSON and not a JSON file ({err.msg})") from None


def _card_options(args: argparse.Namespace) -> tuple[list | None, dict | None, Any]:
    """``dsf export``'s ``--eval-results`` (a JSON list), ``--info`` (a JSON object) and ``--card-extra``."""
    eval_results = _json_arg(args.eval_results, "--eval-results")
    info = _json_arg(args.info, "--info")
    if eval_results is not None and not isinstance(eval_results, list):
        raise ValueError("--eval-results must be a JSON list of results")
    if info is not None and not isinstance(info, dict):
        raise ValueError("--info must be a JSON object")
    return eval_results, info, _json_arg(args.card_extra, "--card-extra")


def _key_value(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


# ------------------------------------------------------------------------------------------ export
@guard("export")
def export_command(args: argparse.Namespace) -> int:
    """Turn a Lightning checkpoint into a pretrained model folder (or, ``--format onnx``, a model into an
    ONNX graph). A SequenceClassifier checkpoint gives a text-classifier folder (:mod:`.classifier`). The output
    is written beside its place and renamed into it; one that is, holds or lies inside the source is refused."""
    from ..export.onnx import check_output_outside

    source = Path(args.checkpoint).expanduser()
    if source.exists():  # a published name is resolved (and checked) by the export itself
        check_output_outside(Path(args.output), source)
    if args.format == "onnx":
        return _export_onnx(args)
    if _is_classifier_checkpoint(args.checkpoint):
        return _export_classifier(args)
    given = [flag for key, flag in _CLASSIFIER_ONLY.items() if getattr(args, key, None) not in (None, False)]
    if given:
        raise ValueError(f"{', '.join(given)} belong(s) to text classifiers (a SequenceClassifier checkpoint); "
                         f"{args.checkpoint} holds a language model: drop them (--corpus names its data)")
    eval_results, info, card_extra = _card_options(args)
    folder = export_checkpoint(
        args.checkpoint,
        args.output,
        corpus_name=args.corpus,
        data_root=args.data_root,
        corpus_options=dict(args.corpus_option or []),
        dtype=args.dtype,
        eval_results=eval_results,
        info=info,
        card_extra=card_extra,
        evaluate=tuple(s for s in (args.evaluate or "").split(",") if s),
        dynamic=tuple(args.dynamic or ()),
        dynamic_updates=args.dynamic_updates,
        weights=args.weights,
    )
    total = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    print(f"exported {args.checkpoint} -> {folder} ({total / 1e6:.2f} MB, {args.dtype} weights)")
    _say_which_weights(folder)
    return 0


def _say_which_weights(folder: Path) -> None:
    """Print the line config.json's info records on which weights of the checkpoint the folder holds, if any."""
    info = json.loads((Path(folder) / "config.json").read_text()).get("info") or {}
    which = (info.get("checkpoint") or {}).get("weights")
    if which:
        print(f"weights: {which}")


_CLASSIFIER_ONLY = {"recipe": "--recipe", "max_length": "--max-length", "prototypes": "--prototypes"}
_LANGUAGE_MODEL_ONLY = {"corpus": "--corpus", "corpus_option": "--corpus-option", "dynamic": "--dynamic"}


def _is_classifier_checkpoint(path: str) -> bool:
    """Whether ``path`` is a checkpoint of a dsf_lightning.tasks module (read weights-only); anything that
    cannot be read is left to the language-model export, which says what is wrong."""
    from ..training.read_checkpoint import CheckpointError, is_classifier_checkpoint
    from ..training.read_checkpoint import load_checkpoint as _load_checkpoint

    source = Path(path).expanduser()
    if not source.is_file():
        return False
    try:
        return is_classifier_checkpoint(_load_checkpoint(source))
    except CheckpointError:
        return False


def _prototypes_arg(text: str) -> int | None:
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of test sequences or 'all', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of test sequences or 'all', got {value}")
    return value


def _export_classifier(args: argparse.Namespace) -> int:
    """``dsf export`` of a SequenceClassifier checkpoint: a text-classifier folder."""
    from ..export.classifier import export_classifier_checkpoint

    given = [flag for key, flag in _LANGUAGE_MODEL_ONLY.items() if getattr(args, key)]
    if args.dynamic_updates != "segment":
        given.append("--dynamic-updates")
    if given:
        raise ValueError(f"{', '.join(given)} belong(s) to language models; {args.checkpoint} holds a text classifier "
                         "(its data comes from the run's config.yaml or --recipe): drop them")
    eval_results, info, card_extra = _card_options(args)
    folder = export_classifier_checkpoint(
        args.checkpoint, args.output, recipe=args.recipe, data_root=args.data_root, dtype=args.dtype,
        eval_results=eval_results, info=info, card_extra=card_extra,
        evaluate=tuple(s for s in (args.evaluate or "").split(",") if s),
        prototypes=0 if args.prototypes is False else args.prototypes, max_length=args.max_length, weights=args.weights,
    )
    total = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    print(f"exported {args.checkpoint} -> {folder} ({total / 1e6:.2f} MB, {args.dtype} weights, text classifier)")
    _say_which_weights(folder)
    return 0


_FOLDER_ONLY = {"eval_results": "--eval-results", "evaluate": "--evaluate", "dynamic": "--dynamic", "info": "--info",
                "card_extra": "--card-extra"}


def _export_onnx(args: argparse.Namespace) -> int:
    """``dsf export --format onnx MODEL OUTPUT.onnx``: MODEL is a checkpoint, a pretrained folder or a name."""
    from ..export import to_onnx

    given = [flag for key, flag in _FOLDER_ONLY.items() if getattr(args, key)]
    given += [flag for key, flag in _CLASSIFIER_ONLY.items() if getattr(args, key, None) not in (None, False)]
    if args.dtype != "float32":
        given.append("--dtype")
    if given:
        raise ValueError(
            f"{', '.join(given)} belong(s) to the pretrained folder format, not to --format onnx (an ONNX graph has "
            "float32 weights and no model card): drop them, or export a folder first"
        )
    source = Path(args.checkpoint).expanduser()
    if _is_classifier_checkpoint(args.checkpoint):
        raise ValueError(f"{args.checkpoint} holds a text classifier: --format onnx exports language models only; "
                         "drop --format onnx to write a classifier folder")
    if source.suffix == ".ckpt" or source.is_file():
        from ..training.read_checkpoint import pretrained_from_checkpoint

        model = pretrained_from_checkpoint(
            source, args.corpus, data_root=args.data_root, corpus_options=dict(args.corpus_option or []),
            weights=args.weights,
        )
    else:
        model = args.checkpoint  # a pretrained folder or a published name: the hub's loader resolves it
    from ..hub.folder import WrongTaskError

    try:
        path = to_onnx(model, args.output, opset=args.opset, check=not args.no_check)
    except WrongTaskError as err:  # a classifier folder or name: say what ONNX export is for, not how to load it
        if "text classifier" not in str(err).split(", not a ")[0]:
            raise
        raise ValueError(f"{args.checkpoint} holds a text classifier: --format onnx exports language models only; "
                         f"use the classifier's folder as it is (dsf classify --model {args.checkpoint})") from None
    checked = "" if args.no_check else ", checked against onnxruntime"
    print(f"exported {args.checkpoint} -> {path} ({path.stat().st_size / 1e6:.2f} MB ONNX{checked})")
    return 0


def add_export_parser(subparsers, help: str | None = None) -> argparse.ArgumentParser:
    """``dsf export CHECKPOINT OUTPUT``."""
    parser = subparsers.add_parser(
        "export",
        help=help,
        description="Read a LanguageModelModule checkpoint safely (weights_only) and write a pretrained folder "
        "(config.json, model.safetensors, vocab.json, dsf_tokenizer.json, tokenizer.json where exact, README.md) atomically. "
        "A SequenceClassifier checkpoint (a task recipe of `dsf fit`) gives a text-classifier folder, its vocabulary, "
        "labels and text rules from the task DataModule of the run's config.yaml (or --recipe). With --format onnx: "
        "write a checkpoint, pretrained folder or published model as one ONNX graph (inputs tokens [batch, time] "
        "and the state, outputs logits and the final state; batch and time dynamic), checked against onnxruntime.",
    )
    parser.add_argument("checkpoint", help="the Lightning .ckpt file (--format onnx: also a pretrained folder or a published name)")
    parser.add_argument("output", help="the folder to write (replaced atomically if it is a model folder); --format onnx: the .onnx file")
    parser.add_argument("--format", choices=("folder", "onnx"), default="folder",
                        help="folder: a pretrained model folder (default); onnx: an ONNX graph for onnxruntime "
                        "(needs pip install 'dsf-lightning[onnx]')")
    parser.add_argument("--opset", type=int, help="--format onnx: the ONNX opset (default: the exporter's)")
    parser.add_argument("--no-check", action="store_true",
                        help="--format onnx: do not run the graph with onnxruntime against PyTorch after writing it")
    parser.add_argument("--corpus", help="corpus name for the vocabulary (default: from the checkpoint or the CLI config.yaml beside it)")
    parser.add_argument("--data-root", help="where the corpus files are (default: $DSF_DATA_ROOT)")
    parser.add_argument("--corpus-option", action="append", type=_key_value, metavar="KEY=VALUE",
                        help="a corpus option (value parsed as JSON when it is), repeatable; e.g. tokenizer=char")
    parser.add_argument("--dtype", choices=sorted(STORAGE_DTYPES), default="float32", help="weight storage (float16 halves the size)")
    parser.add_argument("--weights", choices=WEIGHTS, default="auto",
                        help="a run with PolyakAveraging kept averaged weights beside its training ones: 'auto' (default) "
                             "and 'averaged' read the average (what its validation measured), 'training' the iterate")
    parser.add_argument("--eval-results", metavar="JSON|FILE",
                        help='model-index results, e.g. \'[{"metric": "perplexity", "value": 93.1, "dataset": "ptb", "split": "test"}]\'')
    parser.add_argument("--evaluate", metavar="SPLITS",
                        help="score these splits' files (comma-separated, e.g. valid,test) with the stored weights "
                        "and put the numbers in the card (a text classifier: accuracy and error on the DataModule's "
                        "test set(s) / validation set)")
    parser.add_argument("--recipe", metavar="YAML",
                        help="text classifier: the recipe (or LightningCLI config.yaml) it was trained with, when the "
                        "run's config.yaml is not beside the checkpoint or in its logs/version_*/ folder")
    parser.add_argument("--max-length", type=int, metavar="N",
                        help="text classifier: symbols read from each text (default: the longest test length of the "
                        "DataModule when every test set is cut, else 4096)")
    parser.add_argument("--prototypes", type=_prototypes_arg, nargs="?", const=None, default=False, metavar="N|all",
                        help="sr-RNN text classifier: the centroids' prototypical words (sr-RNN Table 6) from N test "
                        "sequences (all: every one; the flag alone: all) into the card")
    parser.add_argument("--dynamic", type=int, nargs="+", choices=(1, 2), metavar="N",
                        help="with --evaluate: also report test numbers under dynamic evaluation #1 and/or #2 "
                        "(DSF sec 4.2; SGD step 0.005, test-then-train)")
    parser.add_argument("--dynamic-updates", choices=("segment", "sentence"), default="segment",
                        help="with --dynamic: an SGD update every 20 tokens (segment, the default) or after each "
                        "sentence (sentence: the DSF paper's per-sample updates); the card records which")
    parser.add_argument("--info", metavar="JSON|FILE", help="extra info (metrics, recipe, training_time, hardware, comparison)")
    parser.add_argument("--card-extra", metavar="JSON|FILE", help="model card field / metadata overrides (e.g. license)")
    parser.set_defaults(handler=export_command)
    return parser


# ------------------------------------------------------------------------------------------ push
@guard("push")
def push_command(args: argparse.Namespace) -> int:
    """Upload a pretrained folder to the Hub."""
    from ..auto import push_to_hub

    commit = push_to_hub(
        args.folder, args.repo_id, revision=args.revision, token=args.token, private=args.private, commit_message=args.message,
    )
    print(f"pushed {args.folder} to {args.repo_id}@{args.revision}: {commit} (commit {getattr(commit, 'oid', '?')})")
    return 0


def add_push_parser(subparsers, help: str | None = None) -> argparse.ArgumentParser:
    """``dsf push FOLDER OWNER/NAME``."""
    parser = subparsers.add_parser(
        "push",
        help=help,
        description="Validate a pretrained folder (it must load) and upload it with huggingface_hub "
        "(HF_ENDPOINT and HF_TOKEN apply).",
    )
    parser.add_argument("folder", help="a folder written by `dsf export` / save_pretrained")
    parser.add_argument("repo_id", help="the Hub repo, owner/name (created if missing)")
    parser.add_argument("--revision", default="main", help="branch to commit to (created if missing)")
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--token", help="Hub token (default: HF_TOKEN or the stored login)")
    parser.add_argument("--message", default="Upload dsf-lightning model", help="commit message")
    parser.set_defaults(handler=push_command)
    return parser


# ------------------------------------------------------------------------------------------ list models
def _value(metric: str | None, value: float | None) -> str:
    if value is None:
        return "-"
    if metric and metric.endswith(("accuracy", "error")):
        return f"{100 * value:.2f}%"
    return f"{value:.3f}" if metric and metric.endswith("bpc") else f"{value:.2f}"


@guard("list models")
def list_models_command(args: argparse.Namespace) -> int:
    """Print the published models: name, task, headline metric and value (from the model card), parameters,
    size on disk and where the model comes from (bundled in the package, the Hub cache, or the Hub)."""
    rows = []
    for m in list_models():
        source = "bundled" if m["source"].startswith("bundled") else f"hub{' (cached)' if m['cached'] else ''} {m['repo_id']}"
        if m["revision"]:
            source += f"@{m['revision'][:12]}"
        rows.append((m["name"], m["task"], m["metric"] or "-", _value(m["metric"], m["value"]),
                     f"{m['parameters']:,}" if m["parameters"] is not None else "-",
                     f"{m['size_bytes'] / 1e6:.1f} MB" if m["size_bytes"] is not None else "-", source))
    header = ("name", "task", "metric", "value", "parameters", "size", "source")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join(col.ljust(w) for col, w in zip(row[:-1], widths)) + "  " + row[-1])
    return 0


def add_list_models_parser(subparsers) -> argparse.ArgumentParser:
    """``dsf list models`` (``subparsers`` is the ``list`` command's)."""
    parser = subparsers.add_parser("models", help="the published pretrained models: task, headline metric, parameters, "
                                   "size and where they come from")
    parser.set_defaults(handler=list_models_command)
    return parser
