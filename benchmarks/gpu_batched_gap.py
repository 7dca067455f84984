"""How far apart the client models of three runs of the quick start end: the CPU's sequential
backend, the device's sequential backend and the device's batched backend (max |Δ| over every
client's model, pairwise, with where it is largest; and each run's train loss per round).

It tells float rounding grown by training from a difference in what is computed: the batched
backend computes the same steps as the sequential one, so its gap to the sequential run on the
device should be of the order of the device's own gap to the CPU. The default cases are the ones
``benchmarks/gpu_smoke.py`` raised on an H100 (``docs/results/gpu.md``): fedseqlayer after 1
and 3 rounds without its final fine-tuning, after 3 rounds with it (10 epochs), and FedAvg and
FedPer for comparison.

    python benchmarks/gpu_batched_gap.py --device cuda
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

import fedpart
from fedpart.bench.devices import check_device
from fedpart.errors import FedpartError

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
NO_FINETUNE = ("algorithm.finetune_epochs=0",)
#: (method, rounds, extra overrides)
CASES = [
    ("fedseqlayer", 1, NO_FINETUNE),
    ("fedseqlayer", 3, NO_FINETUNE),
    ("fedseqlayer", 3, ()),
    ("fedavg", 3, ()),
    ("fedper", 3, ()),
]

States = list[dict[str, torch.Tensor]]


def run(name: str, device: str, backend: str, rounds: int, extra: Sequence[str]):
    r = fedpart.run(
        QUICKSTART,
        [
            f"algorithm.name={name}",
            f"federation.rounds={rounds}",
            f"engine.device={device}",
            f"engine.backend={backend}",
            *extra,
        ],
        write=False,
    )
    sim = r.simulation
    assert sim is not None
    states = [
        {k: v.detach().cpu().double() for k, v in sim.algorithm.eval_state(c).items()}
        for c in range(sim.data.num_clients)
    ]
    return states, [row.get("train_loss") for row in r.metrics]


def gap(a: States, b: States) -> str:
    worst, where = 0.0, ""
    for c, (x, y) in enumerate(zip(a, b, strict=True)):
        for k in x:
            d = float((x[k] - y[k]).abs().max())
            if d > worst:
                worst, where = d, f"client {c} {k}"
    return f"{worst:.2e}" + (f" ({where})" if where else "")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument(
        "--cases", default=None, help="METHOD:ROUNDS[:nofinetune],... (default: the five above)"
    )
    args = p.parse_args(argv)
    try:
        dev = str(check_device(args.device))
        cases = CASES
        if args.cases:
            cases = []
            for item in args.cases.split(","):
                name, rounds, *flag = item.split(":")
                cases.append((name, int(rounds), NO_FINETUNE if flag == ["nofinetune"] else ()))
    except (FedpartError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, rounds, extra in cases:
        cs, ls = run(name, "cpu", "sequential", rounds, extra)
        gs, lgs = run(name, dev, "sequential", rounds, extra)
        gb, lgb = run(name, dev, "batched", rounds, extra)
        print(
            f"{name} {rounds} round(s) {extra}: {dev} seq vs cpu seq {gap(gs, cs)}; "
            f"{dev} batched vs {dev} seq {gap(gb, gs)}; {dev} batched vs cpu seq {gap(gb, cs)}"
        )
        print(f"   train loss cpu {ls}\n   {dev} seq {lgs}\n   {dev} bat {lgb}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
