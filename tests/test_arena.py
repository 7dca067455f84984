"""The process backend's states through a shared file (:mod:`fedpart.engine.arena`) and as raw
bytes (:mod:`fedpart.engine.parallel`): the same values bit for bit, and the same run numbers
when the file cannot be made."""

import os
import pickle

import pytest
import torch

import fedpart
from fedpart.engine import arena, parallel
from resume_check import assert_same_run


def _states():
    gen = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(3, 5, generator=gen),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.empty(0, 4),
        "mask": torch.rand(7, generator=gen) > 0.5,
        "count": torch.tensor([3, 1], dtype=torch.int64),
        "half": torch.randn(3, generator=gen).half(),
    }


def test_a_state_round_trips_through_a_slot_bit_for_bit():
    state = _states()
    entries, size = arena.layout(state)
    assert all(off % arena.ALIGN == 0 for *_, off in entries)
    room = arena.Arena()
    try:
        assert room.ensure(3 * size)
        assert room.path is not None and os.path.exists(room.path)
        arena.write(room.mem, size, entries, state)  # slot 1
        other = arena.attach(room.path, room.size)  # another mapping sees the bytes
        back = arena.read(other, size, entries)
        assert list(back) == list(state)
        for k, v in state.items():
            assert back[k].dtype == v.dtype and back[k].shape == v.shape
            assert torch.equal(back[k], v), k
        arena.write(room.mem, size, entries, back)  # a slot's own views: left as they are
        assert all(torch.equal(arena.read(room.mem, size, entries)[k], state[k]) for k in state)
        path = room.path
    finally:
        room.close()
    assert not os.path.exists(path)


def test_tensors_travel_as_their_raw_bytes():
    state = {**_states(), "view": torch.arange(10.0)[2:7], "bf16": torch.ones(2).bfloat16()}
    back = pickle.loads(parallel._dumps(state, parallel._CloudPickler))
    for k, v in state.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
    back["w"].add_(1.0)  # writable
    big = torch.zeros(100_000)
    assert len(parallel._dumps(big)) < big.numel() * 4 + 200  # no more than its bytes


def test_without_the_file_the_states_go_through_the_pipes(tiny_cfg, monkeypatch):
    cfg = {**tiny_cfg, "algorithm": {"name": "fedper"}}
    seq = fedpart.run({**cfg, "engine": {"threads": 1, "backend": "sequential"}}, write=False)

    def refuse(self, size):
        return False

    monkeypatch.setattr(arena.Arena, "ensure", refuse)
    par = fedpart.run(
        {**cfg, "engine": {"threads": 1, "backend": "processes", "workers": 2}}, write=False
    )
    assert_same_run(seq, par)


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_a_run_uses_the_file_and_leaves_none_behind(tiny_cfg, monkeypatch):
    made = []
    ensure = arena.Arena.ensure

    def recording(self, size):
        made.append(ensure(self, size))
        return made[-1]

    monkeypatch.setattr(arena.Arena, "ensure", recording)
    before = {f for f in os.listdir("/dev/shm") if f.startswith("fedpart-")}
    cfg = {**tiny_cfg, "algorithm": {"name": "fedavg"}}
    fedpart.run(
        {**cfg, "engine": {"threads": 1, "backend": "processes", "workers": 2}}, write=False
    )
    after = {f for f in os.listdir("/dev/shm") if f.startswith("fedpart-")}
    assert after <= before
    assert made and all(made)  # every round's states went through the file


def test_the_file_of_a_driver_that_is_gone_is_removed(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    orphan = tmp_path / f"fedpart-{int(dead.stdout)}-0-deadbeef"
    mine = tmp_path / f"fedpart-{os.getpid()}-0-cafecafe"
    other = tmp_path / "fedpart-notes.txt"
    for f in (orphan, mine, other):
        f.write_bytes(b"x")
    assert arena.remove_orphans(str(tmp_path)) == [orphan.name]
    assert not orphan.exists() and mine.exists() and other.exists()
