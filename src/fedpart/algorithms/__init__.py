"""Methods, one file each, registered by name in :data:`ALGORITHMS`."""

from fedpart.algorithms import fedavg, local  # noqa: F401 - registration
from fedpart.algorithms.base import Algorithm
from fedpart.algorithms.registry import ALGORITHMS, register

__all__ = ["ALGORITHMS", "Algorithm", "register"]
