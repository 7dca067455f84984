"""docs/flower.md read in order: its blocks marked ``<!-- walk: NAME -->`` run as written, each
as a bash script (``-e -o pipefail``) from the repository's root, with ``HOME`` a fresh folder
(so ``~/.flwr`` and ``~/fedpart-flower`` are the test's own)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

from interpreter import interpreter_env

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "flower.md"
#: the ports the guide's one-machine federation uses
PORTS = (8000, 9094, 9095)


def guide_blocks(text: str | None = None) -> dict[str, str]:
    """The guide's walked blocks by name, in the guide's order."""
    text = GUIDE.read_text() if text is None else text
    return dict(re.findall(r"<!-- walk: ([\w-]+) -->\n```bash\n(.*?)```", text, flags=re.S))


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


class GuideWalk:
    """Runs the guide's blocks one after another; every process they start (found by the
    ``HOME`` in its environment) is stopped by :meth:`stop`."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.env = interpreter_env(
            HOME=str(home), FLWR_DISABLE_UPDATE_CHECK="1", FLWR_TELEMETRY_ENABLED="0"
        )
        self.env.pop("FLWR_HOME", None)
        self.blocks = guide_blocks()
        self.outputs: dict[str, str] = {}

    def run(self, name: str, limit: float) -> str:
        """Run block ``name`` to its end (its background processes stay); its output. A block
        that fails raises with its output."""
        script = self.home / f"{name}.sh"
        script.write_text(self.blocks[name])
        log = self.home / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", "-e", "-o", "pipefail", str(script)],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                code = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = None
        text = log.read_text(errors="replace")
        self.outputs[name] = text
        if code != 0:
            raise AssertionError(f"guide block {name!r} ended with {code}:\n{text[-4000:]}")
        return text

    def wait_for_port(self, port: int, limit: float = 120) -> None:
        deadline = time.monotonic() + limit
        while port_free(port):
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing listens on {port} after {limit} s")
            time.sleep(0.5)

    def processes(self) -> list[int]:
        """The processes running with this walk's ``HOME`` (started by its blocks)."""
        mine = f"HOME={self.home}".encode()
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if mine in environ and state != "Z":
                out.append(int(entry))
        return out

    def stop(self) -> None:
        """SIGKILL whatever the blocks left running (nothing, once the guide's stop commands
        ran) and reap what was this process's to reap."""
        left = self.processes()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for pid in left:  # orphans are this process's children (a subreaper)
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
            if not self.processes():
                return
            time.sleep(0.2)
