"""Sequential layer expansion (Jang & Choi): Vanilla / Anti scheduling of base-block unfreezing.

Algorithm 1 of the paper, with the resolutions of the fedseqlayer spec (§2.6):
- the head is a random initialisation shared by all clients, frozen during federation (Eq. 3);
- base blocks b_1..b_K (input → output) are unfrozen cumulatively at rounds t_1 < … < t_K,
  0-indexed: U(t) = {b_k : t ≥ t_k} (Vanilla, Eq. 5) or {b_{K−k+1} : t ≥ t_k} (Anti, Eq. 6);
  mode ``all`` trains the whole base from round 0 (FedBABU's path);
- frozen blocks are neither trained (no gradient) nor sent; only U(t) is uploaded and averaged
  over the round's participants with data-size weights (Eq. 4 / line 18);
- after round T every client (all N) fine-tunes the whole model, head included, for F epochs
  from the final global base and the initial head (lines 20–24); the personalised accuracy is
  measured after fine-tuning.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedpart.algorithms.base import Algorithm
from fedpart.config import option
from fedpart.errors import ConfigError
from fedpart.registry import register

MODES = ("vanilla", "anti", "all")


@dataclass
class SeqLayerOptions:
    mode: str = option(
        "vanilla", "vanilla (input→output), anti (output→input) or all (FedBABU)", choices=MODES
    )
    unfreeze_rounds: list[int] = option(
        doc="rounds t_1 < t_2 < … at which base blocks unfreeze",
        factory=lambda: [0, 100, 200],
        ge=0,
    )
    base_blocks: list[str] | None = option(
        None, "the base blocks b_1..b_K in input→output order (default: every non-head block)"
    )
    finetune_epochs: int = option(
        10, "F: local epochs of whole-model fine-tuning after the last round", ge=0
    )

    def validate(self) -> None:
        rounds = self.unfreeze_rounds
        if any(b <= a for a, b in zip(rounds, rounds[1:], strict=False)):
            raise ConfigError(
                "algorithm.unfreeze_rounds", f"must be strictly increasing, got {rounds}"
            )


def unfrozen_blocks(rnd: int, mode: str, base: list[str], unfreeze_rounds: list[int]) -> list[str]:
    """U(t): the base blocks trained and shared in round ``rnd`` (0-indexed)."""
    if mode == "all":
        return list(base)
    K = len(base)
    opened = [k for k in range(K) if rnd >= unfreeze_rounds[k]]
    if mode == "vanilla":
        return [base[k] for k in opened]
    return [base[K - 1 - k] for k in opened][::-1]


@register
class SeqLayer(Algorithm):
    """Federated training of a growing part of the base; head frozen; fine-tuning at the end."""

    name = "fedseqlayer"
    needs_head_and_body = True
    summary = "Sequential layer expansion (modes vanilla|anti|all), frozen head, final fine-tuning."
    Options = SeqLayerOptions

    def setup(self) -> None:
        model = self.ctx.model
        base = self.options.base_blocks or list(model.body_names())
        unknown = [b for b in base if b not in model.block_names or b in model.head_names]
        if unknown:
            raise ConfigError(
                "algorithm.base_blocks",
                f"unknown base block '{unknown[0]}'; valid choices: {', '.join(model.body_names())}",
            )
        if self.options.mode != "all" and len(self.options.unfreeze_rounds) != len(base):
            raise ConfigError(
                "algorithm.unfreeze_rounds",
                f"needs one round per base block ({len(base)}: {', '.join(base)}), "
                f"got {self.options.unfreeze_rounds}",
            )
        self.base = base
        self.finetuned: dict[int, dict] = {}

    def trainable(self, rnd: int) -> list[str]:
        return unfrozen_blocks(rnd, self.options.mode, self.base, self.options.unfreeze_rounds)

    def frozen_blocks(self, rnd: int) -> set[str]:
        return set(self.ctx.model.block_names) - set(self.trainable(rnd))

    def finish(self) -> bool:
        if self.options.finetune_epochs == 0:
            return False
        self.finetuned = self.ctx.finetune_all(self.options.finetune_epochs)
        return True

    def eval_state(self, client: int) -> dict:
        return self.finetuned.get(client) or self.ctx.store.client_state(client)


@dataclass
class FedBABUOptions:
    finetune_epochs: int = option(
        10, "F: local epochs of whole-model fine-tuning after the last round", ge=0
    )
    base_blocks: list[str] | None = option(
        None, "the body blocks trained and averaged (default: every non-head block)"
    )
    mode = "all"  # not options: FedBABU is the 'all' schedule
    unfreeze_rounds = ()


@register
class FedBABU(SeqLayer):
    """FedBABU (Oh et al., 2022): body-only federated training with the head fixed at its random
    initialisation (lr 0 on the head, which for plain SGD is the same as not training it), then
    whole-model fine-tuning for F epochs on every client. Identical to ``fedseqlayer`` with
    ``mode=all`` (spec §2.6 item 15)."""

    name = "fedbabu"
    needs_head_and_body = True
    summary = "Body-only training with a fixed random head, then whole-model fine-tuning."
    Options = FedBABUOptions
