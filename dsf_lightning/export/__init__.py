"""Export: a trained model out of this library's training format.

- :mod:`.language_model`: a ``LanguageModelModule`` checkpoint -> a model folder (:mod:`dsf_lightning.model.pretrained`),
  optionally scoring the corpus's splits with the stored weights for the card (``dsf export --evaluate``);
- :mod:`.classifier`: the same for a ``SequenceClassifier`` checkpoint (:mod:`dsf_lightning.tasks.pretrained`);
- :mod:`.onnx`: a :class:`~dsf_lightning.model.RecurrentLM` -> an ONNX graph (names re-exported here).

The folder formats themselves live with the models; export only reads checkpoints and runs evaluations.
"""

from .onnx import ONNX_EXTRA, ExportError, OnnxGraph, check_onnx, run_onnx, state_names, to_onnx

__all__ = ["ONNX_EXTRA", "ExportError", "OnnxGraph", "check_onnx", "run_onnx", "state_names", "to_onnx"]
