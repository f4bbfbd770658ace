"""training.optim: the one optimizer builder (names, settings, refused names) and the schedule config Lightning reads."""

import pytest
import torch

from dsf_lightning.training.optim import build_optimizer, fused_allowed, with_schedule

from .conftest import quiet_trainer


def test_names_build_their_optimizer_with_the_settings():
    params = [torch.nn.Parameter(torch.zeros(2))]
    adam = build_optimizer("adam", params, lr=0.01, momentum=0.9, weight_decay=0.1)
    assert type(adam) is torch.optim.Adam and adam.defaults["lr"] == 0.01 and adam.defaults["weight_decay"] == 0.1
    for name, cls in (("sgd", torch.optim.SGD), ("rmsprop", torch.optim.RMSprop)):
        opt = build_optimizer(name, params, lr=0.5, momentum=0.9)
        assert type(opt) is cls and opt.defaults["momentum"] == 0.9 and opt.defaults["lr"] == 0.5
    with pytest.raises(ValueError, match=r"optimizer must be one of \('adam', 'sgd'\), got 'rmsprop'"):
        build_optimizer("rmsprop", params, lr=0.1, choices=("adam", "sgd"))


def test_with_schedule_steps_plateaus_after_validation_and_others_every_epoch():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    assert with_schedule(opt) is opt
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
    assert with_schedule(opt, plateau)["lr_scheduler"] == {"scheduler": plateau, "monitor": "val_loss", "strict": False}
    step = torch.optim.lr_scheduler.StepLR(opt, 1)
    assert with_schedule(opt, step) == {"optimizer": opt, "lr_scheduler": {"scheduler": step, "interval": "epoch"}}


def _steps(optimizer_name, fused, dtype=torch.float64, steps=5, **settings):
    """Parameters after ``steps`` updates on fixed gradients, the fused kernel on or off."""
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(7, 3, dtype=dtype, generator=g)), torch.nn.Parameter(torch.randn(5, dtype=dtype, generator=g))]
    opt = (torch.optim.Adam(params, fused=fused, **settings) if optimizer_name == "adam"
           else torch.optim.SGD(params, fused=fused, **settings))
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, dtype=dtype, generator=g)
        opt.step()
    return [p.detach() for p in params]


def test_adam_and_sgd_take_the_fused_kernel_where_every_parameter_allows_it():
    params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3, 2))]
    assert build_optimizer("adam", params, lr=0.01).defaults["fused"] is True
    assert build_optimizer("sgd", params, lr=0.5, momentum=0.9).defaults["fused"] is True
    assert not build_optimizer("rmsprop", params, lr=0.5).defaults.get("fused")
    group = build_optimizer("adam", [{"params": iter(params), "lr": 0.1}], lr=0.01)  # a generator in a group is kept
    assert group.defaults["fused"] is True and len(group.param_groups[0]["params"]) == 2
    assert not build_optimizer("adam", [torch.nn.Parameter(torch.zeros(2).to_sparse())],
                               lr=0.01).defaults.get("fused")


@pytest.mark.parametrize("name, settings", [("adam", {"lr": 0.01, "weight_decay": 0.1}), ("sgd", {"lr": 0.5, "momentum": 0.9})])
def test_the_fused_update_is_the_plain_update_in_float64(name, settings):
    for fused, plain in zip(_steps(name, True, **settings), _steps(name, False, **settings)):
        torch.testing.assert_close(fused, plain, rtol=1e-13, atol=1e-15)


def _scaler_plugin():
    from lightning.pytorch.plugins import MixedPrecision

    return [MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))]


@pytest.mark.parametrize(
    ("trainer_kwargs", "fused"),
    [({}, True), ({"gradient_clip_val": 0.5}, True), ({"precision": "bf16-mixed"}, True),
     ({"precision": "bf16-mixed", "gradient_clip_val": 0.5}, True),  # no scaler: fused, clipped by FusedClipping
     ({"plugins": "scaler", "gradient_clip_val": 0.5}, False), ({"plugins": "scaler"}, True)],
    ids=["plain", "clip", "bf16", "bf16-clip", "fp16-scaler-clip", "fp16-scaler"],
)
def test_the_classifier_takes_a_fused_optimizer_unless_a_gradient_scaler_must_unscale_before_clipping(trainer_kwargs,
                                                                                                        fused):
    from dsf_lightning.tasks.modules import SequenceClassifier

    if trainer_kwargs.get("plugins") == "scaler":
        trainer_kwargs = {**trainer_kwargs, "plugins": _scaler_plugin()}
    trainer = quiet_trainer(**trainer_kwargs)
    module = SequenceClassifier(vocab_size=5, cell="gru", hidden_size=4, optimizer="adam")
    assert fused_allowed(trainer) is fused
    module.trainer = trainer
    assert bool(module.configure_optimizers().defaults.get("fused")) is fused
    assert fused_allowed(None) is True  # a module on its own: nothing clips it


@pytest.mark.parametrize("algorithm,value", [("norm", 0.5), ("value", 0.01)])
@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_a_fused_optimizers_gradients_are_clipped_under_bf16(precision, algorithm, value):
    """Lightning's mixed-precision plugin refuses to clip a fused optimizer (it raised at the first step);
    FusedClipping clips it under bf16 as full precision does, by norm or by value."""
    from dsf_lightning.tasks.modules import SequenceClassifier

    trainer = quiet_trainer(precision=precision, gradient_clip_val=value, gradient_clip_algorithm=algorithm)
    module = SequenceClassifier(vocab_size=5, cell="gru", hidden_size=4, optimizer="adam")
    module.trainer = trainer
    optimizer = module.configure_optimizers()
    assert optimizer.defaults["fused"] is True
    g = torch.Generator().manual_seed(0)
    for p in module.parameters():
        p.grad = 10 * torch.randn(p.shape, generator=g)
    module.configure_gradient_clipping(optimizer, value, trainer.gradient_clip_algorithm)
    grads = [p.grad for p in module.parameters()]
    if algorithm == "norm":
        assert torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(gr) for gr in grads])) == pytest.approx(value, rel=1e-4)
    else:
        assert max(float(gr.abs().max()) for gr in grads) == pytest.approx(value)
