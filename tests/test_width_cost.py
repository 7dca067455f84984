"""Client cost at a width against Pa3dFL's Table 2 (CIFAR-100 CNN, batch 128)."""

from __future__ import annotations

import math

import pytest
import torch

from fedpart.engine.width_cost import (
    PAPER_TABLE2,
    TABLE2_RATIOS,
    client_cost,
    client_model,
    forward_macs,
    input_shape_of,
    model_size,
    peak_training_memory,
)

CELLS = [(m, r) for m, row in PAPER_TABLE2.items() for r in row]


def close_to_printed(ours: float, printed: str, rel: float = 0.03) -> bool:
    """Within ``rel`` of the printed value, or inside the interval the printed digits round
    from (``"0.1"`` stands for anything in [0.05, 0.15])."""
    paper = float(printed)
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    half_unit = 0.5 * 10.0**-decimals
    return abs(ours - paper) <= max(rel * paper, half_unit + 1e-12)


@pytest.mark.parametrize(("method", "r"), CELLS)
def test_forward_flops_match_table_2_within_3_percent(method: str, r: float) -> None:
    cost = client_cost(method, math.sqrt(r), 128, memory=False)
    ours = cost.forward_macs / 1e7  # the paper's FLOPs: forward multiply-adds of one batch
    paper = float(PAPER_TABLE2[method][r][0])
    assert abs(ours / paper - 1) < 0.03, (method, r, ours, paper)


# Cells whose printed model size the spec's shapes do not reproduce (docs/capacity.md): FLANC at
# r = 1/64 (ours 0.974, printed 0.9) and Pa3dFL below r = 1 (ours 0.48 / 0.83 / 7.59 ×10⁻¹ MiB:
# θ_u whole, θ_v pruned, biases; printed 0.8 / 1.3 / 8.5).
_SIZE_MISMATCH = {("flanc", 1 / 64), ("pa3dfl", 1 / 256), ("pa3dfl", 1 / 64), ("pa3dfl", 1 / 4)}


@pytest.mark.parametrize(
    ("method", "r"),
    [
        pytest.param(
            m,
            r,
            marks=pytest.mark.xfail(strict=True, reason="printed size not reproduced by the spec"),
        )
        if (m, r) in _SIZE_MISMATCH
        else (m, r)
        for m, r in CELLS
    ],
)
def test_model_size_matches_table_2(method: str, r: float) -> None:
    cost = client_cost(method, math.sqrt(r), 128, memory=False)
    ours = cost.size_mib * 10  # printed in units of 10⁻¹ MB (MiB), head excluded
    assert close_to_printed(ours, PAPER_TABLE2[method][r][2]), (method, r, ours)


def test_size_convention_is_the_body_in_mib() -> None:
    model = client_model("fedavg", 1.0)
    body, total = model_size(model)
    assert total == 815_332 and body == total - (192 * 100 + 100)
    assert round(body * 4 / 2**20, 2) == 3.04  # printed 30.4 ×10⁻¹ MB


def test_pa3dfl_size_is_theta_u_plus_pruned_theta_v() -> None:
    # p = 1/16: θ_u = 2500 + 6400 + 576 + 144; θ_v = 25·1·3 + 64·1·4 + 24·1·100 + 12·1·24;
    # biases 4 + 4 + 24 + 12
    body, total = model_size(client_model("pa3dfl", 1 / 16))
    assert body == 9_620 + 3_019 + 44
    assert total == body + 2 * (12 * 100 + 100)  # global and local heads


def test_flops_count_the_weight_rebuild_once_per_batch() -> None:
    shape = input_shape_of("cifar100")
    model = client_model("pa3dfl", 1.0)
    per_batch = {b: forward_macs(model, shape, b) for b in (1, 2)}
    rebuild = 2 * per_batch[1] - per_batch[2]  # the batch-independent part
    # conv1 25·4·25·16·3, conv2 25·4·64·16·64, fc1 24·24·16·1600, fc2 12·12·16·384
    assert rebuild == 120_000 + 6_553_600 + 14_745_600 + 884_736
    plain = client_model("fedavg", 1.0)
    assert forward_macs(plain, shape, 2) == 2 * forward_macs(plain, shape, 1)


def test_peak_memory_grows_with_width() -> None:
    torch.manual_seed(0)
    shape = input_shape_of("fmnist")
    peaks = []
    for p in (1 / 16, 1 / 2):
        model = client_model("p-width", p, variant="fmnist")
        peaks.append(peak_training_memory(model, shape, 10, 16))
        floor = sum(t.numel() * 4 for t in model.parameters()) + 16 * 28 * 28 * 4
        assert peaks[-1] * 2**20 > floor  # parameters and batch at least
    assert peaks[0] < peaks[1]
    again = peak_training_memory(client_model("p-width", 1 / 2, variant="fmnist"), shape, 10, 16)
    assert again == pytest.approx(peaks[1], rel=1e-6)  # deterministic


def test_unknown_method_and_fedavg_width() -> None:
    with pytest.raises(ValueError):
        client_model("heterofl", 0.5)
    with pytest.raises(ValueError):
        client_model("fedavg", 0.5)
    assert len(TABLE2_RATIOS) == 4
