"""The similarity mixer shared by pFedSim and FedCMD's phase 2, on a few tensors."""

from __future__ import annotations

import torch

from fedpart.engine.mixers import SimilarityMixer, cosine, warmup_rounds
from fedpart.engine.mixing import mix_states, normalize_rows


def states(n: int) -> dict[int, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return {c: {"w": torch.randn(3, 2, generator=g)} for c in range(n)}


def test_observe_sets_every_pair_of_the_participants_symmetrically():
    ups = states(4)
    mixer = SimilarityMixer(4, torch.device("cpu"), lambda a, b: max(0.0, cosine(a, b, ["w"], 0)))
    mixer.observe({c: ups[c] for c in (0, 2, 3)})
    S = mixer.matrix
    assert torch.equal(S, S.T) and torch.equal(S.diagonal(), torch.ones(4, dtype=torch.float64))
    assert S[0, 1] == 0 and S[1, 2] == 0  # client 1 met no one
    assert float(S[0, 2]) == max(0.0, cosine(ups[0], ups[2], ["w"], 0))


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


def test_the_in_order_average_is_the_per_tensor_loop_bit_for_bit(monkeypatch):
    """On the CPU the average is one product and one ``index_add_`` per chunk of stacked
    tensors: the same roundings as ``acc = acc + w_j·x_j`` tensor after tensor (values spread
    over twelve orders of magnitude, so that another summation order would show), chunked or
    not, integers averaged in float64 and rounded; a fixed number of operators."""
    from fedpart.bench.dispatch import DispatchCounter
    from fedpart.engine import mixing

    gen = torch.Generator().manual_seed(3)
    for n in (1, 2, 7, 60):
        scales = 10.0 ** torch.randint(-6, 6, (n,), generator=gen)
        tensors = [torch.randn(9, 5, generator=gen) * s for s in scales]
        weights = torch.rand(n, generator=gen, dtype=torch.float64)
        weights = weights / weights.sum()
        want = _loop(tensors, weights, torch.float32)
        assert torch.equal(mixing.average_in_order(tensors, weights), want)
        ints = [torch.randint(0, 1000, (4,), generator=gen) for _ in range(n)]
        got = mixing.average_in_order(ints, weights)
        assert got.dtype == torch.long
        assert torch.equal(got, _loop(ints, weights, torch.float64).round().long())
        with monkeypatch.context() as m:
            m.setattr(mixing, "FOLD_BYTES", 9 * 5 * 8 * 3)  # three tensors a chunk
            assert torch.equal(mixing.average_in_order(tensors, weights), want)
    counts = []
    for n in (5, 40):
        tensors = [torch.randn(3, 3, generator=gen) for _ in range(n)]
        with DispatchCounter("cpu") as c:
            mixing.average_in_order(tensors, torch.full((n,), 1.0 / n, dtype=torch.float64))
        counts.append(c.total_ops)
    assert counts[0] == counts[1]
