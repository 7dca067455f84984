"""FedBN (Li et al., ICLR 2021): BatchNorm layers stay local, everything else is FedAvg."""

from __future__ import annotations

from typing import Any

from fedpart.algorithms.base import Algorithm
from fedpart.errors import ConfigError, FedpartError
from fedpart.models import batchnorm_keys, build_model
from fedpart.registry import register


def require_batchnorm(algorithm: Algorithm) -> None:
    """Fail with one line when the model has no BatchNorm layer (FedBN, FedAP need one)."""
    if not batchnorm_keys(algorithm.ctx.model):
        name = algorithm.ctx.cfg.model.name
        raise ConfigError(
            "model",
            f"{algorithm.name} needs BatchNorm layers, but model {name} has none; "
            "use lenet5, vgg11, resnet18 (norm=bn) or fedavgcnn with model.norm=bn",
        )


def builds_batchnorm(cfg: Any, algo_cls: type[Algorithm]) -> bool:
    """Whether ``cfg``'s model, with the method's ``model_defaults``, has a BatchNorm layer
    (``fedpart compare`` leaves FedBN and FedAP out when it has none). A config that cannot
    build its model is left to the run to report."""
    from fedpart.data.registry import DATASETS
    from fedpart.engine.build import model_options

    info = DATASETS.get(cfg.dataset.name)
    if info is None:
        return True
    try:
        model = build_model(
            cfg.model.name,
            num_classes=info.num_classes,
            input_shape=info.input_shape,
            **model_options(cfg, algo_cls),
        )
    except (FedpartError, KeyError, ValueError):
        return True
    return bool(batchnorm_keys(model))


class LocalBatchNorm(Algorithm):
    """BatchNorm affine parameters and running statistics stay on each client (FedBN; FedAP
    builds on it): the model gets BatchNorm where it offers it, and ``fedpart compare`` leaves
    the method out for a model without."""

    model_defaults = {"norm": "bn"}
    # the server's tensors without BatchNorm are no client's model
    has_global_model = False

    @classmethod
    def supports(cls, cfg: Any) -> bool:
        return builds_batchnorm(cfg, cls)

    def personal_keys(self) -> set[str]:
        bn = batchnorm_keys(self.ctx.model, statistics=True, affine=True)
        return super().personal_keys() | set(bn)

    def setup(self) -> None:
        require_batchnorm(self)


@register
class FedBN(LocalBatchNorm):
    """Every client keeps its BatchNorm affine parameters (γ, β) and running statistics (μ, σ²);
    the other tensors are averaged with data-size weights, w = Σ_{i∈S_t} n_i w_i / Σ n_i
    (the paper's Algorithm 1: aggregation skips the BN layers)."""

    name = "fedbn"
    summary = "FedAvg with BatchNorm parameters and statistics kept on each client."
