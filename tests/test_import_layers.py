"""The engine and the methods do not import each other in a circle: the engine finds methods
through ``fedpart.registry`` and hands them a ``MethodContext``; no method file names the
engine's ``Simulation``."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "fedpart"


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of the file (``TYPE_CHECKING`` blocks and
    imports inside functions included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def test_no_engine_module_imports_the_methods():
    for path in sorted((SRC / "engine").glob("*.py")):
        bad = {m for m in imported_modules(path) if m.split(".")[:2] == ["fedpart", "algorithms"]}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_layers_below_the_engine_do_not_import_it():
    """Configuration, topologies, data, models, tracking and the seeded streams sit below the
    engine (the engine uses them, never the other way)."""
    below = [SRC / "seeding.py", SRC / "errors.py", SRC / "registry.py"]
    for folder in ("config", "topology", "data", "models", "tracking"):
        below += sorted((SRC / folder).rglob("*.py"))
    for path in below:
        bad = {m for m in imported_modules(path) if m.split(".")[:2] == ["fedpart", "engine"]}
        assert not bad, f"{path.relative_to(SRC)} imports {sorted(bad)}"


def test_no_method_file_names_the_simulation():
    for path in sorted((SRC / "algorithms").glob("*.py")):
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        modules = imported_modules(path)
        assert "Simulation" not in names and not any("Simulation" in m for m in modules), path
        assert "fedpart.engine.simulation" not in modules, path


def test_a_method_receives_a_narrow_context_not_the_simulation(tiny_cfg):
    import dataclasses

    from fedpart.config import Config
    from fedpart.engine.context import MethodContext
    from fedpart.engine.simulation import Simulation

    sim = Simulation(Config.from_dict(tiny_cfg))
    ctx = sim.algorithm.ctx
    assert type(ctx) is MethodContext and not isinstance(ctx, Simulation)
    assert not hasattr(ctx, "__dict__")  # slots: nothing beyond the declared members
    declared = {f.name for f in dataclasses.fields(MethodContext)}
    assert set(MethodContext.__slots__) == declared
    assert declared == {
        "cfg",
        "data",
        "device",
        "capacity",
        "model",
        "store",
        "exchange",
        "rounds_completed",
        "algorithm",
        "finetune",
    }
    for name in ("executor", "topology", "run_dir", "rows", "train_clients", "evaluate"):
        assert not hasattr(ctx, name), name
    # what the engine changes, the method sees
    assert ctx.model is sim.model and ctx.store is sim.store and ctx.algorithm is sim.algorithm
    sim.rounds_completed = 2
    assert ctx.rounds_completed == 2
    assert not any(isinstance(v, Simulation) for v in map(ctx.__getattribute__, declared))
