"""The recorded runs that ``test_recorded_numbers.py`` reruns, as data: each one's record, its
rerun's rows, and how far a number of the rerun is from the recorded one (its *deviation*).

Shared by the tests and by ``benchmarks/recorded_spread.py``, which measures the deviations
under other CPUs' rounding (oneDNN, MKL and ATen held to other instruction sets) so that each
test's tolerance is set from a measurement (``tests/recorded_spread.json``).

A deviation is in the unit in which rounding can move a number: losses relative to the recorded
value; accuracies in test samples (the count of samples whose prediction differs: for a mean
over clients, samples of the smallest client); ``performance.md``'s accuracy in the percentage
points it is printed with. A key without a deviation must equal its record exactly.

``perturb=r`` reruns a deliberately changed computation — the learning rate times ``1 + r`` —
which each test must tell apart from rounding (``PERTURBATIONS``: the change each test is shown
to catch).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from fedpart.config import Config, load_config
from fedpart.engine.rounds import sample_clients
from fedpart.engine.simulation import Simulation

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "docs" / "results"

#: what every reproduction run's command puts before the job's own overrides, and after them
#: (``benchmarks/runner.py``, ``run_job``)
RUNNER_FIRST = (
    "engine.backend=sequential",
    "engine.conv_layout=contiguous",
    "engine.cache_features=false",
)
RUNNER_LAST = ("engine.threads=1",)

#: the rounds compared
ROUNDS = 3

#: the deliberate change each test must catch, as a relative change of ``federation.lr``: 0.1 %
#: (a change in the learning rate's fourth significant digit) where the recorded numbers hold a
#: loss; 1 % where they hold only counts of test samples (FedCMD's accuracies, the sanity page's
#: global accuracy), which a 0.1 % change moves by less than rounding does; 10 % for the
#: performance page's accuracy, printed to 0.01 points (a 1 % change moved it 0.003 points)
PERTURBATIONS = {
    "fedcmd": 1e-2,
    "pa3dfl": 1e-3,
    "scale1000": 1e-1,
    "uapdfl": 1e-3,
    "dfedpgp": 1e-3,
    "fedseqlayer": 1e-3,
    "sanity": 1e-2,
}

#: ``deviation(round, key, rerun, recorded)``: None where the two must be equal
Deviation = Callable[[int, str, Any, Any], float | None]


@dataclass
class Rerun:
    """A recorded run's first rounds next to its rerun's, and how to measure their distance."""

    name: str
    recorded: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    deviation: Deviation

    def deviations(self) -> dict[str, list[float]]:
        """Per key with a deviation, its value in each round compared."""
        out: dict[str, list[float]] = {}
        for want, got in zip(self.recorded, self.rows, strict=True):
            for key, value in want.items():
                if key == "wall_seconds" or key not in got:
                    continue
                d = self.deviation(want["round"], key, got[key], value)
                if d is not None:
                    out.setdefault(key, []).append(d)
        return out

    def wrong(self, tolerances: dict[str, tuple[float, ...]]) -> list[str]:
        """What differs from the record beyond ``tolerances`` (per key, one value per round);
        a key without a deviation differs when it is not equal."""
        bad = []
        for i, (want, got) in enumerate(zip(self.recorded, self.rows, strict=True)):
            rnd = want["round"]
            for key, value in want.items():
                if key == "wall_seconds":
                    continue
                if key not in got:
                    bad.append(f"round {rnd} {key}: recorded {value!r}, not in the rerun")
                    continue
                d = self.deviation(rnd, key, got[key], value)
                if d is None:
                    ok = got[key] == value
                else:
                    assert key in tolerances, f"{self.name}: no tolerance for {key}"
                    ok = d <= tolerances[key][i]
                if not ok:
                    extra = "" if d is None else f" (deviation {d:.3g} > {tolerances[key][i]:g})"
                    bad.append(f"round {rnd} {key}: recorded {value!r}, rerun {got[key]!r}{extra}")
        return bad


def relative(got: float, want: float) -> float:
    return abs(got - want) / abs(want) if want else abs(got)


def samples(got: float | None, want: float | None, n: float) -> float | None:
    """|got - want| in samples of a proportion over ``n`` (None = both absent: equal)."""
    if got is None or want is None:
        return None
    return abs(got - want) * n


def script(path: str) -> ModuleType:
    """A reproduction script as a module (its ``main`` is not run)."""
    file = ROOT / path
    spec = importlib.util.spec_from_file_location(file.parent.name + "_reproduce_script", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recorded_run(module: ModuleType, name: str) -> tuple[dict[str, Any], tuple]:
    """The record of run ``name`` and the script's entry for it (its config first; the first
    entry of that name, as ``benchmarks/runner.py``'s ``selected_runs`` takes it)."""
    entries: dict[str, list[Any]] = {}
    for runs in module.experiments().values():
        for run, *rest in runs:
            entries.setdefault(run, rest)
    assert name in entries, f"{name} is no longer a run of {module.__file__}"
    record = module.load(name)
    assert record is not None and "rounds" in record, f"no per-round record of {name}"
    return record, tuple(entries[name])


class _EnoughRoundsError(Exception):
    """Raised in place of the first round not compared: the run stops there."""


def first_rounds(cfg: Config, rounds: int) -> tuple[Simulation, list[dict[str, Any]]]:
    """The metric rows of the first ``rounds`` rounds of ``cfg``'s run, by ``Simulation.run``."""
    sim = Simulation(cfg)
    run_round = sim.run_round

    def until(rnd: int) -> dict[str, Any]:
        if rnd >= rounds:
            raise _EnoughRoundsError
        return run_round(rnd)

    sim.run_round = until  # type: ignore[method-assign]
    try:
        sim.run()
    except _EnoughRoundsError:
        pass
    else:  # pragma: no cover - the run has more rounds than compared
        raise AssertionError("the run ended before the rounds compared")
    assert [row["round"] for row in sim.rows] == list(range(rounds))
    return sim, sim.rows


def _changed(cfg: Config, perturb: float) -> Config:
    cfg.federation.lr *= 1 + perturb
    return cfg


def fedcmd_fedavg_mnist(perturb: float = 0.0, rounds: int = ROUNDS) -> Rerun:
    """FedAvg on the FedCMD protocol (``fedcmd.md``): the participants' accuracies before and
    after local training and the bytes sent, rounds 0-2."""
    name = "fedavg-mnist"
    repro = script("benchmarks/fedcmd/reproduce.py")
    record, (config, dataset, overrides) = recorded_run(repro, name)
    cfg = load_config(
        ROOT / "configs" / "fedcmd" / f"{config}.yaml",
        [
            *RUNNER_FIRST,
            f"dataset.name={dataset}",
            f"dataset.root={DATA}",
            *overrides,
            *RUNNER_LAST,
        ],
    )
    sim, rows = first_rounds(_changed(cfg, perturb), rounds)

    def deviation(rnd: int, key: str, got: Any, want: Any) -> float | None:
        if not key.startswith("participants_accuracy"):
            return None
        # Σ correct / Σ samples over the round's participants
        clients = sample_clients(cfg.seed, rnd, sim.data.num_clients, cfg.federation.join_ratio)
        return samples(got, want, sum(int(sim.data.clients[c].test.numel()) for c in clients))

    return Rerun(name, record["rounds"][:rounds], rows, deviation)


def pa3dfl_fedavg_hetero(perturb: float = 0.0, rounds: int = ROUNDS) -> Rerun:
    """FedAvg in Pa3dFL's Hetero. setting at CPU scale (``pa3dfl.md``): the training loss and the
    bytes sent in rounds 0-2, and no evaluation in them (accuracy recorded as null)."""
    name = "fedavg-hetero-seed0"
    repro = script("benchmarks/pa3dfl/reproduce.py")
    record, (config, overrides) = recorded_run(repro, name)
    cfg = load_config(
        ROOT / "configs" / "pa3dfl" / f"{config}.yaml",
        [
            *RUNNER_FIRST,
            # the script's own (``main``): the CPU scale, then the engine settings it ran with
            f"dataset.root={DATA}",
            *repro.SCALES["cpu"],
            "engine.conv_layout=auto",
            "engine.cache_features=true",
            *overrides,
            *RUNNER_LAST,
        ],
    )
    _, rows = first_rounds(_changed(cfg, perturb), rounds)

    def deviation(rnd: int, key: str, got: Any, want: Any) -> float | None:
        return relative(got, want) if key == "train_loss" else None

    return Rerun(name, record["rounds"][:rounds], rows, deviation)


def scale_section() -> dict[str, Any]:
    """The numbers of the one-thread report's ``scale1000`` section of ``performance.md``."""
    text = (RESULTS / "performance.md").read_text()
    section = re.search(r"^#### scale1000\n(.*?)^#", text, re.S | re.M)
    assert section is not None, "performance.md has no '#### scale1000' section"
    body = section.group(1)
    sizes = re.search(
        r"mnist \(([\d,]+) train / ([\d,]+) test samples over (\d+) clients.*?"
        r"clients with no training sample: (\d+), with fewer than one batch: (\d+)",
        body,
    )
    # | backend | clients | trained / round | 8 times and memory | personal state MB | ...
    row = re.search(r"^\| (\w+) \| ([\d,]+) \| (\d+) \|(?: [^|]* \|){8} ([\d.]+) \|", body, re.M)
    accuracy = re.search(r"Accuracy after the round: ([\d.]+) %", body)
    assert sizes and row and accuracy, "performance.md's scale1000 section changed its layout"
    train, test, clients, empty, short = (int(g.replace(",", "")) for g in sizes.groups())
    assert int(row.group(2).replace(",", "")) == clients
    return {
        "round": 0,
        "train": train,
        "test": test,
        "clients": clients,
        "empty": empty,
        "short": short,
        "backend": row.group(1),
        "participants": int(row.group(3)),
        "personal_mb": row.group(4),
        "accuracy": float(accuracy.group(1)),
    }


def performance_scale1000(perturb: float = 0.0, rounds: int = ROUNDS) -> Rerun:
    """``fedpart bench``'s ``scale1000`` workload at one thread (``performance.md``), as
    ``bench.running.run_scale`` runs it: one round of the default backend, then the evaluation
    of every client. The accuracy is the mean over clients in %, printed to 0.01 points."""
    from fedpart.bench.memory import MB
    from fedpart.bench.workloads import WORKLOADS, BenchOptions, workload_config

    want = scale_section()
    opts = BenchOptions(workloads=["scale1000"], data_root=str(DATA), threads=1)
    cfg = _changed(workload_config(WORKLOADS["scale1000"], opts, "auto"), perturb)
    sim = Simulation(cfg)
    sizes = [c.num_train for c in sim.data.clients]
    row = sim.run_round(0)
    accuracy = sim.evaluate()["accuracy"]
    got = {
        "round": 0,
        "train": sum(sizes),
        "test": sum(int(c.test.numel()) for c in sim.data.clients),
        "clients": sim.data.num_clients,
        "empty": sum(n == 0 for n in sizes),
        "short": sum(n < cfg.federation.batch_size for n in sizes),
        "backend": sim.backend,
        "participants": row["participants"],
        "personal_mb": f"{sim.store.personal_bytes() / MB:.1f}",
        "accuracy": 100 * accuracy,
    }

    def deviation(rnd: int, key: str, got: Any, want: Any) -> float | None:
        return abs(got - want) if key == "accuracy" else None

    return Rerun("scale1000", [want], [got], deviation)


def decentralized(name: str, perturb: float = 0.0, rounds: int = ROUNDS) -> Rerun:
    """Rounds 0-2 of run ``name`` of ``benchmarks/decentralized/reproduce.py``: the training loss
    relative, the accuracy (the mean over clients of each client's test accuracy) in test
    samples of the smallest client, the rest exact."""
    repro = script("benchmarks/decentralized/reproduce.py")
    record, (config, overrides) = recorded_run(repro, name)
    cfg = load_config(
        config,
        [*RUNNER_FIRST, f"dataset.root={DATA}", *repro.FAST, *overrides, *RUNNER_LAST],
    )
    sim, rows = first_rounds(_changed(cfg, perturb), rounds)
    unit = sim.data.num_clients * min(int(c.test.numel()) for c in sim.data.clients)

    def deviation(rnd: int, key: str, got: Any, want: Any) -> float | None:
        if key == "train_loss":
            return relative(got, want)
        if key == "accuracy":
            return samples(got, want, unit)
        return None

    return Rerun(name, record["rounds"][:rounds], rows, deviation)


def uapdfl_dfedper(perturb: float = 0.0, rounds: int = ROUNDS) -> Rerun:
    """Peer-to-peer FedPer in the UA-PDFL study (``uapdfl.md``; 30 clients on 2,250 images,
    β = 0.5, seed 0): rounds 0-2."""
    return decentralized("uapdfl-beta0.5-dfedper-seed0", perturb, rounds)


def dfedpgp_fedavg(perturb: float = 0.0, rounds: int = ROUNDS) -> Rerun:
    """FedAvg in the DFedPGP study (``dfedpgp.md``; 100 clients on 10,000 images, Dir(0.3),
    10 a round, 5 local epochs, seed 0): rounds 0-2."""
    return decentralized("dfedpgp-dir0.3-fedavg-seed0", perturb, rounds)


def fedseqlayer_fedrep(perturb: float = 0.0, rounds: int = ROUNDS) -> Rerun:
    """FedRep on the sequential-layer-expansion paper's MNIST protocol (``fedseqlayer.md``; 100
    clients, 10 a round, every client evaluated each round, T = 100, seed 0): rounds 0-2."""
    name = "T100-fedrep-seed0"
    repro = script("benchmarks/fedseqlayer/reproduce.py")
    record, (config, overrides) = recorded_run(repro, name)
    cfg = load_config(
        ROOT / "configs" / "centralized" / f"{config}.yaml",
        [*RUNNER_FIRST, *overrides, f"dataset.root={DATA}", *RUNNER_LAST],
    )
    sim, rows = first_rounds(_changed(cfg, perturb), rounds)
    tests = [int(c.test.numel()) for c in sim.data.clients]

    def deviation(rnd: int, key: str, got: Any, want: Any) -> float | None:
        if key in ("train_loss", "loss"):
            return relative(got, want)
        if key == "accuracy":
            return samples(got, want, len(tests) * min(tests))
        if key == "accuracy_weighted":
            return samples(got, want, sum(tests))
        return None

    return Rerun(name, record["rounds"][:rounds], rows, deviation)


def sanity_mnist(perturb: float = 0.0, rounds: int = ROUNDS) -> Rerun:
    """FedAvg on MNIST, IID, 10 clients (``sanity.md``, its first command): the global test
    accuracy after round 1, as the page prints it (four decimals of 10,000 test images)."""
    text = (RESULTS / "sanity.md").read_text()
    command = re.search(
        r"^fedpart run configs/sanity_mnist\.yaml (dataset\.name=mnist .*)$", text, re.M
    )
    table = re.search(r"^\| 1 \| (0\.\d{4}) \| (0\.\d{4}) \|$", text, re.M)
    assert command and table, "sanity.md changed its layout"
    cfg = load_config(
        ROOT / "configs" / "sanity_mnist.yaml",
        [*command.group(1).split(), f"dataset.root={DATA}", "engine.cache_features=false"],
    )
    sim, rows = first_rounds(_changed(cfg, perturb), 1)
    assert sim.data.global_test is not None
    n = int(sim.data.global_test.numel())
    assert n == 10_000  # so the page's four decimals are a count of test images
    want = {"round": 0, "global_accuracy": float(table.group(1))}
    got = {"round": 0, "global_accuracy": rows[0]["global_accuracy"]}

    def deviation(rnd: int, key: str, got: Any, want: Any) -> float | None:
        return samples(got, want, n) if key == "global_accuracy" else None

    return Rerun("sanity", [want], [got], deviation)


#: every rerun by the name the spread measurement and the tolerances use, with its dataset
RERUNS: dict[str, tuple[str, Callable[..., Rerun]]] = {
    "fedcmd": ("MNIST", fedcmd_fedavg_mnist),
    "pa3dfl": ("FashionMNIST", pa3dfl_fedavg_hetero),
    "scale1000": ("MNIST", performance_scale1000),
    "uapdfl": ("FashionMNIST", uapdfl_dfedper),
    "dfedpgp": ("FashionMNIST", dfedpgp_fedavg),
    "fedseqlayer": ("MNIST", fedseqlayer_fedrep),
    "sanity": ("MNIST", sanity_mnist),
}


def have(dataset: str) -> bool:
    return (DATA / dataset / "raw").is_dir()
