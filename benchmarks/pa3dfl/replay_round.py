"""Replay the next round of a Pa3dFL run from its last checkpoint (nothing is written) and say
why it diverges or not: each participant's local step gradient norms (unclipped), one client's
loss step by step, and how every client's received model starts.

    python benchmarks/pa3dfl/replay_round.py RUN_DIR [--client 87] [--received] [KEY=VALUE ...]

``KEY=VALUE`` overrides change the replayed round (e.g. ``federation.max_grad_norm=50`` or
``federation.lr=0.05``); a finished run needs ``federation.rounds=<one more>``. The round's
outcome is printed (its training loss and ``clipped_steps``, or the divergence). With
``--received``, per client: the cross-entropy of its received model ``M_0`` on its training
split with the global and with the local head, and its mean feature norm, with the medians per
width — a model that starts far off is where a step size that suits the others overshoots.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import fedpart.engine.context as context
import fedpart.engine.training as training
from fedpart.engine.checkpoint import read_checkpoint, restore, run_directory
from fedpart.engine.functional import call_method
from fedpart.engine.simulation import Simulation
from fedpart.errors import FedpartError


def replay(run: Path, overrides: list[str], traced: int | None, received: bool) -> list[str]:
    rd = run_directory(run)
    cfg, tensors, meta = read_checkpoint(rd, overrides)
    if meta is None or tensors is None:
        raise FedpartError(f"{run}: no checkpoint")
    if not cfg.federation.max_grad_norm:  # measure every step's norm: a limit never reached
        cfg = cfg.with_overrides(["federation.max_grad_norm=1e30"])
    sim = Simulation(cfg, run_dir=None, quiet=True)
    restore(sim, rd, tensors, meta)
    rnd, out = sim.rounds_completed, []
    norms: dict[int, list[float]] = {}
    losses: list[float] = []
    current = [-1]
    clip, train = training.clip_gradient, context.train_client

    def measured_clip(grads, max_norm):  # noqa: ANN001, ANN202
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        norms.setdefault(current[0], []).append(float(norm))
        return clip(grads, max_norm)

    def traced_train(model, start, recipe, data, client, *args, **kwargs):  # noqa: ANN001, ANN202
        current[0] = client
        if client == traced and recipe.objective is not None:
            objective = recipe.objective

            def logged(model, state, x, y):  # noqa: ANN001, ANN202
                loss = objective(model, state, x, y)
                losses.append(float(loss.detach()))
                return loss

            recipe = dataclasses.replace(recipe, objective=logged)
        return train(model, start, recipe, data, client, *args, **kwargs)

    algo = sim.algorithm
    if received:
        out += received_models(sim)
    training.clip_gradient, context.train_client = measured_clip, traced_train
    try:
        row = sim.run_round(rnd)
        outcome = f"round {rnd}: trained, train loss {row['train_loss']:.4f}" + (
            f", clipped steps {row['clipped_steps']}" if "clipped_steps" in row else ""
        )
    except FedpartError as exc:
        outcome = f"round {rnd}: {exc}"
    finally:
        training.clip_gradient, context.train_client = clip, train
    limit = sim.cfg.federation.max_grad_norm
    out.insert(0, outcome + (f" (limit {limit:g})" if limit < 1e30 else " (no limit)"))
    out.append(
        "\n| client | width | steps | first | median | max (finite) |\n| --- | --- | --- | --- | --- | --- |"
    )
    width = algo.ctx.capacity.width
    for c, ns in norms.items():
        finite = [n for n in ns if math.isfinite(n)] or [float("nan")]
        out.append(
            f"| {c} | {float(width[c]):.4f} | {len(ns)} | {ns[0]:.3g} | "
            f"{statistics.median(finite):.3g} | {max(finite):.3g} |"
        )
    if traced is not None:
        shown = ", ".join(f"{v:.4g}" for v in losses[:8])
        out.append(f"\nclient {traced}, loss of its first steps: {shown}")
    return out


def received_models(sim: Simulation) -> list[str]:
    """Per client: CE of ``M_0`` with the global / local head on its training split, and its
    mean feature norm; the clients furthest off first, then medians per width."""
    algo, data = sim.algorithm, sim.data
    width = algo.ctx.capacity.width
    rows = []
    for c in range(data.num_clients):
        state, model = algo.received(c), algo.model_for(c)
        x, y = data.batch(data.clients[c].train)
        with torch.no_grad():
            z = call_method(model, "features", state, x)
            g = F.linear(z, state["head.weight"], state["head.bias"])
            loc = F.linear(z, state["local_head.weight"], state["local_head.bias"])
        rows.append(
            (
                float(F.cross_entropy(g, y)),
                float(F.cross_entropy(loc, y)),
                float(z.norm(dim=1).mean()),
                float(width[c]),
                c,
            )
        )
    out = [
        "\n| client | width | CE global head | CE local head | mean feature norm |",
        "| --- | --- | --- | --- | --- |",
    ]
    for ce_g, ce_l, zn, w, c in sorted(rows, reverse=True)[:8]:
        out.append(f"| {c} | {w:.4f} | {ce_g:.3f} | {ce_l:.3f} | {zn:.1f} |")
    out += [
        "\n| width | clients | median CE global head | median feature norm |",
        "| --- | --- | --- | --- |",
    ]
    for w in sorted({r[3] for r in rows}):
        sub = [r for r in rows if r[3] == w]
        out.append(
            f"| {w:.4f} | {len(sub)} | {statistics.median(r[0] for r in sub):.3f} | "
            f"{statistics.median(r[2] for r in sub):.1f} |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", type=Path, help="a Pa3dFL run directory with a checkpoint")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE changes of the replayed round")
    ap.add_argument("--client", type=int, default=None, help="log this client's loss per step")
    ap.add_argument("--received", action="store_true", help="how every received model starts")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    try:
        print("\n".join(replay(args.run, args.overrides, args.client, args.received)))
    except (FedpartError, OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
