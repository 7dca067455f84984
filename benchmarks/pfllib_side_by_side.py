"""fedpart and PFLlib side by side on PFLlib's MNIST protocol, the same clients for both.

The workload is fedpart's ``fedpart bench`` protocol, which is PFLlib's (the fedseqlayer paper
ran on it): MNIST, 100 clients with Dirichlet(0.1) label skew, each client's samples split 75 /
25 into train and test, 10 clients a round, 1 local epoch, batch 10, local learning rate 0.005,
FedAvgCNN, and every client evaluated every round (PFLlib's ``-eg 1``). The clients are fedpart's
partition of ``--data-root``'s MNIST, written out in PFLlib's format (``dataset/MNIST/train/i.npz``
and ``test/i.npz``, each ``{"x": [n, 1, 28, 28] float32, "y": [n] int64}``), so both tools train
exactly the same clients' samples; each samples its own 10 clients a round.

PFLlib is not a package: give ``--pfllib`` a checkout (the folder holding ``system/``). Its
``system/`` is copied into a work folder beside the generated data and run as its README says
(``python main.py -data MNIST -m CNN -algo FedAvg ...``), on the CPU or ``--device cuda``; the
seconds of each round are its own printed ``time cost`` (evaluation included). PFLlib's
``main.py`` imports torchvision at the top and uses it for none of these models: where torchvision
cannot be imported, a stand-in module is put on its path. fedpart runs the same protocol with its
defaults as the ``fedpart`` command runs them (``engine.backend=auto``); its seconds per round are
the rounds' ``wall_seconds`` (evaluation included). Each run is its own process; the tools
alternate; the first ``--warmup`` rounds are dropped and the median of the rest is reported.

    python benchmarks/pfllib_side_by_side.py --pfllib PFLLIB_DIR --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from itertools import pairwise
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = {"FedAvg": "fedavg", "FedPer": "fedper", "FedRep": "fedrep"}
STUB = '''"""A stand-in for torchvision: PFLlib imports it; these models use none of it."""
import types


class _Missing(types.ModuleType):
    def __getattr__(self, name):
        raise ImportError(f"torchvision.{self.__name__}.{name}: not in this stand-in")


models = _Missing("models")
transforms = _Missing("transforms")
datasets = _Missing("datasets")
'''


def protocol(data_root: str, device: str):
    """fedpart's config of the protocol (``fedpart bench``'s FedPer workload)."""
    from fedpart.bench.workloads import WORKLOADS, BenchOptions, workload_config

    opts = BenchOptions(workloads=["fedper"], device=device, data_root=data_root, repeats=1)
    return workload_config(WORKLOADS["fedper"], opts, "auto")


def write_pfllib_data(data_root: str, folder: Path) -> int:
    """fedpart's clients of the protocol as PFLlib's ``dataset/MNIST`` files; their count."""
    from fedpart.data import load_dataset
    from fedpart.engine.data import build_federated_data

    cfg = protocol(data_root, "cpu")
    data = build_federated_data(cfg, load_dataset("mnist", data_root))
    for part in ("train", "test"):
        (folder / "MNIST" / part).mkdir(parents=True, exist_ok=True)
    for i, client in enumerate(data.clients):
        for part, index in (("train", client.train), ("test", client.test)):
            x, y = data.batch(index, train=False)
            arrays = {"x": x.numpy().astype(np.float32), "y": y.numpy().astype(np.int64)}
            with open(folder / "MNIST" / part / f"{i}.npz", "wb") as f:
                np.savez_compressed(f, data=arrays)
    return data.num_clients


def run_pfllib(args: argparse.Namespace, work: Path, algorithm: str, clients: int) -> list[float]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    probe = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True)
    if probe.returncode:
        stub = work / "stub" / "torchvision"
        stub.mkdir(parents=True, exist_ok=True)
        (stub / "__init__.py").write_text(STUB)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(work / "stub"), env.get("PYTHONPATH")])
        )
    cmd = [
        sys.executable, "main.py", "-data", "MNIST", "-m", "CNN", "-algo", algorithm,
        "-gr", str(args.rounds), "-nc", str(clients), "-jr", "0.1", "-lbs", "10",
        "-lr", "0.005", "-ls", "1", "-eg", "1", "-dev", args.device, "-did", "0",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=work / "system", env=env, capture_output=True, text=True)
    times = [float(m) for m in re.findall(r"time cost -+ ([0-9.eE+-]+)", proc.stdout)]
    if proc.returncode or not times:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-10:]
        raise SystemExit(f"PFLlib {algorithm} failed (exit {proc.returncode}):\n" + "\n".join(tail))
    return times


def run_fedpart(args: argparse.Namespace, algorithm: str) -> list[float]:
    overrides = [
        f"algorithm.name={algorithm}",
        f"federation.rounds={args.rounds}",
        "engine.backend=auto",
        "engine.threads=0",
    ]
    code = (
        "import json, sys, fedpart\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "import pfllib_side_by_side as me\n"
        f"cfg = me.protocol({args.data_root!r}, {args.device!r})\n"
        f"r = fedpart.run(cfg, {overrides!r}, write=False)\n"
        "print('WALLS ' + json.dumps([row['wall_seconds'] for row in r.metrics "
        "if 'stage' not in row]))\n"
    )
    env = dict(os.environ, FEDPART_AUTO_WORKERS="1")  # auto as the fedpart command runs it
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("WALLS ")]
    if proc.returncode or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-10:]
        raise SystemExit(
            f"fedpart {algorithm} failed (exit {proc.returncode}):\n" + "\n".join(tail)
        )
    walls = [0.0, *json.loads(lines[0][6:])]
    return [b - a for a, b in pairwise(walls)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pfllib", required=True, help="a PFLlib checkout (the folder holding system/)")
    p.add_argument("--algorithms", default="FedAvg,FedPer,FedRep")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds")
    p.add_argument("--warmup", type=int, default=1, help="rounds dropped first")
    p.add_argument("--device", default="cpu")
    p.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"))
    args = p.parse_args()
    system = Path(args.pfllib) / "system"
    if not (system / "main.py").is_file():
        sys.exit(f"error: --pfllib {args.pfllib}: no system/main.py there")
    bad = [a for a in args.algorithms.split(",") if a not in ALGORITHMS]
    if bad:
        sys.exit(f"error: --algorithms: unknown {bad}; valid: {', '.join(ALGORITHMS)}")
    args.rounds += args.warmup
    with tempfile.TemporaryDirectory(prefix="pfllib-") as tmp:
        work = Path(tmp)
        shutil.copytree(system, work / "system")
        clients = write_pfllib_data(args.data_root, work / "dataset")
        print(
            f"PFLlib {args.pfllib}, fedpart, device {args.device}; {clients} clients, "
            f"{args.rounds - args.warmup} timed rounds after {args.warmup}",
            flush=True,
        )
        rows = []
        for n, algorithm in enumerate(args.algorithms.split(",")):
            order = ("pfllib", "fedpart") if n % 2 == 0 else ("fedpart", "pfllib")
            got = {}
            for tool in order:
                if tool == "pfllib":
                    times = run_pfllib(args, work, algorithm, clients)
                else:
                    times = run_fedpart(args, ALGORITHMS[algorithm])
                got[tool] = statistics.median(times[args.warmup :])
                print(f"  {algorithm}, {tool}: median {got[tool]:.3f} s a round", flush=True)
            rows.append((algorithm, got["pfllib"], got["fedpart"]))
    print("\n| method | PFLlib s / round | fedpart s / round | PFLlib / fedpart |")
    print("| --- | --- | --- | --- |")
    for algorithm, a, b in rows:
        print(f"| {algorithm} | {a:.3f} | {b:.3f} | {a / b:.2f}× |")


if __name__ == "__main__":
    main()
