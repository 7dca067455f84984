"""FedAvg (McMahan et al., 2017): every block shared, data-size-weighted averaging."""

from fedpart.algorithms.base import Algorithm
from fedpart.registry import register


@register
class FedAvg(Algorithm):
    """Clients train the whole model; the server averages all of it.

    w^{t+1} = Σ_{i∈S_t} n_i w_i^{t+1} / Σ_{i∈S_t} n_i. The personalised accuracy of FedAvg is
    the global model evaluated on every client's own test split.
    """

    name = "fedavg"
    summary = "Federated averaging of the whole model (no personalisation)."
