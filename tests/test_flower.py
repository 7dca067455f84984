"""FedPer and FedCMD through Flower's simulation engine give `fedpart run`'s accuracies; a node
that falls silent, and a server that stops and resumes, on nodes in this process.

Skipped without flwr (``pip install 'fedpart[flower]'``). Most of its time is the start of the
engine's local Ray and its actors (about 20 s on two cores); the two rounds take a few seconds.
The same faults with SuperLink, SuperNodes and ServerApp as separate processes:
tests/test_flower_deploy.py.
"""

import itertools
import json
import math
import re
import uuid

import pytest
import torch

import fedpart
from fedpart.config import load_config
from fedpart.errors import FedpartError

flwr = pytest.importorskip("flwr")

from flwr.app import Context, Error, Message, RecordDict  # noqa: E402
from flwr.serverapp import ServerApp  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedpart.flower import (  # noqa: E402
    FlowerSimulation,
    client_app,
    resume_on_grid,
    run_on_grid,
    server_app,
)
from fedpart.flower.progress import quiet_tracebacks, status  # noqa: E402

QUICKSTART = "configs/quickstart.yaml"
# FedCMD's selection phase is round 0 (K_p = max(1, ⌊0.1·2⌋)); in round 1 its l* is personal,
# the layers after it tailored per client and φ uploaded: every path of the node protocol
METHODS = ("fedper", "fedcmd")


def _overrides(method):
    return [f"algorithm.name={method}", "federation.rounds=2"]


def test_flower_equals_fedpart_run():
    configs = {m: load_config(QUICKSTART, _overrides(m)) for m in METHODS}
    results = {}
    app = ServerApp()

    @app.main()
    def main(grid, context):
        # both runs over the same nodes: Ray and its actors start once
        for method, cfg in configs.items():
            results[method] = run_on_grid(grid, cfg, timeout=300)

    n = configs["fedper"].partition.num_clients
    run_simulation(
        app,
        client_app(),
        num_supernodes=n,
        backend_config={
            "client_resources": {"num_cpus": 1},
            "init_args": {"num_cpus": 2, "include_dashboard": False},
        },
    )
    assert set(results) == set(METHODS)
    for method in METHODS:
        ref = fedpart.run(configs[method], write=False)
        got = results[method]
        assert len(got.metrics) == len(ref.metrics) == 2
        for a, b in zip(got.metrics, ref.metrics, strict=True):
            for key in ("accuracy", "accuracy_weighted", "loss", "train_loss", "up_bytes"):
                assert math.isclose(a[key], b[key], rel_tol=1e-6, abs_tol=1e-9), (method, key)
        assert got.client_accuracy == pytest.approx(ref.client_accuracy, abs=1e-9)
    assert results["fedcmd"].summary["fedcmd"]["layer"] is not None


@pytest.mark.parametrize(
    ("method", "message"),
    [("ditto", "own local update"), ("dfedavg", "decentralized"), ("heterofl", "widths")],
)
def test_flower_refuses_in_one_line(method, message):
    cfg = load_config(QUICKSTART, _overrides(method))
    with pytest.raises(FedpartError, match=message) as err:
        FlowerSimulation(cfg, grid=None)
    assert "\n" not in str(err.value)


# ------------------------------------------------- faults, nodes in this process
class ServerStoppedError(Exception):
    """The ServerApp's process ends here (a kill)."""


class LocalGrid:
    """A Flower grid whose nodes are ClientApp contexts in this process (node config
    ``partition-id`` and, under ``root``, ``state-dir``); ``hook(grid, message)`` sees every
    message before its node does and may silence the node, add one, or stop the server. A
    ClientApp's exception comes back as Flower's error reply."""

    def __init__(self, clients, root=None, hook=None):
        self.app = client_app()
        self.root = root
        self.hook = hook
        self.ids = itertools.count(1)
        self.contexts = {}
        self.silent = set()
        for client in range(clients):
            self.add(client)

    def add(self, client):
        node = next(self.ids)
        config = {"partition-id": client}
        if self.root is not None:
            config["state-dir"] = str(self.root / f"node{client}")
        self.contexts[node] = Context(
            run_id=1, node_id=node, node_config=config, state=RecordDict(), run_config={}
        )
        return node

    def client(self, message):
        return self.contexts[message.metadata.dst_node_id].node_config["partition-id"]

    def get_node_ids(self):
        return [node for node in self.contexts if node not in self.silent]

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            if self.hook is not None:
                self.hook(self, message)
            node = message.metadata.dst_node_id
            if node in self.silent:
                continue
            try:
                replies.append(self.app(message, self.contexts[node]))
            except Exception as exc:  # what flwr-clientapp replies
                error = Error(code=2, reason=f"{type(exc)}:<'{exc}'>")
                replies.append(Message(error, reply_to=message))
        return replies


@pytest.fixture
def task_identity():
    """Messages made outside a Flower process need a run, node and task id (flwr internals)."""
    before = TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = before


def _local(clients, rounds, *extra):
    overrides = [
        "algorithm.name=fedper",
        f"partition.num_clients={clients}",
        f"federation.rounds={rounds}",
        "federation.join_ratio=1.0",
        "output.checkpoint_every=1",
        *extra,
    ]
    return load_config(QUICKSTART, overrides)


def _run_local(cfg, grid, run_dir=None):
    sim = FlowerSimulation(cfg, grid, run_dir=run_dir, timeout=5)
    sim.connect()
    return sim.run()


KEYS = ("accuracy", "accuracy_weighted", "loss", "train_loss", "up_bytes")


def _equal(got, ref, keys=KEYS):
    assert len(got.metrics) == len(ref.metrics)
    for a, b in zip(got.metrics, ref.metrics, strict=True):
        for key in keys:
            if b[key] is None:
                assert a[key] is None, (a["round"], key)
            else:
                assert math.isclose(a[key], b[key], rel_tol=1e-6, abs_tol=1e-9), (a["round"], key)


def _silence_client_1(rejoin):
    def hook(grid, message):
        node = message.metadata.dst_node_id
        kind, rnd = message.metadata.message_type, message.metadata.group_id
        if kind == "train" and rnd == "1" and grid.client(message) == 1 and node not in grid.silent:
            grid.silent.add(node)  # dies as round 1's training reaches it
            if rejoin:
                grid.add(1)  # a SuperNode started again with the same state-dir

    return hook


def test_silent_node_fails_its_client_and_a_new_node_rejoins(task_identity, tmp_path):
    got = _run_local(_local(3, 3), LocalGrid(3, tmp_path, _silence_client_1(rejoin=True)))
    ref = fedpart.run(_local(3, 3, "federation.client_failure_schedule=[[1,1]]"), write=False)
    _equal(got, ref, (*KEYS, "down_bytes", "failed"))
    assert [r["failed"] for r in got.metrics] == [0, 1, 0]
    assert [r["eval_failed"] for r in got.metrics] == [0, 0, 0]
    assert got.client_accuracy == pytest.approx(ref.client_accuracy, abs=1e-9)


def test_silent_node_without_rejoin(task_identity, tmp_path):
    got = _run_local(_local(3, 3), LocalGrid(3, tmp_path, _silence_client_1(rejoin=False)))
    assert [r["failed"] for r in got.metrics] == [0, 1, 1]
    assert [r["eval_failed"] for r in got.metrics] == [0, 1, 1]
    assert got.client_accuracy[1] is None
    assert all(r["accuracy"] is not None for r in got.metrics)
    # round 1 aggregated the updates of clients 0 and 2 alone, as the engine's failed client
    ref = fedpart.run(_local(3, 2, "federation.client_failure_schedule=[[1,1]]"), write=False)
    assert got.metrics[1]["train_loss"] == pytest.approx(ref.metrics[1]["train_loss"], rel=1e-9)
    assert got.metrics[1]["up_bytes"] == ref.metrics[1]["up_bytes"]


def _stop_at_round_1_evaluation(grid, message):
    # the nodes trained round 1 (ahead of the checkpoint of round 0) when the server stops
    if message.metadata.message_type == "evaluate" and message.metadata.group_id == "1":
        raise ServerStoppedError


def _files(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("wall_seconds", None)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.pop("wall_seconds")
    return rows, (run_dir / "clients.json").read_text(), summary


def test_stopped_server_resumes_from_its_checkpoint(task_identity, tmp_path):
    cfg = _local(2, 2)
    whole = tmp_path / "whole"
    _run_local(cfg, LocalGrid(2, tmp_path / "whole-nodes"), run_dir=whole)
    out = tmp_path / "stopped"
    with pytest.raises(ServerStoppedError):
        _run_local(cfg, LocalGrid(2, tmp_path / "nodes", _stop_at_round_1_evaluation), out)
    assert list((tmp_path / "nodes").glob("node*/*/*/personal-1.safetensors"))
    meta = json.loads((out / "checkpoint" / "meta.json").read_text())
    assert meta["rounds_completed"] == 1
    # a new Flower run: new node contexts, the same state-dirs
    resume_on_grid(LocalGrid(2, tmp_path / "nodes"), out, timeout=5)
    assert _files(out) == _files(whole)
    with pytest.raises(FedpartError, match="unknown entry 'flower/"):
        fedpart.resume(out)


def test_resume_needs_the_nodes_state_dir(task_identity, tmp_path):
    out = tmp_path / "stopped"
    with pytest.raises(ServerStoppedError):
        _run_local(_local(2, 2), LocalGrid(2, None, _stop_at_round_1_evaluation), out)
    with pytest.raises(FedpartError, match="client 0 no longer holds its personal tensors"):
        resume_on_grid(LocalGrid(2, None), out, timeout=5)


# ------------------------------------------------------- tampered nodes, in this process
class TamperGrid(LocalGrid):
    """A :class:`LocalGrid` whose replies pass through ``tamper(reply)`` (which may change
    them in place) on their way to the server."""

    def __init__(self, clients, root, tamper, hook=None):
        super().__init__(clients, root, hook)
        self.tamper = tamper

    def send_and_receive(self, messages, *, timeout=None):
        replies = super().send_and_receive(messages, timeout=timeout)
        for reply in replies:
            if not reply.has_error():
                self.tamper(reply)
        return replies


def _tensors(record):
    return {k: v.clone() for k, v in record.to_torch_state_dict().items()}


def _bad_upload(kind):
    """Client 1's round-1 training upload, spoiled in one way."""
    from flwr.app import ArrayRecord

    def tamper(reply):
        meta = reply.metadata
        if meta.message_type != "train" or meta.group_id != "1":
            return
        if int(reply.content["info"]["client"]) != 1:
            return
        state = _tensors(reply.content["model"])
        key = next(k for k, v in state.items() if v.is_floating_point())
        if kind == "shape":
            state[key] = state[key].flatten()[:-1]
        elif kind == "nan":
            state[key][0] = float("nan")
        elif kind == "extra":
            state["intruder.weight"] = torch.zeros(3)
        elif kind == "missing":
            del state[key]
        elif kind == "dtype":
            state[key] = state[key].double()
        reply.content["model"] = ArrayRecord(state)

    return tamper


@pytest.mark.parametrize("kind", ["shape", "nan", "extra", "missing", "dtype"])
def test_a_bad_upload_is_refused_and_the_run_goes_on(task_identity, tmp_path, kind, capsys):
    got = _run_local(_local(3, 3), TamperGrid(3, tmp_path, _bad_upload(kind)))
    assert "refused the upload of client 1" in capsys.readouterr().err
    # as if client 1 had failed in round 1: the others' updates, client 1's tensors unchanged
    ref = fedpart.run(_local(3, 3, "federation.client_failure_schedule=[[1,1]]"), write=False)
    _equal(got, ref, (*KEYS, "down_bytes", "failed"))
    assert [r["rejected"] for r in got.metrics] == [0, 1, 0]
    assert got.client_accuracy == pytest.approx(ref.client_accuracy, abs=1e-9)


def test_a_bad_evaluation_is_refused(task_identity, tmp_path, capsys):
    from flwr.app import ArrayRecord

    def tamper(reply):
        meta = reply.metadata
        if meta.message_type == "evaluate" and meta.group_id == "1":
            if int(reply.content["info"]["client"]) == 2:
                outcome = _tensors(reply.content["outcome"])
                outcome["loss"][0] = float("nan")
                reply.content["outcome"] = ArrayRecord(outcome)

    got = _run_local(_local(3, 3), TamperGrid(3, tmp_path, tamper))
    assert "refused the evaluation of client 2" in capsys.readouterr().err
    ref = _run_local(_local(3, 3), LocalGrid(3, tmp_path / "honest"))
    assert [r["eval_rejected"] for r in got.metrics] == [0, 1, 0]
    assert [r["eval_failed"] for r in got.metrics] == [0, 1, 0]
    for a, b in zip(got.metrics, ref.metrics, strict=True):
        assert a["train_loss"] == b["train_loss"] and a["up_bytes"] == b["up_bytes"]
        if a["round"] != 1:
            assert a["accuracy"] == b["accuracy"]
    assert got.client_accuracy == ref.client_accuracy


def test_a_node_claiming_a_live_client_is_refused(task_identity, tmp_path, capsys):
    seen = []

    def hijack(grid, message):
        node = message.metadata.dst_node_id
        seen.append((node, message.metadata.message_type))
        if message.metadata.group_id == "1" and len(grid.contexts) == 3:
            grid.add(0)  # a fourth node says it is client 0, whose node still answers

    got = _run_local(_local(3, 3), LocalGrid(3, tmp_path, hijack))
    assert "claims client 0, which node 1 holds; refused" in capsys.readouterr().err
    # the claimant was asked who it is, and nothing else
    assert [kind for node, kind in seen if node == 4] == ["query"]
    ref = _run_local(_local(3, 3), LocalGrid(3, tmp_path / "honest"))
    _equal(got, ref, (*KEYS, "down_bytes", "failed"))
    assert got.client_accuracy == ref.client_accuracy


def test_a_claim_is_granted_once_the_holder_is_gone(task_identity, tmp_path, capsys):
    def hook(grid, message):
        if message.metadata.group_id == "1" and len(grid.contexts) == 3:
            grid.add(1)  # a second node for client 1 joins first ...
        kind, node = message.metadata.message_type, message.metadata.dst_node_id
        if kind == "evaluate" and message.metadata.group_id == "1" and node == 2:
            grid.silent.add(2)  # ... then client 1's first node dies

    got = _run_local(_local(3, 3), LocalGrid(3, tmp_path, hook))
    err = capsys.readouterr().err
    assert "claims client 1, which node 2 holds; refused" in err
    assert "Flower node 4 takes over client 1" in err
    assert [r["eval_failed"] for r in got.metrics] == [0, 1, 0]
    assert got.client_accuracy[1] is not None


def test_unavailable_codes_are_flowers():
    """The error codes the server reads as 'the node is gone' are Flower's (its constants live
    outside its public API, so the server keeps the numbers; this pins them)."""
    from flwr.common.constant import ErrorCode

    from fedpart.flower.records import UNAVAILABLE

    assert UNAVAILABLE == (
        ErrorCode.MESSAGE_UNAVAILABLE,
        ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
        ErrorCode.NODE_UNAVAILABLE,
    )


# ------------------------------------------------ what the ServerApp tells its user
def _serve(grid, run_config):
    """The example's ServerApp (``fedpart.flower.server_app``) on ``grid`` with ``run_config``."""
    context = Context(
        run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config
    )
    server_app(QUICKSTART)(grid, context)


def _lines(text):
    return [line for line in text.splitlines() if line.startswith("fedpart: ")]


def test_serverapp_prints_a_line_per_round_and_the_end(task_identity, tmp_path, capsys):
    """A line per round (trained, failed, accuracy, time), a last line saying it completed and
    where; ``config.yaml`` records the directory written; the status reads it back."""
    out = tmp_path / "run"
    overrides = "algorithm.name=fedper partition.num_clients=3 federation.rounds=2"
    overrides += " federation.join_ratio=1.0 evaluation.every=2"
    _serve(LocalGrid(3, tmp_path), {"overrides": overrides, "output-dir": str(out), "timeout": 5})
    lines = _lines(capsys.readouterr().out)
    summary = json.loads((out / "summary.json").read_text())
    final = 100 * summary["accuracy"]["final"]
    assert lines[0] == "fedpart: fedper on digits, 3 clients, 2 rounds: starting"
    assert re.fullmatch(
        r"fedpart: round 1/2: 3 trained, 0 failed; not evaluated; \d+\.\d s", lines[1]
    )
    assert re.fullmatch(
        rf"fedpart: round 2/2: 3 trained, 0 failed; accuracy {final:.2f}%; \d+\.\d s", lines[2]
    )
    assert lines[3:] == [f"fedpart: run completed: 2 rounds, accuracy {final:.2f}%; wrote {out}"]
    assert f"dir: {out}\n" in (out / "config.yaml").read_text()
    assert status(out) == (0, f"completed: 2 of 2 rounds, accuracy {final:.2f}%")


def test_serverapp_failure_is_one_line_and_recorded(task_identity, tmp_path, capsys):
    """A node missing for a client: the ServerApp's last line says the run failed and why; the
    run directory records it (``fedpart flower status`` exits 1 with that line)."""
    out = tmp_path / "run"
    overrides = "algorithm.name=fedper partition.num_clients=3 federation.rounds=2"
    with pytest.raises(FedpartError, match="2 of the config's 3 clients have a Flower node"):
        _serve(
            LocalGrid(2, tmp_path), {"overrides": overrides, "output-dir": str(out), "timeout": 1}
        )
    lines = _lines(capsys.readouterr().out)
    assert len(lines) == 1 and lines[0].startswith("fedpart: run failed: 2 of the config's 3"), (
        lines
    )
    code, line = status(out)
    assert code == 1 and line.startswith("failed before its first round: 2 of the config's 3"), line
    # a method Flower cannot run: one line too, no directory needed
    with pytest.raises(FedpartError):
        _serve(LocalGrid(2), {"overrides": "algorithm.name=ditto", "timeout": 1})
    (line,) = _lines(capsys.readouterr().out)
    assert line.startswith("fedpart: run failed: ditto has its own local update"), line


def test_flowers_error_log_keeps_one_line_for_fedpart_errors(capsys):
    """Flower logs the exception that ends a ServerApp with its traceback; for fedpart's errors
    (said in one line by the ServerApp) the record is dropped, other exceptions keep theirs."""
    import logging

    quiet_tracebacks()
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(self.format(record))

    logger = logging.getLogger("flwr")
    handler = Keep()
    logger.addHandler(handler)
    try:
        for exc in (FedpartError("a one-line reason"), ValueError("kept")):
            try:
                raise exc
            except Exception as caught:
                logger.error("%s raised an exception", "ServerApp", exc_info=caught)
    finally:
        logger.removeHandler(handler)
    (record,) = records
    assert "Traceback" in record and "ValueError: kept" in record


def test_status_of_a_stopped_and_a_held_run(tmp_path, capsys):
    """No end recorded and nobody holding it: stopped (1); its lock held: running (0); not a
    run: 2."""
    out = tmp_path / "run"
    fedpart.run(load_config(QUICKSTART, ["federation.rounds=1", f"output.dir={out}"]))
    (out / "summary.json").unlink()
    code, line = status(out)
    assert code == 1 and line.startswith("stopped after 1 of 1 rounds"), line
    from fedpart.cli import main

    assert main(["flower", "status", str(out)]) == 1
    assert capsys.readouterr().out == line + "\n"
    from fedpart.tracking.run_dir import RunDir

    rd = RunDir(out)
    rd.acquire()
    try:
        # the lock is per open file: another handle, as another process would see it
        assert status(out)[0] == 0 and "running" in status(out)[1]
    finally:
        rd.release()
    assert status(tmp_path)[0] == 2
