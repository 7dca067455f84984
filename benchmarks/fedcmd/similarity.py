"""FedCMD's similarity weights at the end of a run: how far Eq. 7 is from plain averaging.

    python benchmarks/fedcmd/similarity.py benchmarks/fedcmd/runs/fedcmd-fmnist [...]

Reads the run's last checkpoint (its persistent N×N Φ) and its config (the variant's
normalisation) and prints ``fedcmd.similarity_statistics``: the measured off-diagonal Φ_ij and,
per client, the total-variation distance of its mixing weights from uniform weights on the same
clients. Runs finished after this statistic was added carry it in ``summary.json``
(``fedcmd.similarity``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from fedpart.algorithms.fedcmd import FedCMDOptions, similarity_statistics
from fedpart.errors import FedpartError
from fedpart.tracking.run_dir import RunDir


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    for path in map(Path, paths):
        run = RunDir(path)
        if not run.has_checkpoint():
            print(f"{path}: no checkpoint", file=sys.stderr)
            return 2
        algorithm = dict(yaml.safe_load((path / "config.yaml").read_text())["algorithm"])
        if algorithm.pop("name") != "fedcmd":
            print(f"{path}: not a FedCMD run", file=sys.stderr)
            return 2
        norm = FedCMDOptions(**algorithm).switch("phi_norm")
        try:
            tensors, _ = run.load_checkpoint()  # digest-checked, checkpoint.prev as fallback
        except FedpartError as exc:
            print(exc, file=sys.stderr)
            return 2
        phi = tensors["extra/phi"].double()
        stats = similarity_statistics(phi, norm)
        print(json.dumps({"run": path.name, "phi_norm": norm, **stats}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
