"""prepare_batch: scaling, normalisation, and augmentation that is deterministic and vectorised."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedpart.data import prepare_batch
from fedpart.data.transforms import AUGMENTATIONS, normalize, random_crop, random_flip
from fedpart.errors import ConfigError


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def images(n: int = 16, c: int = 3, size: int = 8, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n, c, size, size), dtype=torch.uint8, generator=gen(seed))


def reference_crop_flip(x: torch.Tensor, padding: int, seed: int, flip: bool) -> torch.Tensor:
    """Per-sample loop with the same draws (dy, dx, then the flip coins), for comparison."""
    g = gen(seed)
    n, _, h, w = x.shape
    dy = torch.randint(0, 2 * padding + 1, (n,), generator=g)
    dx = torch.randint(0, 2 * padding + 1, (n,), generator=g)
    coins = torch.rand(n, generator=g) < 0.5 if flip else torch.zeros(n, dtype=torch.bool)
    padded = F.pad(x, (padding,) * 4)
    out = torch.empty_like(x)
    for i in range(n):
        crop = padded[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w]
        out[i] = crop.flip(-1) if coins[i] else crop
    return out


def test_uint8_is_scaled_then_normalised_per_channel():
    x = images()
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.25, 2.0)
    out = prepare_batch(x, mean, std)
    assert out.dtype == torch.float32 and out.shape == x.shape
    for ch in range(3):
        want = (x[:, ch].float() / 255 - mean[ch]) / std[ch]
        assert torch.allclose(out[:, ch], want, atol=1e-6)
    assert x.dtype == torch.uint8  # the input is left alone
    plain = prepare_batch(x, (), ())
    assert torch.allclose(plain, x.float() / 255) and float(plain.max()) <= 1.0


def test_single_value_stats_and_float_features():
    x = images(c=1)
    assert torch.allclose(prepare_batch(x, (0.5,), (0.5,)), (x.float() / 255 - 0.5) / 0.5)
    feats = torch.randn(10, 4)
    assert torch.equal(prepare_batch(feats, (), ()), feats)  # no rescaling, identity stats
    out = prepare_batch(feats, (1.0, 2.0, 3.0, 4.0), (2.0,) * 4)
    assert torch.allclose(out, (feats - torch.tensor([1.0, 2.0, 3.0, 4.0])) / 2)
    # feature batches are never augmented, even when asked
    assert torch.equal(prepare_batch(feats, (), (), augment="crop_flip", generator=gen(0)), feats)
    with pytest.raises(ValueError, match="mean has 2 values but std has 1"):
        normalize(feats, (0.0, 1.0), (1.0,))


def test_same_generator_state_same_batch():
    x = images(n=64)
    for aug in ("crop", "crop_flip"):
        a = prepare_batch(x, (0.5,) * 3, (0.2,) * 3, augment=aug, generator=gen(7))
        b = prepare_batch(x, (0.5,) * 3, (0.2,) * 3, augment=aug, generator=gen(7))
        c = prepare_batch(x, (0.5,) * 3, (0.2,) * 3, augment=aug, generator=gen(8))
        assert torch.equal(a, b) and not torch.equal(a, c) and a.shape == x.shape
    # "none" draws nothing from the generator
    g = gen(1)
    state = g.get_state()
    prepare_batch(x, (), (), augment="none", generator=g)
    assert torch.equal(g.get_state(), state)


@pytest.mark.parametrize("flip", [False, True])
def test_vectorised_crop_matches_per_sample_reference(flip):
    x = images(n=40, size=12).float()
    got = random_crop(x, 4, gen(11), flip=flip)
    assert got.shape == x.shape
    assert torch.equal(got, reference_crop_flip(x, 4, 11, flip))
    augment = "crop_flip" if flip else "crop"
    via_prepare = prepare_batch(x.to(torch.uint8), (), (), augment=augment, generator=gen(11))
    assert torch.allclose(via_prepare, reference_crop_flip(x, 4, 11, flip) / 255)


def test_crop_pads_with_zeros_and_offsets_cover_the_range():
    ones = torch.full((400, 1, 8, 8), 255, dtype=torch.uint8)
    out = prepare_batch(ones, (), (), augment="crop", generator=gen(0))
    assert set(out.unique().tolist()) <= {0.0, 1.0}
    zero_rows = (out[:, 0].sum(2) == 0).sum(1)  # rows of padding that came into view
    zero_cols = (out[:, 0].sum(1) == 0).sum(1)
    assert int(zero_rows.max()) == 4 and int(zero_cols.max()) == 4
    assert int((zero_rows == 0).sum()) > 0  # the centred offset occurs too
    # the kept part is an unshifted window of the image: every pixel came from it or the padding
    assert float(out.sum()) == float(((8 - zero_rows) * (8 - zero_cols)).sum())


def test_flip_actually_flips_about_half():
    x = torch.arange(2 * 5 * 7, dtype=torch.float32).view(1, 2, 5, 7).repeat(200, 1, 1, 1)
    out = random_flip(x, gen(3))
    flipped = torch.tensor([torch.equal(o, x[0].flip(-1)) for o in out])
    kept = torch.tensor([torch.equal(o, x[0]) for o in out])
    assert bool((flipped | kept).all())
    assert 60 < int(flipped.sum()) < 140
    # crop_flip with no room to move is a pure flip with the same coins
    g1, g2 = gen(5), gen(5)
    a = random_crop(x, 0, g1, flip=True)
    for _ in range(2):  # the two offset draws that random_crop makes first
        torch.randint(0, 1, (200,), generator=g2)
    assert torch.equal(a, random_flip(x, g2))


def test_unknown_augmentation_is_a_config_error():
    assert AUGMENTATIONS == ("none", "crop", "crop_flip")
    with pytest.raises(ConfigError) as err:
        prepare_batch(images(), (), (), augment="rotate")
    assert err.value.key == "dataset.augment"


def test_no_generator_still_works():
    out = prepare_batch(images(), (0.5,) * 3, (0.5,) * 3, augment="crop_flip")
    assert out.shape == (16, 3, 8, 8) and out.dtype == torch.float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_batch_with_cpu_generator_equals_cpu_batch():
    x = images(n=32, size=32)
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    cpu = prepare_batch(x, mean, std, augment="crop_flip", generator=gen(2))
    gpu = prepare_batch(x.cuda(), mean, std, augment="crop_flip", generator=gen(2))
    assert gpu.device.type == "cuda" and torch.allclose(gpu.cpu(), cpu, atol=1e-6)
