"""Every method on a device next to its CPU run, the batched backend (eager and captured) against
the sequential one, bit-identical resume and kill-and-resume: the GPU checks, selected by ``--device``.

    python -m pytest --device cuda tests/test_device_checks.py     # on a GPU
    python -m pytest --device cpu tests/test_device_checks.py -k "fedavg or fedper"   # self-check

Without ``--device`` every test here is skipped (the CPU suite does not run them); with
``--device cuda`` on a machine without a GPU they are skipped as "no cuda device". The methods
are those ``fedpart compare`` runs on the quick start (``configs/quickstart.yaml``), the
capacity-aware ones with ``federation.capacity=uniform``; ``--device-rounds``,
``--device-methods``, ``--device-tolerance``, ``--device-kill-rounds`` and
``--device-kill-method`` size them (``tests/conftest.py``). The checks themselves are in
``tests/device_checks.py``; ``benchmarks/gpu_smoke.py`` runs this file and writes its report.
"""

from __future__ import annotations

import pytest

from device_checks import (
    MethodRuns,
    Outcome,
    check_accuracy,
    check_batched,
    check_kill,
    check_resume,
    options,
)
from fedpart.algorithms import ALGORITHMS

pytestmark = pytest.mark.device


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    opts = options(metafunc.config)
    if "method" in metafunc.fixturenames:
        # a module-scoped fixture: every check of one method runs before the next method's
        metafunc.parametrize("method", opts.methods, indirect=True, scope="module")
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", ["sequential", "batched"])
    if "kill_method" in metafunc.fixturenames:
        metafunc.parametrize("kill_method", [opts.kill_method])


@pytest.fixture(scope="module")
def opts(pytestconfig):
    return options(pytestconfig)


@pytest.fixture(scope="module")
def method(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def runs(opts, method):
    """The method's sequential runs on the device and on the CPU, shared by its checks."""
    made = MethodRuns(opts, method)
    yield made
    made.clear()


@pytest.fixture
def record(request):
    """Records an outcome on the test (``--device-outcomes``), then passes, skips (not
    applicable) or fails with its detail."""

    def done(outcome: Outcome) -> None:
        request.node.user_properties.append(("device_outcome", vars(outcome)))
        if outcome.ok is None:
            pytest.skip(f"{outcome.line()}: {outcome.cells[1]}")
        assert outcome.ok, outcome.line()

    return done


def test_accuracy(runs, record):
    record(check_accuracy(runs))


def test_batched(runs, record):
    record(check_batched(runs))


def test_captured(runs, record):
    """The batched backend with its training captured (``engine.cuda_graphs``), against the
    same sequential run and within the same tolerances."""
    record(check_batched(runs, "captured"))


def test_resume(opts, method, backend, record, tmp_path):
    if backend not in ALGORITHMS[method].backends:
        pytest.skip(f"{method} has no {backend} backend")
    outcome = check_resume(opts, method, backend, tmp_path)
    if outcome is None:
        pytest.skip(f"{method}: the model cannot be batched")
    record(outcome)


def test_kill_and_resume(opts, kill_method, record, tmp_path):
    assert kill_method == opts.kill_method
    record(check_kill(opts, tmp_path))
