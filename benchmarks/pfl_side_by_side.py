"""fedpart and pfl-research side by side on pfl-research's CIFAR-10 benchmark protocol.

The workload is pfl-research's ``benchmarks/image_classification`` baseline (``cifar10_iid``,
``simple_cnn``, FedAvg): 1,000 users x 50 training images (3x32x32), a cohort of 50 users per
central iteration, 1 local epoch, local batch 10, local SGD learning rate 0.1, central learning
rate 1 (plain FedAvg, users weighted equally: all hold 50 images), and a central evaluation of
the global model on 10,000 test images every 10 iterations. Both tools train the same network,
pfl-research's ``simple_cnn``: Conv(3->32, 3x3) ReLU, Conv(32->64, 3x3) ReLU, MaxPool 2x2,
Dropout 0.25, Linear(12544->128) ReLU, Dropout 0.5, Linear(128->10), Glorot-uniform weights.

Without CIFAR-10 (``--data-root`` holding ``cifar-10-batches-bin``), the images are generated
(uniform uint8 pixels and labels, a fixed seed): the time of a round does not depend on pixel
values. Each tool gets the data as it takes it: fedpart uint8 NCHW images normalised per batch
(as its ``cifar10`` dataset), pfl-research float32 NHWC images normalised up front (as its
benchmark's CIFAR-10 loader; ``simple_cnn`` starts with a transpose to NCHW).

Each run is its own subprocess (thread settings never leak from one to the next), the two
tools alternating (which goes first alternates per repetition), in two settings:

- ``one thread``: one torch thread each (``torch.set_num_threads(1)`` for pfl-research,
  ``engine.threads=1`` for fedpart, ``OMP_NUM_THREADS=1`` for both);
- ``defaults``: each tool as it comes: pfl-research's single simulation process with torch's
  default threads, fedpart's ``engine.backend=auto`` as its command line runs it
  (``FEDPART_AUTO_WORKERS=1``: worker processes where a round is large enough).

A run times every central iteration (pfl-research: between consecutive
``after_central_iteration`` callbacks, the central evaluation included; fedpart: the round's
``wall_seconds``, its evaluation included), drops the first ``--warmup`` and reports the median
of the rest: the training round (9 of 10 iterations evaluate nothing). The table gives the
median over repetitions of those medians, the ratio pfl-research / fedpart (above 1: fedpart
faster) and each run's peak resident memory (the driver process; fedpart's worker processes
apart).

    python benchmarks/pfl_side_by_side.py --iterations 30 --repeats 2
    python benchmarks/pfl_side_by_side.py --quick          # seconds: the test's check

Needs ``pip install pfl`` (pfl-research, its PyTorch backend) next to fedpart.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import fedpart
from fedpart.models.base import LayoutConv2d

MODEL = "pfl_simple_cnn"
#: CIFAR-10's per-channel mean and standard deviation (fedpart's ``cifar10`` dataset)
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
SETTINGS = ("one thread", "defaults")
TOOLS = ("pfl", "fedpart")


# ------------------------------------------------------------------------------ the network
class SimpleCNN(fedpart.BlockModel):
    """pfl-research's benchmark ``simple_cnn`` as a fedpart block model: blocks ``conv1``,
    ``conv2`` (with the max-pool and the first dropout), ``fc1`` (with the second dropout) and
    the head ``fc2``; the same layers and parameter shapes as :func:`pfl_simple_cnn`."""

    def __init__(self, num_classes: int, input_shape: tuple[int, ...]) -> None:
        super().__init__()
        channels, height, _ = input_shape
        flat = 64 * ((height - 4) // 2) ** 2
        self.conv1 = nn.Sequential(LayoutConv2d(channels, 32, 3), nn.ReLU())
        self.conv2 = nn.Sequential(
            LayoutConv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25)
        )
        self.fc1 = nn.Sequential(nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(), nn.Dropout(0.5))
        self.fc2 = nn.Linear(128, num_classes)
        glorot(self)


def glorot(model: nn.Module) -> None:
    """Glorot-uniform weights for every convolution and linear layer (as ``simple_cnn``)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            nn.init.xavier_uniform_(m.weight)


@fedpart.register_model(MODEL)
def _build_simple_cnn(*, num_classes: int, input_shape: tuple[int, ...]) -> SimpleCNN:
    return SimpleCNN(num_classes, tuple(input_shape))


class ToNCHW(nn.Module):
    """NHWC images to NCHW (pfl-research's ``Transpose2D``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 3, 1, 2)


def pfl_simple_cnn(num_classes: int, height: int, channels: int) -> nn.Module:
    """pfl-research's ``simple_cnn`` with the ``loss`` and ``metrics`` its ``PyTorchModel``
    calls (cross-entropy; summed loss and accuracy), as its benchmarks attach them."""
    from pfl.metrics import Weighted

    flat = 64 * ((height - 4) // 2) ** 2
    model = nn.Sequential(
        ToNCHW(),
        nn.Conv2d(channels, 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(flat, 128),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(128, num_classes),
    )
    glorot(model)

    def loss(inputs: torch.Tensor, targets: torch.Tensor, eval: bool = False) -> torch.Tensor:
        model.eval() if eval else model.train()
        return nn.functional.cross_entropy(model(inputs), targets.long())

    @torch.no_grad()
    def metrics(inputs: torch.Tensor, targets: torch.Tensor, eval: bool = True) -> dict:
        model.eval() if eval else model.train()
        logits = model(inputs)
        n = len(inputs)
        correct = (logits.argmax(-1) == targets.long()).float().sum().item()
        summed = nn.functional.cross_entropy(logits, targets.long(), reduction="sum").item()
        return {"loss": Weighted(summed, n), "accuracy": Weighted(correct, n)}

    model.loss = loss
    model.metrics = metrics
    return model


# ------------------------------------------------------------------------------ the data
def workload_data(
    users: int, per_user: int, test: int, seed: int, data_root: str | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, x_test, y_test)``: uint8 NCHW images and int64 labels, ``users * per_user``
    training and ``test`` test images; CIFAR-10's own when ``data_root`` holds it, else
    generated."""
    n = users * per_user
    if data_root and (Path(data_root) / "cifar-10-batches-bin").is_dir():
        from fedpart.data.readers.cifar import load_cifar10

        bundle = load_cifar10(Path(data_root), download=False)
        x, y = np.asarray(bundle.train_x), np.asarray(bundle.train_y)
        xt, yt = np.asarray(bundle.test_x), np.asarray(bundle.test_y)
        if n > len(x):
            raise SystemExit(f"--users {users} needs {n} images; CIFAR-10 has {len(x)}")
        return x[:n], y[:n].astype(np.int64), xt[:test], yt[:test].astype(np.int64)
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
    xt = rng.integers(0, 256, size=(test, 3, 32, 32), dtype=np.uint8)
    return x, rng.integers(0, 10, n), xt, rng.integers(0, 10, test)


def pfl_images(x: np.ndarray) -> torch.Tensor:
    """float32 NHWC images normalised per channel (pfl-research's CIFAR-10 preprocessing)."""
    images = torch.from_numpy(x).permute(0, 2, 3, 1).float().contiguous()
    return images.sub_(torch.tensor(MEAN) * 255).div_(torch.tensor(STD) * 255)


# ------------------------------------------------------------------------------ the runs
def peak_rss() -> dict[str, float]:
    """Peak resident memory in MiB: this process and its largest finished child."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"rss_mib": round(own, 1), "children_rss_mib": round(kids, 1)}


def fedpart_bundle(data: tuple) -> fedpart.DatasetBundle:
    """The workload's images as fedpart takes them (uint8 NCHW, normalised per batch)."""
    x, y, xt, yt = data
    return fedpart.DatasetBundle(
        name="cifar_shaped",
        train_x=torch.from_numpy(x),
        train_y=torch.from_numpy(y),
        test_x=torch.from_numpy(xt),
        test_y=torch.from_numpy(yt),
        num_classes=10,
        input_shape=(3, 32, 32),
        mean=MEAN,
        std=STD,
        augment="none",
    )


def run_fedpart(args: argparse.Namespace, data: tuple) -> list[float]:
    """Per-round seconds of a fedpart FedAvg run of the workload."""
    bundle = fedpart_bundle(data)
    config = {
        "seed": args.seed,
        # every user's 50 images train; the test images are evaluated by the server model
        # (``global_accuracy``, pfl-research's central evaluation) and, shared out among the
        # users, by each user's model (fedpart's personalised accuracy, the same model here)
        "dataset": {"merge_test": False},
        "partition": {
            "kind": "iid",
            "num_clients": args.users,
            "split": [1.0, 0.0, 0.0],
            "test_source": "official",
            "min_size": 1,
        },
        "model": {"name": MODEL},
        "algorithm": {"name": "fedavg"},
        "federation": {
            "rounds": args.warmup + args.iterations,
            "join_ratio": args.cohort / args.users,
            "local_epochs": 1,
            "batch_size": 10,
            "lr": 0.1,
        },
        "evaluation": {"every": 10},
    }
    overrides = [f"engine.device={args.device}", *args.fedpart_set]
    if args.setting == "one thread":
        overrides.append("engine.threads=1")
    result = fedpart.run(config, overrides, write=False, data=bundle)
    walls = [0.0] + [float(row["wall_seconds"]) for row in result.metrics if "stage" not in row]
    return [b - a for a, b in pairwise(walls)]


def run_pfl(args: argparse.Namespace, data: tuple) -> list[float]:
    """Per-iteration seconds of a pfl-research FedAvg run of the workload, set up as its
    benchmark's ``image_classification/pytorch/train.py`` sets it up."""
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByUser
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.callback.central_evaluation import CentralEvaluationCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.model.pytorch import PyTorchModel

    x, y, xt, yt = data
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    images, labels = pfl_images(x), torch.from_numpy(y)
    per = args.per_user
    users = {
        u: (images[u * per : (u + 1) * per], labels[u * per : (u + 1) * per])
        for u in range(args.users)
    }
    sampler = get_user_sampler("random", range(args.users))
    training = FederatedDataset.from_slices(users, sampler)
    central = Dataset(raw_data=[pfl_images(xt), torch.from_numpy(yt)])

    network = pfl_simple_cnn(10, 32, 3)
    params = [p for p in network.parameters() if p.requires_grad]
    model = PyTorchModel(
        model=network,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(params, 1.0),
    )
    backend = SimulatedBackend(
        training_data=training, val_data=None, postprocessors=[WeightByUser()]
    )
    stamps: list[float] = []

    class Stopwatch(TrainingProcessCallback):
        def on_train_begin(self, *, model: Any) -> Any:
            stamps.append(time.perf_counter())
            return super().on_train_begin(model=model)

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            stamps.append(time.perf_counter())
            return False, type(aggregate_metrics)()

    iterations = args.warmup + args.iterations
    eval_params = NNEvalHyperParams(local_batch_size=10000)
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=iterations,
            evaluation_frequency=10,
            train_cohort_size=args.cohort,
            val_cohort_size=0,
        ),
        backend=backend,
        model=model,
        model_train_params=NNTrainHyperParams(
            local_learning_rate=0.1, local_num_epochs=1, local_batch_size=10
        ),
        model_eval_params=eval_params,
        callbacks=[
            CentralEvaluationCallback(central, model_eval_params=eval_params, frequency=10),
            Stopwatch(),
        ],
    )
    return [b - a for a, b in pairwise(stamps)]


def child(args: argparse.Namespace) -> None:
    """One run of one tool in this process: a JSON line on stdout."""
    if args.setting == "one thread":
        torch.set_num_threads(1)
    data = workload_data(args.users, args.per_user, args.test, args.seed, args.data_root)
    runner = run_pfl if args.child == "pfl" else run_fedpart
    times = runner(args, data)
    kept = times[args.warmup :]
    out = {
        "tool": args.child,
        "setting": args.setting,
        "iterations": len(kept),
        "median_s": statistics.median(kept),
        "mean_s": statistics.fmean(kept),
        "threads": torch.get_num_threads(),
        **peak_rss(),
    }
    print("RESULT " + json.dumps(out), flush=True)


def child_env(setting: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    src = str(Path(fedpart.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    if setting == "one thread":
        env["OMP_NUM_THREADS"] = "1"
        env["FEDPART_AUTO_WORKERS"] = "0"
    else:
        env["FEDPART_AUTO_WORKERS"] = "1"  # engine.backend=auto as the fedpart command runs it
    return env


def one_run(args: argparse.Namespace, tool: str, setting: str) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", tool, "--setting", setting]
    for key in ("iterations", "warmup", "users", "per_user", "cohort", "test", "seed"):
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    cmd += ["--device", args.device]
    if args.fedpart_set:
        cmd += ["--fedpart-set", *args.fedpart_set]
    if args.data_root:
        cmd += ["--data-root", args.data_root]
    proc = subprocess.run(cmd, env=child_env(setting), capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise SystemExit(f"{tool} ({setting}) failed (exit {proc.returncode}):\n" + "\n".join(tail))
    return json.loads(lines[-1][len("RESULT ") :])


def table(results: list[dict[str, Any]], settings: list[str]) -> str:
    rows = [
        "| setting | tool | median s / iteration | runs (median each) | peak RSS MiB "
        "(driver; largest worker) |",
        "| --- | --- | --- | --- | --- |",
    ]
    ratios = []
    for setting in settings:
        medians = {}
        for tool in TOOLS:
            mine = [r for r in results if r["tool"] == tool and r["setting"] == setting]
            if not mine:
                continue
            med = statistics.median(r["median_s"] for r in mine)
            medians[tool] = med
            runs = ", ".join(f"{r['median_s']:.3f}" for r in mine)
            rss = max(r["rss_mib"] for r in mine)
            kids = max(r["children_rss_mib"] for r in mine)
            mem = f"{rss:.0f}" + (f"; {kids:.0f}" if tool == "fedpart" and kids > 0 else "")
            rows.append(f"| {setting} | {tool} | {med:.3f} | {runs} | {mem} |")
        if len(medians) == 2:
            ratios.append(
                f"{setting}: pfl / fedpart = {medians['pfl'] / medians['fedpart']:.2f}x "
                "(above 1: fedpart faster)"
            )
    return "\n".join(rows + [""] + ratios)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=30, help="timed iterations per run")
    p.add_argument("--warmup", type=int, default=2, help="iterations dropped first")
    p.add_argument("--repeats", type=int, default=2, help="runs of each tool per setting")
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--per-user", type=int, default=50, help="training images per user")
    p.add_argument("--cohort", type=int, default=50, help="users per iteration")
    p.add_argument("--test", type=int, default=10000, help="central evaluation images")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--settings", default="one thread,defaults", help="comma-separated")
    p.add_argument("--device", default="cpu", help="cpu or cuda (pfl-research: its default)")
    p.add_argument("--data-root", default=None, help="a folder holding cifar-10-batches-bin")
    p.add_argument("--quick", action="store_true", help="a tiny run (seconds): a smoke test")
    p.add_argument(
        "--fedpart-set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="more fedpart config overrides, e.g. engine.conv_layout=contiguous",
    )
    p.add_argument("--child", choices=TOOLS, help=argparse.SUPPRESS)
    p.add_argument("--setting", default="defaults", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.iterations, args.warmup, args.repeats = 3, 1, 1
        args.users, args.per_user, args.cohort, args.test = 20, 10, 4, 100
    if args.child:
        child(args)
        return
    import pfl  # noqa: F401 - fail here, in one line, when pfl-research is missing

    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    for s in settings:
        if s not in SETTINGS:
            raise SystemExit(f"--settings: unknown {s!r}; valid: {', '.join(SETTINGS)}")
    from importlib.metadata import version

    print(
        f"pfl {version('pfl')}, fedpart {fedpart.__version__}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs, device {args.device}; {args.users} users x {args.per_user} "
        f"images, cohort {args.cohort}, {args.iterations} timed iterations after "
        f"{args.warmup}, {args.repeats} runs each"
        + (f"; fedpart with {' '.join(args.fedpart_set)}" if args.fedpart_set else ""),
        flush=True,
    )
    results = []
    for setting in settings:
        for rep in range(args.repeats):
            order = TOOLS if rep % 2 == 0 else TOOLS[::-1]
            for tool in order:
                r = one_run(args, tool, setting)
                print(
                    f"  {setting}, run {rep + 1}, {tool}: median {r['median_s']:.3f} s "
                    f"(mean {r['mean_s']:.3f} s, {r['threads']} threads, "
                    f"{r['rss_mib']:.0f} MiB)",
                    flush=True,
                )
                results.append(r)
    print()
    print(table(results, settings))


if __name__ == "__main__":
    main()
