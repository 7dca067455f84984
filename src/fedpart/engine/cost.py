"""Cost accounting: trainable parameters, the fedseqlayer paper's computation proxy, and a real
count of forward/backward multiply-adds.

The paper's proxy (fedseqlayer spec §3.6) is
``Σ_rounds (trainable parameters that round) × (batches per client per epoch) × (clients)``;
it ignores the forward pass and what backpropagation must traverse. The real count runs one
training step of the model under ``torch.utils.flop_counter.FlopCounterMode`` with exactly the
phase's trainable parameters requiring gradients, so frozen blocks cost their forward pass and
only the backward work autograd really does (no weight gradients for frozen blocks, no input
gradients below the lowest trainable block).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch.func import functional_call
from torch.utils.flop_counter import FlopCounterMode

from fedpart.models import BlockModel


def trainable_parameters(model: BlockModel, blocks: Iterable[str]) -> int:
    """Number of parameters in ``blocks`` (buffers excluded)."""
    wanted = set(blocks)
    return sum(p.numel() for k, p in model.named_parameters() if model.block_of(k) in wanted)


def paper_cost_proxy(
    trainable_per_round: Sequence[int], batches_per_epoch: int, clients: int
) -> int:
    """The fedseqlayer paper's computation proxy (Table 4): Σ_t trainable(t) × batches × clients."""
    return int(sum(trainable_per_round)) * int(batches_per_epoch) * int(clients)


class MacCounter:
    """Multiply-adds per training sample (forward + backward) for a given set of trainable keys."""

    def __init__(self, model: BlockModel, input_shape: Sequence[int], num_classes: int) -> None:
        self.model = model
        self.input_shape = tuple(input_shape)
        self.num_classes = num_classes
        self._cache: dict[tuple[str, ...], float] = {}

    def per_sample(self, state: dict[str, torch.Tensor], keys: Sequence[str]) -> float:
        key = tuple(sorted(keys))
        if key not in self._cache:
            batch = 4
            x = torch.zeros(batch, *self.input_shape, device=next(iter(state.values())).device)
            y = torch.zeros(batch, dtype=torch.long, device=x.device)
            params = {k: state[k].detach().clone().requires_grad_(k in key) for k in state}
            was_training = self.model.training
            self.model.train()
            counter = FlopCounterMode(display=False)
            with counter:
                loss = F.cross_entropy(functional_call(self.model, params, (x,)), y)
                wanted = [params[k] for k in key]
                if wanted:
                    # a second head that forward() does not use (Pa3dFL's local head) gets none
                    torch.autograd.grad(loss, wanted, allow_unused=True)
            self.model.train(was_training)
            # FLOPs count a multiply-add as 2
            self._cache[key] = counter.get_total_flops() / 2 / batch
        return self._cache[key]
