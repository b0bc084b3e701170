"""Who owns which piece: orphans placed, then moves from the busiest member.

Weights are the pieces' loads, or their widths while the keyspace reports no
load at all (a new keyspace is spread by share of the hash space).

1. A piece with no live owner goes to the member with the least weight per
   capacity (ties: fewer pieces, then name) among those that do not refuse it
   (any member when all do: a piece nobody else can run is better run than
   idle).  It costs no budget.
2. While the busiest member (weight per capacity) is above ``1 + tolerance``
   times its share, or the idlest below ``1 - tolerance`` times its share, one of
   the busiest member's pieces moves to the idlest: of the pieces whose range
   the budget still covers and whose move leaves the idlest below the busiest
   (and within its band) and that the idlest does not refuse, the one with the
   most weight per hash point (the most load moved for the fewest keys: a hot
   key's one-point piece first).  Once a
   member is out of the band, the moves go on until the busiest and the idlest
   are within ``AIM`` of it (half): the loads of pieces split this round are
   estimates, and a plan right at the band's edge lands past it.
3. When no piece can move only because each that would is wider than the
   budget left, one is cut (while ``spare`` allows more pieces): a window of
   ``budget left`` points becomes a piece of their own, which moves, and what
   lies either side of it stays, each part born with a new token.  Without the
   cut a piece wider than the whole budget could never move: with few slices, a
   member that joins after the first would never be handed one.  The window is
   the heaviest that passes rule 2's checks, among those at either end of a
   piece and those starting at one of its sampled keys: a window that carries
   no load is never cut (its move would change nothing, and cutting it again
   and again would shred the piece up to the bound of slices).  A member none
   of whose pieces can move is left as it is for the rest of the round.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from workgroup.keyspaces.pieces import ChurnBudget, Piece, TokenCounter
from workgroup.keyspaces.reshaping import split

#: Once a member is out of the band, the moves aim within this share of it.
AIM = 0.5


def balance(
    pieces: list[Piece],
    capacities: Mapping[str, float],
    tolerance: float,
    budget: ChurnBudget,
    tokens: TokenCounter,
    spare: int,
) -> tuple[int, int]:
    """Sets the pieces' owners, cutting at most ``spare`` pieces (rule 3; ``pieces``
    is changed in place, in hash order); returns how many pieces changed owner
    between members, and how many were cut."""
    if not capacities:
        for piece in pieces:
            piece.owner = None
        return 0, 0
    by_load = any(piece.load > 0 for piece in pieces)

    def weight(piece: Piece) -> float:
        return piece.load if by_load else float(piece.width)

    total = sum(weight(piece) for piece in pieces)
    capacity = sum(capacities.values())
    share = {member: total * cap / capacity for member, cap in capacities.items()}
    held: dict[str, list[Piece]] = {member: [] for member in sorted(capacities)}
    carried = dict.fromkeys(held, 0.0)
    orphans = []
    for piece in pieces:
        if piece.owner in held:
            held[piece.owner].append(piece)
            carried[piece.owner] += weight(piece)
        else:
            orphans.append(piece)
    for piece in orphans:
        takers = [m for m in held if not piece.refuses(m)] or list(held)
        member = min(takers, key=lambda m: (carried[m] / capacities[m], len(held[m]), m))
        budget.spend(piece, member)
        piece.owner = member
        held[member].append(piece)
        carried[member] += weight(piece)

    moves = cuts = added = 0
    stuck: set[str] = set()
    band = tolerance
    # Every move lowers the spread of weight per capacity; the cap only bounds the round.
    while len(stuck) < len(held) and moves < len(pieces):
        donor = max(
            (m for m in held if m not in stuck),
            key=lambda m: (carried[m] / capacities[m], m),
        )
        receiver = min(held, key=lambda m: (carried[m] / capacities[m], m))
        over = carried[donor] > share[donor] * (1 + band)
        under = carried[receiver] < share[receiver] * (1 - band)
        if donor == receiver or not (over or under):
            break
        band = tolerance * AIM  # out of the band: aim well within it
        donor_ratio = carried[donor] / capacities[donor]
        room = share[receiver] * (1 + tolerance) - carried[receiver]
        # Rule 2's checks: within the receiver's room, and the receiver below the donor after.
        fits = _Fits(room, donor_ratio * capacities[receiver] - carried[receiver])
        best: Piece | None = None
        best_score = (0.0, 0.0, 0)
        wide: list[Piece] = []
        for piece in held[donor]:
            w = weight(piece)
            if w <= 0 or piece.refuses(receiver):
                continue
            if piece.width > budget.remaining:
                wide.append(piece)  # a window of it may still fit (rule 3)
                continue
            if not fits(w):
                continue
            score = (w / piece.width, w, -piece.start)
            if best is None or score > best_score:
                best, best_score = piece, score
        if best is None and wide and added < spare and budget.remaining > 0:
            # (wide holds no piece the receiver refuses: skipped above.)
            window = _best_window(wide, budget.remaining, fits, by_load)
            if window is not None:
                # Rule 3: the window the budget covers moves; the rest stays.
                piece, start = window
                end = start + budget.remaining
                bounds = [p for p in (start, end) if piece.start < p < piece.end]
                if len(bounds) <= spare - added:
                    parts = split(piece, bounds, tokens)
                    index = next(i for i, p in enumerate(pieces) if p is piece)
                    pieces[index : index + 1] = parts
                    held[donor].remove(piece)
                    held[donor] += parts
                    best = next(part for part in parts if part.start == start)
                    added += len(bounds)
                    cuts += 1
        if best is None:
            stuck.add(donor)
            continue
        budget.spend(best, receiver)
        held[donor].remove(best)
        held[receiver].append(best)
        carried[donor] -= weight(best)
        carried[receiver] += weight(best)
        best.owner = receiver
        moves += 1
    return moves, cuts


@dataclass(frozen=True, slots=True)
class _Fits:
    """Whether a weight may move to the receiver: above 0, at most ``room``,
    below ``below`` (the receiver's weight stays under the donor's)."""

    room: float
    below: float

    def __call__(self, weight: float) -> bool:
        return 0 < weight <= self.room and weight < self.below


def _best_window(
    wide: list[Piece], width: int, fits: _Fits, by_load: bool
) -> tuple[Piece, int] | None:
    """Rule 3: the heaviest window of ``width`` points in one of ``wide`` that
    ``fits`` (by weight), as ``(piece, its start)``; ``None`` if none carries weight."""
    best: tuple[Piece, int] | None = None
    best_score = (0.0, 0)
    for piece in wide:
        density = piece.spread_density()
        starts = {piece.start, piece.end - width}
        starts.update(min(point, piece.end - width) for point, _ in piece.keys)
        for start in sorted(starts):
            w = piece.load_of(start, start + width, density) if by_load else float(width)
            score = (w, -start)
            if fits(w) and (best is None or score > best_score):
                best, best_score = (piece, start), score
    return best


__all__ = ["balance"]
