"""A real two-node Ray cluster on this machine: the Ray backend, connected through
``engine.ray_address``, gives the sequential backend's numbers exactly, its client tasks spread
over both nodes.

The nodes are two ``ray start --block`` processes (a head and a second node joining it), each in
its own process group with one CPU, so a round's clients run on both. Teardown stops exactly
the processes the test started (SIGTERM to each ``ray start``, which drains and stops its node;
then SIGKILL to whatever is left of its process group), not every Ray on the machine.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import fedpart
from resume_check import QUICKSTART, assert_same_run

ray = pytest.importorskip("ray")

RAY = Path(sys.executable).with_name("ray")
#: seconds to wait for the cluster to come up (two nodes alive)
START_TIMEOUT = 90


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_start(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    # The cluster authenticates as this process does. A local ray.init() (tests/test_ray.py)
    # switches the process to token authentication (RAY_AUTH_MODE=token, the token in
    # ~/.ray/auth_token); then the nodes must use it too, or the workers cannot reach the driver
    # that owns the model and data. Otherwise the mode is set explicitly: unset, the head would
    # turn it on by itself whenever ~/.ray holds a token, and the second node and the driver,
    # which connect with an explicit address, would not.
    env.setdefault("RAY_AUTH_MODE", "disabled")
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(RAY), "start", *args, "--block", "--disable-usage-stats"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: the node's processes, and only them
        )


def _stop(proc: subprocess.Popen) -> None:
    """Stop one ``ray start --block`` and every process of its group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # drains the node, then stops its processes
        try:
            proc.wait(timeout=45)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # whatever outlived it (its group id is its pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"ray start --head exited with {proc.returncode}:\n{_tail(log)}")
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    pytest.fail(f"the head's GCS did not open port {port}:\n{_tail(log)}")


@pytest.fixture(scope="module")
def ray_cluster():
    """The GCS address (``127.0.0.1:port``) of a head and a second node, one CPU each."""
    if not RAY.exists():
        pytest.skip(f"no ray executable next to {sys.executable}")
    if ray.is_initialized():
        ray.shutdown()
    # a short path: Ray's unix socket names under it must stay below 108 characters
    temp = Path(tempfile.mkdtemp(prefix="fpray", dir="/tmp"))
    port = _free_port()
    address = f"127.0.0.1:{port}"
    common = ["--num-cpus", "1", "--num-gpus", "0"]
    procs: list[subprocess.Popen] = []
    logs = [temp / "head.log", temp / "node.log"]
    try:
        deadline = time.monotonic() + START_TIMEOUT
        procs.append(
            _ray_start(
                [
                    "--head",
                    "--port",
                    str(port),
                    *common,
                    "--include-dashboard=false",
                    "--temp-dir",
                    str(temp),
                    # every port a second Ray on this machine could also want, chosen free
                    "--ray-client-server-port",
                    str(_free_port()),
                    "--dashboard-port",
                    str(_free_port()),
                    "--dashboard-agent-listen-port",
                    str(_free_port()),
                ],
                logs[0],
            )
        )
        _wait_for_port(port, procs[0], logs[0], deadline)
        procs.append(
            _ray_start(
                [
                    "--address",
                    address,
                    *common,
                    "--dashboard-agent-listen-port",
                    str(_free_port()),
                ],
                logs[1],
            )
        )
        ray.init(
            address=address, include_dashboard=False, log_to_driver=False, configure_logging=False
        )
        try:
            while len([n for n in ray.nodes() if n["Alive"]]) < 2:
                for proc, log in zip(procs, logs, strict=True):
                    if proc.poll() is not None:
                        pytest.fail(f"a Ray node exited with {proc.returncode}:\n{_tail(log)}")
                if time.monotonic() > deadline:
                    pytest.fail(f"the second node did not join in time:\n{_tail(logs[1])}")
                time.sleep(0.3)
        finally:
            ray.shutdown()  # the run connects by itself, through engine.ray_address
        yield address
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(temp, ignore_errors=True)  # the session's logs and sockets


def test_two_node_cluster_equals_sequential(ray_cluster):
    overrides = ["algorithm.name=fedper", "federation.rounds=2", "engine.threads=1"]
    seq = fedpart.run(QUICKSTART, [*overrides, "engine.backend=sequential"], write=False)
    par = fedpart.run(
        QUICKSTART,
        [*overrides, "engine.backend=ray", f"engine.ray_address={ray_cluster}"],
        write=False,
    )
    try:
        assert par.simulation.backend == "ray"
        assert len(seq.metrics) == len(par.metrics) == 2
        for a, b in zip(seq.metrics, par.metrics, strict=True):
            measured = {k for k in a if "accuracy" in k or k == "train_loss"}
            assert "train_loss" in measured and any("accuracy" in k for k in measured)
            assert {k: a[k] for k in measured} == {k: b[k] for k in measured}
        assert_same_run(seq, par)
        # where the client tasks ran: both nodes of the cluster
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        placed = par.simulation._remote.nodes
        assert len(alive) == 2
        assert set(placed) == alive, f"client tasks per node: {dict(placed)}"
        assert sum(placed.values()) == sum(row["participants"] for row in par.metrics)
    finally:
        ray.shutdown()
