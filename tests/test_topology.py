import numpy as np
import pytest
import torch

from fedpart.errors import ConfigError
from fedpart.topology import TOPOLOGIES, Graph, Topology


def test_kregular_is_undirected_regular_and_time_varying():
    topo = Topology("kregular", 12, 4, seed=1)
    g0, g1 = topo.graph(0), topo.graph(1)
    for g in (g0, g1):
        assert g.undirected
        assert (g.adj.sum(1) == 4).all()
        assert not g.adj.diagonal().any()
    assert not np.array_equal(g0.adj, g1.adj)
    assert np.array_equal(g0.adj, Topology("kregular", 12, 4, seed=1).graph(0).adj)
    fixed = Topology("kregular", 12, 4, seed=1, time_varying=False)
    assert np.array_equal(fixed.graph(0).adj, fixed.graph(7).adj)
    odd = Topology("kregular", 12, 3, seed=0).graph(0)
    assert (odd.adj.sum(1) == 3).all() and odd.undirected


def test_kout_and_kpull_degrees():
    out = Topology("kout", 10, 3, seed=0).graph(2)
    assert (out.adj.sum(1) == 3).all() and not out.undirected
    pull = Topology("kpull", 10, 3, seed=0).graph(2)
    assert (pull.adj.sum(0) == 3).all()
    assert all(len(pull.in_neighbors(i)) == 3 and i not in pull.in_neighbors(i) for i in range(10))


def test_ring_full_exponential():
    ring = Topology("ring", 6, 1, seed=0).graph(0)
    assert ring.undirected and (ring.adj.sum(1) == 2).all()
    full = Topology("full", 5, 1, seed=0).graph(0)
    assert full.adj.sum() == 20
    expo = Topology("exponential", 8, 1, seed=0, time_varying=False).graph(0)
    assert sorted(expo.out_neighbors(0)) == [1, 2, 4]
    one_peer = Topology("exponential", 8, 1, seed=0)
    assert [one_peer.graph(t).out_neighbors(0) for t in range(4)] == [[1], [2], [4], [1]]


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_weights_are_stochastic(name):
    g = Topology(name, 10, 4, seed=3).graph(1)
    uniform = g.weights("uniform")
    assert torch.allclose(uniform.sum(1), torch.ones(10, dtype=torch.float64))
    push = g.weights("push")
    assert torch.allclose(push.sum(0), torch.ones(10, dtype=torch.float64))
    size = g.weights("size", sizes=np.arange(1, 11))
    assert torch.allclose(size.sum(1), torch.ones(10, dtype=torch.float64))
    if g.undirected:
        mh = g.weights("metropolis")
        assert torch.allclose(mh, mh.T)
        assert torch.allclose(mh.sum(0), torch.ones(10, dtype=torch.float64))
        assert (mh >= 0).all()
    else:
        with pytest.raises(ConfigError, match="undirected"):
            g.weights("metropolis")
    # only edges (and self-loops) carry weight
    support = torch.from_numpy(g.adj.T | np.eye(10, dtype=bool))
    assert ((push != 0) <= support).all() and ((uniform != 0) == support).all()


def test_link_drops_keep_undirected_graphs_symmetric():
    base = Topology("kregular", 20, 6, seed=0).graph(3)
    dropped = Topology("kregular", 20, 6, seed=0, drop_prob=0.3).graph(3)
    assert dropped.undirected
    assert dropped.adj.sum() < base.adj.sum()
    assert (dropped.adj <= base.adj).all()
    directed = Topology("kout", 20, 6, seed=0, drop_prob=0.5).graph(3)
    assert directed.adj.sum() < 20 * 6


def test_impossible_graphs_are_config_errors():
    with pytest.raises(ConfigError, match="m·k must be even"):
        Topology("kregular", 5, 3, seed=0)
    with pytest.raises(ConfigError, match="< num_clients"):
        Topology("kout", 5, 5, seed=0)
    with pytest.raises(ConfigError, match="unknown topology"):
        Topology("star-ish", 5, 1, seed=0)


def test_graph_neighbour_lists():
    adj = np.zeros((3, 3), dtype=bool)
    adj[0, 1] = adj[2, 1] = True
    g = Graph(adj)
    assert g.in_neighbors(1) == [0, 2] and g.out_neighbors(0) == [1]
    assert g.edges() == [(0, 1), (2, 1)]
