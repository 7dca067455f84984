import pytest

from fedpart.config import Config, load_config
from fedpart.errors import ConfigError


def test_defaults_validate():
    cfg = Config.from_dict({})
    assert cfg.algorithm.name == "fedavg"
    assert cfg.federation.rounds > 0


def test_quickstart_config_loads():
    cfg = load_config("configs/quickstart.yaml", ["federation.rounds=3"])
    assert cfg.federation.rounds == 3
    assert cfg.dataset.name == "digits"
    assert cfg.model.options == {"padding": 2, "width": 4}


def test_unknown_key_names_valid_choices():
    with pytest.raises(ConfigError) as err:
        load_config("configs/quickstart.yaml", ["federation.roundz=3"])
    msg = str(err.value)
    assert msg.startswith("federation.roundz")
    assert "rounds" in msg and "join_ratio" in msg
    assert "\n" not in msg


def test_unknown_algorithm_lists_choices():
    with pytest.raises(ConfigError) as err:
        load_config("configs/quickstart.yaml", ["algorithm.name=nope"])
    assert (
        "algorithm.name" in str(err.value)
        and "fedavg" in str(err.value)
        and "local" in str(err.value)
    )


@pytest.mark.parametrize(
    "override, key",
    [
        ("federation.rounds=-1", "federation.rounds"),
        ("federation.lr=abc", "federation.lr"),
        ("federation.join_ratio=1.5", "federation.join_ratio"),
        ("partition.alpha=0", "partition.alpha"),
        ("partition.kind=weird", "partition.kind"),
        ("dataset.name=imagenet22k", "dataset.name"),
        ("model.name=gpt", "model.name"),
        ("model.nonsense=1", "model.nonsense"),
        ("algorithm.mu=0.1", "algorithm.mu"),
        ("partition.split=[0.5,0.1]", "partition.split"),
        ("engine.backend=gpu-magic", "engine.backend"),
        ("federation.local_epochs=true", "federation.local_epochs"),
        ("partition.test_source=official", "partition.test_source"),
    ],
)
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        load_config("configs/quickstart.yaml", [override])
    assert str(err.value).startswith(key)


def test_overrides_parse_types():
    cfg = load_config(
        None, ["federation.lr=0.5", "partition.split=[0.6,0.2,0.2]", "dataset.merge_test=false"]
    )
    assert cfg.federation.lr == 0.5
    assert cfg.partition.split == [0.6, 0.2, 0.2]
    assert cfg.dataset.merge_test is False


def test_roundtrip_to_dict():
    cfg = load_config("configs/quickstart.yaml")
    again = Config.from_dict(cfg.to_dict())
    assert again == cfg


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize(
    "path",
    sorted(str(p) for p in __import__("pathlib").Path("configs").rglob("*.yaml")),
)
def test_every_shipped_config_validates(path):
    cfg = load_config(path)
    assert cfg.federation.rounds > 0
