"""The leader's keyspace stage: the next slice map and who holds each slice.  Sans-I/O.

In the group of a keyspace (:mod:`~workgroup.member.keyspace`) the keyspace's
planner (:func:`~workgroup.keyspaces.planner.plan_next_map`) decides the
round's target; the pipeline runs it in place of the assignor
(:func:`~workgroup.member.round_stages.run_round_stages`).

Rules:

1. **Where the round starts** (:func:`read_keyspace`, when the round begins):
   the newest map the members report (highest ``epoch``, then ``max_token``),
   and the highest ``max_token`` any of them reports, so that a new leader
   never issues a token again.  The map's carriers report it whole, the other
   members their parts of it (:mod:`~workgroup.member.keyspace` rule 1); when
   no member reports the newest map whole (both carriers gone at once), it is
   rebuilt from the parts of it the members report
   (:func:`~workgroup.keyspaces.partial.rebuild_map`: each live member's
   slices keep their range, owner and token; each range nobody reported
   becomes an unowned slice with a new token), logged as
   ``member.keyspace_map_rebuilt``.  With no map anywhere, one slice over the whole
   space, unowned; the planner cuts it to the lower bound of slices.  The
   round's catalog is that map's slices (:func:`~workgroup.member.keyspace.keyspace_catalog`).
   **The kept state** (:class:`~workgroup.keyspaces.persisted.PersistedKeyspace`,
   read by the leader's process before it joined) counts as one more report:
   its highest token and epoch are floors, so that after a full restart (no
   member carries a map) tokens start above every token issued before and
   epochs above every map made before; its map, if it is the newest, is the
   starting point with its owners dropped (they are processes from before the
   restart), so that every slice keeps its range and takes a new token.
2. **The planner's input**: the members that take the keyspace's kind (a
   leaving or draining member takes none: its slices are placed elsewhere),
   with their capacities; the slices' loads their owners published
   (``AssignmentInput.resource_loads``); the keys they sampled, summed by point;
   the slices members claim to hold (their metadata's ``owned``), whose lease
   slots stay taken (:mod:`~workgroup.keyspaces.slot_pool`).
3. **The target is the map**: each member gets the slices the next map gives
   it, nothing else.  The delay, refusals and load balancing do not run: the
   planner places, moves within its churn budget, and balances, and a stage
   after it would make the map and the assignment disagree.  A round whose
   plan changed the map (or waited for a hand-over) is probed again a
   balancing interval later, with the loads of the slices it changed measured
   (:mod:`~workgroup.member.load_balancing` rule 5).
4. **Every member is handed the next map** (:func:`member_maps`), and the
   assignment names the next map's catalog, which members adopt before taking
   it.  The map goes whole to the carriers: the leader and, among the
   members that stay (not leaving or draining), the member that carried it
   before, else the first by id (two that stay when the leader leaves or
   drains); every other member
   is handed its part of it: the slices the map gives it and those its
   assignment names (handed, warming, withheld, standby), so that the group's
   metadata and assignments hold about two copies of the map, not two per
   member.
5. **A slice no longer in the map is released before its range is handed on**
   (:func:`withhold_overlaps`): while a member still claims a slice that a
   merge or a split took away (its handler is stopping), no other member is
   handed a slice overlapping it; the slice is withheld until the claim ends,
   as a resource that moves waits for its owner to revoke it.  Its range is
   the current map's, or the one the leader remembers from an earlier round
   (:attr:`KeyspaceRound.ranges`); a leader that never saw it withholds every
   slice born after it.  Such a claim is expected, not an unknown resource
   (:attr:`KeyspaceRound.releasing`): the map lists its slot as retired.
6. **A slice the planner moves between live members is a planned move**: the
   plan hands it to its next owner and revokes it from its current owner, and
   the warm-up stage (:mod:`~workgroup.member.warmup`, after this stage) stages
   it as any other resource.  While it is staged (warming, or waiting for a
   free warm-up) its current owner keeps it, and so does the map
   (:func:`keep_staged_slices`): the slice keeps its owner and its token, so
   that keys are routed to the member that serves them and only that member's
   token is valid.  The planner plans each round afresh from that map: while
   the move stands, the next round stages it again, and once the next owner is
   ready the move is cut over as a plain one, the map names the next owner and
   the token rises (the fence).  A map with nothing but staged moves is the
   current map, unchanged (its epoch does not rise).  Slices born from a split
   or a merge have new ids: nobody holds them yet, so they are handed out at
   once (after rule 5), never warmed.
7. **Standbys** (:attr:`~workgroup.member.keyspace.KeyspaceConfig.standbys`):
   after the map's owners, each slice of the next map gets that many holders of
   its standby twin among the members that take both kinds, never its owner
   (:func:`~workgroup.assignors.standby.add_standbys`: sticky, spread so that
   a member's slices have their standbys on many members).  Slices born from
   a split or a merge get new twins; the twins of retired slices are dropped
   (their claims are expected, as rule 5's).  A slice whose owner is gone
   (crashed, leaving, draining) goes to a live standby holder of it, one that
   reported its standby ready first (:attr:`KeyspaceRound.standby`, the
   planner's ``standby``), unless a member is already warming it up.
8. **Refusals** (``on_failure="release"``: a member whose handler of a slice
   kept failing gives it up and refuses it for a while, in its metadata's
   tags): the planner takes them as a constraint (its ``refused``): a
   refusing owner, warming member or standby holder does not keep the slice,
   and no refusing member is given it, nor a slice split from it, while a
   member that does not refuse it can take it (when every member refuses it,
   it is placed anyway: better run than idle).  A refused standby twin is not
   handed back to the member refusing it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.assignors.standby import add_standbys, claimed_standbys, standby_kind
from workgroup.errors import ProtocolError
from workgroup.keyspaces.loads import KeyspaceLoads
from workgroup.keyspaces.partial import PartialMap, part_of, rebuild_map
from workgroup.keyspaces.persisted import PersistedKeyspace
from workgroup.keyspaces.planner import Plan, moved_share, plan_next_map
from workgroup.keyspaces.report import decode_report, encode_map_only
from workgroup.keyspaces.slices import Slice, SliceMap
from workgroup.log import get_logger
from workgroup.member.keyspace import KeyspaceConfig, KnownMap, keyspace_catalog, newer
from workgroup.member.round_plan import RoundPlan
from workgroup.protocol.catalog import catalog_hash, freeze_catalog
from workgroup.protocol.metadata import MemberMetadata
from workgroup.types import Key, Resource

log = get_logger(__name__)

#: How many members carry the whole map (rule 4): the leader and one more, so
#: that a new leader finds it whole unless both leave at once.
CARRIERS = 2


@dataclass(frozen=True, slots=True)
class KeyspaceRound:
    """What the keyspace stage starts from (rule 1)."""

    config: KeyspaceConfig
    #: The newest map the members carry (or a fresh one).
    current: SliceMap
    #: The highest token any member's map issued.
    max_token: int
    #: Sampled key loads, by hash point, summed over members.
    keys: Mapping[int, float] = field(default_factory=dict)
    #: The slice ids members hold now (their slots stay taken).
    claimed: frozenset[int] = frozenset()
    #: ``slice id -> (start, end)`` of slices no longer in the current map that
    #: the leader saw in an earlier round (rule 5).
    ranges: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    #: ``slice id -> the member warming it up`` (rule 6): a slice whose owner
    #: left or drains stays with the member already warming it.
    warming: Mapping[int, str] = field(default_factory=dict)
    #: ``slice id -> its standby holders``, those that reported the standby
    #: ready first (rule 7): a slice whose owner is gone goes to the first live one.
    standby: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    #: The members that reported the current map whole (rule 4).
    carriers: frozenset[str] = frozenset()

    @property
    def catalog_hash(self) -> bytes:
        return catalog_hash(freeze_catalog(keyspace_catalog(self.current, self.config.standbys)))

    @property
    def releasing(self) -> frozenset[Resource]:
        """The slices merged or split away that members still held when the
        current map was made (its retired slots): claims of them are expected."""
        name = self.config.name
        twin = standby_kind(name)
        return frozenset(
            (kind, piece_id)
            for _, piece_id in self.current.retired
            for kind in ((name, twin) if self.config.standbys else (name,))
        )

    def known_ranges(self) -> dict[int, tuple[int, int]]:
        """``slice id -> (start, end)`` of every slice the leader knows the range of."""
        known = dict(self.ranges)
        known.update((piece.id, (piece.start, piece.end)) for piece in self.current.slices)
        return known


@dataclass(frozen=True, slots=True)
class KeyspacePlanned:
    """The keyspace stage's output."""

    plan: Plan
    #: ``member id -> the slices the next map gives it`` (rule 3).
    target: Assignment
    #: The next map as every member is handed it (rule 4).
    encoded: bytes
    #: The digest of the next map's catalog (rule 4).
    catalog_hash: bytes


def read_keyspace(
    config: KeyspaceConfig,
    metadata: Mapping[str, MemberMetadata],
    *,
    group_id: str,
    persisted: PersistedKeyspace | None = None,
) -> KeyspaceRound:
    """Rule 1: the map and loads the round starts from (``persisted``: the kept state)."""
    newest: SliceMap | None = None
    max_token = 0
    epoch = 0  # the kept epoch: maps after a restart are newer than those before
    keys: dict[int, float] = {}
    claimed = frozenset(
        key
        for meta in metadata.values()
        for kind, key in meta.owned
        if kind == config.name and isinstance(key, int)
    )
    warming = {
        key: member_id
        for member_id, meta in sorted(metadata.items())
        for kind, key in meta.warming
        if kind == config.name and isinstance(key, int)
    }
    standby = _standby_holders(config.name, metadata)
    maps: dict[bytes, SliceMap] = {}  # carriers carry the same map: decode it once
    reported: dict[str, KnownMap] = {}
    newest_known: KnownMap | None = None
    for member_id, meta in metadata.items():
        if not meta.user_data:
            continue
        try:
            report = decode_report(meta.user_data, maps)
        except ProtocolError as exc:
            log.error(
                "member.keyspace_report_unreadable",
                group=group_id,
                member=member_id,
                error=str(exc),
            )
            continue
        smap = report.map
        for point, load in report.keys.items():
            keys[point] = keys.get(point, 0.0) + load
        if smap is None or smap.keyspace != config.name:
            continue
        max_token = max(max_token, smap.max_token)
        reported[member_id] = smap
        if newer(smap, newest_known):
            newest_known = smap
        if isinstance(smap, SliceMap) and newer(smap, newest):
            newest = smap
    if newest_known is not None and newer(newest_known, newest):
        newest = _rebuilt(newest_known, reported.values(), group_id)
    carriers = frozenset(
        member_id
        for member_id, smap in reported.items()
        if isinstance(smap, SliceMap) and newest is not None and smap == newest
    )
    if persisted is not None:
        max_token, epoch = max(max_token, persisted.max_token), persisted.epoch
        kept = persisted.map
        if kept is not None and kept.keyspace == config.name and newer(kept, newest):
            # Only when no member carries it (a full restart): a member's map
            # with its owners is the same map, and keeps the owners.
            newest = _unowned(kept, max(kept.epoch, epoch))
    if newest is None:
        fresh = SliceMap.uniform(config.name, 1, first_token=max_token + 1)
        newest = replace(fresh, epoch=epoch)
    elif persisted is not None and (newest.epoch, newest.max_token) < (
        persisted.epoch,
        persisted.max_token,
    ):
        # Older than the kept state: a member from before a full restart.  Its
        # owners held these ranges before tokens that were issued since.
        newest = _unowned(newest, epoch)
    return KeyspaceRound(
        config,
        newest,
        max(max_token, newest.max_token),
        keys,
        claimed,
        warming=warming,
        standby=standby,
        carriers=carriers,
    )


def _rebuilt(newest: KnownMap, reported: Iterable[KnownMap], group_id: str) -> SliceMap:
    """Rule 1: the newest map, whole, from the parts of it the members report."""
    parts = [
        smap
        for smap in reported
        if isinstance(smap, PartialMap)
        and (smap.keyspace, smap.epoch, smap.max_token)
        == (newest.keyspace, newest.epoch, newest.max_token)
    ]
    smap, gaps = rebuild_map(parts)
    log.warning(
        "member.keyspace_map_rebuilt",
        group=group_id,
        epoch=smap.epoch,
        parts=len(parts),
        slices_known=len(smap) - gaps,
        ranges_unknown=gaps,
        why="no member reported the newest map whole (its carriers left); "
        "each range no member reported takes a new token",
    )
    return smap


def _standby_holders(
    name: str, metadata: Mapping[str, MemberMetadata]
) -> dict[int, tuple[str, ...]]:
    """Rule 7: ``slice id -> the members holding its standby twin``, those that
    report it ready first, then by member id."""
    twin = standby_kind(name)
    holders: dict[int, list[tuple[bool, str]]] = {}
    for member_id, meta in metadata.items():
        ready = frozenset(meta.ready)
        for kind, key in meta.owned:
            if kind == twin and isinstance(key, int):
                holders.setdefault(key, []).append(((kind, key) not in ready, member_id))
    return {key: tuple(mid for _, mid in sorted(found)) for key, found in holders.items()}


def _unowned(smap: SliceMap, epoch: int) -> SliceMap:
    """``smap`` at ``epoch`` with no owners: placed again, every slice takes a new token."""
    slices = tuple(replace(p, owner=None) for p in smap.slices)
    return SliceMap(smap.keyspace, slices, smap.max_token, epoch, smap.retired)


def run_keyspace_stage(
    round_: KeyspaceRound,
    data: AssignmentInput,
    refusals: Mapping[str, frozenset[Resource]] | None = None,
) -> KeyspacePlanned:
    """Rules 2-4 and 8: plan the next map and hand each member its slices
    (``refusals``: what each member refuses)."""
    name = round_.config.name
    twin = standby_kind(name)
    refused: dict[int, set[str]] = {}
    refused_twins: dict[str, set[Key]] = {}
    for member_id, resources in (refusals or {}).items():
        for kind, key in resources:
            if kind == name and isinstance(key, int):
                refused.setdefault(key, set()).add(member_id)
            elif kind == twin:
                refused_twins.setdefault(member_id, set()).add(key)
    members = _takers(name, data.members)
    slice_loads = {
        key: load
        for (kind, key), load in data.resource_loads.items()
        if kind == name and isinstance(key, int)
    }
    loads = KeyspaceLoads(slice_loads, round_.keys)
    plan = plan_next_map(
        round_.current,
        loads,
        members,
        round_.config.settings,
        max_token=round_.max_token,
        claimed=round_.claimed,
        warming=round_.warming,
        standby=round_.standby,
        refused=refused,
    )
    target: Assignment = {mid: [] for mid in data.members}
    for piece in plan.map.slices:
        if piece.owner is not None and piece.owner in target:
            target[piece.owner].append((name, piece.id))
    standbys = round_.config.standbys
    catalog = keyspace_catalog(plan.map, standbys)
    if standbys:
        # Rule 7: the next map's slices, each with its twins on other members.
        ids: list[Key] = [piece.id for piece in plan.map.slices]
        placing = replace(data, resources={name: ids, standby_kind(name): ids})
        add_standbys(placing, {name}, target, claimed_standbys(data), standbys)
        for member_id, keys in refused_twins.items():
            # Rule 8: a refused twin is not handed back (the slice has one
            # standby fewer until the refusal ends).
            if member_id in target:
                target[member_id] = [
                    r for r in target[member_id] if r[0] != twin or r[1] not in keys
                ]
    return KeyspacePlanned(
        plan,
        target,
        encode_map_only(plan.map),
        catalog_hash(freeze_catalog(catalog)),
    )


def keep_staged_slices(
    planned: KeyspacePlanned, round_: KeyspaceRound, plan: RoundPlan
) -> KeyspacePlanned:
    """Rule 6: ``planned`` with each slice that ``plan`` (the round's plan after
    the warm-up stage) leaves with its current owner, instead of the next map's
    owner, back with that owner and its token."""
    name = round_.config.name
    holder = {
        key: member_id
        for member_id, given in plan.assigned.items()
        for kind, key in given
        if kind == name and isinstance(key, int)
    }
    before = round_.current.by_id()
    next_map = planned.plan.map
    slices: list[Slice] = []
    kept = 0
    for piece in next_map.slices:
        old = before.get(piece.id)
        if (
            old is not None
            and old.owner is not None
            and old.owner != piece.owner
            and holder.get(piece.id) == old.owner
        ):
            slices.append(replace(piece, owner=old.owner, token=old.token))
            kept += 1
        else:
            slices.append(piece)
    if not kept:
        return planned
    smap = SliceMap(
        next_map.keyspace,
        tuple(slices),
        max_token=next_map.max_token,
        epoch=next_map.epoch,
        retired=next_map.retired,
    )
    current = round_.current
    if smap.slices == current.slices and smap.retired == current.retired:
        smap = current  # nothing changes but staged moves: the map stays as it is
    changed = smap is not current
    moves = max(planned.plan.moves - kept, 0)
    owners = frozenset(p.owner for p in next_map.slices if p.owner is not None)
    moved = moved_share(current, smap, owners)
    plan_out = replace(planned.plan, map=smap, moves=moves, moved=moved, changed=changed)
    return replace(planned, plan=plan_out, encoded=encode_map_only(smap))


def member_maps(
    planned: KeyspacePlanned,
    round_: KeyspaceRound,
    plan: RoundPlan,
    leader_id: str,
    infos: Mapping[str, MemberInfo],
) -> dict[str, bytes]:
    """Rule 4: each member's ``user_data``: the next map whole for the
    carriers (:func:`_carriers`), its part of it for every other member
    (``infos``: the round's members, as the planner saw them)."""
    name = round_.config.name
    twin = standby_kind(name)
    members = sorted(plan.assigned)
    carriers = _carriers(leader_id, round_.carriers, members, _takers(name, infos))
    smap = planned.plan.map
    whole = planned.encoded
    ids: dict[str, set[int]] = {member_id: set() for member_id in members}
    for piece in smap.slices:
        if piece.owner in ids:
            ids[piece.owner].add(piece.id)
    for given in (plan.assigned, plan.warming, plan.withheld):
        for member_id, resources in given.items():
            mine = ids.get(member_id)
            if mine is None:
                continue
            mine.update(
                key for kind, key in resources if kind in (name, twin) and isinstance(key, int)
            )
    return {
        member_id: whole
        if member_id in carriers
        else encode_map_only(part_of(smap, ids[member_id]))
        for member_id in members
    }


def _carriers(
    leader_id: str, before: Collection[str], members: list[str], staying: Collection[str]
) -> set[str]:
    """Rule 4: the leader, and :data:`CARRIERS` members beside it that stay
    (one when the leader stays), those that carried the map ``before`` first;
    any members when too few stay."""
    candidates = [
        m for m in dict.fromkeys([*sorted(before), *members]) if m in members and m != leader_id
    ]
    carriers = {leader_id} & set(members)
    wanted = CARRIERS - (leader_id in staying)
    carriers.update([m for m in candidates if m in staying][:wanted])
    for member_id in candidates:
        if len(carriers) >= CARRIERS:
            break
        carriers.add(member_id)
    return carriers


def _takers(name: str, infos: Mapping[str, MemberInfo]) -> dict[str, float]:
    """The members that take keyspace ``name`` (not leaving nor draining), by capacity."""
    return {mid: info.capacity for mid, info in infos.items() if name in info.kinds}


def withhold_overlaps(
    plan: RoundPlan,
    round_: KeyspaceRound,
    next_map: SliceMap,
    claims: Mapping[str, Iterable[Resource]],
) -> RoundPlan:
    """Rule 5: ``plan`` with every slice handed to a member withheld while
    another member claims a slice that ``next_map`` no longer has and whose
    range overlaps it (``claims``: what each member reports holding)."""
    name = round_.config.name
    live = next_map.by_id()
    known = round_.known_ranges()
    releasing: list[tuple[str, int, tuple[int, int] | None]] = [
        (member_id, key, known.get(key))
        for member_id, resources in claims.items()
        for kind, key in resources
        if kind == name and isinstance(key, int) and key not in live
    ]
    if not releasing:
        return plan
    assigned = dict(plan.assigned)
    withheld = dict(plan.withheld)
    for member_id, given in plan.assigned.items():
        mine = set(claims.get(member_id, ()))
        held = [
            resource
            for resource in given
            if resource[0] == name
            and resource not in mine  # already running there: nothing starts
            and isinstance(resource[1], int)
            and resource[1] in live
            and _blocked(member_id, live[resource[1]], releasing)
        ]
        if held:
            skip = set(held)
            assigned[member_id] = tuple(r for r in given if r not in skip)
            withheld[member_id] = (*withheld.get(member_id, ()), *held)
    return replace(plan, assigned=assigned, withheld=withheld)


def _blocked(
    member_id: str, piece: Slice, releasing: list[tuple[str, int, tuple[int, int] | None]]
) -> bool:
    for claimant, claimed_id, span in releasing:
        if claimant == member_id:
            continue  # the member's own handlers: it stops them before starting others
        if span is None:
            # Range unknown: every slice born after it may overlap it.
            if piece.id > claimed_id:
                return True
        elif span[0] < piece.end and piece.start < span[1]:
            return True
    return False


def ranges_to_remember(round_: KeyspaceRound, next_map: SliceMap) -> dict[int, tuple[int, int]]:
    """The ranges of ``next_map``'s retired slices the leader knows (rule 5):
    claims of them may outlast the round."""
    known = round_.known_ranges()
    return {piece_id: known[piece_id] for _, piece_id in next_map.retired if piece_id in known}


__all__ = [
    "CARRIERS",
    "KeyspacePlanned",
    "KeyspaceRound",
    "keep_staged_slices",
    "member_maps",
    "ranges_to_remember",
    "read_keyspace",
    "run_keyspace_stage",
    "withhold_overlaps",
]
