"""What each fit of FedCMD's vote sees: the scalar Gaussians of x, y and every block output,
and Eq. 6's terms, under the min–max and the raw fit.

    python benchmarks/fedcmd/vote_fits.py benchmarks/fedcmd/runs/sel-minmax-fmnist-a1-s42

Reads a selection-phase run's last checkpoint (the model after its last selection round), takes
the clients of that round and, for each, the model it trained from (the global model and its
own BatchNorm statistics), evaluated on all its training samples (the ``post_train`` reading's
batch); prints, per fit, the mean over the clients of each tensor's fitted (μ, σ), of
W2(z^o, z^y) and W2(z^o, z^x) for every output o, and of each candidate's s_l, and how many
clients each candidate wins.
"""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from pathlib import Path

import torch
import yaml

from fedpart.config import Config
from fedpart.engine.functional import call_method
from fedpart.engine.layer_selection import gaussian, transfer_scores, w2_gaussian
from fedpart.engine.rounds import sample_clients
from fedpart.engine.simulation import Simulation
from fedpart.tracking.run_dir import RunDir


def main(path: Path) -> None:
    cfg = Config.from_dict(yaml.safe_load((path / "config.yaml").read_text()))
    sim = Simulation(cfg)
    tensors, meta = RunDir(path).load_checkpoint()
    sim.load_state(tensors, meta)
    rnd = meta["rounds_completed"] - 1
    clients = sample_clients(cfg.seed, rnd, sim.data.num_clients, cfg.federation.join_ratio)
    algo, model = sim.algorithm, sim.model
    names = ("x", "y", *algo.chain)
    rows: dict[str, dict[str, list[float]]] = {}
    wins: dict[str, Counter] = {}
    model.eval()
    for c in clients:
        x, y = sim.data.batch(sim.data.clients[c].train)
        with torch.no_grad():
            out = call_method(model, "block_outputs", sim.store.client_state(c), x)
        for fit in ("minmax", "raw"):
            z = {"x": gaussian(x, fit), "y": gaussian(y, fit)}
            z.update({b: gaussian(out[b], fit) for b in algo.chain})
            row = rows.setdefault(fit, {})
            for n in names:
                row.setdefault(f"μ {n}", []).append(z[n][0])
                row.setdefault(f"σ {n}", []).append(z[n][1])
            for b in algo.chain:
                row.setdefault(f"W2(z^{b}, z^y)", []).append(
                    w2_gaussian(z[b], z["y"], "closed_form")
                )
                row.setdefault(f"W2(z^{b}, z^x)", []).append(
                    w2_gaussian(z[b], z["x"], "closed_form")
                )
            chain = [out[b] for b in algo.chain]
            scores = transfer_scores(x, y, chain, w2="closed_form", score="paper", fit=fit)
            for cand, s in zip(algo.candidates, scores, strict=True):
                row.setdefault(f"s_{cand}", []).append(s)
            wins.setdefault(fit, Counter())[algo.candidates[scores.index(min(scores))]] += 1
    print(f"{path.name}: model after round {rnd}, its {len(clients)} clients\n")
    print("| quantity | " + " | ".join(rows) + " |")
    print("| --- |" + " --- |" * len(rows))
    for key in rows["minmax"]:
        cells = [f"{statistics.mean(rows[fit][key]):.4f}" for fit in rows]
        print(f"| {key} | " + " | ".join(cells) + " |")
    votes = [", ".join(f"{k} {v}" for k, v in wins[fit].items()) for fit in rows]
    print("| clients' votes | " + " | ".join(votes) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
