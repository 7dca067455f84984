"""Communication graphs of decentralized federations and their mixing weights."""

from fedpart.topology.graphs import TOPOLOGIES, WEIGHTS, Graph, Topology, build_topology

__all__ = ["TOPOLOGIES", "WEIGHTS", "Graph", "Topology", "build_topology"]
