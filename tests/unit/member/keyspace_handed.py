"""A keyspace round's handed maps, as the members read them: whole to two
carriers, and to every other member the part of it that member works on."""

from __future__ import annotations

from collections.abc import Mapping

from workgroup.keyspaces.partial import PartialMap
from workgroup.keyspaces.report import decode_report
from workgroup.keyspaces.slices import SliceMap
from workgroup.member.keyspace import KnownMap
from workgroup.member.keyspace_stage import CARRIERS
from workgroup.protocol.metadata import AssignmentData


def handed_maps(assignments: Mapping[str, AssignmentData]) -> tuple[SliceMap, dict[str, KnownMap]]:
    """The whole map a round handed, and what each member was handed; checks
    that two members carry it whole and that each other member's part is the
    map's slices it owns or is handed (active, warming, standby or withheld)."""
    handed: dict[str, KnownMap] = {}
    for mid, data in assignments.items():
        smap = decode_report(data.user_data).map
        assert smap is not None
        handed[mid] = smap
    whole = {mid: m for mid, m in handed.items() if isinstance(m, SliceMap)}
    # Two (one more when the leader leaves), or every member of a smaller group.
    assert min(CARRIERS, len(assignments)) <= len(whole) <= CARRIERS + 1
    maps = set(whole.values())
    assert len(maps) == 1  # the carriers are handed the same map
    smap = maps.pop()
    live = smap.by_id()
    for mid, part in handed.items():
        if mid in whole:
            continue
        assert isinstance(part, PartialMap)
        assert (part.keyspace, part.epoch, part.max_token) == (
            smap.keyspace,
            smap.epoch,
            smap.max_token,
        )
        assert all(live[piece.id] == piece for piece in part.slices)
        data = assignments[mid]
        named = {key for _, key in (*data.assigned, *data.warming)}
        theirs = {piece.id for piece in smap.slices if piece.owner == mid}
        # And the slices of what is withheld from it, which its assignment omits.
        assert {piece.id for piece in part.slices} >= named | theirs
    return smap, handed


def handed_map(assignments: Mapping[str, AssignmentData]) -> SliceMap:
    """:func:`handed_maps`' whole map."""
    return handed_maps(assignments)[0]
