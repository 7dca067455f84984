"""Declared option limits: a method's ``Options`` fields name their bounds and choices in their
metadata, and one generic check (``fedpart.config.check_limits``) enforces them when the
options are parsed, with one line naming the key and what it allows."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from fedpart.algorithms import ALGORITHMS
from fedpart.cli import main
from fedpart.config import LIMITS, check_limits
from fedpart.errors import ConfigError


@dataclasses.dataclass
class ToyOptions:
    rate: float = dataclasses.field(default=0.5, metadata={"gt": 0, "le": 1})
    steps: int = dataclasses.field(default=1, metadata={"ge": 1})
    epochs: int | None = dataclasses.field(default=None, metadata={"ge": 0})
    rounds: list[int] = dataclasses.field(default_factory=lambda: [0, 5], metadata={"ge": 0})
    mode: str = dataclasses.field(default="a", metadata={"choices": ("a", "b")})
    share: float = dataclasses.field(default=0.0, metadata={"ge": 0, "lt": 1})


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rate": 0.0}, "algorithm.rate: must be in (0, 1], got 0.0"),
        ({"rate": 1.5}, "algorithm.rate: must be in (0, 1], got 1.5"),
        ({"rate": float("nan")}, "algorithm.rate: must be in (0, 1], got nan"),
        ({"steps": 0}, "algorithm.steps: must be >= 1, got 0"),
        ({"epochs": -1}, "algorithm.epochs: must be >= 0, got -1"),
        ({"rounds": [0, -3]}, "algorithm.rounds[1]: must be >= 0, got -3"),
        ({"mode": "c"}, "algorithm.mode: unknown value 'c'; valid choices: a, b"),
        ({"share": 1.0}, "algorithm.share: must be in [0, 1), got 1.0"),
    ],
)
def test_a_value_outside_its_declared_limits_is_one_line(change, message):
    with pytest.raises(ConfigError) as err:
        check_limits(ToyOptions(**change), "algorithm")
    assert str(err.value) == message


def test_values_inside_their_limits_pass():
    check_limits(ToyOptions(), "algorithm")
    check_limits(ToyOptions(rate=1.0, steps=7, epochs=0, rounds=[], mode="b"), "algorithm")


def test_every_method_declares_limits_in_the_shared_vocabulary_and_no_check_method():
    for name, cls in ALGORITHMS.items():
        assert not hasattr(cls.Options, "check"), f"{name}: limits belong in field metadata"
        for f in dataclasses.fields(cls.Options):
            unknown = set(f.metadata) - {*LIMITS, "doc"}
            assert not unknown, f"{name}.{f.name}: unknown metadata {unknown}"
        cls.parse_options({})  # every default is inside its own limits


@pytest.mark.parametrize(
    "algorithm, override, message",
    [
        ("fedprox", "algorithm.mu=-1", "algorithm.mu: must be >= 0, got -1.0"),
        (
            "dispfl",
            "algorithm.regrow=magic",
            "algorithm.regrow: unknown value 'magic'; valid choices: gradient, random",
        ),
        ("pa3dfl", "algorithm.hn_clip=-0.5", "algorithm.hn_clip: must be >= 0, got -0.5"),
    ],
)
def test_the_cli_reports_a_bad_option_in_one_line_with_exit_code_2(
    tiny_cfg, tmp_path, capsys, algorithm, override, message
):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**tiny_cfg, "algorithm": {"name": algorithm}}))
    out = tmp_path / "out"
    assert main(["run", str(path), override, f"output.dir={out}", "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"error: {message}"]
    assert not out.exists()
