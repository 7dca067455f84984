"""Paths mean what they say: a string key given as ``key=value`` is taken as written (a ``#``
is no YAML comment, a ``:`` no mapping), ``compare`` and ``sweep`` hand run directories on
without re-parsing them, and a template field that does not exist is one line."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedpart.api import output_path
from fedpart.cli import main
from fedpart.config import load_config
from fedpart.errors import FedpartError

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
