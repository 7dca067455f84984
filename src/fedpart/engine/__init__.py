"""The engine: client state store, local training from recipes, mixing, the round loop."""

from fedpart.engine.recipe import LossTerm, Phase, Recipe
from fedpart.engine.simulation import Simulation

__all__ = ["LossTerm", "Phase", "Recipe", "Simulation"]
