"""Methods, one file each, registered by name in :data:`ALGORITHMS`."""

from fedpart.algorithms import (  # noqa: F401 - registration
    dfedavg,
    dfedavgm,
    dfedpgp,
    dispfl,
    ditto,
    fedap,
    fedavg,
    fedbn,
    fedcmd,
    feddyn,
    fedfomo,
    fedper,
    fedprox,
    fedrep,
    fedrod,
    fedrolex,
    fedseqlayer,
    fjord,
    flanc,
    heterofl,
    lgfedavg,
    local,
    osgp,
    pa3dfl,
    pfedgate,
    pfedhn,
    pfedsim,
    tailorfl,
    uapdfl,
)
from fedpart.algorithms.base import Algorithm
from fedpart.registry import ALGORITHMS, register

__all__ = ["ALGORITHMS", "Algorithm", "register"]
