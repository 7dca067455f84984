"""Normalisation and augmentation on tensors (random crop with padding, horizontal flip).

Everything works on whole batches at once (no per-sample Python loop) and draws its randomness
only from the ``torch.Generator`` it is given, so the same generator state gives the same batch
on any device: random numbers are drawn on the generator's device and moved to the data.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from fedpart.errors import ConfigError

__all__ = ["AUGMENTATIONS", "normalize", "prepare_batch", "random_crop", "random_flip"]

#: Augmentations :func:`prepare_batch` knows.
AUGMENTATIONS = ("none", "crop", "crop_flip")

#: Zero padding of the random crop (the usual CIFAR recipe: pad 4, crop back to size).
CROP_PADDING = 4


def prepare_batch(
    x: torch.Tensor,
    mean: Sequence[float] | torch.Tensor,
    std: Sequence[float] | torch.Tensor,
    *,
    augment: str = "none",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """uint8 images → float32 in [0, 1] → augmentation → per-channel normalisation.

    ``augment`` is ``none``, ``crop`` (zero-pad 4 and crop back at a random offset) or
    ``crop_flip`` (crop, then a horizontal flip with probability 1/2); it applies to image
    batches ``[N, C, H, W]`` only; feature batches ``[N, D]`` are never augmented. Float inputs are
    not rescaled. ``mean``/``std`` hold one value per channel (or per feature), one value for
    all, or nothing (no normalisation). Randomness comes only from ``generator``.
    """
    if augment not in AUGMENTATIONS:
        raise ConfigError(
            "dataset.augment",
            f"unknown augmentation '{augment}'; valid choices: {', '.join(AUGMENTATIONS)}",
        )
    if x.dtype == torch.uint8:
        x = x.float().div_(255.0)
    elif not x.is_floating_point():
        x = x.float()
    if augment != "none" and x.dim() == 4:
        x = random_crop(x, CROP_PADDING, generator, flip=augment == "crop_flip")
    return normalize(x, mean, std)


def normalize(
    x: torch.Tensor,
    mean: Sequence[float] | torch.Tensor,
    std: Sequence[float] | torch.Tensor,
) -> torch.Tensor:
    """``(x - mean) / std`` along dimension 1 (channels or features); identity when empty.
    ``mean``/``std`` may be tensors on ``x``'s device (:meth:`fedpart.engine.data.
    FederatedData.batch` passes them so, made once)."""
    if not len(mean) and not len(std):
        return x
    if len(mean) != len(std):
        raise ValueError(f"mean has {len(mean)} values but std has {len(std)}")
    shape = (1, -1) + (1,) * (x.dim() - 2)
    m = torch.as_tensor(_values(mean), dtype=x.dtype, device=x.device).view(shape)
    s = torch.as_tensor(_values(std), dtype=x.dtype, device=x.device).view(shape)
    return (x - m) / s


def _values(v: Sequence[float] | torch.Tensor) -> tuple[float, ...] | torch.Tensor:
    # a tensor already of ``x``'s dtype and device is used as it is (no copy): on a GPU, a
    # tensor made from host values is a blocking copy that waits for every queued kernel
    return v if isinstance(v, torch.Tensor) else tuple(v)


def _device_of(generator: torch.Generator | None) -> torch.device:
    return generator.device if generator is not None else torch.device("cpu")


def random_crop(
    x: torch.Tensor, padding: int, generator: torch.Generator | None, *, flip: bool = False
) -> torch.Tensor:
    """Zero-pad each image by ``padding`` and crop it back to its size at a random offset.

    Offsets are uniform in ``0..2*padding`` per image and axis (as torchvision's
    ``RandomCrop(size, padding)``). With ``flip``, each crop is also mirrored horizontally with
    probability 1/2, exactly as :func:`random_flip` after this function would (same draws).
    One pad and one gather for the whole batch.
    """
    b, c, h, w = x.shape
    dev = _device_of(generator)
    dy = torch.randint(0, 2 * padding + 1, (b,), generator=generator, device=dev).to(x.device)
    dx = torch.randint(0, 2 * padding + 1, (b,), generator=generator, device=dev).to(x.device)
    cols = dx[:, None] + torch.arange(w, device=x.device)[None]  # [b, w]
    if flip:
        mirrored = torch.rand(b, generator=generator, device=dev).to(x.device) < 0.5
        cols = torch.where(mirrored[:, None], cols.flip(1), cols)
    rows = dy[:, None] + torch.arange(h, device=x.device)[None]  # [b, h]
    wp = w + 2 * padding
    index = (rows[:, :, None] * wp + cols[:, None, :]).view(b, 1, h * w).expand(b, c, h * w)
    padded = F.pad(x, (padding, padding, padding, padding)).reshape(b, c, -1)
    return padded.gather(2, index).view(b, c, h, w)


def random_flip(x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Flip each image horizontally (last axis) with probability 1/2."""
    flip = torch.rand(x.shape[0], generator=generator, device=_device_of(generator)) < 0.5
    return torch.where(flip.to(x.device).view(-1, *([1] * (x.dim() - 1))), x.flip(-1), x)
