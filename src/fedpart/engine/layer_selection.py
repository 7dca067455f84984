"""Choosing one block by votes over a selection phase — FedCMD's personalized-layer selection
(Chen et al., IEEE TC 2024, Alg. 2), written so that any method that picks a block by what its
clients observe can configure it.

Scoring (Eq. 4, 6): on every batch, the outputs ``o_0, o_1, …`` of a chain of blocks (``o_0``
the predecessor of the first candidate; :func:`score_chain`) are fitted with scalar Gaussians
after min–max normalisation, and a candidate ``l`` scores how much it moves the features'
distribution towards the labels' against the input's,

    s_l = | (W2(z^{o_l}, z^y) − W2(z^{o_l}, z^x)) − (W2(z^{o_{l−1}}, z^y) − W2(z^{o_{l−1}}, z^x)) |,

with the closed-form 1-D W2 (or the authors' code's mean-only form); a batch votes for
``argmin_l s_l`` (:func:`batch_vote`, run by the trainer's observer).

Voting (:class:`BlockVote`): a client's vote is its batches' majority, a round's winner its
clients' majority (Alg. 2 line 17), the choice the majority of the round winners (line 22).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fedpart.errors import ConfigError

__all__ = [
    "BlockVote",
    "batch_vote",
    "gaussian",
    "majority",
    "score_chain",
    "transfer_scores",
    "vote",
    "w2_gaussian",
]


def gaussian(t: torch.Tensor) -> tuple[float, float] | None:
    """(mean, std) of a scalar Gaussian fitted to ``t`` after min–max normalisation to [0, 1]
    over the whole tensor; ``None`` when ``t`` is constant (the code's NaN, scored as 0)."""
    t = t.detach().double().flatten()
    lo, hi = t.min(), t.max()
    if not hi > lo:
        return None
    u = (t - lo) / (hi - lo)
    return float(u.mean()), float(u.std())


def w2_gaussian(a: tuple[float, float] | None, b: tuple[float, float] | None, mode: str) -> float:
    """W2 between 1-D Gaussians: √((μ1−μ2)² + (σ1−σ2)²) (closed form), or |μ1−μ2| (the
    code's mean-only form); 0 when either fit is undefined."""
    if a is None or b is None:
        return 0.0
    if mode == "mean_only":
        return abs(a[0] - b[0])
    return math.hypot(a[0] - b[0], a[1] - b[1])


def transfer_scores(
    x: torch.Tensor, y: torch.Tensor, chain: list[torch.Tensor], *, w2: str, score: str
) -> list[float]:
    """s_l of Eq. (6) for l = 1..len(chain)−1, ``chain`` being the outputs o_0, o_1, … (o_0 the
    predecessor of the first candidate)."""
    zx, zy = gaussian(x), gaussian(y)
    z = [gaussian(o) for o in chain]
    scores = []
    for l in range(1, len(chain)):
        ay, ax = w2_gaussian(z[l], zy, w2), w2_gaussian(z[l], zx, w2)
        by, bx = w2_gaussian(z[l - 1], zy, w2), w2_gaussian(z[l - 1], zx, w2)
        if score == "paper":
            scores.append(abs((ay - ax) - (by - bx)))
        else:
            scores.append(abs(abs(ay - by) - abs(ax - bx)))
    return scores


def vote(scores: list[float], candidates: tuple[str, ...], tie_break: str) -> int:
    """argmin_l s_l (first index on ties; the code prefers fc2 when it attains the minimum)."""
    best = min(scores)
    if (
        tie_break == "prefer_fc2"
        and "fc2" in candidates
        and scores[candidates.index("fc2")] == best
    ):
        return candidates.index("fc2")
    return scores.index(best)


def batch_vote(
    x: torch.Tensor,
    y: torch.Tensor,
    outputs: dict[str, torch.Tensor],
    *,
    chain: tuple[str, ...],
    w2: str,
    score: str,
    tie_break: str,
) -> int:
    """One batch's vote (an index into ``chain[1:]``): the observer of phase-1 training."""
    scores = transfer_scores(x, y, [outputs[b] for b in chain], w2=w2, score=score)
    return vote(scores, chain[1:], tie_break)


def majority(votes: list[int] | list[str], order: list[Any]) -> Any:
    """The most frequent vote; ties go to the earliest in ``order``."""
    counts = Counter(votes)
    top = max(counts.values())
    return next(v for v in order if counts.get(v, 0) == top)


def score_chain(
    model: Any, candidates: list[str] | None, named: tuple[str | None, ...] = ()
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(candidates, chain)``: the candidate blocks in forward order (default: the blocks
    after the last convolutional one) and the chain of outputs Eq. (6) compares — the block
    before the first candidate, then the candidates. Raises ``ConfigError`` (as
    ``algorithm.candidates``) for unknown blocks (``named``: other blocks the method names,
    checked with them), blocks out of order, or the first block."""
    blocks = list(model.block_names)
    if candidates is None:
        convs = [
            i
            for i, b in enumerate(blocks)
            if any(isinstance(m, nn.Conv2d) for m in model.get_submodule(b).modules())
        ]
        first = convs[-1] + 1 if convs else 1
        candidates = blocks[max(first, 1) :]
    unknown = [c for c in [*candidates, *named] if c and c not in blocks]
    if unknown:
        raise ConfigError(
            "algorithm.candidates", f"unknown blocks {unknown}; blocks: {', '.join(blocks)}"
        )
    positions = [blocks.index(c) for c in candidates]
    if not candidates or positions != sorted(set(positions)) or positions[0] == 0:
        raise ConfigError(
            "algorithm.candidates",
            "need distinct blocks in forward order, none of them the first block "
            f"(its predecessor's output is scored); got {candidates}",
        )
    return tuple(candidates), (blocks[positions[0] - 1], *candidates)


@dataclass
class BlockVote:
    """The votes of a selection phase among ``candidates``: each client's vote is the majority
    of its batches' (:meth:`client_voted`), each round's winner the majority of its clients'
    (:meth:`close_round`), and the choice the majority of the round winners (:meth:`choice`).
    ``winners`` is what a checkpoint keeps; a round's pending votes end with the round."""

    candidates: tuple[str, ...]
    winners: list[str] = field(default_factory=list)
    pending: dict[int, str] = field(default_factory=dict)
    last_round: dict[str, int] = field(default_factory=dict)

    def client_voted(self, client: int, votes: list[int]) -> None:
        """``client``'s batch votes (indices into the candidates) of this round."""
        if votes:
            order = list(range(len(self.candidates)))
            self.pending[client] = self.candidates[majority(votes, order)]

    def close_round(self, clients: list[int]) -> None:
        """The round's winner among the votes of ``clients`` (those whose uploads arrived)."""
        votes = [self.pending.pop(c) for c in clients if c in self.pending]
        self.last_round = dict(Counter(votes))
        if votes:
            self.winners.append(majority(votes, list(self.candidates)))

    def choice(self) -> str:
        """The majority of the round winners (ties: the earliest candidate)."""
        return majority(self.winners, list(self.candidates))

    def round_metrics(self, prefix: str) -> dict[str, Any]:
        """The last closed round's vote counts and winner, once."""
        if not self.last_round:
            return {}
        row = {f"{prefix}_votes": self.last_round, f"{prefix}_round_winner": self.winners[-1]}
        self.last_round = {}
        return row

    def counts(self) -> dict[str, int]:
        """How many rounds each candidate won."""
        counts = Counter(self.winners)
        return {c: counts.get(c, 0) for c in self.candidates}
