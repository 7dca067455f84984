import numpy as np
import pytest
import torch

from fedpart.data.partition import (
    PARTITIONS,
    assign_test_like_train,
    describe_partition,
    label_matrix,
    partition,
    plot_label_matrix,
    skew,
    split_clients,
)
from fedpart.errors import ConfigError, DataError

NUM_CLASSES = 10


def make_labels(n: int = 3000, seed: int = 0) -> np.ndarray:
    """Imbalanced labels: class k is about (k + 5) / sum as frequent, shuffled."""
    weights = np.arange(5, 5 + NUM_CLASSES, dtype=float)
    rng = np.random.default_rng(seed)
    return rng.choice(NUM_CLASSES, size=n, p=weights / weights.sum())


LABELS = make_labels()


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def tv(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a / a.sum() - b / b.sum()).sum())


@pytest.mark.parametrize("kind", sorted(PARTITIONS))
def test_every_sample_at_most_once_sorted_int64(kind):
    parts = partition(LABELS, 12, kind, rng(), alpha=0.5, min_size=10)
    assert len(parts) == 12
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)
    assert allidx.min() >= 0 and allidx.max() < len(LABELS)
    for p in parts:
        assert p.dtype == np.int64 and len(p) > 0
        assert np.all(np.diff(p) > 0)
    if kind in ("iid", "dirichlet", "dirichlet_prior", "shards"):
        assert len(allidx) == len(LABELS)


@pytest.mark.parametrize("kind", sorted(PARTITIONS))
def test_same_seed_same_partition(kind):
    a = partition(LABELS, 8, kind, rng(7), alpha=0.3)
    b = partition(LABELS, 8, kind, rng(7), alpha=0.3)
    c = partition(LABELS, 8, kind, rng(8), alpha=0.3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_iid_equal_sizes():
    sizes = [len(p) for p in partition(LABELS, 7, "iid", rng())]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == len(LABELS)


@pytest.mark.parametrize("kind", ["dirichlet", "dirichlet_prior"])
def test_min_size_honoured(kind):
    parts = partition(LABELS, 20, kind, rng(1), alpha=0.3, min_size=40)
    assert min(len(p) for p in parts) >= 40


@pytest.mark.parametrize("kind", ["dirichlet", "dirichlet_prior"])
def test_smaller_alpha_more_skew(kind):
    def measured(alpha: float) -> float:
        values = []
        for seed in range(3):
            parts = partition(LABELS, 20, kind, rng(seed), alpha=alpha, min_size=5)
            values.append(skew(label_matrix(parts, LABELS, NUM_CLASSES)))
        return float(np.mean(values))

    low, high = measured(0.1), measured(10.0)
    assert low > high + 0.2
    iid = skew(label_matrix(partition(LABELS, 20, "iid", rng()), LABELS, NUM_CLASSES))
    assert high > iid


def test_dirichlet_prior_sizes_about_equal():
    parts = partition(LABELS, 15, "dirichlet_prior", rng(2), alpha=1.0)
    sizes = np.array([len(p) for p in parts])
    assert sizes.sum() == len(LABELS)
    assert np.all(np.abs(sizes - len(LABELS) / 15) <= 0.1 * len(LABELS) / 15)


def test_impossible_min_size_is_data_error():
    with pytest.raises(DataError, match="partition.min_size=50"):
        partition(LABELS, 100, "dirichlet", rng(), alpha=0.5, min_size=50)  # 100*50 > 3000
    with pytest.raises(DataError, match="lower partition.min_size or raise partition.alpha"):
        partition(LABELS, 100, "dirichlet", rng(), alpha=0.01, min_size=25, max_tries=20)


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError) as err:
        partition(LABELS, 5, "bogus", rng())
    assert err.value.key == "partition.kind" and "dirichlet" in str(err.value)
    with pytest.raises(ConfigError) as err:
        partition(LABELS, 5, "dirichlet", rng(), alpha=0.0)
    assert err.value.key == "partition.alpha"
    for n in (0, len(LABELS) + 1):
        with pytest.raises(ConfigError) as err:
            partition(LABELS, n, "iid", rng())
        assert err.value.key == "partition.num_clients"
    with pytest.raises(ConfigError) as err:
        partition(LABELS, 5, "classes", rng(), classes_per_client=NUM_CLASSES + 1)
    assert err.value.key == "partition.classes_per_client"


def test_shards_are_pathological():
    parts = partition(LABELS, 50, "shards", rng(3), shards_per_client=2)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 2
    nlabels = (label_matrix(parts, LABELS, NUM_CLASSES) > 0).sum(axis=1)
    # a shard is within one class or straddles a class boundary (at most 9 of 100 shards)
    assert np.all(nlabels <= 4)
    assert np.mean(nlabels <= 2) >= 0.8


def test_classes_exact_count_and_balanced_use():
    parts = partition(LABELS, 20, "classes", rng(4), classes_per_client=3)
    m = label_matrix(parts, LABELS, NUM_CLASSES)
    assert np.all((m > 0).sum(axis=1) == 3)
    holders = (m > 0).sum(axis=0)
    assert holders.max() - holders.min() <= 1  # 60 slots over 10 classes: 6 each
    assert len(np.concatenate(parts)) == len(LABELS)  # every class held, every sample given


def test_split_clients_stratified_and_disjoint():
    parts = partition(LABELS, 10, "dirichlet", rng(5), alpha=0.5, min_size=50)
    splits = split_clients(parts, LABELS, (0.6, 0.2, 0.2), rng(6))
    for part, s in zip(parts, splits, strict=True):
        joined = np.concatenate([s.train, s.val, s.test])
        assert np.array_equal(np.sort(joined), part)  # a partition of the client's samples
        assert abs(len(s.test) - 0.2 * len(part)) <= 1 and abs(len(s.val) - 0.2 * len(part)) <= 1
        tr = np.bincount(LABELS[s.train], minlength=NUM_CLASSES)
        te = np.bincount(LABELS[s.test], minlength=NUM_CLASSES)
        allc = np.bincount(LABELS[part], minlength=NUM_CLASSES)
        assert np.all(tr[allc > 0] >= 1)  # every class the client has is in its train split
        if len(part) >= 200:
            assert tv(tr, te) < 0.1


def test_split_fraction_zero_and_tiny_classes():
    labels = np.array([0, 1, 1, 2, 2, 2, 3, 3, 3, 3])
    (s,) = split_clients([np.arange(10)], labels, (0.75, 0.0, 0.25), rng())
    assert len(s.val) == 0
    assert set(labels[s.train]) == {0, 1, 2, 3}
    assert len(s.train) + len(s.test) == 10 and 2 <= len(s.test) <= 3


def test_split_fractions_must_sum_to_one():
    with pytest.raises(ConfigError) as err:
        split_clients([np.arange(5)], np.zeros(5, dtype=int), (0.5, 0.2, 0.2), rng())
    assert err.value.key == "partition.split"


def test_assign_test_like_train_matches_proportions():
    train_labels = LABELS
    test_labels = make_labels(1500, seed=1)
    parts = partition(train_labels, 8, "dirichlet", rng(9), alpha=0.3, min_size=50)
    tests = assign_test_like_train(parts, train_labels, test_labels, rng(10))
    allidx = np.concatenate(tests)
    assert len(np.unique(allidx)) == len(allidx)  # at most once
    assert len(allidx) == len(test_labels)  # every class is held by some client here
    m_train = label_matrix(parts, train_labels, NUM_CLASSES)
    m_test = label_matrix(tests, test_labels, NUM_CLASSES)
    assert np.all(m_test[m_train == 0] == 0)  # no class a client does not train on
    for c in range(NUM_CLASSES):
        share_train = m_train[:, c] / m_train[:, c].sum()
        share_test = m_test[:, c] / m_test[:, c].sum()
        assert np.abs(share_train - share_test).max() < 0.02
    for i in range(len(parts)):
        assert tv(m_train[i], m_test[i]) < 0.1


def test_assign_test_skips_classes_nobody_has():
    train_labels = np.array([0, 0, 1, 1])
    test_labels = np.array([0, 1, 2, 2, 0])
    tests = assign_test_like_train(
        [np.array([0, 1]), np.array([2, 3])], train_labels, test_labels, rng()
    )
    assert sorted(tests[0].tolist()) == [0, 4] and tests[1].tolist() == [1]


def test_describe_and_plot(tmp_path):
    parts = partition(LABELS, 6, "dirichlet", rng(), alpha=0.5)
    m = label_matrix(parts, LABELS, NUM_CLASSES)
    assert m.shape == (6, NUM_CLASSES) and m.sum() == len(LABELS)
    text = describe_partition(m)
    assert "skew" in text and "median" in text and "labels per client" in text
    assert f"{skew(m):.3f}" in text
    png = tmp_path / "sub" / "m.png"
    plot_label_matrix(m, png, title="t")
    assert png.stat().st_size > 1000


def test_skew_bounds():
    assert skew(np.array([[5, 5], [5, 5]])) == 0.0
    assert skew(np.array([[10, 0], [0, 10]])) == pytest.approx(0.5)
    assert skew(np.zeros((3, 4))) == 0.0


def test_pool_size_partitions_a_seeded_subset(tmp_path):
    from fedpart.config import Config
    from fedpart.data import load_dataset
    from fedpart.engine.data import build_federated_data
    from fedpart.errors import ConfigError

    def data(**partition):
        cfg = Config.from_dict(
            {"dataset": {"name": "digits"}, "partition": {"num_clients": 4, **partition}}
        )
        return build_federated_data(cfg, load_dataset("digits"))

    def used(d):
        return torch.cat([torch.cat([c.train, c.val, c.test]) for c in d.clients])

    full, sub, again = data(), data(pool_size=600), data(pool_size=600)
    assert used(full).numel() == 1797 and used(sub).numel() == 600
    assert torch.equal(used(sub), used(again))  # the same seed draws the same subset
    assert len(set(used(sub).tolist())) == 600  # each sample at most once
    with pytest.raises(ConfigError, match="partition.pool_size"):
        data(pool_size=5000)
    with pytest.raises(ConfigError, match="partition.pool_size"):
        data(pool_size=-1)
