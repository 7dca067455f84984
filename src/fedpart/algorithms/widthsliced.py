"""The shared machinery of width-sliced methods (HeteroFL, FedRolex): each client trains the
submodel of its width, the server averages every coordinate over the clients that hold it.

The server keeps the full model in the state store. A client of width ``p_i``
(``federation.capacity``) receives the slice its method selects (a prefix, or a window rolling
with the round), trains the width-``p_i`` model (one cached module per width: the module only
fixes shapes, so one serves every selection of that width) and sends its slice back;
:func:`fedpart.models.width.holder_average` puts the slices together, and a coordinate no
participant held keeps its value. A client of width 1 under a prefix selection holds the whole
model and takes FedAvg's path unchanged, so ``federation.capacity=ideal`` runs FedAvg's code.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from fedpart.algorithms.base import Algorithm, State
from fedpart.engine import method_state as saved
from fedpart.engine.training import ClientJob
from fedpart.models.width import (
    embed_state,
    holder_average,
    index_sets_on,
    model_index_sets,
    narrow_model,
    slice_state,
)
from fedpart.models.width_plan import IndexSets, width_plan


def scale_outputs(model: nn.Module, reference: nn.Module, p: float) -> None:
    """Divide the output of every sliced conv/linear layer of ``model`` by ``p`` in training
    mode (HeteroFL's *Scaler*, placed after each such layer, before its norm), so that a narrow
    model's activations have the full model's scale; evaluation is unscaled. ``reference`` is
    the full model whose width plan says which layers are sliced (the classifier is not)."""
    axes = width_plan(reference).axes

    def hook(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        return output / p if module.training else output

    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d | nn.Linear):
            if any(a.dim == 0 for a in axes.get(f"{name}.weight", ())):
                module.register_forward_hook(hook)


class WidthSliced(Algorithm):
    """Base of the width-sliced methods: a subclass names its ``selection`` (``prefix`` or
    ``rolling``) and, for a rolling window, :meth:`offset`."""

    capacity_aware = True
    #: the batched backend groups clients by width (never stacks different widths)
    backends = ("sequential", "batched")
    #: how a client's channels are chosen: ``prefix`` or ``rolling`` (``WidthPlan.channels``)
    selection: ClassVar[str] = "prefix"
    checkpointed: ClassVar[tuple[saved.Field, ...]] = (
        saved.Value("_round"),
        saved.Value("_trained_round", encode=saved.str_keys, decode=saved.int_keys),
    )

    def setup(self) -> None:
        self._models: dict[float, Any] = {}
        self._index: dict[tuple[float, int], IndexSets] = {}
        self._round = 0  # the round whose selection evaluation uses
        self._trained_round: dict[int, int] = {}  # the round each client's last slice is from

    # --------------------------------------------------------------- widths
    def width(self, client: int) -> float:
        """The client's width ``p_i``."""
        return float(self.ctx.capacity.width[client])

    def offset(self, rnd: int) -> int:
        """The rolling window's start in round ``rnd`` (unused by a prefix selection)."""
        return 0

    def scaled(self) -> bool:
        """Whether narrow models scale their layers' outputs by ``1/p`` in training."""
        return bool(getattr(self.options, "scaler", False))

    def whole(self, client: int) -> bool:
        """Whether ``client`` holds the whole model in the server's own order."""
        return self.width(client) >= 1.0 and self.selection == "prefix"

    def index_sets(self, rnd: int, client: int) -> IndexSets:
        """What ``client`` holds in round ``rnd`` (empty: everything, as FedAvg)."""
        if self.whole(client):
            return {}
        p = self.width(client)
        offset = self.offset(rnd) if self.selection == "rolling" else 0
        key = (p, offset)
        if key not in self._index:
            if len(self._index) > 64:  # a rolling window makes new sets every round
                self._index.clear()
            # on the run's device, where the states they slice live
            self._index[key] = index_sets_on(
                model_index_sets(self.ctx.model, p, kind=self.selection, offset=offset),
                self.ctx.device,
            )
        return self._index[key]

    def model_for(self, client: int) -> Any:
        if self.whole(client):
            return self.ctx.model
        return self.model_at(self.width(client))

    def model_at(self, p: float) -> Any:
        """The module of width ``p`` (one cached per width; the run's model at ``p = 1``)."""
        if p >= 1.0:
            return self.ctx.model
        if p not in self._models:
            model = narrow_model(self.ctx.model, p)
            if self.scaled():
                scale_outputs(model, self.ctx.model, p)
            self._models[p] = model
        return self._models[p]

    # ---------------------------------------------------------------- round
    def begin_round(self, rnd: int) -> None:
        self._round = rnd

    def download_bytes(self, rnd: int, client: int, keys: list[str]) -> int:
        """Bytes of the client's slice of ``keys``: never more than its width holds."""
        index = self.index_sets(rnd, client)
        total = 0
        for key in keys:
            t = self.ctx.store.global_state[key]
            kept = index.get(key, ())
            sizes = [
                len(kept[d]) if d < len(kept) and kept[d] is not None else t.shape[d]  # type: ignore[arg-type]
                for d in range(t.dim())
            ]
            total += math.prod(sizes) * t.element_size()
        return total

    def job(self, rnd: int, client: int) -> ClientJob:
        store = self.ctx.store
        # the full-shaped personal tensors the trained slice goes back into (``trained``)
        personal = store.personal.get(client, store.init_personal) if store.personal_keys else {}
        job = super().job(rnd, client)
        job.scratch["personal"] = personal
        return job

    def start_state(self, rnd: int, client: int) -> State:
        store = self.ctx.store
        index = self.index_sets(rnd, client)
        state = store.client_state(client)
        return slice_state(state, index) if index else state

    def trained(self, rnd: int, client: int, result: Any) -> None:
        # the store keeps full shapes: a client's personal slice goes back into its full
        # personal tensors, whose unheld coordinates keep their values
        store = self.ctx.store
        self._trained_round[client] = rnd
        index = self.index_sets(rnd, client)
        if index and store.personal_keys:
            prev = result.job.scratch["personal"]
            sub = {k: result.state[k] for k in store.personal_keys}
            store.personal[client] = embed_state(prev, sub, index)

    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        """Holder averaging (weighted by training samples, as FedAvg); FedAvg's own average
        when every participant held the whole model."""
        if not uploads:
            return
        clients = sorted(uploads)
        index = [self.index_sets(self._trained_round.get(c, rnd), c) for c in clients]
        if not any(index):
            super().aggregate(rnd, uploads, weights)
            return
        keys = list(uploads[clients[0]])
        mixed = holder_average(
            self.ctx.store.global_state,
            [uploads[c] for c in clients],
            index,
            [weights[c] for c in clients],
            keys,
        )
        self.ctx.store.global_state.update(mixed)

    def eval_state(self, client: int) -> State:
        """The client's slice (of the current round's selection) at its own width."""
        index = self.index_sets(self._round, client)
        state = self.ctx.store.client_state(client)
        return slice_state(state, index) if index else state
