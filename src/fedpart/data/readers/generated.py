"""Datasets without files to read: scikit-learn's bundled digits and Gaussian features
labelled by a random linear teacher."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedpart.data.readers.bundle import make_bundle
from fedpart.data.registry import DatasetBundle
from fedpart.errors import ConfigError


def load_digits(root: Path, download: bool) -> DatasetBundle:
    """scikit-learn's bundled UCI digits: 1,797 8x8 images, values 0..16 scaled to 0..255."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    x = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)
    scaled = x.astype(np.float64) / 255.0
    return make_bundle(
        "digits", (x, d.target), None, 10, (float(scaled.mean()),), (float(scaled.std()),), "none"
    )


def _int_option(key: str, value: Any, low: int) -> int:
    """``value`` as an int >= ``low`` (integral floats and digit strings accepted)."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"dataset.{key}", f"expected an integer >= {low}, got {value!r}")
    return value


def load_synthetic(
    root: Path,
    download: bool,
    num_samples: int = 6000,
    num_features: int = 60,
    num_classes: int = 10,
    seed: int = 0,
    noise: float = 1.0,
) -> DatasetBundle:
    """Gaussian features labelled by a random linear teacher (with ``noise`` on the logits).

    ``x ~ N(0, I_D)``; a teacher ``W ~ N(0, 1/D)`` of shape ``[D, K]`` gives logits
    ``4 x W + noise * N(0, 1)`` and the label is their argmax. ``num_samples`` are generated
    for training and ``num_samples // 5`` more for the test split (1/6 of all samples). The
    same options give the same data (``torch.Generator`` seeded with ``seed``).
    """
    num_samples = _int_option("num_samples", num_samples, 10)
    num_features = _int_option("num_features", num_features, 1)
    num_classes = _int_option("num_classes", num_classes, 2)
    seed = _int_option("seed", seed, 0)
    try:
        noise = float(noise)
    except (TypeError, ValueError):
        raise ConfigError("dataset.noise", f"expected a number, got {noise!r}") from None
    if not math.isfinite(noise) or noise < 0:
        raise ConfigError("dataset.noise", f"expected a finite number >= 0, got {noise!r}")
    g = torch.Generator().manual_seed(int(seed))
    n = num_samples + num_samples // 5
    x = torch.randn(n, num_features, generator=g)
    teacher = torch.randn(num_features, num_classes, generator=g) / num_features**0.5
    logits = x @ teacher * 4 + float(noise) * torch.randn(n, num_classes, generator=g)
    y = logits.argmax(1)
    return DatasetBundle(
        "synthetic",
        x[:num_samples],
        y[:num_samples],
        x[num_samples:],
        y[num_samples:],
        num_classes,
        (num_features,),
        (),
        (),
        "none",
    )
