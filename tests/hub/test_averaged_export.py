"""Exporting a run that kept averaged weights (PolyakAveraging, DSF sec. 2.5): its validation, and so the
ModelCheckpoint's choice of ``best.ckpt``, measured the averaged weights, while the checkpoint's ``state_dict``
holds the training iterate. ``dsf export`` must write the model that was measured: the average, unless
``--weights training`` asks for the iterate."""

import pytest
import torch

from dsf_lightning.cli import main
from dsf_lightning.export.language_model import export_checkpoint
from dsf_lightning.hub import CheckpointError
from dsf_lightning.model.pretrained import load_pretrained
from dsf_lightning.training import LanguageModelModule
from dsf_lightning.training.callbacks import PolyakAveraging
from dsf_lightning.training.read_checkpoint import checkpoint_weights

from .conftest import fit_tiny_lm, logits_of

SETTINGS = dict(cell="delta-rnn", hidden_sizes=[16], embedding_size=16, tie_weights=True, lr=3e-2)


@pytest.fixture(scope="module")
def averaged_run(tmp_path_factory):
    """Two epochs of the real Trainer with an EMA of the weights; the module and the callback as they ended."""
    tmp = tmp_path_factory.mktemp("polyak-run")
    polyak = PolyakAveraging(decay=0.8)
    root, module, data = fit_tiny_lm(tmp, [polyak], **SETTINGS)
    averaged = LanguageModelModule(vocab_size=data.vocab_size, **SETTINGS)
    averaged.load_state_dict(polyak.averaged_state_dict(module))
    return {"root": root, "ckpt": tmp / "checkpoints" / "last.ckpt", "training": module.eval(), "averaged": averaged.eval(),
            "corpus": data.corpus, "polyak": polyak}


def _tokens(run):
    return run["corpus"].splits["test"][:60].reshape(3, 20)


def test_the_export_holds_the_averaged_weights_by_default(averaged_run, tmp_path):
    folder = export_checkpoint(averaged_run["ckpt"], tmp_path / "avg", corpus_name="text-folder", data_root=averaged_run["root"])
    loaded = load_pretrained(folder)
    tokens = _tokens(averaged_run)
    exported = logits_of(loaded.model, tokens)
    assert torch.equal(exported, logits_of(averaged_run["averaged"].model, tokens))
    assert not torch.allclose(exported, logits_of(averaged_run["training"].model, tokens))  # the two really differ
    weights = loaded.info["checkpoint"]["weights"]
    assert "exponential moving average (decay 0.8)" in weights
    assert f"{averaged_run['polyak'].num_averaged:,} training iterates" in weights


def test_weights_training_exports_the_iterate(averaged_run, tmp_path):
    folder = export_checkpoint(averaged_run["ckpt"], tmp_path / "raw", corpus_name="text-folder", data_root=averaged_run["root"],
                               weights="training")
    loaded = load_pretrained(folder)
    assert torch.equal(logits_of(loaded.model, _tokens(averaged_run)), logits_of(averaged_run["training"].model, _tokens(averaged_run)))
    assert "also kept an average" in loaded.info["checkpoint"]["weights"]


def test_a_checkpoint_without_an_average(averaged_run, tmp_path):
    ckpt = torch.load(averaged_run["ckpt"], map_location="cpu", weights_only=True)
    ckpt["callbacks"] = {k: v for k, v in ckpt["callbacks"].items() if not k.startswith("PolyakAveraging")}
    assert checkpoint_weights(ckpt, tmp_path / "x.ckpt") == (ckpt["state_dict"], None)  # auto: the only weights there are
    with pytest.raises(CheckpointError, match="holds no averaged weights.*--weights training"):
        checkpoint_weights(ckpt, tmp_path / "x.ckpt", "averaged")
    with pytest.raises(ValueError, match="weights must be one of"):
        checkpoint_weights(ckpt, tmp_path / "x.ckpt", "best")


def test_dsf_export_says_which_weights_it_wrote(averaged_run, tmp_path, capsys):
    base = ["export", str(averaged_run["ckpt"]), "--corpus", "text-folder", "--data-root", str(averaged_run["root"])]
    assert main([*base[:2], str(tmp_path / "a"), *base[2:]]) == 0
    assert "weights: PolyakAveraging: the exponential moving average" in capsys.readouterr().out
    assert main([*base[:2], str(tmp_path / "b"), *base[2:], "--weights", "training"]) == 0
    assert "weights: the training weights" in capsys.readouterr().out
