"""Datasets (in-memory tensors), transforms, partitions and per-client splits."""

from fedpart.data import sources  # noqa: F401  (registers the built-in datasets)
from fedpart.data.registry import DATASETS, DatasetBundle, load_dataset, resolve_root
from fedpart.data.transforms import prepare_batch

__all__ = ["DATASETS", "DatasetBundle", "load_dataset", "prepare_batch", "resolve_root"]
