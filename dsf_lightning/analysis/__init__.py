"""Analysis tools for trained recurrent models. Each is a function that returns data (no plotting,
no files); :mod:`.plots` draws them and :mod:`.command` is ``dsf analyze``.

* :mod:`.state_delta`: the min-max normalized L1 state-delta score per word (DSF paper Fig. 2);
* :mod:`.influence`: each word's most influential predecessor in a RAN (RAN paper eq. 7, Fig. 1);
* :mod:`.timescales`: IRLM timescales ``-1/log|r|`` (IRLM paper sec. 5.1, Fig. 1);
* :mod:`.centroids`: sr-RNN centroid visits, transitions and prototypes (sr-RNN paper sec. 5);
* :mod:`.trajectories`: hidden / cell state trajectories, 2-D PCA;
* :mod:`.sentence_completion`: the MRSC protocol (IRLM paper sec. 5.3), optionally with a subset of units;
* :mod:`dsf_lightning.tasks.dfa` (with the tasks it serves): automata extracted from sr-RNNs (sr-RNN paper appendix E);
* :mod:`.fresh`: short training runs so the tools work without a trained model.

The modules import lazily: ``from dsf_lightning.analysis import state_deltas`` loads only what it needs.
"""

from __future__ import annotations

import importlib

from ._common import AnalysisError

_EXPORTS = {
    "state_deltas": ".state_delta",
    "StateDeltaResult": ".state_delta",
    "ran_influence": ".influence",
    "InfluenceResult": ".influence",
    "irlm_timescales": ".timescales",
    "TimescaleResult": ".timescales",
    "centroid_statistics": ".centroids",
    "CentroidStatistics": ".centroids",
    "CentroidTrace": ".centroids",
    "lm_transition_traces": ".centroids",
    "classifier_transition_traces": ".centroids",
    "state_trajectories": ".trajectories",
    "TrajectoryResult": ".trajectories",
    "complete_questions": ".sentence_completion",
    "CompletionResult": ".sentence_completion",
    "Question": ".sentence_completion",
    "load_questions": ".sentence_completion",
    "score_sentences": ".sentence_completion",
    "train_small_lm": ".fresh",
    "train_tomita_sr": ".fresh",
}

__all__ = ["AnalysisError", *sorted(_EXPORTS)]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
