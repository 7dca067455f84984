"""TailorFL (Deng et al., SenSys 2022): personalized filter pruning, holder-averaged filters."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedpart.algorithms.base import State
from fedpart.algorithms.widthsliced import WidthSliced
from fedpart.config import fraction, option
from fedpart.engine import method_state as saved
from fedpart.engine.training import batch_slices
from fedpart.errors import ConfigError
from fedpart.models.width_plan import IndexSets, kept_count, width_plan
from fedpart.registry import register
from fedpart.seeding import torch_generator

#: the ``algorithm`` seed stream's sub-key of the importance phase's batches
_IMPORTANCE_BATCHES = 2


@dataclasses.dataclass
class TailorFLOptions:
    reg: float = option(0.1, "coefficient of the importance layers' L2 regulariser (λ, >= 0)", ge=0)
    swap: float = fraction(
        0.2,
        "per round, the fraction of min(kept, pruned) filters of a personal layer a "
        "client may exchange towards its similar clients' filters, in [0, 1]",
    )
    importance_steps: int = option(10, "SGD steps training the importance layers (>= 1)", ge=1)
    personal_fraction: float = fraction(
        0.5,
        "fraction of the layers (head counted) whose filters are chosen per client; "
        "the others keep the globally largest filters",
    )
    width_scaling: bool = option(
        False,
        "send a client's submodel divided by its width p (the test model too), multiply its "
        "upload by p and weight it n_i / p in the holder average, as a public FLGo "
        "implementation for the Pa3dFL protocol does; off: plain slices, sample weights",
    )


def filter_magnitude(state: State, layer: str) -> torch.Tensor:
    """Squared L2 norm of every filter (output channel) of ``layer``: its weight rows plus its
    bias."""
    w = state[f"{layer}.weight"].to(torch.float64)
    total = w.pow(2).reshape(w.shape[0], -1).sum(1)
    bias = state.get(f"{layer}.bias")
    return total + bias.to(torch.float64).pow(2) if bias is not None else total


def top_filters(score: torch.Tensor, k: int, tiebreak: torch.Tensor | None = None) -> torch.Tensor:
    """The ``k`` highest-scoring filters in ascending index order; equal scores are ordered by
    ``tiebreak`` (descending), then by index."""
    order = torch.arange(score.numel(), device=score.device)
    if tiebreak is not None:
        order = torch.sort(tiebreak, descending=True, stable=True).indices
    order = order[torch.sort(score[order], descending=True, stable=True).indices][:k]
    return torch.sort(order).values


def exchange_filters(
    member: torch.Tensor, corr: torch.Tensor, client: int, limit: int
) -> torch.Tensor:
    """TailorFL's server-side tuning of one client's filters of one personal layer.

    ``member`` is the clients × filters 0/1 matrix of who holds what. Client ``i`` wants to share
    ``corr[i, j] · min(k_i, k_j)`` filters with each client ``j``; every filter is scored by how
    much the clients holding it still fall short (``Σ_j (target_ij − overlap_ij)·[j holds f]``),
    and the client swaps its lowest-scoring kept filter for the highest-scoring pruned one while
    that gains, at most ``limit`` times. Returns the client's new 0/1 row (same count)."""
    row = member[client].clone()
    counts = member.sum(1)
    others = torch.ones(member.shape[0], dtype=torch.bool, device=member.device)
    others[client] = False
    target = corr[client] * torch.minimum(counts, counts[client])
    for _ in range(limit):
        deficit = torch.where(others, target - member @ row, torch.zeros_like(target))
        score = deficit @ member
        kept, pruned = row > 0, row == 0
        if not kept.any() or not pruned.any():
            break
        low = torch.where(kept, score, torch.full_like(score, float("inf"))).argmin()
        high = torch.where(pruned, score, torch.full_like(score, float("-inf"))).argmax()
        if not score[high] > score[low]:
            break
        row[low], row[high] = 0.0, 1.0
    return row


@register
class TailorFL(WidthSliced):
    """Each client holds its own subset of ``⌈p_i·C⌉`` filters of every layer. Once, at the
    start, every client trains per-filter importance factors (in [0, 1], L2-regularised) on its
    data with the model fixed, and keeps the most important filters of the personal layers (the
    last ``personal_fraction`` of the layers) and the largest-norm filters of the others; the
    similarity of clients is the cosine of their centred last-layer importances. Every round the
    clients train their submodels, the server averages each coordinate over its holders, then
    re-picks the shared layers' filters by norm and moves each client's personal filters towards
    the filters of similar clients. ``docs/methods/tailorfl.md``."""

    name = "tailorfl"
    summary = "Personalized filter pruning by importance and client similarity, holder-averaged."
    Options = TailorFLOptions
    checkpointed = (
        *WidthSliced.checkpointed,
        saved.Tensor("corr", dtype=torch.float64),
        saved.Named("member", dtype=torch.float64, stored=torch.uint8),
    )
    backends = ("sequential",)

    def setup(self) -> None:
        super().setup()
        self.plan = width_plan(self.ctx.model)
        groups = list(self.plan.groups)
        modules = dict(self.ctx.model.named_modules())
        if not all(isinstance(modules.get(g), nn.Conv2d | nn.Linear) for g in groups):
            raise ConfigError(
                "model.name",
                "tailorfl needs a chain model whose layers are its channel groups "
                "(fedavgcnn, pa3dfl_cnn, mlp, lenet5, vgg11), not a residual network",
            )
        shared = int((len(groups) + 1) * (1.0 - self.options.personal_fraction))
        self.shared_groups = groups[:shared]
        self.personal_groups = groups[shared:]
        #: per group, the clients × filters 0/1 matrix of the filters each client holds
        self.member: dict[str, torch.Tensor] = {}
        self.corr = torch.eye(
            self.ctx.data.num_clients, dtype=torch.float64, device=self.ctx.device
        )
        self._client_index: dict[int, IndexSets] = {}
        self._moved: dict[str, int] | None = None  # the last re-selection's, for round_metrics

    # ------------------------------------------------------------ filters
    def filters(self, client: int) -> dict[str, torch.Tensor]:
        """The filter indices ``client`` holds, per channel group (ascending)."""
        self._ensure_filters()
        return {g: m[client].nonzero().flatten() for g, m in self.member.items()}

    def index_sets(self, rnd: int, client: int) -> IndexSets:
        if self.width(client) >= 1.0:
            return {}
        if client not in self._client_index:
            self._client_index[client] = self.plan.index_sets(self.filters(client))
        return self._client_index[client]

    def _set_member(self, group: str, rows: list[torch.Tensor]) -> None:
        size = self.plan.groups[group]
        m = torch.zeros(len(rows), size, dtype=torch.float64, device=self.ctx.device)
        for c, idx in enumerate(rows):
            m[c, idx] = 1.0
        self.member[group] = m
        self._client_index.clear()

    def _counts(self, group: str) -> list[int]:
        size = self.plan.groups[group]
        return [kept_count(size, self.width(c)) for c in range(self.ctx.data.num_clients)]

    def _ensure_filters(self) -> None:
        """The initial selection (TailorFL's first round), from the current server model."""
        if self.member:
            return
        n = self.ctx.data.num_clients
        state = self.ctx.store.global_state
        importance, pull = zip(*(self.importance(c, state) for c in range(n)), strict=True)
        for g in self.shared_groups:
            score = filter_magnitude(state, g)
            self._set_member(g, [top_filters(score, k) for k in self._counts(g)])
        for g in self.personal_groups:
            counts = self._counts(g)
            rows = [top_filters(importance[c][g], counts[c], pull[c][g]) for c in range(n)]
            self._set_member(g, rows)
        last = list(self.plan.groups)[-1]
        theta = torch.stack([imp[last] - imp[last].mean() for imp in importance])
        self.corr = F.cosine_similarity(theta[:, None, :], theta[None, :, :], dim=2)
        self.corr.fill_diagonal_(1.0)

    def importance(
        self, client: int, state: State
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Per-filter importance factors of ``client``: factors in [0, 1] scaling every channel
        group's output, trained for ``importance_steps`` SGD steps on its data with the model
        ``state`` fixed, loss ``CE + λ · mean(factor²)`` (TailorFL's importance layers). Also
        returns each factor's summed descent direction ``−Σ ∂L/∂factor``, which ranks the
        factors the clamp at 1 leaves equal (the ones the loss would raise most come first)."""
        model = self.ctx.model
        data = self.ctx.data
        cfg = self.ctx.cfg
        factors = {
            g: torch.ones(size, dtype=torch.float64, device=self.ctx.device, requires_grad=True)
            for g, size in self.plan.groups.items()
        }
        pull = {g: torch.zeros_like(f) for g, f in factors.items()}
        count = sum(f.numel() for f in factors.values())
        modules = dict(model.named_modules())

        def scaler(group: str) -> Any:
            def hook(_module: nn.Module, _args: Any, out: torch.Tensor) -> torch.Tensor:
                f = factors[group].to(out.dtype)
                return out * f.view(1, -1, *([1] * (out.dim() - 2)))

            return hook

        hooks = [modules[g].register_forward_hook(scaler(g)) for g in factors]
        train = data.clients[client].train
        gen = torch_generator(cfg.seed, "algorithm", _IMPORTANCE_BATCHES, client)
        frozen = {k: v.detach() for k, v in state.items()}
        lr = cfg.federation.lr
        try:
            model.train()
            step = 0
            while step < self.options.importance_steps and train.numel():
                slices = batch_slices(
                    train.numel(), cfg.federation.batch_size, False, gen, train.device
                )
                for pos in slices:
                    x, y = data.batch(train[pos], train=True)
                    loss = F.cross_entropy(functional_call(model, frozen, (x,)), y)
                    reg = sum(f.pow(2).sum() for f in factors.values()) / count
                    loss = loss + self.options.reg * reg
                    grads = torch.autograd.grad(loss, list(factors.values()))
                    with torch.no_grad():
                        for name, g in zip(factors, grads, strict=True):
                            factors[name].sub_(lr * g).clamp_(0.0, 1.0)
                            pull[name].sub_(g)
                    step += 1
                    if step >= self.options.importance_steps:
                        break
        finally:
            for h in hooks:
                h.remove()
        return {g: f.detach() for g, f in factors.items()}, pull

    # ---------------------------------------------------------------- round
    def download_keys(self, rnd: int) -> list[str]:
        self._ensure_filters()
        return super().download_keys(rnd)

    def start_state(self, rnd: int, client: int) -> State:
        return self.width_scaled(super().start_state(rnd, client), client, -1)

    def eval_state(self, client: int) -> State:
        return self.width_scaled(super().eval_state(client), client, -1)

    def width_scaled(self, state: State, client: int, power: int) -> State:
        """``state`` times ``p_i ** power`` under ``width_scaling`` (else unchanged)."""
        p = self.width(client)
        if not self.options.width_scaling or p >= 1.0:
            return state
        return {k: v * p**power if v.is_floating_point() else v for k, v in state.items()}

    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        if self.options.width_scaling:
            uploads = {c: self.width_scaled(s, c, 1) for c, s in uploads.items()}
            weights = {c: w / self.width(c) for c, w in weights.items()}
        super().aggregate(rnd, uploads, weights)
        self.retune()

    def retune(self) -> None:
        """TailorFL's server step after aggregation: the shared layers' filters by the new
        model's norms, the personal layers' by :func:`exchange_filters`."""
        n = self.ctx.data.num_clients
        state = self.ctx.store.global_state
        before = {g: m.clone() for g, m in self.member.items()}
        for g in self.shared_groups:
            score = filter_magnitude(state, g)
            self._set_member(g, [top_filters(score, k) for k in self._counts(g)])
        for g in self.personal_groups:
            member = self.member[g]
            size = self.plan.groups[g]
            rows = []
            for c in range(n):
                k = int(member[c].sum())
                limit = int(self.options.swap * min(k, size - k))
                rows.append(exchange_filters(member, self.corr, c, limit).nonzero().flatten())
            self._set_member(g, rows)
        self._moved = {
            g: int((self.member[g] - m).abs().sum().item()) // 2 for g, m in before.items()
        }

    def round_metrics(self) -> dict[str, Any]:
        """The mechanism per channel group: ``tailorfl_moved``, the filters that left the
        clients' sets in this round's re-selection (summed over clients; shared groups by the new
        norms, personal ones by the exchange), and ``tailorfl_overlap``, the mean Jaccard index
        of two narrower-than-whole clients' sets (1: everyone holds the same filters)."""
        moved, self._moved = self._moved, None
        if moved is None:
            return {}
        narrow = [c for c in range(self.ctx.data.num_clients) if self.width(c) < 1.0]
        overlap = {}
        if len(narrow) > 1:
            for g, m in self.member.items():
                m = m[narrow]
                inter = m @ m.T
                union = m.sum(1)[:, None] + m.sum(1)[None, :] - inter
                off = ~torch.eye(len(narrow), dtype=torch.bool, device=m.device)
                overlap[g] = round(float((inter / union)[off].mean()), 6)
        return {"tailorfl_moved": moved, "tailorfl_overlap": overlap}

    def state_restored(self) -> None:
        super().state_restored()
        self._client_index.clear()
