"""Splits and merges: the planner's changes to the slices' ranges.

- A piece hotter than the split load is split, again and again within the
  round while the model says a child is still too hot: when one sampled key
  carries half its load or more, that key is cut out into a one-point piece
  (with what lies either side as two more pieces); otherwise the cut falls where
  the load is halved.
- While there are fewer pieces than the lower bound, the heaviest (then the
  widest) are halved the same way.  Splits stop at the upper bound.
- Adjacent pieces merge, in pairs, coldest first, while their sum is at most a
  quarter of the split load (so a merged piece is never split back at once) and
  the count is above the lower bound; above the upper bound any pair merges.
  A pair with one owner merges first; a pair with two takes the heavier's owner
  and spends the budget on the lighter part's range.  Merges spend at most
  ``MERGE_SHARE`` of the budget while the count is within the bounds: the rest
  is the balancing's (with slices spread over members, neighbours mostly have
  two owners, and merges down to the lower bound would take the whole budget,
  round after round, while a member stays out of the band).

Children keep their parent's owner.  Every piece born here takes a new token
(above all issued before: :class:`~workgroup.keyspaces.pieces.TokenCounter`) and
that token as its id.
"""

from __future__ import annotations

import heapq
import math
from itertools import pairwise

from workgroup.keyspaces.pieces import ChurnBudget, Piece, TokenCounter

#: The share of the round's budget merges may spend while the slice count is
#: within its bounds.
MERGE_SHARE = 0.5


def cut_points(piece: Piece) -> list[int]:
    """Where to cut ``piece`` (points strictly inside it; none if it cannot be cut)."""
    if piece.width < 2:
        return []
    if piece.keys and piece.load > 0:
        point, load = max(piece.keys, key=lambda item: (item[1], -item[0]))
        if 2 * load >= piece.load:
            return [p for p in (point, point + 1) if piece.start < p < piece.end]
    return [_halving_point(piece)]


def _halving_point(piece: Piece) -> int:
    """The point that halves the piece's modelled load (the middle if it has none)."""
    start, end = piece.start, piece.end
    if piece.load <= 0:
        return start + piece.width // 2
    half = piece.load / 2
    density = piece.spread_density()
    before = 0.0
    position = start
    cut = end - 1
    for point, load in piece.keys:
        spread = density * (point - position)
        # (No spread load, e.g. a load so small it underflows: the keys decide.)
        if density > 0 and before + spread >= half:
            cut = position + math.ceil((half - before) / density)
            break
        before += spread
        # The key itself crosses the half: cut on the side that is closer.
        if before + load >= half:
            cut = point if half - before <= before + load - half else point + 1
            break
        before += load
        position = point + 1
    else:
        if density > 0:
            cut = position + math.ceil((half - before) / density)
    return min(max(cut, start + 1), end - 1)


def split(piece: Piece, points: list[int], tokens: TokenCounter) -> list[Piece]:
    """The children of ``piece`` cut at ``points`` (sorted, inside it)."""
    density = piece.spread_density()
    bounds = [piece.start, *points, piece.end]
    children = []
    for start, end in pairwise(bounds):
        token = tokens.next()
        children.append(
            Piece(
                start,
                end,
                token,
                token,
                piece.owner,
                piece.load_of(start, end, density),
                piece.keys_in(start, end),
                born=True,
                refused_by=piece.refused_by,
            )
        )
    return children


def split_pieces(
    pieces: list[Piece], split_load: float, low: int, high: int, tokens: TokenCounter
) -> tuple[list[Piece], int]:
    """``pieces`` after the round's splits (in hash order), and how many were split."""
    alive = {id(p): p for p in pieces}
    count = len(pieces)
    splits = 0
    # Hot pieces first, then (to reach the lower bound) the heaviest and widest.
    heap = [(-p.load, -p.width, p.start, id(p)) for p in pieces]
    heapq.heapify(heap)
    while heap and count < high:
        neg_load, _, _, key = heapq.heappop(heap)
        piece = alive[key]
        if -neg_load <= split_load and count >= low:
            break
        points = cut_points(piece)
        if not points or count + len(points) > high:
            continue
        del alive[key]
        for child in split(piece, points, tokens):
            alive[id(child)] = child
            heapq.heappush(heap, (-child.load, -child.width, child.start, id(child)))
        count += len(points)
        splits += 1
    return sorted(alive.values(), key=lambda p: p.start), splits


def merge_pieces(
    pieces: list[Piece],
    merge_load: float,
    low: int,
    high: int,
    tokens: TokenCounter,
    budget: ChurnBudget,
) -> tuple[list[Piece], int]:
    """``pieces`` (in hash order) after the round's merges, and how many were made."""
    count = len(pieces)
    if count <= low:
        return pieces, 0
    pairs = sorted(
        (
            _owner_of(left) != _owner_of(right),
            left.load + right.load,
            left.start,
            i,
        )
        for i, (left, right) in enumerate(pairwise(pieces))
        # A refused piece is not merged: the merged piece could land on the
        # member refusing it, with its neighbour.
        if not (left.born or right.born or left.refused_by or right.refused_by)
    )
    used: set[int] = set()
    merged: dict[int, Piece] = {}
    limit = budget.remaining if count > high else int(budget.remaining * MERGE_SHARE)
    for _, load, _, i in pairs:
        if count <= low:
            break
        if i in used or i + 1 in used or (load > merge_load and count <= high):
            continue
        left, right = pieces[i], pieces[i + 1]
        heavier, lighter = (left, right) if left.load >= right.load else (right, left)
        owner = heavier.owner if heavier.owner is not None else lighter.owner
        if not (budget.allows(heavier, owner) and budget.allows(lighter, owner)):
            continue
        cost = budget.cost(heavier, owner) + budget.cost(lighter, owner)
        if cost > min(limit, budget.remaining):
            continue
        limit -= cost
        budget.spend(heavier, owner)
        budget.spend(lighter, owner)
        token = tokens.next()
        merged[i] = Piece(
            left.start, right.end, token, token, owner, load, left.keys + right.keys, born=True
        )
        used.update((i, i + 1))
        count -= 1
    out: list[Piece] = []
    for i, piece in enumerate(pieces):
        if i in merged:
            out.append(merged[i])
        elif i not in used:
            out.append(piece)
    return out, len(merged)


def _owner_of(piece: Piece) -> str:
    return piece.owner or ""


__all__ = ["MERGE_SHARE", "cut_points", "merge_pieces", "split", "split_pieces"]
