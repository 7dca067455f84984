"""Moved to :mod:`fedpart.seeding` (below every other layer: topology and data draw from it too);
re-exported here for code that imports it from the engine."""

from fedpart.seeding import PURPOSES, numpy_rng, seed_for, torch_generator

__all__ = ["PURPOSES", "numpy_rng", "seed_for", "torch_generator"]
