"""Normalisation and augmentation on tensors (random crop with padding, horizontal flip)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def prepare_batch(
    x: torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    *,
    augment: str = "none",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """uint8 images → float in [0, 1] → augmentation → per-channel normalisation.

    Float inputs are only normalised. Randomness comes only from ``generator``.
    """
    if x.dtype == torch.uint8:
        x = x.float().div_(255.0)
    if augment != "none" and x.dim() == 4:
        if augment in ("crop", "crop_flip"):
            x = random_crop(x, 4, generator)
        if augment == "crop_flip":
            x = random_flip(x, generator)
    if len(mean):
        shape = (1, -1, 1, 1) if x.dim() == 4 else (1, -1)
        m = torch.tensor(mean, dtype=x.dtype).view(shape)
        s = torch.tensor(std, dtype=x.dtype).view(shape)
        x = (x - m) / s
    return x


def random_crop(x: torch.Tensor, padding: int, generator: torch.Generator | None) -> torch.Tensor:
    """Zero-pad by ``padding`` and crop each image back to its size at a random offset."""
    b, c, h, w = x.shape
    padded = F.pad(x, (padding, padding, padding, padding))
    dy = torch.randint(0, 2 * padding + 1, (b,), generator=generator)
    dx = torch.randint(0, 2 * padding + 1, (b,), generator=generator)
    rows = (dy[:, None] + torch.arange(h)[None]).view(b, 1, h, 1).expand(b, c, h, w + 2 * padding)
    out = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w)[None]).view(b, 1, 1, w).expand(b, c, h, w)
    return out.gather(3, cols)


def random_flip(x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Flip each image horizontally with probability 1/2."""
    flip = torch.rand(x.shape[0], generator=generator) < 0.5
    return torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
