"""Every test that starts a process runs it with the interpreter that runs the tests: a Python
process as ``sys.executable``, a console script or a shell script with ``interpreter_env``
(the interpreter's scripts first on ``PATH``, ``$PYTHON`` set), so that
``/path/to/venv/bin/python -m pytest`` works without the venv activated."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

#: commands that would be looked up on PATH, and find another interpreter's
ON_PATH = {"python", "python3", "fedpart", "flwr", "flower-superlink", "flower-supernode", "ray",
           "bash", "sh", "pytest"}  # fmt: skip


def _commands(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every list literal that starts with a command looked up on PATH."""
    out = []
    compared = {
        id(x)
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare)
        for x in (n.left, *n.comparators)
    }  # a value compared with, not a command
    for node in ast.walk(tree):
        if isinstance(node, ast.List) and node.elts and id(node) not in compared:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value in ON_PATH:
                out.append((node.lineno, first.value))
    return out


def test_commands_started_by_tests_use_the_running_interpreter():
    bad = []
    for path in sorted(TESTS.glob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        commands = _commands(tree)
        if commands and "interpreter_env" not in text:
            bad += [f"{path.name}:{line} runs {name!r} from PATH" for line, name in commands]
    assert not bad, "\n".join(bad)


def test_shell_scripts_take_the_interpreter_from_python():
    """The shell scripts tests run start Python as ``$PYTHON`` (default python3)."""
    for script in sorted((ROOT / "benchmarks").glob("*.sh")):
        text = script.read_text()
        assert "${PYTHON:-python3}" in text, script.name
