"""The suite's device-agnostic checks, on the device ``DSF_TEST_DEVICE`` names (default ``cpu``; a GPU
machine runs ``DSF_TEST_DEVICE=cuda python -m pytest tests/test_on_device.py tests/test_benchmarks_device.py``):

* every cell (every variant of the contract battery): sequence, step loop and chunks with carried state
  on the device, in float64 against the same weights on the CPU, in float32 against that float64 result;
  gradients likewise;
* the fused decoder loss and the fused optimizers on the device against the plain paths in float64;
* a Lightning training step of every cell in bf16-mixed and 16-mixed (with a gradient scaler) on the
  device: finite losses, float32 weights that moved, the first loss within 1 % of the float32 run's;
* DDP set up on the device (one process: gloo on the CPU, NCCL on a GPU) trains as the plain run does.
"""

import copy
import os

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.plugins import MixedPrecision

from dsf_lightning.cells import get_cell, list_cells
from dsf_lightning.ops.linear_cross_entropy import linear_cross_entropy
from dsf_lightning.training.optim import build_optimizer

from .cells.test_cell_contract import CASES, INPUT, T, build, inputs, random_state
from .training.conftest import make_toy_corpus, toy_modules

DEVICE = torch.device(os.environ.get("DSF_TEST_DEVICE", "cpu"))
ON_GPU = DEVICE.type == "cuda"
if ON_GPU and not torch.cuda.is_available():
    pytest.skip(f"DSF_TEST_DEVICE={DEVICE} but torch sees no CUDA device", allow_module_level=True)


def _all_outputs(cell, x, h0):
    """(sequence output, sequence state, step-loop output, step-loop state, chunked output, chunked state)."""
    seq_out, seq_state = cell(x, h0)
    state, outs = h0, []
    for t in range(x.shape[1]):
        out_t, state = cell.step(x[:, t], state)
        outs.append(out_t)
    step_out, step_state = torch.stack(outs, 1), state
    state, outs = h0, []
    for lo, hi in ((0, 3), (3, 4), (4, T)):
        out_c, state = cell(x[:, lo:hi], state)
        outs.append(out_c)
    return seq_out, seq_state, step_out, step_state, torch.cat(outs, 1), state


def _flat(outputs):
    return [t for item in outputs for t in (item if isinstance(item, tuple) else (item,))]


@pytest.mark.parametrize("name,options,input_size", CASES)
def test_a_cell_on_the_device_computes_what_it_computes_on_the_cpu(name, options, input_size):
    cpu = build(name, options, input_size)
    x, h0 = inputs(input_size), random_state(cpu)
    with torch.no_grad():
        want = _flat(_all_outputs(cpu, x, h0))
        dev = copy.deepcopy(cpu).to(DEVICE)
        got64 = _flat(_all_outputs(dev, x.to(DEVICE), tuple(s.to(DEVICE) for s in h0)))
        dev32 = copy.deepcopy(cpu).float().to(DEVICE)
        got32 = _flat(_all_outputs(dev32, x.float().to(DEVICE), tuple(s.float().to(DEVICE) for s in h0)))
    for a, b in zip(got64, want):
        assert a.device.type == DEVICE.type
        torch.testing.assert_close(a.cpu(), b, rtol=1e-9, atol=1e-11)
    for a, b in zip(got32, want):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.cpu().double(), b, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("name,options,input_size", CASES)
def test_a_cells_gradients_on_the_device_equal_the_cpus(name, options, input_size):
    def grads(cell, device):
        cell = cell.to(device).eval()  # no random masks or samples: they are drawn per device
        torch.manual_seed(3)
        out, state = cell(inputs(input_size).to(device), tuple(s.to(device) for s in random_state(cell)))
        loss = (out**2).sum() + sum((s**2).sum() for s in state)
        loss.backward()
        return {n: p.grad.cpu() for n, p in cell.named_parameters() if p.grad is not None}

    cpu = build(name, options, input_size)
    want = grads(copy.deepcopy(cpu), "cpu")
    got = grads(copy.deepcopy(cpu), DEVICE)
    assert got.keys() == want.keys() and want
    for n in want:
        torch.testing.assert_close(got[n], want[n], rtol=1e-8, atol=1e-10, msg=n)


@pytest.mark.parametrize("with_bias", [True, False])
def test_the_fused_loss_on_the_device_equals_the_plain_softmax_in_float64(with_bias):
    g = torch.Generator().manual_seed(0)
    y = torch.randn(150, 12, dtype=torch.float64, generator=g).to(DEVICE).requires_grad_()
    w = (3 * torch.randn(40, 12, dtype=torch.float64, generator=g)).to(DEVICE).requires_grad_()
    b = torch.randn(40, dtype=torch.float64, generator=g).to(DEVICE).requires_grad_() if with_bias else None
    t = torch.randint(0, 40, (150,), generator=g).to(DEVICE)
    leaves = [v for v in (y, w, b) if v is not None]
    fused = linear_cross_entropy(y, w, b, t)
    fused_grads = torch.autograd.grad(fused, leaves)
    plain = F.cross_entropy(F.linear(y, w, b), t, reduction="sum")  # the definition, not our op
    plain_grads = torch.autograd.grad(plain, leaves)
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=0)
    for a, b_ in zip(fused_grads, plain_grads):
        torch.testing.assert_close(a, b_, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_the_fused_optimizer_on_the_device_equals_the_plain_one_in_float64(optimizer):
    def after(fused):
        g = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(7, 3, dtype=torch.float64, generator=g).to(DEVICE))]
        if fused:
            opt = build_optimizer(optimizer, params, lr=0.01, momentum=0.9)
            assert opt.defaults.get("fused"), "build_optimizer did not take the fused kernel on this device"
        else:
            opt = (torch.optim.Adam(params, lr=0.01) if optimizer == "adam"
                   else torch.optim.SGD(params, lr=0.01, momentum=0.9))
        for _ in range(4):
            params[0].grad = torch.randn(7, 3, dtype=torch.float64, generator=g).to(DEVICE)
            opt.step()
        return params[0].detach().cpu()

    torch.testing.assert_close(after(True), after(False), rtol=1e-12, atol=1e-14)


class _Losses(L.Callback):
    """Every step's loss, and the parameters' dtypes and devices during training (Lightning moves the
    module back to the CPU when fit ends)."""

    def __init__(self):
        self.losses, self.params = [], set()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))
        self.params |= {(p.dtype, p.device.type) for p in module.parameters()}


def _train(cell, steps=3, **trainer_kwargs):
    L.seed_everything(0, verbose=False)
    options = {"context_size": 4} if cell == "scrn" else {}
    sizes = {"embedding_size": 16} if cell == "ran-simple" else {}  # it adds x_t to the state (RAN eq. 2)
    module, data = toy_modules(make_toy_corpus(n_train=600, n_eval=60), cell=cell, cell_options=options, **sizes)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    record = _Losses()
    trainer = L.Trainer(accelerator="gpu" if ON_GPU else "cpu", devices=1, max_steps=steps, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, limit_val_batches=0, use_distributed_sampler=False,
                        callbacks=[record], **trainer_kwargs)
    trainer.fit(module, data)
    return module, before, record


def _mixed(precision):
    if precision == "16-mixed" and not ON_GPU:  # Lightning's CPU default for "16-mixed" has no scaler
        return {"plugins": [MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))]}
    return {"precision": precision}


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
@pytest.mark.parametrize("cell", list_cells())
def test_a_mixed_precision_training_step_of_every_cell_on_the_device(cell, precision):
    module, before, record = _train(cell, **_mixed(precision))
    losses, losses32 = record.losses, _train(cell)[2].losses
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    assert abs(losses[0] - losses32[0]) <= 0.01 * losses32[0], (losses, losses32)
    assert record.params == {(torch.float32, DEVICE.type)}
    params = dict(module.named_parameters())
    assert any(not torch.equal(params[n].detach().cpu(), before[n].cpu()) for n in params), "no weight moved"


def test_ddp_on_the_device_trains_as_the_plain_run_does():
    plain = _train("delta-rnn", steps=4)[2].losses
    try:
        module, _, ddp = _train("delta-rnn", steps=4, strategy="ddp")
    finally:  # Lightning leaves the process group up: a later ddp_fork run in this process would hang in it
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    assert module.trainer.strategy.__class__.__name__ == "DDPStrategy"
    assert ddp.params == {(torch.float32, DEVICE.type)}
    torch.testing.assert_close(torch.tensor(ddp.losses), torch.tensor(plain), rtol=1e-5, atol=1e-6)


def test_every_cell_is_covered_by_the_device_battery():
    assert {name for name, *_ in (c.values for c in CASES)} == set(list_cells())
    assert get_cell("delta-rnn")(INPUT, 3).to(DEVICE).step(torch.zeros(1, INPUT, device=DEVICE))[0].device.type == DEVICE.type
