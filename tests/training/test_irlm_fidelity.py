"""The IRLM paper's optimization and regularization, checked against the paper's own definitions
(Pachitariu & Sahani 2013, "Regularization and nonlinearities for neural language models: when are they needed?"):

* sec. 3: "We used 1000-fold smaller learning rates for the self-recurrent connections than for the
  encoding and decoding parameters": one SGD step moves each self-connection r_j by
  ``-(lr / 1000) dL/dr_j``, with dL/dr computed here from the model's equations (x_t = W y_t + r x_{t-1},
  logits = Z x_t + b), not through the library;
* sec. 4: column normalization fixes "the L2 norm of the incoming/outgoing weights to each hidden unit",
  i.e. the rows of the cell's encoding matrix W (into unit j) and the columns of the decoder Z (out of
  unit j), whether or not an embedding layer feeds the cell.
"""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.regularizers import column_normalization_targets, normalize_columns
from dsf_lightning.training import LanguageModelModule

ROOT = Path(__file__).resolve().parents[2]
V, H, B, T = 13, 6, 3, 8


def irlm_loss_from_r(r, W, Z, b, tokens, targets, embedding=None):
    """Summed-over-tokens mean NLL of the IRLM written from sec. 3 / eq. 1, as a function of r."""
    y = F.one_hot(tokens, V).double() if embedding is None else embedding[tokens]
    x = torch.zeros(tokens.shape[0], H, dtype=torch.float64)
    logits = []
    for t in range(tokens.shape[1]):
        x = y[:, t] @ W.T + r * x  # x_t = W y_t + R x_{t-1}, R = diag(r)
        logits.append(x @ Z.T + b)  # P(y_{t+1}) ~ exp(y^T Z x_t)
    logits = torch.stack(logits, 1)
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


@pytest.mark.parametrize("r0", [0.0, 0.9, -0.5])
def test_one_sgd_step_moves_r_by_a_thousandth_of_the_base_rate(r0):
    lr = 0.5
    module = LanguageModelModule(vocab_size=V, cell="irlm", hidden_sizes=[H], embedding_size=0, optimizer="sgd",
                                 lr=lr, param_group_lr={"rho": lr / 1000},
                                 cell_options={"r_init": r0, "r_parametrization": "direct"}).double()
    cell = module.model.layers[0]
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    r_before = cell.r.detach().clone()
    assert torch.allclose(r_before, torch.full((H,), r0, dtype=torch.float64))
    # the paper's rule, from the equations: dr = -(lr / 1000) dL/dr
    r = r_before.clone().requires_grad_()
    W, Z, b = cell.W.detach(), module.model.decoder.weight.detach(), module.model.decoder.bias.detach()
    (dL_dr,) = torch.autograd.grad(irlm_loss_from_r(r, W, Z, b, tokens, targets), r)
    assert dL_dr.abs().min() > 0
    want = -(lr / 1000) * dL_dr
    # the library: its optimizer, one step on the same loss
    optimizer = module.configure_optimizers()
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    logits, _ = module.model(tokens)
    F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1)).backward()
    optimizer.step()
    torch.testing.assert_close(cell.r.detach() - r_before, want, rtol=1e-9, atol=1e-15)


def test_the_sigmoid_parametrization_would_scale_the_step_by_its_squared_slope():
    """Why the option exists: with r = tanh(rho / 2) (the default, kept for existing checkpoints) the same
    step moves r by (dr/drho)^2 times the paper's, ~0.009 at r = 0.9."""
    lr = 0.5
    module = LanguageModelModule(vocab_size=V, cell="irlm", hidden_sizes=[H], embedding_size=0, optimizer="sgd",
                                 lr=lr, param_group_lr={"rho": lr / 1000}, cell_options={"r_init": 0.9}).double()
    cell = module.model.layers[0]
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
    r_before = cell.r.detach().clone()
    r = r_before.clone().requires_grad_()
    loss = irlm_loss_from_r(r, cell.W.detach(), module.model.decoder.weight.detach(),
                            module.model.decoder.bias.detach(), tokens[:, :-1], tokens[:, 1:])
    (dL_dr,) = torch.autograd.grad(loss, r)
    optimizer = module.configure_optimizers()
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    logits, _ = module.model(tokens[:, :-1])
    F.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1)).backward()
    optimizer.step()
    ratio = (cell.r.detach() - r_before) / (-(lr / 1000) * dL_dr)
    slope = 0.5 * (1 - 0.9**2)  # d tanh(rho/2) / d rho at r = 0.9
    torch.testing.assert_close(ratio, torch.full_like(ratio, slope**2), rtol=1e-3, atol=0)


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes" / "ptb").glob("irlm*.yaml")), ids=lambda p: p.name)
def test_irlm_recipes_train_r_itself_a_thousand_times_slower(recipe):
    model = yaml.safe_load(recipe.read_text())["model"]
    assert model["cell_options"]["r_parametrization"] == "direct"
    assert model["param_group_lr"]["rho"] == pytest.approx(model["lr"] / 1000)


def test_direct_r_stays_inside_its_bounds_and_old_checkpoints_keep_their_meaning():
    from dsf_lightning.cells import get_cell

    cell = get_cell("irlm")(4, 5, r_parametrization="direct", long_context_units=2)
    with torch.no_grad():
        cell.rho.copy_(torch.tensor([1.5, 0.2, -3.0, 0.3, 2.0]))
    r = cell.r
    assert r[0] < 1 and r[1] > 0.7 and r[2] > -1 and r[4] < 1  # LCUs in (0.7, 1), the rest in (-1, 1)
    assert r[3] == 0.3
    sigmoid = get_cell("irlm")(4, 5)  # the default: rho is the logit, as every existing checkpoint holds it
    with torch.no_grad():
        sigmoid.rho.fill_(1.0)
    torch.testing.assert_close(sigmoid.r, torch.tanh(torch.tensor(0.5)).expand(5))
    with pytest.raises(Exception, match=r"r_parametrization.*'sigmoid'.*'direct'"):
        get_cell("irlm")(4, 5, r_parametrization="linear")


# -- column normalization (sec. 4) ------------------------------------------------------------------
@pytest.mark.parametrize("embedding_size,tie", [(0, False), (H, False), (H, True)])
def test_column_normalization_fixes_each_hidden_units_incoming_and_outgoing_norms(embedding_size, tie):
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=V, cell="irlm", hidden_sizes=[H], embedding_size=embedding_size,
                                 tie_weights=tie))
    embedding_before = None if model.embedding is None else model.embedding.weight.detach().clone()
    normalize_columns(model, 2.0)
    W = model.layers[0].W  # [H, input]: row j = the weights into hidden unit j
    Z = model.decoder.weight if model.decoder is not None else model.embedding.weight  # [V, H]: column j out of j
    torch.testing.assert_close(W.norm(dim=1), torch.full((H,), 2.0))
    torch.testing.assert_close(Z.norm(dim=0), torch.full((H,), 2.0))
    if embedding_before is not None and not tie:  # the embedding is no hidden unit's weights: left alone
        assert torch.equal(model.embedding.weight, embedding_before)
    names = [n for n, _, _ in column_normalization_targets(model)]
    assert "layers.0.W" in names
