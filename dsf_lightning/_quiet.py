"""What a ``dsf`` command does not print: third-party product tips and deprecation warnings of code the user cannot
change (Lightning calling torch's deprecated pytree API). Installed once, before Lightning is imported."""

from __future__ import annotations

import logging
import warnings

#: Lightning's advertisements ("💡 Tip: For seamless cloud uploads and versioning, try installing litmodels ...")
TIP_PREFIX = "💡 Tip:"
#: the loggers Lightning's rank_zero_info writes through (lightning_utilities' log is set to one of them)
_TIP_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero", "lightning_utilities.core.rank_zero")
#: deprecations raised inside Lightning / torch, not by anything a recipe or the user wrote
_THIRD_PARTY_DEPRECATIONS = (r".*isinstance\(treespec, LeafSpec\)` is deprecated.*",)


class _NoTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TIP_PREFIX)


def quiet_third_party() -> None:
    """Drop Lightning's tips and the third-party deprecation warnings (idempotent)."""
    for name in _TIP_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoTips) for f in logger.filters):
            logger.addFilter(_NoTips())
    for message in _THIRD_PARTY_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message)
