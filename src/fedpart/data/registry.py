"""The datasets by name: one declared record each, registered the same way for the built-in
datasets and a user's own (``fedpart.register_dataset``, docs/extending.md).

A record says what the dataset is (classes, input shape, normalisation, augmentation, options)
and holds its loader, ``loader(root, download, **options)``, which returns a
:class:`DatasetBundle` or plain arrays — ``(train_x, train_y)`` or ``(train_x, train_y, test_x,
test_y)``, numpy arrays or tensors — that the record turns into one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedpart.errors import ConfigError
from fedpart.registry import lookup

__all__ = ["DATASETS", "DatasetBundle", "DatasetInfo", "load_dataset", "register_dataset"]

AUGMENTATIONS = ("none", "crop", "crop_flip")


@dataclass
class DatasetBundle:
    """A whole dataset in memory (see ``docs/architecture.md``)."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor | None
    test_y: torch.Tensor | None
    num_classes: int
    input_shape: tuple[int, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment: str


Loader = Callable[..., Any]


@dataclass(frozen=True)
class DatasetInfo:
    """A registered dataset: what it is, the files it needs, the options it accepts, and its
    loader. ``mean``/``std`` normalise a batch per channel (images, after scaling ``uint8`` to
    [0, 1]) or per feature (flat float data); empty: no normalisation."""

    name: str
    description: str
    num_classes: int
    input_shape: tuple[int, ...]
    files: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    offline: bool = True
    folder: str = ""
    title: str = ""
    loader: Loader | None = field(default=None, compare=False, repr=False)
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    augment: str = "none"

    @property
    def display_name(self) -> str:
        return self.title or self.name


DATASETS: dict[str, DatasetInfo] = {}


def _bad(name: str, why: str) -> ConfigError:
    return ConfigError("register_dataset", f"dataset '{name}': {why}")


def register_dataset(
    name: str,
    *,
    num_classes: int,
    input_shape: Sequence[int],
    description: str = "",
    mean: Sequence[float] = (),
    std: Sequence[float] = (),
    augment: str = "none",
    options: dict[str, str] | None = None,
    files: Sequence[str] = (),
    folder: str = "",
    title: str = "",
    offline: bool = True,
) -> Callable[[Loader], Loader]:
    """Decorator registering ``loader(root: Path, download: bool, **options)`` as dataset
    ``name`` (lower case; ``dataset.name`` in a config).

    ``num_classes`` and ``input_shape`` ((C, H, W) images or (D,) features) declare what the
    loader returns (checked when it is loaded); ``mean``/``std`` one value per channel or
    feature (or one for all; empty: none); ``augment`` the dataset's usual training
    augmentation (``none``, ``crop``, ``crop_flip``); ``options`` the ``dataset.*`` keys the
    loader accepts (key → one-line doc). Raises a one-line :class:`ConfigError` for a name
    taken by another loader or a malformed record.
    """
    if not isinstance(name, str) or not name or name != name.lower() or " " in name:
        raise _bad(str(name), "the name must be a non-empty lower-case word")
    shape = tuple(int(s) for s in input_shape)
    if len(shape) not in (1, 3) or any(s < 1 for s in shape):
        raise _bad(name, f"input_shape must be (C, H, W) or (D,) of positive sizes, got {shape}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise _bad(name, f"num_classes must be an integer >= 2, got {num_classes!r}")
    if len(mean) != len(std):
        raise _bad(name, f"mean has {len(mean)} values but std has {len(std)}")
    if any(s <= 0 for s in std):
        raise _bad(name, "every std must be > 0")
    width = shape[0]
    if len(mean) not in (0, 1, width):
        raise _bad(name, f"mean/std need 1 or {width} values (one per channel or feature)")
    if augment not in AUGMENTATIONS:
        raise _bad(name, f"augment must be one of {', '.join(AUGMENTATIONS)}, got {augment!r}")

    def wrap(loader: Loader) -> Loader:
        if not callable(loader):
            raise _bad(name, "register_dataset decorates the dataset's loader function")
        old = DATASETS.get(name)
        if old is not None and not _same_function(old.loader, loader):
            where = getattr(old.loader, "__module__", "?")
            raise _bad(name, f"the name is taken (registered by {where}); choose another")
        DATASETS[name] = DatasetInfo(
            name,
            description or (loader.__doc__ or name).strip().splitlines()[0],
            num_classes,
            shape,
            tuple(files),
            dict(options or {}),
            offline,
            folder,
            title,
            loader,
            tuple(float(m) for m in mean),
            tuple(float(s) for s in std),
            augment,
        )
        return loader

    return wrap


def _same_function(a: Any, b: Any) -> bool:
    """The same function registered again (its module imported a second time)."""
    key = ("__module__", "__qualname__")
    return a is b or all(getattr(a, k, None) == getattr(b, k, 0) for k in key)


def resolve_root(root: str | os.PathLike | None) -> Path:
    """``root``, else ``$FEDPART_DATA``, else ``$XDG_CACHE_HOME/fedpart/data`` (``~/.cache``)."""
    if root:
        return Path(root).expanduser()
    env = os.environ.get("FEDPART_DATA")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "fedpart" / "data"


def load_dataset(
    name: str, root: str | os.PathLike | None = None, *, download: bool = True, **options: Any
) -> DatasetBundle:
    """Load a registered dataset from ``root`` (see :func:`resolve_root`)."""
    from fedpart.plugins import load_entry_points

    load_entry_points()
    name = lookup(list(DATASETS), name, "dataset.name", "dataset")
    info = DATASETS[name]
    for opt in options:
        if opt not in info.options:
            choices = ", ".join(sorted(info.options)) or "(none)"
            raise ConfigError(f"dataset.{opt}", f"unknown option for {name}; valid: {choices}")
    assert info.loader is not None
    return as_bundle(info, info.loader(resolve_root(root), download, **options))


def _tensor(value: Any, what: str, name: str, *, labels: bool = False) -> torch.Tensor:
    t = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
    if labels:
        if t.is_floating_point() and not torch.equal(t, t.round()):
            raise ConfigError("dataset.name", f"dataset '{name}': {what} are not integers")
        return t.to(torch.int64).reshape(-1).contiguous()
    if t.dtype not in (torch.uint8, torch.float32):
        t = t.to(torch.float32)
    return t.contiguous()


def as_bundle(info: DatasetInfo, loaded: Any) -> DatasetBundle:
    """What a loader returned as a :class:`DatasetBundle`, checked against its record."""
    if isinstance(loaded, DatasetBundle):
        return loaded
    if not isinstance(loaded, tuple | list) or len(loaded) not in (2, 4):
        raise ConfigError(
            "dataset.name",
            f"dataset '{info.name}': its loader must return a DatasetBundle, (x, y) or "
            f"(x, y, x_test, y_test), got {type(loaded).__name__}",
        )
    x = _tensor(loaded[0], "training inputs", info.name)
    y = _tensor(loaded[1], "training labels", info.name, labels=True)
    tx = ty = None
    if len(loaded) == 4:
        tx = _tensor(loaded[2], "test inputs", info.name)
        ty = _tensor(loaded[3], "test labels", info.name, labels=True)
    if x.dim() == 3 and len(info.input_shape) == 3:  # [N, H, W] greyscale images
        x = x.unsqueeze(1)
        tx = tx.unsqueeze(1) if tx is not None and tx.dim() == 3 else tx
    for inputs, labels, split in ((x, y, "training"), (tx, ty, "test")):
        if inputs is None or labels is None:
            continue
        if tuple(inputs.shape[1:]) != info.input_shape:
            raise ConfigError(
                "dataset.name",
                f"dataset '{info.name}': {split} inputs have shape {tuple(inputs.shape[1:])} per "
                f"sample, the registration declares input_shape={info.input_shape}",
            )
        if len(inputs) != len(labels):
            raise ConfigError(
                "dataset.name",
                f"dataset '{info.name}': {len(inputs)} {split} inputs but {len(labels)} labels",
            )
        if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= info.num_classes):
            raise ConfigError(
                "dataset.name",
                f"dataset '{info.name}': {split} labels outside 0..{info.num_classes - 1}",
            )
    return DatasetBundle(
        info.name, x, y, tx, ty, info.num_classes, info.input_shape, info.mean, info.std,
        info.augment,
    )  # fmt: skip
