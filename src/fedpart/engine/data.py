"""The federated view of a dataset: one in-memory pool of samples and per-client index arrays."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from fedpart.config import Config
from fedpart.data import DatasetBundle
from fedpart.data.partition import assign_test_like_train, partition, split_clients
from fedpart.data.transforms import prepare_batch
from fedpart.errors import ConfigError
from fedpart.seeding import numpy_rng


@dataclass
class ClientData:
    """Index arrays (into the pool) of one client's train, validation and test samples."""

    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor

    @property
    def num_train(self) -> int:
        return int(self.train.numel())

    def to(self, device: torch.device) -> ClientData:
        """The same index arrays on ``device``."""
        return ClientData(self.train.to(device), self.val.to(device), self.test.to(device))


@dataclass
class FederatedData:
    """All samples of a run as one tensor pool; clients are index arrays into it.

    ``global_test`` holds the indices of the official test split when it was kept aside
    (``dataset.merge_test=false``), used to evaluate a global model.
    """

    bundle: DatasetBundle
    x: torch.Tensor
    y: torch.Tensor
    clients: list[ClientData]
    global_test: torch.Tensor | None
    augment: str

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def num_classes(self) -> int:
        return self.bundle.num_classes

    @property
    def device(self) -> torch.device:
        """Where the pool and the index arrays live."""
        return self.x.device

    def with_clients(self, clients: list[ClientData]) -> FederatedData:
        """The same pool with other clients' index arrays (a method training on part of a
        client's split); the normalisation tensors made on the device are shared, not made again
        at every batch of the new object."""
        out = dataclasses.replace(self, clients=clients)
        if "_norm" in self.__dict__:
            out.__dict__["_norm"] = self.__dict__["_norm"]
        return out

    def to(self, device: str | torch.device) -> FederatedData:
        """The pool (still ``uint8`` images), labels and every client's index arrays on
        ``device``: moved once per run, so that a batch is an indexed read on the device. The
        bundle's own tensors stay where they are (the host copy)."""
        device = torch.device(device)
        if self.x.device == device:
            return self
        return FederatedData(
            self.bundle,
            self.x.to(device),
            self.y.to(device),
            [c.to(device) for c in self.clients],
            None if self.global_test is None else self.global_test.to(device),
            self.augment,
        )

    def batch(
        self, index: torch.Tensor, *, train: bool = False, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (normalised, augmented when ``train``) and labels of the samples ``index``."""
        mean, std = self._normalisation()
        x = prepare_batch(
            self.x[index],
            mean,
            std,
            augment=self.augment if train else "none",
            generator=generator,
        )
        return x, self.y[index]

    def _normalisation(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The bundle's mean and std as tensors of a batch's dtype on the pool's device, made
        on first use (one host-to-device copy per run, not two per batch)."""
        cached = self.__dict__.get("_norm")
        if cached is None:
            dtype = self.x.dtype if self.x.is_floating_point() else torch.float32
            cached = tuple(
                torch.as_tensor(tuple(v), dtype=dtype, device=self.x.device)
                for v in (self.bundle.mean, self.bundle.std)
            )
            self.__dict__["_norm"] = cached
        return cached

    def label_matrix(self, which: str = "train") -> np.ndarray:
        """[clients, classes] sample counts of one split."""
        y = self.y.cpu().numpy()
        out = np.zeros((self.num_clients, self.num_classes), dtype=np.int64)
        for i, c in enumerate(self.clients):
            idx = getattr(c, which).cpu().numpy()
            out[i] = np.bincount(y[idx], minlength=self.num_classes)
        return out


def build_federated_data(cfg: Config, bundle: DatasetBundle) -> FederatedData:
    """Partition ``bundle`` over clients as ``cfg.partition`` says, deterministically from ``cfg.seed``."""
    p = cfg.partition
    has_test = bundle.test_x is not None and bundle.test_y is not None
    if has_test:
        x = torch.cat([bundle.train_x, bundle.test_x])
        y = torch.cat([bundle.train_y, bundle.test_y])
    else:
        x, y = bundle.train_x, bundle.train_y
    n_train = int(bundle.train_y.numel())
    labels = y.numpy()
    merge = cfg.dataset.merge_test or not has_test
    pool = np.arange(len(labels)) if merge else np.arange(n_train)
    if p.pool_size:
        if p.pool_size > len(pool):
            raise ConfigError(
                "partition.pool_size",
                f"the pool holds {len(pool)} samples, fewer than the {p.pool_size} asked for",
            )
        pool = np.sort(numpy_rng(cfg.seed, "pool").choice(pool, p.pool_size, replace=False))
    opts = dict(
        alpha=p.alpha,
        min_size=p.min_size,
        shards_per_client=p.shards_per_client,
        classes_per_client=p.classes_per_client,
    )
    parts = partition(labels[pool], p.num_clients, p.kind, numpy_rng(cfg.seed, "partition"), **opts)
    parts = [pool[idx] for idx in parts]
    fractions = tuple(p.split)
    global_test = None
    if p.test_source == "official" and not merge:
        tr, va, _ = fractions
        splits = split_clients(
            parts, labels, (tr / (tr + va), va / (tr + va), 0.0), numpy_rng(cfg.seed, "split")
        )
        test_labels = labels[n_train:]
        tests = assign_test_like_train(
            [s.train for s in splits], labels, test_labels, numpy_rng(cfg.seed, "split", 1)
        )
        tests = [t + n_train for t in tests]
    else:
        splits = split_clients(parts, labels, fractions, numpy_rng(cfg.seed, "split"))
        tests = [s.test for s in splits]
    if not merge:
        global_test = torch.arange(n_train, len(labels))
    clients = [
        ClientData(
            train=torch.as_tensor(np.sort(s.train), dtype=torch.long),
            val=torch.as_tensor(np.sort(s.val), dtype=torch.long),
            test=torch.as_tensor(np.sort(t), dtype=torch.long),
        )
        for s, t in zip(splits, tests, strict=True)
    ]
    augment = bundle.augment if cfg.dataset.augment == "auto" else cfg.dataset.augment
    return FederatedData(bundle, x, y, clients, global_test, augment)
