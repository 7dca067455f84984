"""Choosing one block by votes over a selection phase — FedCMD's personalized-layer selection
(Chen et al., IEEE TC 2024, Alg. 2), written so that any method that picks a block by what its
clients observe can configure it.

Scoring (Eq. 4, 6): on every batch, the outputs ``o_0, o_1, …`` of a chain of blocks (``o_0``
the predecessor of the first candidate; :func:`score_chain`) are fitted with scalar Gaussians
(:func:`gaussian`: after min–max normalisation, or of the raw values), and a candidate ``l``
scores how much it moves the features' distribution towards the labels' against the input's,

    s_l = | (W2(z^{o_l}, z^y) − W2(z^{o_l}, z^x)) − (W2(z^{o_{l−1}}, z^y) − W2(z^{o_{l−1}}, z^x)) |,

with the closed-form 1-D W2 (or the authors' code's mean-only form); a batch votes for
``argmin_l s_l`` (:func:`batch_vote`, run by the trainer's observer).

Voting (:class:`BlockVote`): a client's vote is its batches' majority, a round's winner its
clients' majority (Alg. 2 line 17), the choice the majority of the round winners (line 22).
The paper states no tie rule at any of these levels; each level takes one of :data:`TIES`
(:func:`tally`), and every round's counts and ties are logged.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from fedpart.engine.recipe import recipe_function
from fedpart.errors import ConfigError

__all__ = [
    "DEGENERATE",
    "FITS",
    "LABELS",
    "TIES",
    "BlockVote",
    "batch_vote",
    "gaussian",
    "gaussians",
    "majority",
    "score_chain",
    "tally",
    "transfer_scores",
    "vote",
    "w2_gaussian",
]

#: how a tensor becomes a scalar Gaussian (:func:`gaussian`)
FITS = ("minmax", "raw")
#: what tensor stands for the labels y: the class-index vector or its one-hot matrix
LABELS = ("index", "onehot")
#: tie rules of a majority (:func:`tally`): the earliest candidate in forward order, the tied
#: candidate voted first (the authors' code: Python's ``max`` over an insertion-ordered dict),
#: or fc2 when it is among the tied (the code's batch-level "prior knowledge")
TIES = ("first", "first_seen", "prefer_fc2")
#: what a batch of one sample or of one class contributes (:func:`batch_vote`)
DEGENERATE = ("score", "skip_single", "skip")


def gaussian(t: torch.Tensor, fit: str = "minmax") -> tuple[float, float] | None:
    """(mean, std) of a scalar Gaussian fitted to all of ``t``: after min–max normalisation to
    [0, 1] over the whole tensor (``minmax``, the authors' code), or of its raw values (``raw``).
    ``None`` where the fit is undefined (the code's NaN, scored as 0): a constant tensor under
    ``minmax``, a single value under ``raw``."""
    return gaussians([t], fit)[0]


def _fit(t: torch.Tensor, fit: str) -> torch.Tensor:
    """``[defined, mean, std]`` of :func:`gaussian`'s fit, as float64 on ``t``'s device."""
    t = t.detach().double().flatten()
    if t.numel() == 1:  # undefined under either fit (and no spread to compute)
        return torch.zeros(3, dtype=torch.float64, device=t.device)
    if fit == "raw":
        return torch.stack([torch.ones_like(t[0]), t.mean(), t.std()])
    lo, hi = t.min(), t.max()
    u = (t - lo) / (hi - lo)  # undefined (a constant tensor) where hi == lo: not read
    return torch.stack([(hi > lo).double(), u.mean(), u.std()])


def gaussians(tensors: list[torch.Tensor], fit: str = "minmax") -> list[tuple[float, float] | None]:
    """:func:`gaussian` of each tensor, computed where the tensors are and read back at once
    (one synchronisation of a GPU for all of them, not three per tensor)."""
    if not tensors:
        return []
    read = torch.stack([_fit(t, fit) for t in tensors]).tolist()
    return [(mean, std) if defined else None for defined, mean, std in read]


def w2_gaussian(a: tuple[float, float] | None, b: tuple[float, float] | None, mode: str) -> float:
    """W2 between 1-D Gaussians: √((μ1−μ2)² + (σ1−σ2)²) (closed form), or |μ1−μ2| (the
    code's mean-only form); 0 when either fit is undefined."""
    if a is None or b is None:
        return 0.0
    if mode == "mean_only":
        return abs(a[0] - b[0])
    return math.hypot(a[0] - b[0], a[1] - b[1])


def transfer_scores(
    x: torch.Tensor,
    y: torch.Tensor,
    chain: list[torch.Tensor],
    *,
    w2: str,
    score: str,
    fit: str = "minmax",
) -> list[float]:
    """s_l of Eq. (6) for l = 1..len(chain)−1, ``chain`` being the outputs o_0, o_1, … (o_0 the
    predecessor of the first candidate); ``y`` is the labels' tensor as encoded."""
    zx, zy, *z = gaussians([x, y, *chain], fit)
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


@recipe_function
def batch_vote(
    x: torch.Tensor,
    y: torch.Tensor,
    outputs: dict[str, torch.Tensor],
    *,
    chain: tuple[str, ...],
    w2: str,
    score: str,
    tie_break: str,
    fit: str = "minmax",
    labels: str = "index",
    num_classes: int = 0,
    degenerate: str = "score",
) -> tuple[int, bool]:
    """One batch's vote — an index into ``chain[1:]``, −1 for no vote — and whether several
    candidates attained the minimum: the observer of phase-1 training. ``degenerate``
    (:data:`DEGENERATE`): ``score``, every batch votes (an undefined fit counting W2 = 0);
    ``skip_single``, a batch of one sample casts no vote (the authors' code skips it); ``skip``,
    neither does a batch of one class."""
    single = len(y) < 2
    if (degenerate != "score" and single) or (degenerate == "skip" and bool((y == y[0]).all())):
        return -1, False
    target = F.one_hot(y, num_classes) if labels == "onehot" else y
    scores = transfer_scores(x, target, [outputs[b] for b in chain], w2=w2, score=score, fit=fit)
    return vote(scores, chain[1:], tie_break), scores.count(min(scores)) > 1


def tally(votes: list[Any], order: list[Any], tie: str = "first") -> tuple[Any, list[Any]]:
    """The most frequent of ``votes`` and the candidates tied at the top (in ``order``); a tie
    goes by ``tie`` (:data:`TIES`)."""
    counts = Counter(votes)
    top = max(counts.values())
    tied = [v for v in order if counts.get(v, 0) == top]
    if tie == "first_seen":
        return next(v for v in votes if v in tied), tied
    if tie == "prefer_fc2" and "fc2" in tied:
        return "fc2", tied
    return tied[0], tied


def majority(votes: list[Any], order: list[Any], tie: str = "first") -> Any:
    """The most frequent vote; ties by ``tie`` (default: the earliest in ``order``)."""
    return tally(votes, order, tie)[0]


def score_chain(
    model: Any, candidates: list[str] | None, named: dict[str, str | None] | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(candidates, chain)``: the candidate blocks in forward order (default: the blocks
    after the last convolutional one) and the chain of outputs Eq. (6) compares — the block
    before the first candidate, then the candidates. Raises ``ConfigError`` (as
    ``algorithm.candidates``) for unknown blocks, blocks out of order, or the first block;
    ``named`` maps the method's other block-naming options (``algorithm.<key>``) to their
    values, each checked and reported under its own key."""
    blocks = list(model.block_names)
    for key, block in (named or {}).items():
        if block and block not in blocks:
            raise ConfigError(key, f"unknown block {block!r}; blocks: {', '.join(blocks)}")
    if candidates is None:
        convs = [
            i
            for i, b in enumerate(blocks)
            if any(isinstance(m, nn.Conv2d) for m in model.get_submodule(b).modules())
        ]
        first = convs[-1] + 1 if convs else 1
        candidates = blocks[max(first, 1) :]
    unknown = [c for c in candidates if c not in blocks]
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
class Ballot:
    """One client's vote in a round: its batches' majority and what it was made of."""

    choice: str
    batches: Counter
    tied: bool
    batch_ties: int
    no_vote: int


@dataclass
class BlockVote:
    """The votes of a selection phase among ``candidates``: each client's vote is the majority
    of its batches' (:meth:`client_voted`), each round's winner the majority of its clients'
    (:meth:`close_round`), and the choice the majority of the round winners (:meth:`choice`);
    ``ties`` are the tie rules of these three majorities (:data:`TIES`). ``winners`` is what a
    checkpoint keeps; a round's pending votes end with the round."""

    candidates: tuple[str, ...]
    ties: tuple[str, str, str] = ("first", "first", "first")
    winners: list[str] = field(default_factory=list)
    pending: dict[int, Ballot] = field(default_factory=dict)
    last_round: dict[str, Any] = field(default_factory=dict)

    def client_voted(self, client: int, votes: list[tuple[int, bool]]) -> None:
        """``client``'s batch votes of this round: (index into the candidates or −1 for no
        vote, whether the batch's minimum was tied)."""
        cast = [self.candidates[v] for v, _ in votes if v >= 0]
        if cast:
            choice, tied = tally(cast, list(self.candidates), self.ties[0])
            batch_ties = sum(1 for v, t in votes if v >= 0 and t)
            no_vote = len(votes) - len(cast)
            self.pending[client] = Ballot(choice, Counter(cast), len(tied) > 1, batch_ties, no_vote)

    def close_round(self, clients: list[int]) -> None:
        """The round's winner among the votes of ``clients`` (those whose uploads arrived)."""
        ballots = [self.pending.pop(c) for c in clients if c in self.pending]
        if not ballots:
            return
        votes = [b.choice for b in ballots]
        winner, tied = tally(votes, list(self.candidates), self.ties[1])
        self.winners.append(winner)
        batches = sum((b.batches for b in ballots), Counter())
        self.last_round = {
            "votes": dict(Counter(votes)),
            "round_winner": winner,
            "batch_votes": {c: batches.get(c, 0) for c in self.candidates},
            "ties": {
                "batch": sum(b.batch_ties for b in ballots),
                "client": sum(b.tied for b in ballots),
                "round": tied if len(tied) > 1 else [],
                "no_vote_batches": sum(b.no_vote for b in ballots),
            },
        }

    def choice(self) -> str:
        """The majority of the round winners (ties by the third rule)."""
        return tally(self.winners, list(self.candidates), self.ties[2])[0]

    def final_tie(self) -> list[str]:
        """The candidates tied for the most round wins ([] without a tie)."""
        tied = tally(self.winners, list(self.candidates))[1] if self.winners else []
        return tied if len(tied) > 1 else []

    def round_metrics(self, prefix: str) -> dict[str, Any]:
        """The last closed round's vote counts (clients and batches per candidate), winner and
        ties (batches whose minimum was tied, clients whose batch majority was tied, the
        candidates tied in the round's majority, batches that cast no vote), once."""
        row = {f"{prefix}_{k}": v for k, v in self.last_round.items()}
        self.last_round = {}
        return row

    def counts(self) -> dict[str, int]:
        """How many rounds each candidate won."""
        counts = Counter(self.winners)
        return {c: counts.get(c, 0) for c in self.candidates}
