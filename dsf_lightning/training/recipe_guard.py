"""What a recipe, a command line or a checkpoint may make the ``dsf`` command line import and build.

jsonargparse (under LightningCLI) imports whatever a ``class_path`` (or a value given where a callable
is expected) names, falling back to ``getattr`` on a parent module, so ``torch.serialization.io.FileIO``
reaches ``io.FileIO`` and ``torch.utils.cpp_extension.subprocess.Popen`` reaches ``subprocess.Popen``;
and it instantiates class specs found in values typed ``Any`` (``data.corpus``, ``model.cell_options``).
A check of the *text* of a recipe cannot follow every way of giving a config (files without a suffix,
abbreviated options, group files, environment variables, ``ckpt_path`` inside a config, checkpoint
hyper-parameters), so the policy is enforced where jsonargparse resolves names, while the CLI runs
(:func:`recipe_policy`):

* **an allowlist of classes** (:data:`ALLOWED_CLASSES`, plus ``$DSF_TRUSTED_CLASSES``): a name is
  imported only when it is exactly one of these classes' import paths, checked *before* the import and
  again on the object's defining path after it (jsonargparse's import-path policy, denying ``*``, plus an
  exact-match check in front of it: a name *below* an allowed class, such as a method, is refused too);
* **no instantiation from untyped values**: a class spec inside an ``Any`` / ``dict[str, Any]`` value is
  validated against the allowlist and kept as plain data, never built;
* **bounded configs**: every YAML value jsonargparse loads, and a ``--ckpt_path`` checkpoint's
  ``hyper_parameters``, are measured iteratively first: more than :data:`MAX_CONFIG_DEPTH` levels of
  nesting, more than :data:`MAX_CONFIG_VALUES` values once YAML aliases (or shared pickle references)
  are expanded, or a structure that contains itself, is refused in milliseconds (an alias bomb of a few
  hundred bytes expands to 387 million strings; a 3000-deep list overflows Python's recursion);
* **local paths only** (:func:`check_paths`, before anything is built): a string of the parsed config that
  fsspec / Lightning / jsonargparse would open as a URL, whatever option holds it, is refused, and so is a
  config include by URL (jsonargparse's URL and fsspec reading, which LightningCLI turns on, is off while the
  CLI parses; every config path is refused there by name); ``--allow-remote-paths`` on the command line
  (:data:`ALLOW_REMOTE_FLAG`, never a recipe key) allows them. A checkpoint is loaded weights-only whatever
  ``weights_only`` says (:func:`force_weights_only`);
* **recipe writes inside the run directory**: a write location (:data:`WRITE_KEYS`) that a recipe file names
  absolute, with ``~``, ``$`` or ``..`` is refused unless the command line gives that value itself.

A refusal raises :class:`UnsafeRecipeError` (``dsf fit`` prints it and exits with code 2).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "ALLOWED_CLASSES",
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_VALUES",
    "TRUSTED_CLASSES_ENV",
    "ConfigTooComplexError",
    "UnsafeRecipeError",
    "allowed_classes",
    "check_checkpoint",
    "check_config_structure",
    "recipe_policy",
]

# The classes a recipe, a command line or a checkpoint may name: the project's modules, data modules and
# callbacks; the Lightning callbacks, loggers, plugins, strategies, profilers and accelerators a training
# run configures; torch's optimizers and learning-rate schedulers (LightningCLI's --optimizer /
# --lr_scheduler). Classes whose arguments are callables (LambdaCallback, LambdaLR, MultiplicativeLR) or
# arbitrary objects (SequentialLR, ChainedScheduler) are left out on purpose: they hand a recipe a call.
ALLOWED_CLASSES: tuple[str, ...] = (
    # dsf_lightning
    "dsf_lightning.training.LanguageModelModule",
    "dsf_lightning.training.datamodule.LanguageModelDataModule",
    "dsf_lightning.tasks.SequenceClassifier",
    "dsf_lightning.tasks.SequenceTagger",
    "dsf_lightning.tasks.TomitaDataModule",
    "dsf_lightning.tasks.BalancedParenthesesDataModule",
    "dsf_lightning.tasks.PalindromeDataModule",
    "dsf_lightning.tasks.CopyingMemoryDataModule",
    "dsf_lightning.tasks.IMDBSentimentDataModule",
    "dsf_lightning.tasks.PixelMNISTDataModule",
    "dsf_lightning.training.callbacks.ColumnNormalization",
    "dsf_lightning.training.callbacks.PolyakAveraging",
    "dsf_lightning.training.callbacks.GradientNormMonitor",
    "dsf_lightning.training.callbacks.CpuTimeBudget",
    "dsf_lightning.training.callbacks.LateDropout",
    "dsf_lightning.training.prediction.TokenLogprobWriter",
    "dsf_lightning.training.guards.NonFiniteGuard",
    "dsf_lightning.training.checkpoint_io.AtomicCheckpointIO",
    # Lightning callbacks
    "lightning.pytorch.callbacks.ModelCheckpoint",
    "lightning.pytorch.callbacks.EarlyStopping",
    "lightning.pytorch.callbacks.LearningRateMonitor",
    "lightning.pytorch.callbacks.TQDMProgressBar",
    "lightning.pytorch.callbacks.RichProgressBar",
    "lightning.pytorch.callbacks.ModelSummary",
    "lightning.pytorch.callbacks.RichModelSummary",
    "lightning.pytorch.callbacks.Timer",
    "lightning.pytorch.callbacks.DeviceStatsMonitor",
    "lightning.pytorch.callbacks.GradientAccumulationScheduler",
    "lightning.pytorch.callbacks.StochasticWeightAveraging",
    "lightning.pytorch.callbacks.OnExceptionCheckpoint",
    # Lightning loggers
    "lightning.pytorch.loggers.CSVLogger",
    "lightning.pytorch.loggers.TensorBoardLogger",  # pip install 'dsf-lightning[tensorboard]'
    "lightning.pytorch.loggers.WandbLogger",  # pip install 'dsf-lightning[wandb]'
    # Lightning plugins, strategies, profilers, accelerators
    "lightning.pytorch.plugins.TorchCheckpointIO",
    "lightning.pytorch.plugins.MixedPrecision",
    "lightning.pytorch.plugins.HalfPrecision",
    "lightning.pytorch.plugins.DoublePrecision",
    "lightning.pytorch.plugins.Precision",
    "lightning.pytorch.plugins.environments.LightningEnvironment",
    "lightning.pytorch.plugins.environments.SLURMEnvironment",
    "lightning.pytorch.plugins.environments.TorchElasticEnvironment",
    "lightning.pytorch.strategies.DDPStrategy",
    "lightning.pytorch.strategies.SingleDeviceStrategy",
    "lightning.pytorch.profilers.SimpleProfiler",
    "lightning.pytorch.profilers.AdvancedProfiler",
    "lightning.pytorch.accelerators.CPUAccelerator",
    "lightning.pytorch.accelerators.CUDAAccelerator",
    # torch optimizers and schedulers
    "torch.optim.SGD",
    "torch.optim.Adam",
    "torch.optim.AdamW",
    "torch.optim.Adagrad",
    "torch.optim.Adadelta",
    "torch.optim.Adamax",
    "torch.optim.ASGD",
    "torch.optim.NAdam",
    "torch.optim.RAdam",
    "torch.optim.RMSprop",
    "torch.optim.Rprop",
    "torch.optim.lr_scheduler.StepLR",
    "torch.optim.lr_scheduler.MultiStepLR",
    "torch.optim.lr_scheduler.ExponentialLR",
    "torch.optim.lr_scheduler.CosineAnnealingLR",
    "torch.optim.lr_scheduler.CosineAnnealingWarmRestarts",
    "torch.optim.lr_scheduler.CyclicLR",
    "torch.optim.lr_scheduler.OneCycleLR",
    "torch.optim.lr_scheduler.LinearLR",
    "torch.optim.lr_scheduler.ConstantLR",
    "torch.optim.lr_scheduler.PolynomialLR",
    "torch.optim.lr_scheduler.ReduceLROnPlateau",
    "lightning.pytorch.cli.ReduceLROnPlateau",
)
TRUSTED_CLASSES_ENV = "DSF_TRUSTED_CLASSES"
_RETIRED_ENV = "DSF_TRUSTED_MODULES"  # the former whole-package trust (a prefix reached subprocess.Popen)

MAX_CONFIG_DEPTH = 64  # the shipped recipes nest 5 levels deep
MAX_CONFIG_VALUES = 1_000_000  # values once aliases / shared references are expanded
ALLOWED_PHRASE = "classes a dsf recipe may name"


class UnsafeRecipeError(ValueError):
    """A recipe, command line or checkpoint names code outside the allowed classes (it would be imported
    or called), or is shaped to exhaust the parser (too deep, an alias bomb)."""


try:  # jsonargparse's loaders report a YAMLError as "Problems parsing config" (exit code 2, no traceback)
    import yaml as _yaml

    _YAMLError: type[Exception] = _yaml.YAMLError
except ImportError:  # pragma: no cover - PyYAML is a dependency of jsonargparse[signatures]
    _YAMLError = ValueError


class ConfigTooComplexError(UnsafeRecipeError, _YAMLError):
    """A config value nested too deeply, expanding to too many values, or containing itself."""


# ------------------------------------------------------------------------------------------ allowlist
def _import_class(path: str, source: str) -> type:
    module_name, _, name = path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise UnsafeRecipeError(f"{source}: cannot import {path!r} ({err}); give classes as package.module.Class") from None
    if not inspect.isclass(obj):
        raise UnsafeRecipeError(f"{source}: {path!r} is a {type(obj).__name__}, not a class; only classes can be allowed")
    return obj


def allowed_classes() -> dict[str, type]:
    """The allowed classes by their given import path: :data:`ALLOWED_CLASSES` plus the comma-separated
    class paths in ``$DSF_TRUSTED_CLASSES`` (your own callbacks: ``DSF_TRUSTED_CLASSES=my_pkg.cb.MyCallback``;
    they are imported to learn where they are defined)."""
    if os.environ.get(_RETIRED_ENV, "").strip():
        log.warning("%s is no longer read (a package prefix let names reach e.g. subprocess.Popen); list the "
                    "classes themselves in %s", _RETIRED_ENV, TRUSTED_CLASSES_ENV)
    classes = {}
    for path in ALLOWED_CLASSES:
        module_name, _, name = path.rpartition(".")
        try:
            classes[path] = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError):  # an optional piece of an older / newer Lightning or torch
            log.debug("allowed class %s is not available here", path)
    extra = [p.strip() for p in os.environ.get(TRUSTED_CLASSES_ENV, "").split(",") if p.strip()]
    for path in extra:
        classes[path] = _import_class(path, f"${TRUSTED_CLASSES_ENV}")
    return classes


def _import_paths(classes: dict[str, type]) -> set[str]:
    """Every name under which jsonargparse may import an allowed class: the given path, the defining
    ``module.qualname`` (checked after the import) and jsonargparse's shortest path (what it writes back
    into a parsed config and imports again when it instantiates)."""
    try:
        from jsonargparse._util import get_import_path
    except ImportError:  # pragma: no cover - a jsonargparse without it: the other two paths
        get_import_path = None
    import sys

    paths = set()
    for path, cls in classes.items():
        paths.update({path, f"{cls.__module__}.{cls.__qualname__}"})
        if get_import_path is not None:
            with contextlib.suppress(Exception):
                paths.add(get_import_path(cls))
    # the modules that re-export a class under its own name (lightning.pytorch.plugins.io.TorchCheckpointIO
    # is lightning.fabric's class): only modules already imported, of the packages the classes come from
    by_name: dict[str, list[type]] = {}
    for cls in classes.values():
        by_name.setdefault(cls.__name__, []).append(cls)
    tops = {cls.__module__.split(".")[0] for cls in classes.values()} | {p.split(".")[0] for p in classes}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in tops or module is None:
            continue
        namespace = getattr(module, "__dict__", {})
        for cls_name, candidates in by_name.items():
            if any(namespace.get(cls_name) is cls for cls in candidates):
                paths.add(f"{name}.{cls_name}")
    return paths


def _summary(names) -> str:
    """``pkg.mod.{A, B}; other.C``: the allowed classes, grouped by module."""
    groups: dict[str, list[str]] = {}
    for name in names:
        module, _, cls = name.rpartition(".")
        groups.setdefault(module, []).append(cls)
    return "; ".join(f"{m}.{{{', '.join(c)}}}" if len(c) > 1 else f"{m}.{c[0]}" for m, c in groups.items())


def denied_message(path: str, allowed_names) -> str:
    return (
        f"{path!r} is not one of the {ALLOWED_PHRASE} (nothing was imported or built). A recipe, command line "
        f"or checkpoint may name only these classes: {_summary(allowed_names)}. Values of options that take "
        f"plain data (data.corpus, model.cell_options, data.corpus_options) never hold a class_path. To allow a "
        f"class of your own, list its import path in ${TRUSTED_CLASSES_ENV} (comma-separated)"
    )


# ------------------------------------------------------------------------------------------ structure
def _is_container(value: Any) -> bool:
    return isinstance(value, (dict, list, tuple))


def _too_deep(where: str) -> str:
    return f"{where} is nested more than {MAX_CONFIG_DEPTH} levels deep (recipes need about 5); flatten the value"


def check_config_structure(value: Any, where: str = "the config") -> None:
    """Raise :class:`ConfigTooComplexError` when ``value`` nests deeper than :data:`MAX_CONFIG_DEPTH`,
    contains itself, or expands to more than :data:`MAX_CONFIG_VALUES` values (YAML aliases or shared
    references counted at every use). Iterative, and each shared container is measured once: fast on the
    inputs that make a recursive walk overflow or hang."""
    if not _is_container(value):
        return
    measured: dict[int, tuple[int, int]] = {}  # id -> (values once expanded, depth)
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children = list(node.values()) if isinstance(node, dict) else list(node)
        if children_done:
            size, depth = 1, 1
            for child in children:
                if _is_container(child):
                    child_size, child_depth = measured[id(child)]
                    size, depth = size + child_size, max(depth, child_depth + 1)
                else:
                    size += 1
            on_path.discard(key)
            measured[key] = (size, depth)
            if size > MAX_CONFIG_VALUES:
                raise ConfigTooComplexError(
                    f"{where} uses too many aliases: its YAML aliases (or shared references) expand it to more than "
                    f"{MAX_CONFIG_VALUES:,} values, the shape of an alias bomb; write the values out or use fewer aliases"
                )
            continue
        if key in measured:  # a shared container (an alias): measured once, counted at every use
            continue
        if key in on_path:
            raise ConfigTooComplexError(f"{where} contains itself (a YAML alias inside the anchor it refers to); "
                                        "write the value out")
        if len(on_path) >= MAX_CONFIG_DEPTH:
            raise ConfigTooComplexError(_too_deep(where))
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if _is_container(child))


# ---------------------------------------------------------------------------------------- checkpoints
def check_checkpoint(value: str) -> None:
    """Check a ``--ckpt_path`` before LightningCLI reads its ``hyper_parameters`` into the config: it must
    load weights-only (no pickled objects) and its hyper-parameters must be bounded
    (:func:`check_config_structure`). The class paths in them meet the allowlist when they are parsed."""
    import pickle
    from pathlib import Path

    import torch

    path = Path(value)
    try:
        if not path.is_file():
            return
    except (OSError, ValueError):
        return
    try:
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except (RuntimeError, ValueError):  # not a zip checkpoint: mmap is unsupported
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise UnsafeRecipeError(
            f"--ckpt_path {value}: holds Python objects that weights-only loading refuses "
            f"({str(err).strip().splitlines()[0][:200]}); nothing was unpickled. Resume only from checkpoints you trust"
        ) from None
    except RecursionError:
        raise ConfigTooComplexError(f"--ckpt_path {value}: its contents are nested too deeply to load") from None
    except Exception:  # unreadable: Lightning reports it
        return
    if isinstance(ckpt, dict):
        check_config_structure(ckpt.get("hyper_parameters"), f"--ckpt_path {value}: hyper_parameters")


# ------------------------------------------------------------------------------------- paths and URLs
#: the command-line flag (never a recipe key) that lets paths and config includes be URLs
ALLOW_REMOTE_FLAG = "--allow-remote-paths"
#: keys whose string value names where a run writes (ModelCheckpoint / profiler ``dirpath`` and ``filename``,
#: loggers' ``save_dir`` / ``dir`` / ``sub_dir`` / ``name`` / ``version``, ``trainer.default_root_dir``,
#: TokenLogprobWriter ``output``, ``dsf predict --predict_output``), whatever class they belong to
WRITE_KEYS = frozenset({"default_root_dir", "dirpath", "filename", "save_dir", "dir", "log_dir", "sub_dir", "name",
                        "version", "output", "predict_output"})
_SCHEME = re.compile(r"^\s*([A-Za-z][A-Za-z0-9+.\-]*)://")


def remote_scheme(value: Any) -> str | None:
    """What makes ``value`` a URL rather than a local path, as fsspec, Lightning (``cloud_io``, ``torch.hub``)
    or jsonargparse would read it: ``SCHEME://`` (``file://``, ``http://``, ``ftp://``, ``hf://``, ``s3://``),
    an fsspec chain (``simplecache::http://...``) or ``data:``; None for a plain path (or a non-string)."""
    if not isinstance(value, str):
        return None
    found = _SCHEME.match(value)
    if found:
        return f"{found.group(1)}://"
    if "::" in value:
        return "an fsspec chain (::)"
    if value.strip().lower().startswith("data:"):
        return "data:"
    return None


def _remote_message(where: str, value: str, scheme: str) -> str:
    return (f"{where}: {value!r} is a URL ({scheme}); dsf reads and writes local paths only, nothing was opened or "
            f"fetched. Give a local path, or pass {ALLOW_REMOTE_FLAG} on the command line to allow URLs")


def _outside_run_directory(value: str) -> str | None:
    """Why ``value`` (a path a recipe names for writing) leaves the run directory, or None."""
    import posixpath

    text = value.replace("\\", "/")
    if text.startswith("~"):
        return "starts with ~"
    if "$" in text:
        return "holds a $VARIABLE"
    if posixpath.isabs(text) or os.path.isabs(value):
        return "is absolute"
    if ".." in text.split("/"):
        return "has a .. component"
    return None


def _normalized_key(key: str) -> str:
    """``trainer.callbacks[0].init_args.dirpath`` -> ``trainer.callbacks.dirpath`` (how a command line spells it)."""
    parts = re.sub(r"\[\d+\]", "", key).split(".")
    return ".".join(p for p in parts if p not in ("init_args", "dict_kwargs"))


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)


def command_line_values(argv) -> list[tuple[str, set[str]]]:
    """The options ``argv`` sets by itself: ``(normalized dotted key, the strings its value spells)`` for every
    ``--key value`` / ``--key=value`` / ``--key+=value`` that is not a config file: ``--config`` (and ``-c``) and
    a value that names an existing file (``--trainer trainer.yaml``, ``--trainer.callbacks cbs.yaml``: jsonargparse
    reads it as a config) are the recipe's, not the command line's. The strings are the value as typed and as
    YAML reads it (inline ``[{class_path: ..., init_args: {dirpath: DIR}}]`` spells ``DIR``)."""
    from pathlib import Path

    args = [str(a) for a in argv]
    found = []
    for i, arg in enumerate(args):
        if not arg.startswith("--") or arg == "--":
            continue
        key, eq, value = arg[2:].partition("=")
        if not eq:
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""
        key = key.rstrip("+")
        if key in ("config", "print_config"):
            continue
        loaded = _load_yaml(value) if value else value
        if not isinstance(loaded, (dict, list)) and key.rsplit(".", 1)[-1] not in WRITE_KEYS:  # a path option's value is no config
            try:
                if value and Path(value).is_file():
                    continue  # read as a config file: the recipe's values
            except (OSError, ValueError):
                pass
        found.append((_normalized_key(key), {value, *_strings(loaded)}))
    return found


def check_paths(config: Any, argv=(), allow_remote: bool = False) -> None:
    """Refuse, before anything is built or opened, the path-valued strings of a parsed ``config`` (a jsonargparse
    Namespace: the recipe files, the command line and a ``--ckpt_path``'s hyper-parameters merged):

    * **URLs anywhere** (:func:`remote_scheme`: any string fsspec, Lightning or jsonargparse would open as a URL,
      whatever option holds it: ``ckpt_path``, ``ModelCheckpoint.dirpath``, loggers' ``save_dir``,
      ``default_root_dir``, a profiler's ``dirpath``, ``TokenLogprobWriter.output``, ``data_root`` ...), and a
      ``ckpt_path`` of Lightning's model ``registry``, unless ``allow_remote`` (:data:`ALLOW_REMOTE_FLAG`);
    * **writes outside the run directory named by a recipe**: a :data:`WRITE_KEYS` value that is absolute,
      starts with ``~``, holds a ``$VARIABLE`` or a ``..`` component, unless the command line (``argv``) gives
      that value for that option itself (:func:`command_line_values`). The run directory is the directory the
      command runs in: relative paths without ``..`` stay below it (Lightning resolves them against it).

    Which values came from the command line is read from ``argv`` (the options it sets inline and the strings
    it spells), not from the merged config: a recipe cannot claim a value the command line did not type."""
    given = None
    for where, node in _config_nodes(config):
        if isinstance(node, str):
            name = where.rsplit(".", 1)[-1].split("[", 1)[0]
            scheme = remote_scheme(node)
            if scheme is None and name == "ckpt_path" and node.strip().lower().split(":", 1)[0] == "registry":
                scheme = "Lightning's model registry"
            if scheme is not None and not allow_remote:
                raise UnsafeRecipeError(_remote_message(where, node, scheme))
            why = _outside_run_directory(node) if name in WRITE_KEYS and scheme is None else None
            if why is not None:
                given = command_line_values(argv) if given is None else given
                key = _normalized_key(where)
                key = key.split(".", 1)[1] if key.split(".", 1)[0] in _SUBCOMMANDS else key
                if not any((key == k or key.startswith(k + ".")) and node in values for k, values in given):
                    # a list item (a callback) is given whole on the command line: --trainer.callbacks '[...]'
                    how = f"--{key} {node}" if "[" not in where else f"--{_normalized_key(where.split('[', 1)[0])} '[...]'"
                    raise UnsafeRecipeError(
                        f"{where}: {node!r} {why}: a recipe file writes only inside its run directory (relative paths "
                        f"below the directory dsf runs in, without ..); to write there, pass it on the command line "
                        f"instead ({how})"
                    )


def _config_nodes(config: Any) -> Iterator[tuple[str, Any]]:
    """Every value of a parsed config (Namespaces, dicts, lists) with its place, ``trainer.callbacks[0].init_args
    .dirpath``; iterative, each container entered once; a value is yielded before what it holds."""
    from jsonargparse import Namespace

    stack: list[tuple[str, Any]] = [("", config)]
    seen: set[int] = set()
    while stack:
        where, node = stack.pop()
        yield where, node
        if id(node) in seen:
            continue
        if isinstance(node, Namespace):
            seen.add(id(node))
            stack.extend((f"{where}.{k}" if where else k, v) for k, v in node.items(branches=True, nested=False))
        elif isinstance(node, dict):
            seen.add(id(node))
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            seen.add(id(node))
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(node))


_SUBCOMMANDS = ("fit", "validate", "test", "predict")


def force_weights_only(config: Any) -> None:
    """Set a parsed subcommand config's ``weights_only`` to True: ``trainer.fit(..., weights_only=True)`` reaches
    every CheckpointIO (``TorchCheckpointIO`` too, whose ``_load`` otherwise unpickles ``http`` URLs in full), so a
    checkpoint is never unpickled beyond plain data whatever a recipe or option says (a ``false`` is logged)."""
    if config is None or not hasattr(config, "get") or "weights_only" not in config:
        return
    if config.get("weights_only") is False:
        log.warning("weights_only: false is ignored: dsf loads checkpoints weights-only (never a full unpickle)")
    config["weights_only"] = True


# ------------------------------------------------------------------------------------------- policy
class _Policy:
    """What :func:`recipe_policy` enforces, and the refusals it saw (``denied``)."""

    def __init__(self) -> None:
        self.classes = allowed_classes()
        self.paths = _import_paths(self.classes)
        self.denied: list[str] = []
        self.too_complex: list[str] = []
        self.remote: list[str] = []
        self.parse_error: str | None = None  # jsonargparse's message for a refused class (it names the class as given)

    def message(self) -> str | None:
        if self.too_complex:
            return self.too_complex[0]
        if self.remote:
            return self.remote[0]
        if self.denied:
            names = list(dict.fromkeys(self.denied))
            return denied_message(", ".join(names), self.classes)
        return None


_ACTIVE: list[_Policy] = []  # the policies of the recipe_policy blocks now open, innermost last


def active_policy() -> _Policy | None:
    """The innermost open :func:`recipe_policy` (what it refused so far), or None outside one: a parse error handler
    asks it whether the error is a refusal that :func:`guarded` reports."""
    return _ACTIVE[-1] if _ACTIVE else None


def _option_in_progress() -> str:
    """The option jsonargparse is reading a config for (its Action's ``dest``), from the calling frames."""
    import argparse
    import sys

    frame = sys._getframe(2)
    while frame is not None:
        local = frame.f_locals
        if isinstance(local.get("self"), argparse.Action) and getattr(local["self"], "dest", None):
            return str(local["self"].dest)
        if isinstance(local.get("dest"), str):
            return local["dest"]
        frame = frame.f_back
    return "a config include"


@contextlib.contextmanager
def recipe_policy(allow_remote: bool = False) -> Iterator[_Policy]:
    """While the ``dsf`` LightningCLI parses, instantiates and runs: jsonargparse imports only the allowed
    classes (exact import paths), never instantiates class specs in ``Any`` values, loads only bounded
    YAML and, unless ``allow_remote``, reads config files only from local paths (LightningCLI turns on
    jsonargparse's fsspec reading at import: ``trainer: http://.../x.yaml`` would be fetched). jsonargparse's
    settings are process-wide: they are restored on exit."""
    import jsonargparse
    from jsonargparse import _common, _core, _loaders_dumpers, _optionals, _paths

    policy = _Policy()
    saved_error = _core.ArgumentParser.error
    saved_read_mode = _optionals._config_read_mode
    saved_path_init = _paths.Path.__init__
    saved_settings = dict(_common.parsing_settings)
    saved_loader = (_loaders_dumpers.loaders.get("yaml"), _loaders_dumpers.loader_exceptions.get("yaml"),
                    _loaders_dumpers.loader_json_superset.get("yaml"), _loaders_dumpers.loader_params.get("yaml"))
    saved_yaml_load = _loaders_dumpers.yaml_load
    patched: list[tuple[Any, str, Any]] = []

    def exact(original):
        def check_import_path(path: str) -> None:
            # jsonargparse's own policy (the allowlist below, '*' denied) matches prefixes: a method of an
            # allowed class would pass it. Only the exact import paths of the allowed classes go on.
            if path not in policy.paths:
                policy.denied.append(path)
                # short here (jsonargparse may repeat it once per member of a Union); guarded() prints
                # the full message, with the allowed classes, as the command's error
                raise _common.ImportDenied(f"{path!r} is not one of the {ALLOWED_PHRASE} (nothing was imported)")
            original(path)

        return check_import_path

    def bounded_yaml(loader):
        """``loader`` (a jsonargparse value loader) that measures what it loaded
        (:func:`check_config_structure`) and records a refusal in the policy."""

        def load(stream, *args, **kwargs):
            try:
                value = loader(stream, *args, **kwargs)
            except _YAMLError as err:
                if "nesting depth" not in str(err):
                    raise
                # PyYAML >= 6.0.4 refuses nesting past ~1000 levels itself: the same refusal as ours
                policy.too_complex.append(_too_deep("the config"))
                raise ConfigTooComplexError(policy.too_complex[-1]) from err
            try:
                check_config_structure(value)
            except ConfigTooComplexError as err:
                policy.too_complex.append(str(err))
                raise
            return value

        load.__signature__ = inspect.signature(loader)  # jsonargparse passes the loader's own keyword arguments
        return load

    try:
        jsonargparse.set_parsing_settings(
            import_path_denylist=["*"],
            import_path_allowlist=sorted(policy.paths),
            instantiate_subclass_spec_in_any=False,
            validate_subclass_spec_in_any=True,  # a foreign class_path in an Any value fails the parse
        )
        for module_name in ("jsonargparse._util", "jsonargparse._typehints"):
            module = importlib.import_module(module_name)
            if hasattr(module, "check_import_path"):
                patched.append((module, "check_import_path", module.check_import_path))
                module.check_import_path = exact(module.check_import_path)
        original_yaml = _loaders_dumpers.loaders["yaml"]
        jsonargparse.set_loader("yaml", bounded_yaml(original_yaml), exceptions=(_YAMLError,))
        _loaders_dumpers.yaml_load = bounded_yaml(saved_yaml_load)  # what json_or_yaml_load calls directly
        if not allow_remote:
            _optionals._config_read_mode = saved_read_mode.replace("u", "").replace("s", "")  # files only

            def local_only(self, path, *args, **kwargs):
                # every config include (--config, a group or class given as a file name) is a jsonargparse
                # Path: a URL is refused here, before the read mode is even consulted, and named in the error
                scheme = remote_scheme(path) if isinstance(path, str) else None
                if scheme is not None:
                    policy.remote.append(_remote_message(_option_in_progress(), path, f"{scheme}, a config include"))
                    raise TypeError(f"{path!r} is a URL: not read")
                saved_path_init(self, path, *args, **kwargs)

            _paths.Path.__init__ = local_only

        def error(self, message, ex=None):
            if policy.remote:  # a URL refused: guarded() prints its one line (jsonargparse's usage would name no URL)
                raise SystemExit(2)
            saved_error(self, message, ex)

        _core.ArgumentParser.error = error
        _ACTIVE.append(policy)
        yield policy
    finally:
        if _ACTIVE and _ACTIVE[-1] is policy:
            _ACTIVE.pop()
        _core.ArgumentParser.error = saved_error
        _paths.Path.__init__ = saved_path_init
        _optionals._config_read_mode = saved_read_mode
        for module, name, original in reversed(patched):
            setattr(module, name, original)
        _loaders_dumpers.yaml_load = saved_yaml_load
        for table, value in zip(
            (_loaders_dumpers.loaders, _loaders_dumpers.loader_exceptions, _loaders_dumpers.loader_json_superset,
             _loaders_dumpers.loader_params),
            saved_loader,
        ):
            if value is None:
                table.pop("yaml", None)
            else:
                table["yaml"] = value
        _common.parsing_settings.clear()
        _common.parsing_settings.update(saved_settings)


def check_parsed_config(config: Any) -> None:
    """Refuse what a parse left that no option type took: ``--data.corpus.class_path X --data.corpus.init_args
    {...}`` on an option that takes plain data (``Any``) ends as jsonargparse's internal ``NestedArg``
    (never built, but the option's own check would fail with an obscure message)."""
    from jsonargparse._util import NestedArg

    for where, node in _config_nodes(config):
        if isinstance(node, NestedArg):
            raise UnsafeRecipeError(
                f"{where}: `--{where}.{node.key} ...` sets a field inside an option that takes plain data: nothing "
                f"there is a class to build (a class_path in it is never instantiated). Give the whole value, "
                f"e.g. --{where} '<value>'"
            )


def guarded(call, *args, allow_remote_paths: bool = False, **kwargs):
    """``call(*args, **kwargs)`` (a LightningCLI's construction: parse, instantiate, run) under
    :func:`recipe_policy` (``allow_remote_paths``: its ``allow_remote``). A parse that failed because of the
    policy (jsonargparse printed its usage error and exits) is re-raised as :class:`UnsafeRecipeError` naming
    the refused class paths, URL or unbounded YAML, and what is allowed."""
    from jsonargparse import ArgumentError
    from jsonargparse._common import ImportDenied

    with recipe_policy(allow_remote_paths) as policy:
        try:
            return call(*args, **kwargs)
        except (SystemExit, ArgumentError) as err:  # a parser that exits, or one with exit_on_error=False
            if (isinstance(err, SystemExit) and err.code in (0, None)) or policy.message() is None:
                raise
            message = policy.message()
            if policy.parse_error and not (policy.remote or policy.too_complex):
                message = f"{policy.parse_error} -- {message}"
        except (ImportDenied, ConfigTooComplexError) as err:  # outside a parse (e.g. at instantiation)
            message = policy.message() or str(err)
    raise UnsafeRecipeError(message)


# --------------------------------------------------------------------------------- recipe form sniffing
def _load_yaml(text: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError):
        return text  # not YAML, or hostile: jsonargparse's (bounded) loader reports it


def config_source(value: str) -> tuple[Any, str]:
    """A ``--config`` (or group config) value as :func:`dsf_lightning.cli.lightning.is_task_recipe` reads it to pick
    the recipe form: the parsed file when ``value`` names a regular file (any suffix, as jsonargparse
    reads it), else the value as inline YAML. Only the top-level keys are looked at (no walk)."""
    from pathlib import Path

    try:
        path = Path(value)
        if path.is_file() and path.stat().st_size <= 16 * 1024 * 1024:
            return _load_yaml(path.read_text(encoding="utf-8", errors="replace")), str(path)
    except (OSError, ValueError):
        pass
    return _load_yaml(value), "inline value"


def names_a_class(value) -> bool:
    """A recipe's ``model:`` / ``data:`` value in subclass form: ``{class_path: ...}`` or a bare class name (how
    the CLI and ``dsf reproduce`` tell a sequence-task recipe from a language-model one)."""
    if isinstance(value, dict):
        return "class_path" in value
    # a URL is a config include (refused by the policy, which names it), never a class name
    return (isinstance(value, str) and bool(value.strip()) and not value.strip().startswith(("{", "["))
            and remote_scheme(value) is None)
