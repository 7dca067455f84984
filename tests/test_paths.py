"""Paths mean what they say: a string key given as ``key=value`` is taken as written (a ``#``
is no YAML comment, a ``:`` no mapping), ``compare`` and ``sweep`` hand run directories on
without re-parsing them, and a template field that does not exist is one line."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from fedpart.api import output_path
from fedpart.cli import main
from fedpart.config import load_config
from fedpart.errors import FedpartError
from interpreter import interpreter_env

NASTY = ["aud x #1", "a:b", "it's", 'say "hi"', "ünïcødé ✓", "tab\there", "line\nbreak", "#", "- x"]


@pytest.mark.parametrize("name", NASTY)
def test_string_keys_are_taken_literally(tmp_path, name):
    where = str(tmp_path / name)
    cfg = load_config(None, [f"output.dir={where}", f"dataset.root={where}"])
    assert cfg.output.dir == where and cfg.dataset.root == where
    assert output_path(cfg) == tmp_path / name


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0/{}"), min_size=1)
)
def test_any_folder_name_lands_where_asked(tmp_path, name):
    where = f"{tmp_path}/{name}/{{algorithm}}"
    cfg = load_config(None, [f"output.dir={where}"])
    assert str(output_path(cfg)) == f"{tmp_path}/{name}/fedavg"


def test_yaml_still_parses_where_the_type_calls_for_it():
    cfg = load_config(None, ["federation.lr=1e-2", "partition.split=[0.8, 0.1, 0.1]", "seed=7"])
    assert cfg.federation.lr == 0.01 and cfg.partition.split == [0.8, 0.1, 0.1] and cfg.seed == 7


@pytest.mark.parametrize("template", ["x/{algorithm.nope}", "x/{nope}", "x/{}", "x/{0}", "x/{"])
def test_a_bad_template_field_is_one_line(template):
    cfg = load_config(None, [f"output.dir={template}"])
    with pytest.raises(FedpartError, match="valid placeholders: {algorithm}, {dataset}"):
        output_path(cfg)


def test_compare_and_sweep_land_exactly_where_asked(tmp_path, tiny_cfg, capsys):
    import yaml

    config = tmp_path / "tiny.yaml"
    tiny_cfg["federation"]["rounds"] = 1
    config.write_text(yaml.safe_dump(tiny_cfg))
    where = tmp_path / "aud x #1: 'ü'"
    code = main(["compare", str(config), f"output.dir={where}/{{algorithm}}",
                 "--algorithms", "fedavg,local", "--jobs", "1", "--quiet"])  # fmt: skip
    assert code == 0
    assert (where / "fedavg" / "summary.json").is_file() and (where / "local").is_dir()
    sweep = tmp_path / "sweep #2"
    code = main(["sweep", str(config), "algorithm.name=fedavg", "--seeds", "0",
                 "--out", str(sweep), "--jobs", "1", "--quiet"])  # fmt: skip
    assert code == 0
    assert list(sweep.rglob("summary.json")), list(sweep.rglob("*"))
    assert main(["run", str(config), f"output.dir={tmp_path}/{{nope}}", "--quiet"]) == 2
    assert "valid placeholders" in capsys.readouterr().err


# ----------------------------------------------------------------- through the command line
# The rule for braces, in ``output.dir`` only (``api.output_path``): the value is a Python
# ``str.format`` template. ``{algorithm}``, ``{dataset}``, ``{seed}`` (and ``{time}``, not drawn
# here: it is now) are filled in, ``{{`` and ``}}`` are a literal ``{`` and ``}``, and anything
# else -- an unmatched brace, an unknown field, ``{}``, ``{0}``, ``{algorithm.nope}`` -- is
# refused in one line (exit 2) before anything is written. ``dataset.root`` and ``sweep --out``
# have no placeholders: a brace there is a brace.

PATH_EXAMPLES = int(os.environ.get("FEDPART_PATH_EXAMPLES", "10"))
CLI = settings(
    max_examples=PATH_EXAMPLES,
    deadline=None,
    derandomize="FEDPART_PATH_EXAMPLES" not in os.environ,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: tiny_cfg's values of the placeholders
FIELDS = {"dataset": "digits", "seed": 3}
BRACES = ["{", "}", "{{", "}}", "{algorithm}", "{dataset}", "{seed}", "{nope}", "{}", "{0}",
          "{algorithm.nope}"]  # fmt: skip
SPECIAL = " #:'\"\n\t\r\\$,[]&*!|>%@`~üé✓€漢\u00a0\u2028"


def folder_names(*, comma: bool = True) -> st.SearchStrategy[str]:
    """One path component: spaces, ``#``, ``:``, quotes, unicode, newlines, tabs and braces
    (no ``/`` or NUL, which no component holds; not ``.`` or ``..``)."""
    bad = "\0/{}" + ("" if comma else ",")
    char = st.one_of(
        st.sampled_from([c for c in SPECIAL if c not in bad]),
        st.characters(blacklist_categories=("Cs",), blacklist_characters=bad),
    )
    text = st.text(char, min_size=1, max_size=6)
    piece = st.one_of(text, text, st.sampled_from(BRACES))  # two in three pieces braceless
    return st.lists(piece, min_size=1, max_size=4).map("".join).filter(lambda n: n.strip("."))


def expanded(template: str, algorithm: str) -> str | None:
    """``template`` with its placeholders filled in; None where it must be refused."""
    try:
        return template.format_map({"algorithm": algorithm, **FIELDS})
    except (KeyError, IndexError, ValueError, AttributeError):
        return None


@pytest.fixture
def tiny_yaml(tmp_path, tiny_cfg, monkeypatch):
    """tiny_cfg for one round as a YAML file; the tests run in an empty folder of their own."""
    tiny_cfg["federation"]["rounds"] = 1
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_cfg))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    yield str(config)
    assert not list((tmp_path / "cwd").iterdir())  # nothing written beside the runs


def files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if not p.is_dir()]


def recorded(run_dir: Path) -> dict:
    return yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))


def refused_in_one_line(code: int, err: str) -> None:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err


@CLI
@given(name=folder_names(), root=folder_names())
@example(name="aud x #1", root="data #2: {x}")
@example(name="b{{x}}", root="r")
@example(name="{nope}", root="r")
def test_run_lands_where_asked_or_refuses_in_one_line(tmp_path, tiny_yaml, capsys, name, root):
    """``output.dir`` lands in the folder its template names; config.yaml records the template
    and ``dataset.root`` (digits reads nothing from it) exactly as given."""
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    where, data = f"{base}/{name}", f"{base}/{root}"
    code = main(["run", tiny_yaml, f"output.dir={where}", f"dataset.root={data}", "--quiet"])
    err = capsys.readouterr().err
    expected = expanded(where, "fedavg")
    event("refused" if expected is None else "ran")
    if expected is None:
        refused_in_one_line(code, err)
        assert not files(base)
        return
    assert code == 0, err
    run_dir = Path(expected)
    assert (run_dir / "summary.json").is_file()
    assert all(run_dir in f.parents for f in files(base))
    cfg = recorded(run_dir)
    assert cfg["output"]["dir"] == where and cfg["dataset"]["root"] == data


@CLI
@given(name=folder_names(), root=folder_names())
@example(name="aud x #1", root="data #2: {x}")
@example(name="b{{algorithm}}", root="r")
@example(name="x{algorithm.nope}", root="r")
def test_compare_lands_where_asked_or_refuses_in_one_line(tmp_path, tiny_yaml, capsys, name, root):
    """Each method's run lands in the template filled in with its name; its config.yaml
    records that folder as ``output.dir`` and ``dataset.root`` as given."""
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    where, data = f"{base}/{name}/{{algorithm}}", f"{base}/{root}"
    code = main(["compare", tiny_yaml, f"output.dir={where}", f"dataset.root={data}",
                 "--algorithms", "fedavg,local", "--jobs", "1", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    expected = {a: expanded(where, a) for a in ("fedavg", "local")}
    event("refused" if None in expected.values() else "ran")
    if None in expected.values():
        refused_in_one_line(code, err)
        assert not files(base)
        return
    assert code == 0, err
    for folder in expected.values():
        run_dir = Path(folder)
        assert (run_dir / "summary.json").is_file()
        cfg = recorded(run_dir)
        assert cfg["output"]["dir"] == folder and cfg["dataset"]["root"] == data
    common = Path(os.path.commonpath(list(expected.values())))  # the table's plots go there
    assert all(common in f.parents for f in files(base))


@CLI
@given(name=folder_names(), root=folder_names(comma=False))
@example(name="s{x} #1", root="data #2: {x} ")
def test_sweep_lands_where_asked(tmp_path, tiny_yaml, capsys, name, root):
    """``--out`` is a folder as written (no placeholders); a single value is taken as written
    (a comma would make it an axis of the grid, so none is drawn here)."""
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    out, data = f"{base}/{name}", f"{base}/{root}"
    code = main(["sweep", tiny_yaml, f"dataset.root={data}", "--seeds", "0", "--out", out,
                 "--jobs", "1", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    run_dir = Path(out) / "all" / "seed0"
    assert (run_dir / "summary.json").is_file()
    assert all(Path(out) in f.parents for f in files(base))
    cfg = recorded(run_dir)
    assert cfg["output"]["dir"] == str(run_dir.resolve()) and cfg["dataset"]["root"] == data


def test_sweep_refuses_output_dir_in_one_line(tmp_path, tiny_yaml, capsys):
    code = main(["sweep", tiny_yaml, f"output.dir={tmp_path}/x", "--out", str(tmp_path / "s")])
    refused_in_one_line(code, capsys.readouterr().err)
    assert not (tmp_path / "s").exists() and not (tmp_path / "x").exists()


def test_compare_adds_the_method_where_the_template_does_not_fill_it_in(tmp_path, tiny_yaml):
    """``{{algorithm}}`` is a literal ``{algorithm}``: each method's run goes below it."""
    where = tmp_path / "c{algorithm}"
    code = main(["compare", tiny_yaml, f"output.dir={tmp_path}/c{{{{algorithm}}}}",
                 "--algorithms", "fedavg,local", "--jobs", "1", "--quiet"])  # fmt: skip
    assert code == 0
    assert (where / "fedavg" / "summary.json").is_file()
    assert (where / "local" / "summary.json").is_file()


def test_the_commands_of_the_issue_in_a_process(tmp_path, tiny_yaml):
    """``fedpart run`` with a field that does not exist, and ``fedpart compare`` into a folder
    with a space and a ``#``, as processes (in worker processes: ``--jobs 2``)."""
    cli = [sys.executable, "-m", "fedpart.cli"]
    bad = subprocess.run([*cli, "run", tiny_yaml, f"output.dir={tmp_path}/zz/{{algorithm.nope}}"],
                         env=interpreter_env(), capture_output=True, text=True)  # fmt: skip
    refused_in_one_line(bad.returncode, bad.stderr)
    assert "algorithm.nope" in bad.stderr and not (tmp_path / "zz").exists()
    where = tmp_path / "aud x #1"
    good = subprocess.run([*cli, "compare", tiny_yaml, f"output.dir={where}/{{algorithm}}",
                           "--algorithms", "fedavg,fedper", "--quiet"],
                          env=interpreter_env(), capture_output=True, text=True)  # fmt: skip
    assert good.returncode == 0, good.stderr
    for method in ("fedavg", "fedper"):
        assert (where / method / "summary.json").is_file()
        assert recorded(where / method)["output"]["dir"] == str(where / method)
