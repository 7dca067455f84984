"""Dis-PFL on the quick start: is a device's difference float rounding amplified by the mask search?

Dis-PFL's masks are chosen by ranking magnitudes (prune the smallest active weights, regrow the
largest gradients): a change in the last bit of one weight can swap two ranks, and from then on
the runs train different sparse models. This script runs Dis-PFL on ``configs/quickstart.yaml``
and records, per round, the mean accuracy and every client's mask (packed bits), so that two runs
can be compared round by round: the first round whose masks differ, the fraction of mask
coordinates that differ, and the accuracies.

A run (``--out FILE.npz``):

- ``--seed S`` runs the quick start with ``seed=S``;
- ``--perturb`` moves half of the initial weights (a fixed random half) by one unit in the last
  place (``torch.nextafter``): a difference of the size of one rounding, and nothing else;
- ``--device cuda`` runs it on a GPU (``engine.device``).

Comparing (``--compare A.npz B.npz ...``) prints, for each file against the first: the first
round whose masks differ, the fraction of differing mask coordinates at rounds 1, 5, 10 and the
last, and the final accuracies. If a one-ulp perturbation on the CPU moves the final accuracy as
far as the device does, the device's difference is rounding amplified by the discrete mask
choice, not another computation.

    python benchmarks/dispfl_rounding.py --seed 0 --out /tmp/cpu-s0.npz
    python benchmarks/dispfl_rounding.py --seed 0 --perturb --out /tmp/cpu-s0-ulp.npz
    python benchmarks/dispfl_rounding.py --compare /tmp/cpu-s0.npz /tmp/cpu-s0-ulp.npz
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from fedpart.api import _as_config
from fedpart.engine import build
from fedpart.engine.loop import Observer
from fedpart.engine.simulation import Simulation

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


class MaskLog(Observer):
    """Every client's mask after each round, packed to bits."""

    def __init__(self) -> None:
        self.rounds: list[np.ndarray] = []

    def _take(self, sim) -> None:
        masks = sim.algorithm.masks
        flat = torch.cat([m[k].flatten().cpu() for m in masks for k in sorted(m)])
        self.rounds.append(np.packbits(flat.numpy()))

    def start(self, sim) -> None:
        self._take(sim)

    def round_end(self, sim, row) -> None:
        self._take(sim)


def _perturbed(run_model, draw: int):
    def wrapped(*args, **kwargs):
        model = run_model(*args, **kwargs)
        gen = torch.Generator().manual_seed(12345 + draw)
        with torch.no_grad():
            for p in model.parameters():
                pick = (torch.rand(p.shape, generator=gen) < 0.5).to(p.device)
                p.copy_(torch.where(pick, torch.nextafter(p, torch.full_like(p, np.inf)), p))
        return model

    return wrapped


def run(args: argparse.Namespace) -> None:
    overrides = [
        "algorithm.name=dispfl",
        f"seed={args.seed}",
        f"engine.device={args.device}",
        f"federation.rounds={args.rounds}",
        "output.checkpoint_every=0",
    ]
    cfg = _as_config(str(CONFIG), overrides)
    if args.perturb:
        build.run_model = _perturbed(build.run_model, args.perturb_seed)
    sim = Simulation(cfg, run_dir=None, quiet=True)
    log = MaskLog()
    sim.extra_observers.append(log)
    result = sim.run()
    acc = [row["accuracy"] for row in sim.rows]
    final = result.final["accuracy"] if hasattr(result, "final") else acc[-1]
    ulp = f" +1ulp (draw {args.perturb_seed})" if args.perturb else ""
    np.savez_compressed(
        args.out,
        masks=np.stack(log.rounds),
        accuracy=np.array(acc, dtype=np.float64),
        final=np.array(final, dtype=np.float64),
        label=np.array(f"{args.device} seed {args.seed}{ulp}"),
    )
    print(
        f"{args.out}: seed {args.seed} {args.device}{' perturbed' if args.perturb else ''}: "
        f"final accuracy {100 * final:.2f}"
    )


def compare(files: list[str]) -> None:
    runs = [np.load(f) for f in files]
    base = runs[0]
    print(f"against {base['label']} (final {100 * float(base['final']):.2f}):\n")
    print(
        "| run | final | Δ final | first round masks differ | max abs. Δ accuracy before it "
        "| mask coords differing at rounds 1 / 5 / 10 / last |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for r in runs[1:]:
        a, b = base["masks"], r["masks"]
        n = min(len(a), len(b))
        bits = np.unpackbits(a[0]).size
        frac = [np.unpackbits(a[i] ^ b[i]).sum() / bits for i in range(n)]
        first = next((i for i in range(n) if frac[i] > 0), None)
        at = " / ".join(f"{100 * frac[i]:.2f}%" for i in (1, 5, 10, n - 1) if i < n)
        fa, fb = 100 * float(base["final"]), 100 * float(r["final"])
        # masks[i] is after round i (0: the initial masks); accuracy[j] is round j + 1's
        upto = n - 1 if first is None else first - 1
        before = np.abs(base["accuracy"][:upto] - r["accuracy"][:upto])
        gap = f"{100 * before.max():.2f}" if upto > 0 else "—"
        print(
            f"| {r['label']} | {fb:.2f} | {fb - fa:+.2f} | "
            f"{'none' if first is None else first} | {gap} | {at} |"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--perturb", action="store_true", help="one ulp on half the initial weights")
    p.add_argument("--perturb-seed", type=int, default=0, help="which random half (--perturb)")
    p.add_argument("--out", help="the run's record (.npz)")
    p.add_argument("--compare", nargs="+", metavar="NPZ", help="compare records with the first")
    args = p.parse_args()
    if args.compare:
        compare(args.compare)
    elif args.out:
        run(args)
    else:
        sys.exit("error: give --out FILE.npz (a run) or --compare A.npz B.npz ...")


if __name__ == "__main__":
    main()
