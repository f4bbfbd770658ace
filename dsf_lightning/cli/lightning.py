"""``dsf fit | validate | test | predict``: the command line around :func:`dsf_lightning.recipe_cli.lightning_cli`,
the LightningCLI over the language-model module and DataModule or (subclass mode) the sequence-task ones, which
``dsf reproduce`` trains every row with too.

``--config recipes/...yaml``, with ``data.vocab_size`` linked into the model; ``dsf predict`` writes the
per-token log-probabilities of ``data.predict_split`` (or ``data.predict_file``) as JSON lines to
``--predict_output`` (:mod:`dsf_lightning.training.prediction`).

What this module adds is the command's: ``--allow-remote-paths`` taken from ``argv`` (never a recipe key), a parse
error as one line (``dsf fit: error: ... (the options: dsf fit --help)``, exit 2), and the error policy
(:mod:`.errors`): a recipe the guards refuse, a ``--ckpt_path`` whose options disagree (or that is not a
checkpoint file), a bad model option, a missing logger package, a cluster plugin outside its cluster, a checkpoint
or saved configuration that cannot be written (a full disk) exit 2 with one line; a run that diverged (non-finite
weights) exits 1. The configuration a run saves never replaces a file no run wrote
(:mod:`dsf_lightning.training.saved_config`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..recipe_cli import is_task_recipe  # noqa: F401 - a public name of the CLI package
from .errors import print_error, report_errors

#: the LightningCLI subcommands, parsed by LightningCLI itself (not argparse)
LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


def lightning_cli(argv: Sequence[str], run: bool = True, allow_remote_paths: bool = False):
    """:func:`dsf_lightning.recipe_cli.lightning_cli` with a parse error printed as the command's one line
    (``dsf COMMAND: error: ...``, exit 2)."""
    from ..recipe_cli import lightning_cli as recipe_lightning_cli

    command = next((a for a in argv if a in LIGHTNING_COMMANDS), "fit")

    def report(message: str) -> None:
        print_error(command, f"{message} (the options: dsf {command} --help)")

    return recipe_lightning_cli(argv, run=run, allow_remote_paths=allow_remote_paths, report_parse_error=report)


def run(argv: Sequence[str]) -> int:
    """``dsf fit|validate|test|predict ...`` (``argv[0]`` the subcommand) under the one error policy."""
    from ..recipe_cli import ALLOW_REMOTE_FLAG, error_kinds

    user_errors, failures = error_kinds()

    def body() -> int:  # the allow flag is taken from the command line here, before jsonargparse (and recipes) see it
        lightning_cli([a for a in argv if a != ALLOW_REMOTE_FLAG], allow_remote_paths=ALLOW_REMOTE_FLAG in argv)
        return 0

    # only the recipe / checkpoint errors are the user's: a ValueError inside a training step keeps its traceback
    return report_errors(argv[0], body, *user_errors, broad=False, failures=failures)
