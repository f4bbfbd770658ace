"""Model cards: ``README.md`` with model-index metadata (huggingface_hub's ``ModelCardData`` /
``EvalResult``) above a Markdown body filled from ``model_cards/template.md``.

Evaluation results are plain dicts, one per number::

    {"metric": "perplexity", "value": 93.1, "dataset": "ptb", "split": "test"}

``metric`` is ``perplexity`` (word / subword models), ``bpc`` (bits per character, character models),
``accuracy`` or ``error`` (the error rate, 1 - accuracy: text classifiers, :mod:`dsf_lightning.tasks.pretrained`);
optional keys: ``dataset_name`` (display name), ``task`` (default
``text-generation``, ``text-classification`` for accuracy), ``metric_name``, ``dataset_config``,
``dataset_revision``, ``source_name``, ``source_url``. They become the card's ``model-index`` and
read back with ``ModelCard.load(path).data.eval_results``.

Template placeholders are ``{{ field }}``; :data:`FIELDS` lists them. The packaged template
(``dsf_lightning/hub/card_template.md``) is a byte-identical copy of ``model_cards/template.md``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..cells import UnknownCellError, get_cell

TEMPLATE_PATH = Path(__file__).with_name("card_template.md")
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
FIELDS = (
    "model_name", "repo_id", "description", "architecture_table", "intended_use", "limitations", "recipe",
    "metrics_table", "comparison", "how_to_score", "files", "citation", "library_version",
)
METADATA_KEYS = ("license", "language", "tags", "datasets", "base_model", "pipeline_tag", "model_name")
METRICS = {  # metric type -> (display name, task type)
    "perplexity": ("perplexity", "text-generation"),
    "bpc": ("bits per character", "text-generation"),
    "accuracy": ("accuracy", "text-classification"),
    "error": ("error rate", "text-classification"),
}
METRIC_ALIASES = {"ppl": "perplexity", "bits-per-character": "bpc", "bits_per_character": "bpc", "acc": "accuracy",
                  "err": "error", "error-rate": "error", "error_rate": "error"}
SPLIT_NAMES = {"valid": "validation", "val": "validation", "dev": "validation"}
EVAL_KEYS = {
    "metric", "value", "dataset", "split", "dataset_name", "task", "metric_name", "dataset_config",
    "dataset_revision", "source_name", "source_url",
}
EXAMPLE = "the market rose sharply"
#: the card's ``license`` unless card_extra / ``dsf export --card-extra`` names another: the library's own
DEFAULT_LICENSE = "apache-2.0"


def _corpus_fact(corpus: Any, fact: str) -> str | None:
    """What the spec of the corpus a model was trained on says (``dataset_id``, ``language``); None for a corpus
    no spec is registered for."""
    from ..data.corpora import find_corpus_spec

    return getattr(find_corpus_spec(corpus), fact, None)


def cell_citation(cell: str) -> str:
    """The paper a registered cell declares (its class's ``citation``); a name no cell is registered under
    (a classifier folder from a package not installed here) gets a pointer instead."""
    try:
        return get_cell(cell).citation or _no_citation(cell)
    except UnknownCellError:
        return _no_citation(cell)


def _no_citation(cell: str) -> str:
    return f"See the paper that introduced the `{cell}` cell."


class ModelCardError(ValueError):
    """Bad evaluation results, unknown card fields, or a template with unknown placeholders."""


# --------------------------------------------------------------------------------- eval results
def normalize_eval_results(eval_results: Iterable[dict] | None) -> list[dict]:
    """Check evaluation-result dicts and fill their defaults (split ``test``, task by metric)."""
    out = []
    for i, result in enumerate(eval_results or []):
        if not isinstance(result, dict):
            raise ModelCardError(f"eval_results[{i}] must be a dict, got {type(result).__name__}")
        unknown = sorted(set(result) - EVAL_KEYS)
        if unknown:
            raise ModelCardError(f"eval_results[{i}]: unknown key(s) {unknown}; accepted: {sorted(EVAL_KEYS)}")
        missing = [k for k in ("metric", "value", "dataset") if k not in result]
        if missing:
            raise ModelCardError(f"eval_results[{i}] needs {missing} (e.g. {{'metric': 'perplexity', 'value': 93.1, 'dataset': 'ptb'}})")
        metric = METRIC_ALIASES.get(str(result["metric"]).lower(), str(result["metric"]).lower())
        if metric not in METRICS:
            raise ModelCardError(f"eval_results[{i}]: unknown metric {result['metric']!r}; known: {sorted(METRICS)}")
        value = result["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ModelCardError(f"eval_results[{i}]: value must be a finite number, got {value!r}")
        split = str(result.get("split", "test"))
        entry = {
            **{k: v for k, v in result.items() if v is not None},
            "metric": metric,
            "value": float(value),
            "dataset": str(result["dataset"]),
            "split": SPLIT_NAMES.get(split, split),
            "task": result.get("task") or METRICS[metric][1],
        }
        out.append(entry)
    return out


def default_eval_results(info: dict, tokenizer_name: str | None) -> list[dict]:
    """Results from ``info["metrics"]`` (keys like ``test_ppl`` / ``valid_bpc``): BPC for character
    models, perplexity otherwise, accuracy when present; the dataset is ``info["corpus"]``."""
    metrics, corpus = info.get("metrics") or {}, info.get("corpus")
    if not isinstance(metrics, dict) or not corpus:
        return []
    wanted = ("bpc",) if tokenizer_name == "char" else ("ppl",)
    out = []
    for key, value in metrics.items():
        split, _, kind = str(key).rpartition("_")
        if kind in (*wanted, "accuracy") and split and isinstance(value, (int, float)) and math.isfinite(value):
            out.append({"metric": METRIC_ALIASES.get(kind, kind), "value": float(value), "dataset": str(corpus), "split": split})
    return normalize_eval_results(out)


def classifier_eval_results(info: dict) -> list[dict]:
    """A text classifier's results from ``info["metrics"]``: ``<split>_accuracy`` / ``<split>_error``, and
    ``test_<set>_accuracy`` for a split of several test sets (its ``dataset_config``, e.g. ``l100``)."""
    metrics, corpus = info.get("metrics") or {}, info.get("corpus")
    if not isinstance(metrics, dict) or not corpus:
        return []
    out = []
    for key, value in metrics.items():
        stem, _, kind = str(key).rpartition("_")
        split, _, subset = stem.partition("_")
        if kind in ("accuracy", "error") and split in ("valid", "test") and isinstance(value, (int, float)) \
                and not isinstance(value, bool) and math.isfinite(value):
            out.append({"metric": kind, "value": float(value), "dataset": str(corpus), "split": split,
                        **({"dataset_config": subset} if subset else {})})
    return normalize_eval_results(out)


def to_eval_result(entry: dict):
    """One normalized dict -> ``huggingface_hub.EvalResult``."""
    from huggingface_hub import EvalResult

    return EvalResult(
        task_type=entry["task"],
        dataset_type=_corpus_fact(entry["dataset"], "dataset_id") or entry["dataset"],  # the Hub id where one exists
        dataset_name=entry.get("dataset_name", entry["dataset"]),
        dataset_split=entry["split"],
        dataset_config=entry.get("dataset_config"),
        dataset_revision=entry.get("dataset_revision"),
        metric_type=entry["metric"],
        metric_value=entry["value"],
        metric_name=entry.get("metric_name", f"{entry['split']} {METRICS[entry['metric']][0]}"),
        source_name=entry.get("source_name"),
        source_url=entry.get("source_url"),
    )


def from_eval_result(result) -> dict:
    """One ``huggingface_hub.EvalResult`` (a card's model-index entry) -> the dict :func:`to_eval_result` takes."""
    entry = {"metric": result.metric_type, "value": result.metric_value, "dataset": result.dataset_name,
             "split": result.dataset_split, "task": result.task_type, "metric_name": result.metric_name}
    optional = {"dataset_config": result.dataset_config, "dataset_revision": result.dataset_revision,
                "source_name": result.source_name, "source_url": result.source_url}
    return {**entry, **{k: v for k, v in optional.items() if v is not None}}


MAX_CARD_BYTES = 1 << 20  # a card is a page of text: a larger README.md is not read back


def read_card(folder) -> dict | None:
    """``{"license", "eval_results"}`` of the model card (README.md) in ``folder``, for a save to write them
    again; None where there is no readable card (it is documentation: loading never fails for it)."""
    from huggingface_hub import ModelCard

    path = Path(folder) / "README.md"
    try:
        if path.stat().st_size > MAX_CARD_BYTES:
            return None
        data = ModelCard.load(path).data
        results = normalize_eval_results(from_eval_result(r) for r in data.eval_results or [])
    except Exception:  # noqa: BLE001 - missing, not YAML, unknown metrics...: the card is rebuilt from info
        return None
    return {"license": data.license if isinstance(data.license, str) else None, "eval_results": results or None}


def kept_card(card_data: dict | None, eval_results, card_extra: dict | None) -> tuple[list | None, dict | None]:
    """``(eval_results, card_extra)`` for a save: those given, else the loaded card's results and license."""
    if not card_data:
        return eval_results, card_extra
    if eval_results is None:
        eval_results = card_data.get("eval_results")
    if card_data.get("license") and "license" not in (card_extra or {}):
        card_extra = {**(card_extra or {}), "license": card_data["license"]}
    return eval_results, card_extra


# --------------------------------------------------------------------------------- template
def render_template(template: str, values: dict[str, str]) -> str:
    """Replace every ``{{ field }}``; an unknown placeholder or an unused value raises."""
    template = re.sub(r"\A\s*<!--.*?-->\s*", "", template, flags=re.S)  # the template's own notes
    used = set(PLACEHOLDER.findall(template))
    unknown = sorted(used - set(values))
    if unknown:
        raise ModelCardError(f"card template has placeholder(s) {unknown} with no value; known fields: {sorted(values)}")
    return PLACEHOLDER.sub(lambda m: str(values[m.group(1)]).strip(), template)


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return str(n)


def _table(rows: list[tuple[str, str]], header: tuple[str, str]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "| --- | --- |"]
    lines += [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines)


def _default_fields(pretrained, eval_entries: list[dict], files: dict[str, int], name: str, repo_id: str) -> dict[str, str]:
    cfg, info, tok = pretrained.model.config, pretrained.info, pretrained.tokenizer
    corpus = info.get("corpus", "an unnamed corpus")
    metric_word = "bits per character" if tok.name == "char" else "perplexity"
    description = (
        f"A recurrent language model with the `{cfg.cell}` cell ({len(cfg.hidden_sizes)} layer(s) of "
        f"{', '.join(map(str, cfg.hidden_sizes))} units) trained on {corpus} with "
        f"dsf-lightning, {tok.name}-level, "
        f"{len(pretrained.vocab):,} symbols. Its headline metric is {metric_word}."
    )
    dropout = ", ".join(
        [f"{k.removeprefix('dropout_')} {getattr(cfg, k)}"
         for k in ("dropout_embedding", "dropout_input", "dropout_hidden", "dropout_output") if getattr(cfg, k)]
        # the cell's own, e.g. the Delta-RNN's on its inner function (DSF eq. 12)
        + [f"cell option {k} {v}" for k, v in (cfg.cell_options or {}).items() if "dropout" in k and v]
    ) or "none"
    arch = [
        ("cell", f"`{cfg.cell}`" + (f" with options `{json.dumps(cfg.cell_options)}`" if cfg.cell_options else "")),
        ("layers (hidden sizes)", ", ".join(map(str, cfg.hidden_sizes))),
        ("embedding size", "one-hot input" if cfg.embedding_size == 0 else str(cfg.embedding_size)),
        ("tied input/output embedding", "yes" if cfg.tie_weights else "no"),
        ("dropout (training)", dropout + (" (variational)" if cfg.variational else "")),
        ("parameters", f"{sum(p.numel() for p in pretrained.model.parameters()):,}"),
        ("vocabulary", f"{len(pretrained.vocab):,} symbols" + (f", unknown symbol `{pretrained.vocab.unk}`" if pretrained.vocab.unk else ", closed")),
        ("tokenizer", f"`{tok.name}` `{json.dumps(tok.options())}`"),
    ]
    metrics_table = _metrics_table(eval_entries)
    note = dynamic_evaluation_note(info.get("metrics"))
    if note:
        metrics_table += "\n\n" + note
    metric_attr = "bpc" if tok.name == "char" else "ppl"
    example = json.dumps(example_text(pretrained), ensure_ascii=False)
    hf_note = ("`tokenizer.json` is a Hugging Face `tokenizers` file giving the model's ids exactly "
               "(`tokenizers.Tokenizer.from_file`); " if "tokenizer.json" in files else "")
    how_to_score = f"""```bash
pip install dsf-lightning
dsf score --model {repo_id} {example}   # per-sentence log-probability and {metric_word}
dsf score --model {repo_id} --file valid.txt --per-token   # a whole document, state carried across lines
dsf generate --model {repo_id} {example} --max-new-tokens 20 --seed 0
```

```python
import dsf_lightning as dsf

scorer = dsf.from_pretrained("{repo_id}")  # a published name, a Hub repo id "owner/name" or a local folder
s = scorer.score({example})
print(s.tokens, s.logprobs, s.{metric_attr})
print(scorer.generate({example}, max_new_tokens=20, seed=0).text)  # sampled continuation

model = dsf.RecurrentLM.from_pretrained("{repo_id}")  # the plain torch.nn.Module, loaded strictly
print(type(model).__name__, sum(p.numel() for p in model.parameters()))
```

`from_pretrained` takes huggingface_hub's `revision`, `cache_dir`, `force_download`, `local_files_only` and
`token`, plus `dtype` and `device`. `model(tokens, state) -> (logits, state)`; {hf_note}`dsf_tokenizer.json`
is dsf-lightning's own tokenizer."""
    descriptions = {
        "config.json": "format version, model configuration, training information, checksums",
        "model.safetensors": "weights (safetensors; tied weights stored once)",
        "vocab.json": "the vocabulary (symbols, end-of-line and unknown symbols)",
        "dsf_tokenizer.json": "the tokenizer's options and learned state",
        "tokenizer.json": "the same tokenizer as a Hugging Face `tokenizers` file (same ids)",
    }
    return _fields(
        info, name=name, repo_id=repo_id, cell=cfg.cell, description=description, architecture=arch,
        intended_use=f"Scoring text like {corpus}: per-token log-probabilities, surprisal and {metric_word}; a baseline "
        "for research on simple recurrent language models. It also generates text (`Scorer.generate`, `dsf generate`), "
        "as small recurrent models do: locally fluent, not meant to be read as fact.",
        limitations=f"It knows only the {len(pretrained.vocab):,} symbols of its vocabulary"
        + (f" (others become `{pretrained.vocab.unk}`)" if pretrained.vocab.unk else " (other symbols are an error)")
        + f" and the domain of {corpus}; scores of text from other domains or tokenized differently are not comparable.",
        metrics_table=metrics_table, how_to_score=how_to_score, files=files, descriptions=descriptions,
    )


def _fields(info: dict, *, name: str, repo_id: str, cell: str, description: str, architecture: list[tuple[str, str]],
            intended_use: str, limitations: str, metrics_table: str, how_to_score: str, files: dict[str, int],
            descriptions: dict[str, str]) -> dict[str, str]:
    """The template's fields (:data:`FIELDS`) from what each kind of model describes its own way; ``info``'s
    ``description``, ``intended_use`` and ``limitations`` take the place of the defaults given here."""
    from .._version import __version__

    return {
        "model_name": name,
        "repo_id": repo_id,
        "description": info.get("description") or description,
        "architecture_table": _table(architecture, ("", "")),
        "intended_use": info.get("intended_use") or intended_use,
        "limitations": info.get("limitations") or limitations,
        "recipe": _recipe_table(info),
        "metrics_table": metrics_table,
        "comparison": _comparison(info),
        "how_to_score": how_to_score,
        "files": _files_table(files, descriptions),
        "citation": cell_citation(cell),
        "library_version": __version__,
    }


def _recipe_table(info: dict) -> str:
    """The card's training recipe: corpus, recipe, training time, hardware and the training settings."""
    rows = []
    for key, label in (("corpus", "corpus"), ("recipe", "recipe"), ("training_time", "training time"), ("hardware", "hardware")):
        if info.get(key) not in (None, ""):
            value = info[key]
            rows.append((label, f"`{value}`" if key == "recipe" and isinstance(value, str) else _cell(value)))
    for key, value in (info.get("training") or {}).items():
        if value is not None:
            rows.append((key, _cell(value)))
    return _table(rows, ("setting", "value")) if rows else "No training recipe recorded."


def _metrics_table(eval_entries: list[dict]) -> str:
    if not eval_entries:
        return "No evaluation results recorded."
    lines = ["| dataset | split | metric | value |", "| --- | --- | --- | --- |"]
    lines += [
        f"| {e.get('dataset_name', e['dataset'])} | {e['split']}{' (' + e['dataset_config'] + ')' if e.get('dataset_config') else ''} "
        f"| {_metric_label(e)} | {e['value']:.4g} |"
        for e in eval_entries
    ]
    return "\n".join(lines)


def _metric_label(entry: dict) -> str:
    """The metric's display name, or the result's own name less its split ("test perplexity, dynamic
    evaluation #2" -> "perplexity, dynamic evaluation #2"), so that two results of one split stay apart."""
    name = entry.get("metric_name")
    if not name:
        return METRICS[entry["metric"]][0]
    for split in {entry["split"], *(k for k, v in SPLIT_NAMES.items() if v == entry["split"])}:
        name = name.removeprefix(f"{split} ")
    return name


def _comparison(info: dict) -> str:
    comparison = info.get("comparison")
    if isinstance(comparison, (list, tuple)):
        comparison = "\n".join(f"- {line}" for line in comparison)
    return comparison or "No comparison recorded."


def _files_table(files: dict[str, int], descriptions: dict[str, str]) -> str:
    return _table(
        [(f"`{f}`", f"{_fmt_bytes(size)}: {descriptions.get(f, '')}") for f, size in files.items()], ("file", "size and contents")
    )


def _classifier_fields(pretrained, eval_entries: list[dict], files: dict[str, int], name: str, repo_id: str) -> dict[str, str]:
    """The template's fields for a text classifier (:class:`~dsf_lightning.tasks.pretrained.PretrainedClassifier`)."""
    arch, info, tok, vocab = pretrained.config, pretrained.info, pretrained.tokenizer, pretrained.vocab
    corpus = info.get("corpus", "an unnamed data set")
    options = arch.get("cell_options") or {}
    centroids = f", {options['k']} centroids" if "k" in options else ""
    labels = ", ".join(pretrained.labels)
    end = getattr(pretrained, "keep", "first")
    reads = f"the {end} {pretrained.max_length:,} symbols of each text" if pretrained.max_length else "whole texts"
    level = "character" if tok.name == "char" else tok.name
    description = (
        f"A text classifier with the `{arch['cell']}` cell ({arch['hidden_size']} units{centroids}) trained on {corpus} with "
        f"dsf-lightning. It reads {level}-level text ({len(vocab):,} symbols) and gives one of {len(pretrained.labels)} "
        f"labels ({labels}) with the probability of each. Its headline metric is accuracy."
    )
    arch_rows = [
        ("cell", f"`{arch['cell']}`" + (f" with options `{json.dumps(options)}`" if options else "")),
        ("hidden size", str(arch["hidden_size"])),
        ("input", "one-hot symbols" if arch["input_mode"] == "one-hot" else f"{arch['embedding_size'] or arch['hidden_size']}-d learned embedding"),
        ("readout", f"`{arch['readout']}`" + (", end token read without the stochastic component (sr-RNN sec. 3.3)" if arch["end_token"] else "")),
        ("parameters", f"{sum(p.numel() for p in pretrained.model.parameters()):,}"),
        ("vocabulary", f"{len(vocab):,} symbols" + (", unknown symbol `<unk>`" if getattr(vocab, "unk_id", None) is not None else ", closed")),
        ("text", f"normalizer `{pretrained.normalize or 'none'}`, tokenizer `{tok.name}` `{json.dumps(tok.options())}`"),
        ("labels", labels),
        ("length", reads + " (after normalization); the rest is not read"),
    ]
    metrics_table = _metrics_table(eval_entries) + _prototypes_table(info.get("prototypes"))
    example = json.dumps(classifier_example(pretrained), ensure_ascii=False)
    how_to_score = f"""```bash
pip install dsf-lightning
dsf classify --model {repo_id} {example}   # label and the probability of each label
dsf classify --model {repo_id} --file texts.txt --json   # one text per line (--file - reads stdin)
```

```python
import dsf_lightning as dsf

classifier = dsf.from_pretrained("{repo_id}")  # a published name, a Hub repo id "owner/name" or a local folder
result = classifier.classify({example})  # a list of texts gives a list
print(result.label, result.probability, result.probabilities)

from dsf_lightning.tasks import SequenceClassifier

model = SequenceClassifier.from_pretrained("{repo_id}")  # the plain module, loaded strictly
```

`classify` reads {reads} (after the `{pretrained.normalize or 'none'}` normalizer), and each record tells how many it
read (`num_tokens`), how many were unknown (`num_unknown`) and whether the text was cut (`truncated`). An
empty text is the model's reading of its start and end tokens alone."""
    descriptions = {
        "config.json": "format version, task, architecture, labels, length rule, training information, checksums",
        "model.safetensors": "weights (safetensors)",
        "vocab.json": "the vocabulary (special symbols, then the symbols in id order)",
        "dsf_tokenizer.json": "the tokenizer that splits normalized text into symbols",
    }
    return _fields(
        info, name=name, repo_id=repo_id, cell=arch["cell"], description=description, architecture=arch_rows,
        intended_use=f"Classifying text like {corpus} into {labels}; a baseline for research on (state-regularized) "
        "recurrent classifiers, whose centroids can be read as the states of an automaton (sr-RNN paper sec. 5).",
        limitations=f"It knows only the {len(vocab):,} symbols of its vocabulary and the domain of {corpus}; it reads "
        f"{reads}, so the {'end' if end == 'first' else 'beginning'} of a longer text does not change its label. "
        "Accuracy on other kinds of text is unknown.",
        metrics_table=metrics_table, how_to_score=how_to_score, files=files, descriptions=descriptions,
    )


def _prototypes_table(prototypes: Any) -> str:
    """The centroids' prototypical words (``info["prototypes"]``, :func:`~.classifier.centroid_prototypes`)."""
    if not isinstance(prototypes, dict) or not prototypes.get("centroids"):
        return ""
    rows = [(str(c.get("centroid")), f"{c.get('visits', 0):,}",
             ", ".join(f"{_cell(w['symbol'])} ({w['mean_prob']:.2f})" for w in c.get("top", [])) or "-")
            for c in prototypes["centroids"]]
    lines = ["| centroid | visits | words (mean transition probability) |", "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return (f"\n\n### Prototypical words of the centroids\n\nFor each centroid, the words with the highest mean "
            f"probability of a transition to it, over {prototypes.get('sequences', '?'):,} sequences of "
            f"`{prototypes.get('split', 'test')}` (words read at least {prototypes.get('min_count', 1)} times; as in "
            "the sr-RNN paper, Table 6). Visits: the steps that ended in the centroid.\n\n" + "\n".join(lines))


def classifier_example(pretrained) -> str:
    """A text for the card's snippets: a review for word-level classifiers, alphabet symbols for the languages."""
    if pretrained.tokenizer.name == "char":
        symbols = [s for s in pretrained.vocab.alphabet if len(s) == 1][:4]
        return "".join(symbols * 2)
    return "A great movie, I loved every minute of it!"


def example_text(pretrained) -> str:
    """A line the model's tokenizer and vocabulary accept (the card's snippets run as written):
    ``"the market rose sharply"`` in the tokenizer's input convention, else the first vocabulary symbols."""
    tok, vocab = pretrained.tokenizer, pretrained.vocab
    char_ptb = tok.name == "char" and getattr(tok, "mode", None) == "ptb"
    candidates = [" ".join(EXAMPLE.replace(" ", getattr(tok, "space", "_"))) if char_ptb else EXAMPLE]
    specials = {vocab.eos, vocab.unk}
    symbols = [s for s in vocab.symbols if s not in specials and not (s.startswith("<") and s.endswith(">"))][:4]
    candidates.append(("" if tok.name == "char" and not char_ptb else " ").join(symbols))
    for text in candidates:
        try:
            tokens = tok.tokenize_line(text)
        except Exception:  # noqa: BLE001 - a tokenizer that cannot read the candidate: try the next
            continue
        if vocab.unk is not None or all(t in vocab for t in tokens):
            return text
    return candidates[-1]


def dynamic_evaluation_note(metrics: Any) -> str | None:
    """The card's line on how dynamic evaluation updated (DSF sec 4.2), from ``info["metrics"]``; None
    when there are no dynamic-evaluation numbers. Folders written before ``dynamic_updates`` existed
    recorded only ``dynamic_segment_length``: they updated every that many tokens."""
    if not isinstance(metrics, dict) or not any(str(k).startswith("test_") and "_dynamic" in str(k) for k in metrics):
        return None
    how = ("one update after every sentence (the DSF paper's per-sample updates)"
           if metrics.get("dynamic_updates") == "sentence"
           else f"one update every {metrics.get('dynamic_segment_length', 20)} tokens (the paper updates after "
                "every sentence)")
    return (f"Dynamic evaluation (DSF paper sec. 4.2, test-then-train): SGD with step size "
            f"{metrics.get('dynamic_lr', 0.005)}, {how}.")


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")


def build_model_card(
    pretrained,
    *,
    eval_results: Iterable[dict] | None = None,
    card_extra: dict | None = None,
    files: dict[str, int] | None = None,
    name: str | None = None,
    template: str | None = None,
):
    """A ``huggingface_hub.ModelCard`` for ``pretrained``.

    ``eval_results`` default to :func:`default_eval_results` of ``pretrained.info``. ``card_extra``
    overrides template fields (:data:`FIELDS`) or sets card metadata (:data:`METADATA_KEYS`: license,
    language, tags (added to the defaults), datasets, base_model, pipeline_tag, model_name).
    """
    from huggingface_hub import ModelCard, ModelCardData

    from .._version import __version__

    extra = dict(card_extra or {})
    unknown = sorted(set(extra) - set(FIELDS) - set(METADATA_KEYS))
    if unknown:
        raise ModelCardError(f"card_extra: unknown key(s) {unknown}; template fields: {list(FIELDS)}; metadata: {list(METADATA_KEYS)}")
    info = pretrained.info
    classifier = getattr(pretrained, "task", None) == "text-classification"
    if eval_results is not None:
        entries = normalize_eval_results(eval_results)
    else:
        entries = classifier_eval_results(info) if classifier else default_eval_results(info, pretrained.tokenizer.name)
    name = extra.get("model_name") or name or info.get("name") or "dsf-lightning model"
    repo_id = extra.get("repo_id") or info.get("repo_id") or name
    values = (_classifier_fields if classifier else _default_fields)(pretrained, entries, files or {}, name, repo_id)
    values.update({k: str(v) for k, v in extra.items() if k in FIELDS})
    text = render_template(template if template is not None else TEMPLATE_PATH.read_text(encoding="utf-8"), values)
    cell = pretrained.config["cell"] if classifier else pretrained.model.config.cell
    kind = "text-classification" if classifier else "language-model"
    tags = ["dsf-lightning", "recurrent-neural-network", kind, cell]
    tags += [t for t in extra.get("tags", []) if t not in tags]
    corpus = info.get("corpus")
    dataset_id = _corpus_fact(corpus, "dataset_id")
    data = ModelCardData(
        model_name=name,
        library_name="dsf-lightning",
        # a language model scores and generates text (Scorer.generate): the Hub's text-generation task
        pipeline_tag=extra.get("pipeline_tag", "text-classification" if classifier else "text-generation"),
        tags=tags,
        license=extra.get("license") or DEFAULT_LICENSE,
        language=extra.get("language") or _corpus_fact(corpus, "language"),
        # the Hub dataset id where one exists (a corpus without one is named in the card's text)
        datasets=extra.get("datasets") or ([dataset_id] if dataset_id else None),
        base_model=extra.get("base_model"),
        eval_results=[to_eval_result(e) for e in entries] or None,
        library_version=__version__,
    )
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{text}")
