"""The stacked recurrent language model: embedding -> recurrent layers -> decoder.

* :mod:`.recurrent_lm`: :class:`LMConfig` (the model as names and numbers) and :class:`RecurrentLM` (the
  ``nn.Module``; dropout, weight tying and the size limit are described there);
* :mod:`.initialization`: the ``init`` schemes (uniform, normal);
* :mod:`.pretrained`: the language-model folder (``save_pretrained`` / ``load_pretrained``);
* :mod:`.budget`: hidden sizes for a parameter budget.

This package only re-exports.
"""

from . import pretrained  # noqa: F401 - registers the language-model folder for RecurrentLM.from_pretrained
from .initialization import INIT_SCHEMES, check_init, initialize
from .recurrent_lm import (
    MAX_PARAMETERS_ENV,
    LMConfig,
    ModelConfigError,
    ModelState,
    RecurrentLM,
    count_parameters,
    detach_state,
    max_parameters,
    recurrent_dropout_cells,
)

__all__ = [
    "INIT_SCHEMES",
    "MAX_PARAMETERS_ENV",
    "LMConfig",
    "ModelConfigError",
    "ModelState",
    "RecurrentLM",
    "check_init",
    "count_parameters",
    "detach_state",
    "initialize",
    "max_parameters",
    "recurrent_dropout_cells",
]
