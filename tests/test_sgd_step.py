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


def test_a_transposed_gradient_is_scaled_in_place_with_the_same_bits():
    """A ``Linear`` weight's gradient is the transpose of a fresh product (a view, not
    contiguous): scaled in place all the same — no temporary the size of the weight — with the
    bits of ``p − round(lr·g)``; a view that does not cover its whole storage is not."""
    from fedpart.engine.training import _own

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, 5, generator=gen)
    w = torch.randn(3, 5, generator=gen, requires_grad=True)
    loss = torch.nn.functional.linear(x, w).square().sum()
    (g,) = torch.autograd.grad(loss, [w])
    assert _own([g])
    t = torch.randn(5, 3, generator=gen).t()  # transposed, dense, its own storage
    assert _own([t]) and not t.is_contiguous()
    assert not _own([torch.randn(4, 3, generator=gen)[1:]])  # part of a storage
    assert not _own([torch.randn(4, 6, generator=gen)[:, ::2]])  # strided, part of a storage
    assert not _own([t, t])  # the same storage twice
    state = {"w": torch.randn(3, 5, generator=gen)}
    want = state["w"] - torch.mul(t, 0.1)
    given = t.clone()
    sgd_step(state, ["w"], (t,), {}, _settings(), 0.1)
    assert torch.equal(state["w"], want)
    assert torch.equal(t, torch.mul(given, 0.1))  # the gradient itself was scaled: no temporary
