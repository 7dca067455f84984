"""Capacity profiles, widths from capacities (Pa3dFL §2.11.1) and the five capacity groups."""

from __future__ import annotations

import numpy as np
import pytest

from fedpart.engine.capacity import (
    DEFAULT_P_MIN,
    capacities,
    capacity_groups,
    group_labels,
    width_of,
    widths,
)


def test_ideal_is_all_ones() -> None:
    assert np.array_equal(capacities("ideal", 7), np.ones(7))


def test_uniform_is_the_1_to_100_percent_grid_in_a_seeded_order() -> None:
    r = capacities("uniform", 100, 3)
    assert np.allclose(np.sort(r), np.linspace(0.01, 1.0, 100))
    assert np.array_equal(r, capacities("uniform", 100, np.random.default_rng(3)))
    assert not np.array_equal(r, capacities("uniform", 100, 4))
    assert np.allclose(capacities("uniform", 100, shuffle=False), np.linspace(0.01, 1.0, 100))


def test_random_profiles_need_a_seed() -> None:
    with pytest.raises(ValueError, match="rng"):
        capacities("uniform", 10)
    with pytest.raises(ValueError, match="rng"):
        capacities("uniform_random", 10)


def test_uniform_random_and_list() -> None:
    r = capacities("uniform_random", 50, 0)
    assert r.shape == (50,) and r.min() >= 0.01 and r.max() <= 1.0
    assert np.array_equal(capacities("list", 3, values=[0.25, 1, 0.5]), [0.25, 1.0, 0.5])


@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [
        ("list", {}),
        ("list", {"values": [0.5]}),
        ("list", {"values": [0.5, 0.0]}),
        ("list", {"values": [0.5, 1.5]}),
        ("ideal", {"values": [1.0, 1.0]}),
        ("nope", {}),
    ],
)
def test_bad_profiles_are_refused(kind: str, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        capacities(kind, 2, 0, **kwargs)


def test_width_of_matches_table_2_ratios() -> None:
    # Table 2's capacity ratios are the squares of these widths
    for r, p in [(1 / 256, 1 / 16), (1 / 64, 1 / 8), (1 / 4, 1 / 2), (1.0, 1.0)]:
        assert width_of(r) == p
    assert DEFAULT_P_MIN == 1 / 16


def test_width_of_is_the_largest_multiple_with_p_squared_below_r() -> None:
    for r in np.linspace(0.01, 1.0, 100):
        p = width_of(float(r))
        assert p >= 1 / 16 and round(p * 16) == p * 16
        if r >= 1 / 256:
            assert p * p <= r + 1e-12
            assert (p + 1 / 16) ** 2 > r
    assert width_of(0.001) == 1 / 16  # below p_min²: the smallest model
    assert width_of(0.3, p_min=0.25) == 0.5
    assert np.array_equal(widths([1 / 256, 0.5, 1.0]), [1 / 16, 11 / 16, 1.0])


def test_five_groups_of_twenty_for_the_uniform_profile() -> None:
    r = capacities("uniform", 100, 0)
    g = capacity_groups(r)
    assert np.array_equal(np.bincount(g), [20] * 5)
    # the groups follow r: every r of group g is below every r of group g + 1
    for k in range(4):
        assert r[g == k].max() < r[g == k + 1].min()
    assert np.array_equal(capacity_groups([0.2, 0.2001, 1.0, 0.01]), [0, 1, 4, 0])
    assert np.array_equal(capacity_groups(capacities("ideal", 4)), [4, 4, 4, 4])
    assert group_labels()[1] == "(0.2, 0.4]"
