"""training.optim: the one optimizer builder (names, settings, refused names) and the schedule config Lightning reads."""

import pytest
import torch

from dsf_lightning.training.optim import build_optimizer, with_schedule


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
