"""A Flower deployment of separate processes: docs/flower.md's one-machine commands run as
written (a run, the ServerApp killed and the run continued, the federation stopped, the
simulation), the numbers of `fedpart run` over TLS with SuperNode authentication, an
unregistered SuperNode refused, a SuperNode killed mid-round, runs the ServerApp refuses.

One `flower-superlink` and one `flower-supernode` per client (each with node config
`partition-id` and `state-dir`) run as separate processes on localhost; `flwr run
examples/flower deploy --stream` submits runs to them: the commands of docs/flower.md. The
module starts two such federations besides the guide's (tests/guide_walk.py), so that its runs
go on at the same time without one's fault reaching another's run: one, over TLS with SuperNode
authentication (certificates and node keys made by the module, each node's public key
registered with `flwr supernode register`), runs FedPer and FedCMD
uninterrupted; the other (`--insecure`) the run whose SuperNode is killed, then the runs the
ServerApp refuses. The guide's blocks start its own federation on the ports 8000, 9094, 9095.
Every process the module starts, and every process those start, is stopped by it, also when a
test fails (the module's fixtures; the test process adopts orphaned Flower processes as a
subreaper and reaps them). All files go under pytest's tmp_path (FLWR_HOME and the guide's
HOME included).

Slow by nature: Flower 1.41 starts a fresh `flwr-clientapp` process (Python, torch, fedpart)
for every message a node receives, and the SuperLink and the SuperNodes poll every 3 s, so a
round (train + evaluate) costs about 20 s on an idle 2-core machine and far more on a busy one;
detecting a SuperNode killed with SIGKILL waits for Flower's heartbeat patience (up to 60 s).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import fedpart
from fedpart.config import load_config
from fedpart.errors import FedpartError
from guide_walk import PORTS, GuideWalk, port_free
from interpreter import interpreter_env

flwr = pytest.importorskip("flwr")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "flower"
CLIENTS = 2
# the example's quick start on two clients, both training every round (FedPer averages two
# uploads; FedCMD's selection round 0 and its personal l* in round 1 see both clients)
BASE = [
    f"partition.num_clients={CLIENTS}",
    "federation.rounds=2",
    "federation.join_ratio=1.0",
    "output.checkpoint_every=1",
]
#: seconds a run may take here before the test gives up (generous: a busy 2-core machine)
RUN_LIMIT = 900
#: the methods run uninterrupted on the authenticated federation: a model split whose heads stay
#: on the nodes (FedPer), and one whose recipe sends an observer that votes on the nodes, with the
#: votes counted and a distillation on the server (FedCMD). That recipes with tensors (FedProx's
#: reference model, FedRoD's class counts) train to the same numbers through the wire format:
#: tests/test_recipes_as_data.py.
SECURE_METHODS = ("fedper", "fedcmd")
KEYS = ("accuracy", "accuracy_weighted", "loss", "train_loss", "up_bytes", "down_bytes")
#: keys a resumed run may differ in from one that never stopped
WALL = ("wall_seconds",)


def _overrides(method: str, *extra: str) -> list[str]:
    return [f"algorithm.name={method}", *BASE, *extra]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ keys and certificates
def _write_certificates(folder: Path) -> None:
    """A CA (``ca.crt``) and a server certificate it signs for 127.0.0.1 (``server.pem``,
    ``server.key``): what the guide's openssl commands make, with ``cryptography``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("fedpart test CA"))
        .issuer_name(name("fedpart test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        x509.CertificateBuilder()
        .subject_name(name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True)
    pem = serialization.Encoding.PEM
    (folder / "ca.crt").write_bytes(ca.public_bytes(pem))
    (folder / "server.pem").write_bytes(server.public_bytes(pem))
    (folder / "server.key").write_bytes(
        key.private_bytes(
            pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    )


def _write_node_key(path: Path) -> None:
    """A SuperNode's key pair in OpenSSH format, ``path`` and ``path.pub`` (what ``ssh-keygen
    -t ecdsa -b 384`` makes)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP384R1())
    ssh = serialization.Encoding.OpenSSH
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    path.with_suffix(".pub").write_bytes(
        key.public_key().public_bytes(ssh, serialization.PublicFormat.OpenSSH)
    )


# ------------------------------------------------------------------ processes
def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0]


def _started(pid: int) -> int | None:
    """When a process started (clock ticks since boot): with its pid, its identity."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2 :].split()[19])


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (parents before children)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            parents.setdefault(st[0], []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, []))
    return out


def _running(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[1] != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _subreaper(on: bool) -> None:
    """Make this process adopt its descendants' orphans (Linux), so that Flower processes whose
    parent was stopped first are still ours to stop and to reap."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _reap(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


class Federation:
    """A SuperLink and one SuperNode per client on localhost, and the `flwr run`s sent to it;
    ``secure``: over TLS, with SuperNode authentication (each node's key registered)."""

    def __init__(self, root: Path, secure: bool = False) -> None:
        self.root = root
        self.secure = secure
        self.port = _free_port()
        self.env = interpreter_env(
            FLWR_HOME=str(root / "flwr"),
            FLWR_DISABLE_UPDATE_CHECK="1",
            FLWR_TELEMETRY_ENABLED="0",
        )
        (root / "flwr").mkdir(parents=True)
        self.certs = root / "certificates"
        if secure:
            _write_certificates(self.certs)
            how = f'root-certificates = "{self.certs / "ca.crt"}"'
        else:
            how = "insecure = true"
        # the connection `flwr run . deploy` uses (docs/flower.md)
        (root / "flwr" / "config.toml").write_text(
            '[superlink]\ndefault = "deploy"\n\n'
            f'[superlink.deploy]\naddress = "127.0.0.1:{self.port}"\n{how}\n'
        )
        self.procs: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, argv: list[str]) -> subprocess.Popen:
        with open(self.root / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.root,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> None:
        # fedpart is installed here already: no `uv sync` of the app's dependencies
        if self.secure:
            tls = ["--ssl-ca-certfile", str(self.certs / "ca.crt")]
            tls += ["--ssl-certfile", str(self.certs / "server.pem")]
            tls += ["--ssl-keyfile", str(self.certs / "server.key"), "--enable-supernode-auth"]
        else:
            tls = ["--insecure"]
        self._start(
            "superlink",
            ["flower-superlink", *tls, "--disable-runtime-dependency-installation"]
            + ["--port", str(self.port)],
        )
        deadline = time.monotonic() + 120
        while True:  # the SuperLink's HTTP API is up
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            if time.monotonic() > deadline or self.procs["superlink"].poll() is not None:
                raise RuntimeError("the SuperLink did not start:\n" + self.log("superlink"))
            time.sleep(0.5)
        for client in range(CLIENTS):
            if self.secure:
                _write_node_key(self.certs / f"node{client}")
                self.flwr("supernode", "register", str(self.certs / f"node{client}.pub"))
            self.start_node(client)

    def flwr(self, *argv: str) -> str:
        """``flwr ARGV... deploy`` (the command's SuperLink connection last); its stdout."""
        return subprocess.run(
            ["flwr", *argv, "deploy"],
            env=self.env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout

    def start_node(self, client: int, name: str | None = None, key: Path | None = None) -> None:
        """The SuperNode of ``client`` (named ``node<client>``); on a secure federation with
        the key made for it, or ``key`` (a path that does not exist: no key at all)."""
        state = self.root / f"state{client}"
        if not self.secure:
            how = ["--insecure"]
        else:
            how = ["--root-certificates", str(self.certs / "ca.crt")]
            key = self.certs / f"node{client}" if key is None else key
            how += ["--auth-supernode-private-key", str(key)] if key.exists() else []
        self._start(
            name or f"node{client}",
            [
                "flower-supernode",
                *how,
                "--superlink",
                f"127.0.0.1:{self.port}",
                "--port",
                str(_free_port()),
                "--node-config",
                f'partition-id={client} num-partitions={CLIENTS} state-dir="{state}"',
            ],
        )

    def kill(self, pid: int) -> None:
        """SIGKILL ``pid`` and everything below it (a SuperNode with its SuperExec and the
        ClientApp it runs; a ServerApp), and reap them."""
        self._end({p: _started(p) for p in _tree(pid)}, signal.SIGKILL, complete=False)

    def _end(self, procs: dict[int, int | None], sig: int, complete: bool = True) -> None:
        """Signal the processes ``procs`` (pid → start time: a pid that now names another
        process is left alone) and wait until they are gone, reaping them (their orphans are
        this process's children, as subreaper). Unless ``complete``, a dead process whose
        parent (one of ours, running on) has not reaped it yet counts as gone: it is reaped
        when that parent is stopped."""
        me = os.getpid()

        def ours(pid: int) -> bool:
            if procs[pid] is None or _started(pid) != procs[pid]:
                return False
            st = _stat(pid)
            return st is not None and (complete or st[1] != "Z" or st[0] == me)

        for pid in procs:
            if ours(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while True:
            for proc in self.procs.values():
                if proc.pid in procs:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=0.1)
            _reap({p for p in procs if ours(p)})
            left = [p for p in procs if ours(p)]
            if not left:
                return
            if time.monotonic() > deadline:
                if sig == signal.SIGKILL:
                    raise AssertionError(f"processes left: {[(p, _cmdline(p)) for p in left]}")
                self._end({p: procs[p] for p in left}, signal.SIGKILL, complete)
                return
            time.sleep(0.2)

    def serverapps(self) -> list[int]:
        """The ServerApp processes running now (started by the SuperLink's SuperExec)."""
        root = self.procs["superlink"].pid
        return [p for p in _tree(root) if "flwr-serverapp" in _cmdline(p) and _running(p)]

    def submit(self, name: str, run_config: str) -> subprocess.Popen:
        return self._start(
            name,
            ["flwr", "run", str(EXAMPLE), "deploy", "--stream", "--run-config", run_config],
        )

    def finish(self, name: str, limit: float = RUN_LIMIT) -> None:
        """Wait for the `flwr run --stream` of ``name`` to end (with its run)."""
        try:
            self.procs[name].wait(timeout=limit)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} did not finish in {limit} s:\n{self.log(name)[-4000:]}")

    def stop(self) -> None:
        """Stop every process started here and below: SIGTERM, SIGKILL after 10 s; reaped."""
        procs = {
            p: _started(p)
            for proc in self.procs.values()
            if proc.poll() is None
            for p in _tree(proc.pid)
        }
        self._end(procs, signal.SIGTERM)
        for proc in self.procs.values():
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def federations(tmp_path_factory):
    """Two federations, each a SuperLink with its own SuperNodes: ``ref`` (TLS, SuperNode
    authentication) runs the runs that are never interrupted, ``node`` the run whose SuperNode
    is killed, then the runs that fail. A fault in one does not touch the other's runs, so the
    runs go on at the same time (a killed SuperNode's heartbeat wait overlaps the others'
    rounds), and with them the guide's own federation (``walk``)."""
    feds: dict[str, Federation] = {}
    _subreaper(True)
    try:
        for name in ("ref", "node"):
            feds[name] = Federation(tmp_path_factory.mktemp(name), secure=name == "ref")
            feds[name].start()
        yield feds
    finally:
        try:
            errors = []
            for fed in feds.values():
                try:
                    fed.stop()
                except BaseException as e:  # stop the others all the same
                    errors.append(e)
            if errors:
                raise errors[0]
        finally:
            _subreaper(False)


def _run_config(method: str, out: Path) -> str:
    """The run config of `flwr run`: the example's config with ``BASE``, written to ``out``."""
    overrides = " ".join(_overrides(method))
    return f'overrides="{overrides}" output-dir="{out}" timeout=300'


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _same(got: list[dict], ref: list[dict], keys: tuple[str, ...], what: str) -> None:
    assert len(got) == len(ref), what
    for a, b in zip(got, ref, strict=True):
        assert a["round"] == b["round"], what
        for key in keys:
            if b.get(key) is None:
                assert a.get(key) is None, (what, a["round"], key)
            else:
                assert math.isclose(a[key], b[key], rel_tol=1e-6, abs_tol=1e-9), (
                    what,
                    a["round"],
                    key,
                    a[key],
                    b[key],
                )


def _check_against_fedpart_run(run_dir: Path, overrides: list[str], what: str) -> None:
    ref = fedpart.run(load_config(EXAMPLE / "quickstart.yaml", overrides), write=False)
    got = _rows(run_dir)
    keys = (*KEYS, "participants", *(("failed",) if "failed" in ref.metrics[0] else ()))
    _same(got, ref.metrics, keys, what)
    clients = json.loads((run_dir / "clients.json").read_text())
    assert clients["client_accuracy"] == pytest.approx(ref.client_accuracy, abs=1e-9), what


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    """docs/flower.md's one-machine blocks, run as written (tests/guide_walk.py); the ports
    they name must be free."""
    busy = [port for port in PORTS if not port_free(port)]
    if busy:
        pytest.fail(f"the guide's ports {busy} are in use on this machine; free them to run it")
    guide = GuideWalk(tmp_path_factory.mktemp("guide") / "home")
    try:
        yield guide
    finally:
        guide.stop()


def _walk_the_guide(guide: GuideWalk, errors: list[BaseException]) -> None:
    """The guide in order: the federation, its connection, a run, the ServerApp-kill story, the
    stop (after which none of its processes may be left), then the simulation."""
    try:
        guide.run("deploy-start", 120)
        guide.wait_for_port(8000)
        guide.run("deploy-connect", 120)
        guide.run("deploy-run", RUN_LIMIT)
        guide.run("fault-serverapp", RUN_LIMIT)
        guide.run("deploy-stop", 60)
        deadline = time.monotonic() + 30
        while guide.processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        guide.left_after_stop = [_cmdline(p) for p in guide.processes()]
        guide.run("simulation", RUN_LIMIT)
        guide.run("simulation-stop", 60)
    except BaseException as exc:  # reported by the test that reads the walk
        errors.append(exc)


#: runs the ServerApp must refuse, each with the one line it ends with
REFUSED = {
    "missing-node": (
        ["partition.num_clients=3"],
        "fedpart: run failed: 2 of the config's 3 clients have a Flower node",
    ),
    "wrong-method": (["algorithm.name=ditto"], "fedpart: run failed: ditto has its own local"),
}


@pytest.fixture(scope="module")
def deployed(federations, walk):
    """The module's runs, submitted together: ``SECURE_METHODS`` run to the end on ``ref``;
    FedPer on ``node`` with client 1's SuperNode killed (SIGKILL) while it trains round 0 and
    started again, run to the end, then the ``REFUSED`` runs; meanwhile the guide's walk. Their
    run directories, by name."""
    ref, node = federations["ref"], federations["node"]
    errors: list[BaseException] = []
    walker = threading.Thread(target=_walk_the_guide, args=(walk, errors), daemon=True)
    walker.start()
    runs = {}
    for method in SECURE_METHODS:
        out = ref.root / "runs" / method
        ref.submit(method, _run_config(method, out))
        runs[method] = out
    runs["node-killed"] = node.root / "runs" / "node-killed"
    node.submit("node-killed", _run_config("fedper", runs["node-killed"]))

    mid_round = None
    deadline = time.monotonic() + RUN_LIMIT
    while True:
        assert time.monotonic() < deadline, node.log("node-killed")[-4000:]
        if mid_round is None and (
            started := re.search(r"Successfully started run (\d+)", node.log("node-killed"))
        ):
            mid_round = re.compile(
                rf"\[RUN {started[1]}, ROUND 0\]\s*\n[^\n]*Receiving: train message"
            )
        if mid_round is not None and mid_round.search(node.log("node1")):
            node.kill(node.procs["node1"].pid)
            node.start_node(1)  # the same partition and state-dir
            break
        time.sleep(0.2)
    node.finish("node-killed")
    for name, (extra, _) in REFUSED.items():
        runs[name] = node.root / "runs" / name
        config = " ".join(_overrides("fedper", *extra))
        node.submit(name, f'overrides="{config}" output-dir="{runs[name]}" timeout=20')
    for method in SECURE_METHODS:
        ref.finish(method)
        assert (runs[method] / "summary.json").is_file(), ref.log(method)[-4000:]
    for name in REFUSED:
        node.finish(name)
    walker.join(timeout=RUN_LIMIT)
    if walker.is_alive():
        errors.append(AssertionError(f"the guide's walk did not end in {RUN_LIMIT} s"))
    runs["walk-errors"] = errors
    return runs


def test_deployed_runs_equal_fedpart_run(federations, deployed):
    """Over TLS, every node authenticated: each method's numbers are `fedpart run`'s."""
    for method in SECURE_METHODS:
        out = deployed[method]
        _check_against_fedpart_run(out, _overrides(method), method)
        rows = _rows(out)
        assert all(r["failed"] == 0 and r["eval_failed"] == 0 for r in rows), method
        assert all(r["train_msg_up_bytes"] > 0 and r["eval_msg_up_bytes"] > 0 for r in rows)
    assert json.loads((deployed["fedcmd"] / "summary.json").read_text())["fedcmd"]["layer"]
    # FedPer's nodes send back exactly what up_bytes counts (the shared tensors) and, once
    # they hold their heads, receive exactly what down_bytes counts
    for r in _rows(deployed["fedper"]):
        assert r["train_msg_up_bytes"] == r["up_bytes"]
        if r["round"] > 0:
            assert r["train_msg_down_bytes"] == r["down_bytes"]
    # each node keeps its personal tensors under its state-dir, one folder per run
    for client in range(CLIENTS):
        state = federations["ref"].root / f"state{client}"
        kept = sorted(p.name for p in state.glob("*/*/*"))
        assert "personal-1.safetensors" in kept, kept
        assert all(re.fullmatch(r"personal-\d+\.safetensors", name) for name in kept), kept


def _walked(walk, deployed) -> Path:
    """The guide's runs folder, once its walk ended without an error."""
    if deployed["walk-errors"]:
        raise deployed["walk-errors"][0]
    return walk.home / "fedpart-flower" / "runs"


def test_the_guide_runs_as_written(walk, deployed):
    """docs/flower.md's one-machine blocks, in order, as written: the deployed FedPer run
    equals `fedpart run`, prints a line per round and a completed line, its status says so and
    its config.yaml records its directory; the guide's stop leaves no process behind; its
    simulation run equals `fedpart run` too."""
    runs = _walked(walk, deployed)
    out = runs / "fedper"
    _check_against_fedpart_run(out, _overrides("fedper"), "the guide's FedPer")
    final = 100 * json.loads((out / "summary.json").read_text())["accuracy"]["final"]
    said = walk.outputs["deploy-run"].splitlines()
    printed = [line for line in said if line.startswith("fedpart: ")]
    assert printed[0] == "fedpart: fedper on digits, 2 clients, 2 rounds: starting", printed
    for rnd in (1, 2):
        pattern = rf"fedpart: round {rnd}/2: 2 trained, 0 failed; accuracy [\d.]+%; [\d.]+ s"
        assert re.fullmatch(pattern, printed[rnd]), printed
    assert printed[3:] == [f"fedpart: run completed: 2 rounds, accuracy {final:.2f}%; wrote {out}"]
    # the status the block asks for last
    assert said[-1] == f"completed: 2 of 2 rounds, accuracy {final:.2f}%", said[-3:]
    assert f"  dir: {out}\n" in (out / "config.yaml").read_text()
    assert walk.left_after_stop == []
    simulation = runs / "simulation"
    _check_against_fedpart_run(simulation, ["algorithm.name=fedper", "federation.rounds=2"], "sim")
    assert "completed: 2 of 2 rounds" in walk.outputs["simulation"]


def test_serverapp_killed_run_resumes(walk, deployed):
    """The guide's fault story: the ServerApp killed (SIGKILL) once the first checkpoint is
    written; the status says stopped (exit code 1); `flwr run ... resume=true` continues from
    the checkpoint and ends with the numbers of the guide's run that never stopped, traffic
    counts included."""
    runs = _walked(walk, deployed)
    said = walk.outputs["fault-serverapp"]
    assert "stopped after 1 of 2 rounds: nothing holds it" in said and "exit code 1" in said, said
    assert "fedpart: fedper on digits, 2 clients, 2 rounds: resuming after round 1" in said, said
    out, ref = runs / "killed", runs / "fedper"
    got, want = _rows(out), _rows(ref)
    assert [{k: v for k, v in r.items() if k not in WALL} for r in got] == [
        {k: v for k, v in r.items() if k not in WALL} for r in want
    ]
    assert (out / "clients.json").read_text() == (ref / "clients.json").read_text()
    # config.yaml: the same but for the directory each records as output.dir
    assert (out / "config.yaml").read_text().replace(str(out), str(ref)) == (
        ref / "config.yaml"
    ).read_text()
    summary = json.loads((out / "summary.json").read_text())
    expected = json.loads((ref / "summary.json").read_text())
    assert {k: v for k, v in summary.items() if k not in WALL} == {
        k: v for k, v in expected.items() if k not in WALL
    }
    # its checkpoint holds no node's personal tensors: fedpart run --resume refuses it
    with pytest.raises(FedpartError, match="unknown entry 'flower/"):
        fedpart.resume(out)


def test_refused_runs_end_in_one_line(federations, deployed):
    """A client without a node and a method Flower cannot run: `flwr run --stream` shows one
    fedpart line saying the run failed and why, no traceback; the status exits 1 with it."""
    node = federations["node"]
    for name, (_, line) in REFUSED.items():
        stream = node.log(name)
        said = [text for text in stream.splitlines() if text.startswith("fedpart: run failed")]
        assert len(said) == 1 and said[0].startswith(line), stream[-4000:]
        assert "Traceback" not in stream, stream[-4000:]
        proc = subprocess.run(
            [sys.executable, "-m", "fedpart.cli", "flower", "status", str(deployed[name])],
            capture_output=True,
            text=True,
            env=node.env,
        )
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert line.removeprefix("fedpart: run failed: ") in proc.stdout, proc.stdout


def test_supernode_killed_mid_round(federations, deployed):
    """Client 1's SuperNode killed (SIGKILL) while it trains round 0, then started again
    (``deployed`` does both): round 0 aggregates client 0's update alone and counts the
    failure, and the run goes on, the restarted node rejoining: `fedpart run` with client 1
    failing in round 0 gives the same numbers."""
    out = deployed["node-killed"]
    assert (out / "summary.json").is_file(), federations["node"].log("node-killed")[-4000:]
    rows = _rows(out)
    assert [r["failed"] for r in rows] == [1, 0]
    assert [r["eval_failed"] for r in rows] == [0, 0]
    _check_against_fedpart_run(
        out,
        _overrides("fedper", "federation.client_failure_schedule=[[0,1]]"),
        "fedper, client 1 failing in round 0",
    )


def test_unregistered_supernode_is_refused(federations, deployed):
    """On the authenticated federation a SuperNode whose key was never registered ("Failed to
    activate SuperNode"), and one with no key ("All SuperNodes must be registered"), are
    refused by the SuperLink (Flower's exit code 305) and never listed; the registered nodes
    stay online."""
    ref = federations["ref"]
    stranger = ref.certs / "stranger"
    _write_node_key(stranger)  # a well-formed key, not registered
    ref.start_node(1, name="stranger", key=stranger)
    ref.start_node(1, name="keyless", key=ref.certs / "no-such-key")
    why = {"stranger": "Failed to activate SuperNode", "keyless": "must be registered"}
    for name, reason in why.items():
        try:
            code = ref.procs[name].wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} was not refused:\n{ref.log(name)[-4000:]}")
        assert code != 0, ref.log(name)[-4000:]
        assert "Exit Code: 305" in ref.log(name) and reason in ref.log(name), ref.log(name)[-4000:]
    nodes = json.loads(ref.flwr("supernode", "ls", "--format", "json"))["nodes"]
    assert sorted(n["status"] for n in nodes) == ["online", "online"], nodes
