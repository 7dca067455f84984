"""The numbers recorded in ``docs/results/`` come out again on the CPU.

Each test reruns the first rounds of one recorded run of a results page, with the config and
overrides its reproduction script ran it with, through the engine's own round loop and with the
run's full round count (so every schedule and the evaluation plan are the recorded run's; the run
is stopped after the rounds compared), and compares every number recorded for those rounds —
wall-clock times excepted — with the rerun's (``recorded_runs.py`` holds the reruns).

Pages covered (the cheapest recorded run of each: smallest model, least work per round):

- ``fedcmd.md``: ``benchmarks/fedcmd/results/fedavg-mnist.json``, rounds 0-2 (FedAvg, LeNet5,
  10 of 100 clients per round).
- ``pa3dfl.md``: ``benchmarks/pa3dfl/results/fedavg-hetero-seed0.json``, rounds 0-2 (the CNN cut
  to p_min = 1/16; these rounds hold the training loss and the bytes, no accuracy).
- ``performance.md``: the one-thread report's ``scale1000`` round (one FedPer round over 1,000
  MNIST clients, then every client evaluated): the partition's sizes, the backend, the
  participants, the personal state and the accuracy.
- ``uapdfl.md``: ``benchmarks/decentralized/results/uapdfl-beta0.5-dfedper-seed0.json``, rounds
  0-2.
- ``dfedpgp.md``: ``benchmarks/decentralized/results/dfedpgp-dir0.3-fedavg-seed0.json``, rounds
  0-2.
- ``fedseqlayer.md``: ``benchmarks/fedseqlayer/results/T100-fedrep-seed0.json``, rounds 0-2.
- ``sanity.md``: the global test accuracy after round 1 of its MNIST command.

``gpu.md`` holds measurements on a GPU, none on the CPU.

**Tolerances, measured.** Other CPUs compute the same arithmetic with other kernels (oneDNN's
convolutions, MKL's matrix products, ATen's vector loops each dispatch on the CPU's instruction
sets) and round differently. ``benchmarks/recorded_spread.py`` reruns every test's run on one
machine under each instruction-set setting that makes it round as another CPU would, and
records how far each number moves from the record, round by round (``recorded_spread.json``,
its table in ``docs/reliability.md``); what was measured on another machine is ``REPORTED``.
Each tolerance below follows one rule from that spread (``tolerance``):

- a loss, relative to the record: 4 × the largest deviation measured or reported, rounded up to
  two significant digits;
- a count of test samples: the largest count measured or reported, plus one sample;
- ``performance.md``'s accuracy, printed to 0.01 points: one unit of that digit.

``test_tolerances_follow_the_measured_spread`` holds the table to the rule, and each test's
``..._catches_a_changed_computation`` reruns it with the learning rate changed
(``recorded_runs.PERTURBATIONS``: 0.1 % where a loss is recorded, 1 % where only counts of test
samples are, 10 % for ``performance.md``'s two-decimal accuracy) and must fail.

The real MNIST and Fashion-MNIST files (``../shared/data``) are needed: a test is skipped when
its dataset is not there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from recorded_runs import PERTURBATIONS, RERUNS, have

SPREAD = json.loads((Path(__file__).parent / "recorded_spread.json").read_text())

#: the unit each compared number's deviation is in (``recorded_runs``): ``relative`` for losses,
#: ``samples`` for counts of test samples, ``points`` for a number printed to 0.01 points
UNITS = {
    "train_loss": "relative",
    "loss": "relative",
    "accuracy": "samples",
    "accuracy_weighted": "samples",
    "participants_accuracy_before": "samples",
    "participants_accuracy_after": "samples",
    "global_accuracy": "samples",
}

#: deviations measured on another machine than the one ``recorded_spread.json`` was made on
#: (``docs/reliability.md``): an Intel Xeon with AVX-512 (oneDNN and MKL at their defaults)
#: against the records, made on AMD EPYC machines with AVX2 — per run, number and round
REPORTED = {
    "pa3dfl": {"train_loss": (4e-8, 4e-8, 4e-8)},
    "uapdfl": {"train_loss": (4e-8, 4e-8, 4e-8)},
    "dfedpgp": {"train_loss": (4e-8, 4e-8, 4e-8)},
    # rounds 1-2 (round 0 bit for bit): 3 of the 17,485 test samples, 0.49 of the smallest
    # client's test split in the client mean
    "fedseqlayer": {
        "train_loss": (0, 1.8e-5, 1.8e-5),
        "loss": (0, 1.8e-5, 1.8e-5),
        "accuracy_weighted": (0, 3, 3),
        "accuracy": (0, 0.49, 0.49),
    },
}

#: per run and number, one tolerance per round compared (in its unit; the measured spread that
#: chose it in the comment: the largest deviation over the settings of recorded_spread.json,
#: and REPORTED where larger)
TOLERANCES: dict[str, dict[str, tuple[float, ...]]] = {
    "fedcmd": {
        "participants_accuracy_before": (1, 1, 2),  # measured 0, 0, 1 samples
        "participants_accuracy_after": (1, 2, 2),  # measured 0, 1, 1 samples
    },
    "pa3dfl": {"train_loss": (1.6e-7, 1.6e-7, 1.6e-7)},  # 3.9e-9, 6.8e-9, 4.6e-9; Intel 4e-8
    "scale1000": {"accuracy": (0.01,)},  # printed to 0.01 points
    "uapdfl": {
        "accuracy": (1, 1, 1),  # measured 0, 0, 0 samples of the smallest client
        "train_loss": (1.6e-7, 1.6e-7, 1.6e-7),  # 1.6e-8, 6.0e-9, 1.4e-8; Intel 4e-8
    },
    "dfedpgp": {
        "accuracy": (1, 1, 1),  # measured 0, 0, 0
        "train_loss": (1.6e-7, 1.6e-7, 5.8e-5),  # 5.8e-9, 1.8e-8, 1.45e-5 (oneDNN/MKL AVX-512)
    },
    "fedseqlayer": {
        "train_loss": (4.4e-7, 7.2e-5, 7.5e-5),  # 1.1e-7, 6.6e-6, 1.85e-5; Intel -, 1.8e-5, 1.8e-5
        "accuracy": (1, 1.49, 1.49),  # 0, 0.375, 0.371 of the smallest client's; Intel 0.49
        "accuracy_weighted": (1, 4, 4),  # 0, 2, 2 samples; Intel 3
        "loss": (1.3e-6, 7.2e-5, 8.5e-5),  # 3.2e-7, 1.75e-5, 2.1e-5; Intel 1.8e-5
    },
    "sanity": {"global_accuracy": (2,)},  # measured 1 test image (oneDNN and MKL at AVX2)
}

MARGIN = 4


def _round_up(x: float, digits: int = 2) -> float:
    if x <= 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return math.ceil(x / scale - 1e-9) * scale


def tolerance(run: str, key: str, rnd: int) -> float:
    """The rule: what ``TOLERANCES`` must hold for ``run``'s ``key`` in round ``rnd``."""
    measured = [s["runs"][run][key][rnd] for s in SPREAD["settings"].values()]
    reported = REPORTED.get(run, {}).get(key)
    spread = max([*measured, reported[rnd] if reported else 0])
    if run == "scale1000":
        return 0.01
    if UNITS[key] == "samples":
        return round(spread + 1, 2)  # whole samples, or 0.01 of the smallest client's
    return _round_up(MARGIN * spread)


def test_tolerances_follow_the_measured_spread():
    settings = SPREAD["settings"]
    assert "all avx2" in settings and "default" in settings, "measure every setting"
    for run, keys in TOLERANCES.items():
        measured = settings["default"]["runs"][run]
        assert set(keys) == set(measured), run
        for key, tols in keys.items():
            assert len(tols) == len(measured[key]), (run, key)
            for rnd, tol in enumerate(tols):
                assert math.isclose(tol, tolerance(run, key, rnd), rel_tol=1e-9), (run, key, rnd)
            # the changed computation moved it further than the tolerance, in some round
    for run in TOLERANCES:
        moved = SPREAD["perturbed"]["runs"][run]
        assert any(
            d > TOLERANCES[run][key][rnd] for key, ds in moved.items() for rnd, d in enumerate(ds)
        ), f"{run}: the changed computation is inside the tolerance"


def test_reliability_md_shows_the_measured_spread():
    """The table in docs/reliability.md is the record's (``recorded_spread.py --report``)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "recorded_spread.py"
    spec = importlib.util.spec_from_file_location("recorded_spread", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (path.parents[1] / "docs" / "reliability.md").read_text()
    assert module.report(SPREAD) in page


def _check(run: str, perturb: float = 0.0, rounds: int = 3) -> list[str]:
    dataset, rerun = RERUNS[run]
    if not have(dataset):
        pytest.skip(f"the real {dataset} files are not in ../shared/data: the recorded "
                    "numbers were computed on them")  # fmt: skip
    return rerun(perturb, rounds).wrong(TOLERANCES[run])


def first_caught(run: str) -> int:
    """The first round in which the changed computation of recorded_spread.json left the
    tolerance: the changed rerun stops after it."""
    moved = SPREAD["perturbed"]["runs"][run]
    return min(
        rnd
        for key, ds in moved.items()
        for rnd, d in enumerate(ds)
        if d > TOLERANCES[run][key][rnd]
    )


@pytest.mark.parametrize("run", list(RERUNS))
def test_recorded_first_rounds_come_out_again(run):
    wrong = _check(run)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("run", list(RERUNS))
def test_recorded_numbers_catch_a_changed_computation(run):
    """The tolerances are not so wide that a real change passes: the learning rate changed by
    ``PERTURBATIONS[run]`` (relative) moves some number out of them, by the round in which the
    measurement saw it leave (the rerun stops there)."""
    rounds = first_caught(run) + 1
    assert _check(run, PERTURBATIONS[run], rounds), f"lr × (1 + {PERTURBATIONS[run]}) passed"
