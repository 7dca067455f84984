"""Declared method state: a method names its checkpointed attributes once
(``Algorithm.checkpointed``) and the engine saves and restores them generically."""

from __future__ import annotations

import torch

from fedpart.algorithms import ALGORITHMS
from fedpart.engine import method_state as saved
from resume_check import assert_resume_bit_identical


class Toy:
    checkpointed = (
        saved.Tensor("phi", dtype=torch.float64),
        saved.Tensor("maybe"),
        saved.Named("h"),
        saved.Named("member", dtype=torch.float64, stored=torch.uint8),
        saved.PerClient("latest"),
        saved.Stacked("masks", key="mask", dtype=torch.bool),
        saved.Module("net"),
        saved.Value("_round"),
        saved.Value("_trained", encode=saved.str_keys, decode=saved.int_keys),
    )

    def __init__(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.phi = torch.rand(3, 3, generator=g, dtype=torch.float64)
        self.maybe = None
        self.h = {"b": torch.rand(2, generator=g), "a": torch.rand(2, generator=g)}
        self.member = {"conv1": (torch.rand(3, 4, generator=g) > 0.5).double()}
        self.latest = {0: {"w": torch.rand(2, generator=g)}, 2: {"w": torch.rand(2, generator=g)}}
        self.masks = [{"w": torch.rand(2, 2, generator=g) > 0.5} for _ in range(3)]
        torch.manual_seed(seed)
        self.net = torch.nn.Linear(2, 2)
        self._round = seed
        self._trained = {0: seed, 2: seed + 1}


def test_every_kind_round_trips_under_its_checkpoint_names():
    a, b = Toy(1), Toy(2)
    tensors, values = saved.save_state(a, Toy.checkpointed)
    assert set(tensors) == {
        "phi",
        "h/a",
        "h/b",
        "member/conv1",
        "latest/0/w",
        "latest/2/w",
        "mask/w",
        "net/weight",
        "net/bias",
    }
    assert tensors["member/conv1"].dtype == torch.uint8 and tensors["mask/w"].shape == (3, 2, 2)
    assert values == {"round": 1, "trained": {"0": 1, "2": 2}}
    saved.load_state(b, Toy.checkpointed, tensors, values)
    assert torch.equal(b.phi, a.phi) and b.maybe is None
    assert list(b.h) == ["b", "a"] and all(torch.equal(b.h[k], a.h[k]) for k in a.h)
    assert b.member["conv1"].dtype == torch.float64 and torch.equal(
        b.member["conv1"], a.member["conv1"]
    )
    assert torch.equal(b.latest[2]["w"], a.latest[2]["w"]) and sorted(b.latest) == [0, 2]
    assert all(torch.equal(x["w"], y["w"]) for x, y in zip(a.masks, b.masks, strict=True))
    assert torch.equal(b.net.weight, a.net.weight)
    assert b._round == 1 and b._trained == {0: 1, 2: 2}


def test_an_entry_the_checkpoint_lacks_keeps_the_fresh_value():
    b = Toy(2)
    before = b.phi
    saved.load_state(b, Toy.checkpointed[:2] + Toy.checkpointed[-2:], {}, {})
    assert b.phi is before and b._round == 2


def test_no_method_writes_its_own_save_and_load_pair():
    for name, cls in ALGORITHMS.items():
        for hook in ("extra_state", "load_extra_state"):
            owner = next(k for k in cls.__mro__ if hook in vars(k))
            assert owner.__name__ == "Algorithm", f"{name} overrides {hook}: declare checkpointed"


def test_ditto_personal_models_resume_bit_identical_under_their_old_names(tiny_cfg, tmp_path):
    tensors = assert_resume_bit_identical({**tiny_cfg, "algorithm": {"name": "ditto"}}, tmp_path)
    extra = [k.split("/") for k in tensors if k.startswith("extra/")]
    assert extra and all(client.isdigit() for _, client, _ in extra)  # extra/<client>/<key>
