"""Pa3dFL (Wang et al., 2024): pruning and aggregation after decomposition.

Every layer but the classifier is ``θ = Reshape(θ_u θ_v)`` (Eq. 4, ``models.factorized``). The
general θ_u is never pruned and averaged uniformly (Eq. 6); the personal θ_v is generated per
client by the server's hyper-network and pruned to the client's width (Eq. 9–10), and the
hyper-network learns from the returned θ_v by the pFedHN rule (Eq. 7–8). Clients train
FedBABU-style (Alg. 3) and test the interpolation of the received and the trained model chosen
by line search on their validation split (Alg. 1). ``docs/methods/pa3dfl.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from fedpart.algorithms.widthsliced import WidthSliced
from fedpart.config import option
from fedpart.engine import method_state as saved
from fedpart.engine.evaluation import evaluate_samples
from fedpart.engine.functional import call_method
from fedpart.engine.hypernetwork import (
    DECODER_INITS,
    ENCODER_INITS,
    SIMILARITIES,
    HyperNetwork,
    HyperNetworkOptions,
    hn_metrics,
    hypernetwork_seed,
    step_on_uploads,
)
from fedpart.engine.recipe import LossTerm, Phase, Recipe, bind, recipe_function
from fedpart.errors import ConfigError
from fedpart.models import BlockModel
from fedpart.models.cnn import PA3DFL_VARIANTS, FedAvgCNN, Pa3dFLCNN
from fedpart.models.factorization import DECOMPOSITIONS, RANK_RULES, offdiagonal_gram_penalty
from fedpart.models.factorized import FactorizedCNN
from fedpart.models.width import holder_average
from fedpart.registry import register
from fedpart.seeding import torch_generator

State = dict[str, torch.Tensor]
TEST_MODELS = ("search", "received", "trained")
HEAD_INITS = ("default", "he")
#: the ``algorithm`` seed stream of the global head's He initialisation
_HEAD_STREAM = 13


@dataclasses.dataclass
class Pa3dFLOptions(HyperNetworkOptions):
    lam: float = option(0.001, "λ of the orthogonality term on conv θ_u (Eq. 32)", ge=0)
    embed_dim: int = option(64, "client-embedding size", ge=1)
    hidden_dim: int = option(64, "hyper-network hidden size", ge=1)
    depth: int = option(4, "linear layers of the hyper-network's encoder", ge=1)
    tau: float = option(1.0, "initial attention temperature τ_l of every layer", gt=0)
    encoder_init: str = option(
        "he",
        "HN encoder: PyTorch's default (collapses clients) or he (keeps them)",
        choices=ENCODER_INITS,
    )
    similarity: str = option(
        "dot",
        "attention scores: raw dot products (dot, Eq. 9) or cosines (cosine)",
        choices=SIMILARITIES,
    )
    centred: bool = option(
        True, "attention scores and decoder inputs from the encodings minus their mean"
    )
    decoder_init: str = option(
        "model",
        "HN decoders: biases at the model's initial tensors (model) or default",
        choices=DECODER_INITS,
    )
    global_head_init: str = option(
        "he",
        "frozen global head: PyTorch's default or he (N(0, 2/fan_in) weights)",
        choices=HEAD_INITS,
    )
    line_search: int = option(10, "n of Alg. 1: α is searched on the grid 0, 1/n, ..., 1", ge=1)
    hn_aggregation: bool = option(
        True, "θ_v from the hyper-network; false: kept on each client (Table 3)"
    )
    decomposition: str = option(
        "pa3dfl", "pa3dfl (Eq. 4) or flanc (Eq. 3; Table 3 ablation)", choices=DECOMPOSITIONS
    )
    flanc_ranks: str = option(
        "eq5",
        "with decomposition=flanc: R2 by Eq. 5 (eq5: only the layout changes, θ_v "
        "about Pa3dFL's size) or R2 = T/4 as FLANC's code (flanc)",
        choices=RANK_RULES,
    )
    local_head_lr_scale: float = option(
        1.0,
        "factor on the local step size for the local head only (the paper: 1, one "
        "step size; features under the frozen global head grow, see docs/methods/pa3dfl.md)",
        ge=0,
    )
    test_model: str = option(
        "search", "search (Alg. 1), received (α = 0) or trained (α = 1)", choices=TEST_MODELS
    )


def factorized_model(
    model: BlockModel,
    input_shape: tuple[int, ...],
    p_min: float,
    decomposition: str,
    ranks: str = "flanc",
) -> FactorizedCNN:
    """The factorized form of a chain CNN (Pa3dFL's ``pa3dfl_cnn`` or the quick start's
    ``fedavgcnn``), with both heads, fresh factors and ranks from ``p_min`` (Eq. 5; ``ranks``:
    a FLANC layer's rank rule)."""
    if isinstance(model, Pa3dFLCNN):
        spec = PA3DFL_VARIANTS[model.variant]
        classes = model.head.out_features
    elif isinstance(model, FedAvgCNN) and model.head_names == ("fc2",) and model.conv1.norm is None:
        spec = {
            "channels": (model.conv1.out_channels, model.conv2.out_channels),
            "padding": model.conv1.padding[0],
            "fc": (model.fc1.out_features,),
        }
        classes = model.fc2.out_features
    else:
        raise ConfigError(
            "model.name",
            f"pa3dfl decomposes pa3dfl_cnn or fedavgcnn (without norm), not {type(model).__name__}",
        )
    return FactorizedCNN(
        classes,
        input_shape,
        decomposition=decomposition,
        p_min=p_min,
        local_head=True,
        spec=spec,
        ranks=ranks,
    )


def block_p_min(widths: Any) -> float:
    """Alg. 2 line 2's ``p_min``: the smallest width, or the largest multiple of 1/256 that
    divides every width when the smallest does not (blocks must tile every client's width)."""
    steps = [round(float(p) * 256) for p in widths]
    return math.gcd(*steps) / 256


def scaled_gradient(t: torch.Tensor, scale: float) -> torch.Tensor:
    """``t`` with its gradient multiplied by ``scale`` (the value is unchanged)."""
    return t if scale == 1.0 else t.detach() + scale * (t - t.detach())


@recipe_function
def two_heads(
    model: FactorizedCNN,
    state: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: Any,
    local_head_lr_scale: float = 1.0,
):
    """Alg. 3 lines 7–9: ``L_g`` on the frozen global head plus ``L_c`` on the local head over
    detached features, so the encoder learns through the global head only. The local head's
    gradient is multiplied by ``local_head_lr_scale`` (its own step size; it gets no other
    gradient), the loss value is not."""
    z = call_method(model, "features", state, x)
    global_logits = F.linear(z, state["head.weight"], state["head.bias"])
    w, b = (
        scaled_gradient(state[f"local_head.{k}"], local_head_lr_scale) for k in ("weight", "bias")
    )
    local_logits = F.linear(z.detach(), w, b)
    return F.cross_entropy(global_logits, y) + F.cross_entropy(local_logits, y)


@recipe_function
def orthogonality(params: Mapping[str, torch.Tensor], keys: tuple[str, ...]) -> torch.Tensor:
    """Eq. (32): Σ over conv layers of ‖θ_uᵀθ_u − diag(θ_uᵀθ_u)‖²_F."""
    return sum(offdiagonal_gram_penalty(params[k]) for k in keys)  # type: ignore[return-value]


def line_search(
    model: Any,
    received: State,
    trained: State,
    data: Any,
    index: torch.Tensor,
    steps: int,
    batch_size: int,
) -> tuple[float, State]:
    """Alg. 1: the model ``M_0 + α(M_1 − M_0)`` with the best validation accuracy over the grid
    ``α = 0, 1/n, …, 1`` (ties: lower loss, then smaller α). Both ends are on the grid, so the
    choice is at least as good as either model on ``index``."""
    if index.numel() == 0:
        return 0.0, received

    def at(alpha: float) -> State:
        return {
            key: torch.lerp(v, trained[key], alpha) if v.is_floating_point() else v
            for key, v in received.items()
        }

    scores = []  # per α: (accuracy, −loss), kept on the model's device and read once
    for k in range(steps + 1):
        ok, losses = evaluate_samples(model, at(k / steps), data, index, batch_size)
        scores.append(torch.stack([ok.double().mean(), -losses.double().mean()]))
    read = torch.stack(scores).tolist()
    best = max(range(steps + 1), key=lambda k: (read[k][0], read[k][1], -k))
    return best / steps, at(best / steps)


@register
class Pa3dFL(WidthSliced):
    """Server (Alg. 2): θ_u averaged over the round's participants (Eq. 6); θ_v and the local
    head generated by the hyper-network and pruned to each client's width (Eq. 9–10), the
    hyper-network stepped on the returned θ_v (Eq. 7–8). Client (Alg. 3): E epochs of
    ``L_g + L_c + λ·L_reg`` with the global head frozen; test model by Alg. 1."""

    name = "pa3dfl"
    summary = "Factorized θ_u θ_v: θ_u averaged, θ_v from a hyper-network with attention."
    Options = Pa3dFLOptions
    #: batched training runs (its test model is chosen in ``trained``), but departs from the
    #: sequential run beyond the batched tolerance within rounds: a rounding-level gap grown by
    #: the hyper-network step and the α search (docs/methods/pa3dfl.md)
    backends = ("sequential",)
    has_global_model = False  # the server holds no θ_v of its own, only the hyper-network
    checkpointed = (
        *WidthSliced.checkpointed,
        saved.PerClient("_test", key="test"),
        saved.Module("hn"),
        saved.Value("_hn_loss"),
    )

    def wrap_model(self, model: BlockModel) -> BlockModel:
        p_min = block_p_min(self.ctx.capacity.width)
        shape = tuple(self.ctx.data.bundle.input_shape)
        opts = self.options
        return factorized_model(model, shape, p_min, opts.decomposition, opts.flanc_ranks)

    def setup(self) -> None:
        super().setup()
        model = self.ctx.model
        self._test: dict[int, State] = {}  # each client's test model (Alg. 1), at its width
        self._alphas: list[float] = []
        self._hn_loss: float | None = None
        self._hn_row: dict[str, Any] = {}  # the last hyper-network step's measurements
        layers = [k.removeprefix("general.").removesuffix("_u") for k in model.general_keys()]
        self.conv_u = tuple(f"general.{n}_u" for n in layers if model.layer_geometry(n).conv)
        if self.options.global_head_init == "he":
            # the frozen head's weights N(0, 2/fan_in) (He) instead of U(±1/√fan_in): logits √6×
            # larger for the same features, so the encoder grows them less to lower L_g
            weight = self.ctx.store.global_state["head.weight"]
            gen = torch_generator(self.ctx.cfg.seed, "algorithm", _HEAD_STREAM)
            drawn = torch.randn(weight.shape, generator=gen, dtype=weight.dtype)
            weight.copy_((drawn * math.sqrt(2.0 / weight.shape[1])).to(weight.device))
        self.hn: HyperNetwork | None = None
        if self.options.hn_aggregation:
            o = self.options
            keys = [*model.personal_keys(), "local_head.weight", "local_head.bias"]
            init = self.ctx.store.global_state
            self.hn = HyperNetwork(
                self.ctx.data.num_clients,
                {k: init[k].shape for k in keys},
                embed_dim=o.embed_dim,
                hidden_dim=o.hidden_dim,
                depth=o.depth,
                attention=True,
                # one τ_l per decomposed layer and one for the local head
                layers={
                    k: k.removeprefix("personal.").removesuffix("_v")
                    if k.startswith("personal.")
                    else "local_head"
                    for k in keys
                },
                tau=o.tau,
                init={k: init[k] for k in keys} if o.decoder_init == "model" else None,
                embed_init=o.embed_init,
                encoder_init=o.encoder_init,
                similarity=o.similarity,
                centred=o.centred,
                seed=hypernetwork_seed(self.ctx.cfg.seed),
            ).to(self.ctx.device)

    # ------------------------------------------------------------ the three choices
    def personal_blocks(self) -> set[str]:
        # without HN-based aggregation (Table 3) each client keeps its own θ_v and local head
        return set() if self.options.hn_aggregation else {"personal", "local_head"}

    def frozen_blocks(self, rnd: int) -> set[str]:
        return {"head"}  # the random global head of FedBABU, never trained nor sent

    def recipe(self, rnd: int, client: int) -> Recipe:
        reg = LossTerm(
            "orthogonality",
            bind(orthogonality, keys=tuple(self.conv_u)),
            weight=self.options.lam,
        )
        objective = bind(two_heads, local_head_lr_scale=self.options.local_head_lr_scale)
        return Recipe(phases=(Phase(loss_terms=(reg,)),), objective=objective)

    # ------------------------------------------------------------ server → client
    def received(self, client: int, state: State | None = None) -> State:
        """``M_0``: the server's θ_u and biases, the global head and the hyper-network's θ_v and
        local head, at the client's width (``state``: the sliced store tensors, if at hand)."""
        index = self.index_sets(self._round, client)
        if state is None:
            state = WidthSliced.eval_state(self, client)
        if self.hn is None:
            return state
        return {**state, **self.hn.generate([client], [index])[0]}

    def start_state(self, rnd: int, client: int) -> State:
        return self.received(client, super().start_state(rnd, client))

    def trained(self, rnd: int, client: int, result: Any) -> None:
        super().trained(rnd, client, result)
        self._test[client] = self.test_model(client, result.job.start, result.state)

    def test_model(self, client: int, received: State, trained: State) -> State:
        """Alg. 1: fuse ``M_0`` (global head) and ``M_1`` (its local head) on the client's
        validation split (its training split when it has none)."""
        m1 = {**trained, "head.weight": trained["local_head.weight"]}
        m1["head.bias"] = trained["local_head.bias"]
        mode = self.options.test_model
        if mode != "search":
            return received if mode == "received" else m1
        split = self.ctx.data.clients[client]
        index = split.val if split.val.numel() else split.train
        alpha, state = line_search(
            self.model_for(client),
            received,
            m1,
            self.ctx.data,
            index,
            self.options.line_search,
            self.ctx.cfg.engine.eval_batch_size,
        )
        self._alphas.append(alpha)
        return state

    # ------------------------------------------------------------ aggregation
    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        if not uploads:
            return
        clients = sorted(uploads)
        index = [self.index_sets(self._trained_round.get(c, rnd), c) for c in clients]
        store = self.ctx.store
        general = [k for k in uploads[clients[0]] if store.model.block_of(k) == "general"]
        # Eq. (6): a uniform average over the participants (biases over those holding them)
        ones = [1.0] * len(clients)
        subs = [uploads[c] for c in clients]
        store.global_state.update(holder_average(store.global_state, subs, index, ones, general))
        if self.hn is not None:
            step = step_on_uploads(self.hn, self.options, clients, uploads, index)
            self._hn_loss = step.loss
            self._hn_row = hn_metrics(self.hn, step)

    # ------------------------------------------------------------ evaluation
    def eval_state(self, client: int) -> State:
        """The client's test model; ``M_0`` for a client that never trained."""
        test = self._test.get(client)
        return test if test is not None else self.received(client)

    def received_state(self, rnd: int, client: int) -> State:
        return self.received(client)

    def round_metrics(self) -> dict[str, Any]:
        row: dict[str, Any] = {}
        if self._hn_loss is not None:
            row["hn_loss"] = self._hn_loss
        row.update(self._hn_row)
        self._hn_row = {}
        if self._alphas:
            row["alpha_mean"] = sum(self._alphas) / len(self._alphas)
        self._alphas = []
        return row

    def summary_values(self) -> dict[str, Any]:
        if self.hn is None:
            return {}
        # the hyper-network at the end of the run (hn.diagnostics): τ_l, the attention's mean
        # entropy against ln N and the spread of the generated θ_v, per layer
        report = self.hn.diagnostics()
        return {
            "tau": report["tau"],
            "attention_entropy": report["entropy"],
            "entropy_max": report["entropy_max"],
            "spread": report["spread"],
        }
