"""The planner's working copy of a slice: mutable, with its load and sampled keys.

Loads inside a piece follow one model: its sampled keys carry their own loads,
and the rest of its load is spread evenly over its range.  Splits estimate their
children's loads with it, so one round can split and then balance.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field


@dataclass(slots=True)
class Piece:
    start: int
    end: int
    id: int
    token: int
    owner: str | None
    load: float
    #: The sampled keys in ``[start, end)``: (hash point, load), by point.
    keys: list[tuple[int, float]] = field(default_factory=list)
    #: Born in this round (a split or a merge): it has its own new token.
    born: bool = False
    #: The live members that refuse it (their handler of it kept failing,
    #: ``on_failure="release"``): it goes to another member while one can take it.
    refused_by: frozenset[str] = frozenset()

    def refuses(self, member: str) -> bool:
        """Whether ``member`` refuses this piece."""
        return member in self.refused_by

    @property
    def width(self) -> int:
        return self.end - self.start

    def spread_density(self) -> float:
        """The load per hash point of the part not in sampled keys."""
        sampled = sum(load for _, load in self.keys)
        return max(self.load - sampled, 0.0) / self.width

    def load_of(self, start: int, end: int, density: float) -> float:
        """The model's load of ``[start, end)`` (within this piece)."""
        lo = bisect_left(self.keys, (start, -1.0))
        hi = bisect_left(self.keys, (end, -1.0))
        return density * (end - start) + sum(load for _, load in self.keys[lo:hi])

    def keys_in(self, start: int, end: int) -> list[tuple[int, float]]:
        lo = bisect_left(self.keys, (start, -1.0))
        hi = bisect_left(self.keys, (end, -1.0))
        return self.keys[lo:hi]


class TokenCounter:
    """Hands out the round's new tokens (each above every token issued before)."""

    def __init__(self, max_token: int) -> None:
        self.max_token = max_token

    def next(self) -> int:
        self.max_token += 1
        return self.max_token


__all__ = ["Piece", "TokenCounter"]


class ChurnBudget:
    """The hash points whose owner may still change this round.

    Only a live owner's points count: a piece that had no owner, or whose owner
    left the group, has nothing to keep.
    """

    def __init__(self, points: int, members: frozenset[str]) -> None:
        self.remaining = points
        self.members = members

    def cost(self, piece: Piece, new_owner: str | None) -> int:
        if piece.owner is None or piece.owner not in self.members or piece.owner == new_owner:
            return 0
        return piece.width

    def allows(self, piece: Piece, new_owner: str | None) -> bool:
        return self.cost(piece, new_owner) <= self.remaining

    def spend(self, piece: Piece, new_owner: str | None) -> None:
        self.remaining -= self.cost(piece, new_owner)


__all__ += ["ChurnBudget"]
