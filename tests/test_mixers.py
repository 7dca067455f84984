"""The similarity mixer shared by pFedSim and FedCMD's phase 2, on a few tensors."""

from __future__ import annotations

import torch

from fedpart.bench.dispatch import DispatchCounter
from fedpart.engine.mixers import SimilarityMixer, clipped, cosine, warmup_rounds
from fedpart.engine.mixing import mix_states, normalize_rows


def states(n: int) -> dict[int, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return {c: {"w": torch.randn(3, 2, generator=g)} for c in range(n)}


def test_observe_sets_every_pair_of_the_participants_symmetrically():
    ups = states(4)
    mixer = SimilarityMixer(4, torch.device("cpu"), lambda a, b: clipped(cosine(a, b, ["w"], 0)))
    with DispatchCounter("cpu") as counter:
        mixer.observe({c: ups[c] for c in (0, 2, 3)})
    assert counter.total_syncs == 0  # computed and written on the device, nothing read back
    S = mixer.matrix
    assert torch.equal(S, S.T) and torch.equal(S.diagonal(), torch.ones(4, dtype=torch.float64))
    assert S[0, 1] == 0 and S[1, 2] == 0  # client 1 met no one
    for i, j in ((0, 2), (0, 3), (2, 3)):  # Python's max(0, ·) of the float, bit for bit
        assert float(S[i, j]) == max(0.0, float(cosine(ups[i], ups[j], ["w"], 0)))
    assert (
        float(clipped(torch.tensor(-0.0))) == 0.0
        and float(clipped(torch.tensor(float("nan")))) == 0.0
    )


def test_mix_row_linear_over_the_held_states_softmax_over_all_and_ready_weights():
    held = states(4)
    del held[3]
    row = torch.tensor([0.5, 0.0, 1.0, 2.0], dtype=torch.float64)
    mixed = SimilarityMixer.mix_row(row, held.get, ["w"])
    expect = mix_states([held[0], held[2]], normalize_rows(row[[0, 2]][None]), ["w"])[0]
    assert torch.equal(mixed["w"], expect["w"])

    default = {"w": torch.zeros(3, 2)}
    soft = SimilarityMixer.mix_row(row, lambda j: held.get(j, default), ["w"], how="softmax")
    every = [held.get(j, default) for j in range(4)]
    expect = mix_states(every, normalize_rows(row[None], "softmax"), ["w"])[0]
    assert torch.equal(soft["w"], expect["w"])

    weights = torch.tensor([0.25, 0.0, 0.75, 0.0], dtype=torch.float64)
    ready = SimilarityMixer.mix_row(weights, held.get, ["w"], how=None)
    assert torch.equal(ready["w"], 0.25 * held[0]["w"] + 0.75 * held[2]["w"])


def test_warmup_rounds():
    assert warmup_rounds(10, 0.5, None) == 5 and warmup_rounds(10, 0.5, 2) == 2


def _loop(tensors, weights, dtype):
    w = weights.to(dtype).unbind(0)
    acc = tensors[0].to(dtype) * w[0]
    for j in range(1, len(tensors)):
        acc = acc + tensors[j].to(dtype) * w[j]
    return acc


def test_the_average_of_states_is_each_tensors_in_order_loop_bit_for_bit(monkeypatch):
    """Every key of a rank-one mix is ``acc = acc + w_j·x_j`` state after state (values spread
    over twelve orders of magnitude, so that another summation order would show; integers in
    float64, rounded), the float tensors of a state taken as one list: two operators per state
    whatever the number of tensors; folded (one ``index_add_``, as on CUDA under the engine's
    deterministic switches), the same bits in a number of operators independent of the states."""
    from fedpart.bench.dispatch import DispatchCounter
    from fedpart.engine import mixing

    gen = torch.Generator().manual_seed(3)

    def states(n: int) -> list[dict[str, torch.Tensor]]:
        scales = 10.0 ** torch.randint(-6, 6, (n, 3), generator=gen)
        return [
            {
                "a": torch.randn(9, 5, generator=gen) * s[0],
                "b": torch.randn(7, generator=gen) * s[1],
                "n": torch.randint(0, 1000, (4,), generator=gen),
                "h": (torch.randn(3, generator=gen) * s[2]).double(),
            }
            for s in scales
        ]

    def check(per_state: int) -> None:
        for n in (1, 2, 7, 60):
            held = states(n)
            weights = torch.rand(n, generator=gen, dtype=torch.float64)
            weights = weights / weights.sum()
            got = mixing.mix_states(held, weights[None], ["a", "b", "n", "h"])[0]
            for k in ("a", "b", "h"):
                assert got[k].dtype == held[0][k].dtype and got[k].shape == held[0][k].shape
                want = _loop([s[k] for s in held], weights, held[0][k].dtype)
                assert torch.equal(got[k], want)
            ints = _loop([s["n"] for s in held], weights, torch.float64).round().long()
            assert got["n"].dtype == torch.long and torch.equal(got["n"], ints)
        counts = []
        for n in (5, 40):
            held = [{k: v for k, v in s.items() if k in "ab"} for s in states(n)]
            weights = torch.full((1, n), 1.0 / n, dtype=torch.float64)
            with DispatchCounter("cpu") as c:
                mixing.mix_states(held, weights, ["a", "b"])
            counts.append(c.total_ops)
        assert counts[1] - counts[0] == per_state * 35

    check(per_state=2)
    # folded as on CUDA under deterministic algorithms: one index_add_, the same bits
    monkeypatch.setattr(mixing, "FOLD_DEVICES", frozenset({"cpu", "cuda"}))
    check(per_state=0)
    # more states than one fold holds: chunk after chunk into the same sum, the same bits
    monkeypatch.setattr(mixing, "FOLD_BYTES", 1_000)
    held = states(60)
    weights = torch.rand(60, generator=gen, dtype=torch.float64)
    got = mixing.mix_states(held, weights[None], ["a", "b", "n", "h"])[0]
    for k in ("a", "b", "h"):
        assert torch.equal(got[k], _loop([s[k] for s in held], weights, held[0][k].dtype))


def test_the_fold_is_cudas_only_under_deterministic_algorithms():
    from fedpart.engine import mixing

    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        assert mixing.folds(torch.device("cuda")) and not mixing.folds(torch.device("cpu"))
        torch.use_deterministic_algorithms(False)
        assert not mixing.folds(torch.device("cuda"))
    finally:
        torch.use_deterministic_algorithms(deterministic)
