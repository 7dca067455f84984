"""The sequential trainer's SGD update (:func:`fedpart.engine.training.sgd_step`)."""

from __future__ import annotations

import torch

from fedpart.engine.training import TrainSettings, sgd_step


def _settings(momentum: float = 0.0, wd: float = 0.0) -> TrainSettings:
    return TrainSettings(
        lr=0.1,
        momentum=momentum,
        weight_decay=wd,
        batch_size=4,
        local_epochs=1,
        drop_last=False,
        seed=0,
    )


def test_the_update_is_p_minus_the_rounded_lr_times_d_bit_for_bit():
    """In place or not, ``p − round(lr·d)``: the rounding every recorded number has; a gradient
    that is not its own tensor (an expanded one) is not scaled in place."""
    gen = torch.Generator().manual_seed(0)
    for momentum, wd in ((0.0, 0.0), (0.0, 1e-3), (0.9, 0.0)):
        settings = _settings(momentum, wd)
        state = {"w": torch.randn(5, 3, generator=gen), "b": torch.randn(3, generator=gen)}
        grads = (torch.randn(5, 3, generator=gen), torch.ones(()).expand(3))
        frozen = [g.clone() for g in grads]
        want = {}
        for (k, p), g in zip(state.items(), frozen, strict=True):
            d = g + wd * p if wd else g
            want[k] = p - torch.mul(d, 0.1)
        bufs: dict[str, torch.Tensor] = {}
        sgd_step(state, ["w", "b"], grads, bufs, settings, 0.1)
        for k in state:
            assert torch.equal(state[k], want[k]), (momentum, wd, k)
        assert torch.equal(grads[1], torch.ones(3))  # the expanded gradient untouched
        assert bool(bufs) == bool(momentum)
