"""The group leader's part of a rebalance, without I/O: one implementation for the
live leader (:class:`~workgroup.member.state.MemberMachine`) and ``workgroup assign``.

A round, as the leader plays it:

1. :func:`read_members` decodes the members' JoinGroup metadata;
2. :func:`build_input` turns it and the leader's catalog into the assignor's
   input.  Kinds the catalog does not have and owned resources it does not list
   are ignored, as Kafka's assignors ignore topics missing from the cluster
   metadata, and returned in an :class:`Ignored` record so that a typo stays
   visible;
3. the assignor computes the *target* assignment, followed by the
   reassignment delay, refusals and, when members report loads, the load
   balancing stage (:mod:`~workgroup.member.round_stages`);
4. :func:`plan_round` decides what each member is handed now and what it must
   revoke: a resource still owned by a member that must give it up is withheld
   until that member has revoked it (KIP-429, Kafka's
   ``ConsumerCoordinator#validateCooperativeAssignment``); the owner then
   rejoins and the follow-up round hands it out;
5. :func:`encode_assignments` writes each member's SyncGroup assignment.

:mod:`~workgroup.member.pipeline` composes these stages, for the live leader
and for the what-if that ``workgroup assign`` shows.

Nothing here logs: the functions return what they found and the caller reports it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat

from workgroup.assignors.balance import Balanced
from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.errors import ProtocolError
from workgroup.kafka.messages import JoinedMember
from workgroup.member.errors import AssignorError
from workgroup.protocol.catalog import FrozenCatalog
from workgroup.protocol.metadata import AssignmentData, BinaryCodec, MemberMetadata
from workgroup.protocol.protocol import RebalanceMode
from workgroup.types import Key, Resource, sorted_resources

#: Rounds :func:`simulate_rebalance` plays before it reports non-convergence.
#: Kafka's cooperative assignors settle in two; more means the assignor keeps
#: moving resources that are still owned.
MAX_ROUNDS = 10

#: Metadata tag of a member that is closing: it takes nothing this round, so its
#: resources go to the others while it still works on them (see state.py).
LEAVING_TAG = "workgroup.leaving"
#: Metadata tag of a draining member: it stays in the group and takes nothing,
#: its resources move to others (with warm-ups: :mod:`~workgroup.member.warmup`).
DRAINING_TAG = "workgroup.draining"
#: Metadata tag of a member asking for a round with nothing else changed (its
#: value counts the asks): a coordinator rebalances only for changed metadata.
ASKS_TAG = "workgroup.asks"
#: Metadata tag of a member that refuses some resources for a while (a handler
#: that kept failing there, ``on_failure="release"``): a JSON list of
#: ``[kind, key]`` pairs.  The leader moves them to another member that takes
#: their kind (:func:`apply_refusals`).
REFUSES_TAG = "workgroup.refuses"


# --- reading the members ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MembersRead:
    """The members' decoded metadata and what could not be read."""

    #: ``member id -> metadata``, for every member whose metadata decoded.
    metadata: dict[str, MemberMetadata]
    #: ``member id -> metadata version it wrote``.
    used_versions: dict[str, int]
    #: Highest version every readable member supports (version probing).
    common_version: int
    #: ``member id -> why its metadata is unreadable``: it gets nothing this round.
    unreadable: dict[str, str]
    #: ``member id -> catalog hash it saw``, where that differs from the leader's.
    catalog_mismatches: dict[str, bytes]


def read_members(
    codec: BinaryCodec, members: Sequence[JoinedMember], catalog_hash: bytes
) -> MembersRead:
    """Decode every member's metadata; an unreadable one is reported, not raised,
    so that the rest of the group keeps working."""
    metadata: dict[str, MemberMetadata] = {}
    used_versions: dict[str, int] = {}
    unreadable: dict[str, str] = {}
    mismatches: dict[str, bytes] = {}
    common = codec.latest_version
    for member in members:
        try:
            decoded = codec.decode_metadata(member.metadata)
        except ProtocolError as exc:
            unreadable[member.member_id] = str(exc)
            continue
        metadata[member.member_id] = decoded.value
        used_versions[member.member_id] = decoded.header.used_version
        common = min(common, decoded.header.latest_supported_version)
        theirs = decoded.value.catalog_hash
        if theirs and theirs != catalog_hash:
            mismatches[member.member_id] = theirs
    return MembersRead(metadata, used_versions, max(common, 1), unreadable, mismatches)


# --- the assignor's input ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ignored:
    """What :func:`build_input` left out of one member's metadata."""

    #: Subscribed kinds the catalog does not have.
    kinds: tuple[str, ...] = ()
    #: Owned resources of a kind the catalog does not have, or a key it does not list.
    owned: tuple[Resource, ...] = ()
    #: Owned resources whose key is listed only with another type (``"0"`` for ``0``):
    #: a separate list because it is almost always a bug in the member.
    key_type_mismatches: tuple[Resource, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.kinds or self.owned or self.key_type_mismatches)

    def as_dict(self) -> dict[str, list[object]]:
        return {
            "unknown_kinds": list(self.kinds),
            "unknown_owned": [list(r) for r in self.owned],
            "key_type_mismatches": [list(r) for r in self.key_type_mismatches],
        }


@dataclass(frozen=True, slots=True)
class LeaderInput:
    """The assignor's input, and what was ignored to build it (members with nothing
    ignored are absent)."""

    input: AssignmentInput
    ignored: dict[str, Ignored]


def build_input(
    members: Sequence[JoinedMember],
    metadata: Mapping[str, MemberMetadata],
    catalog: FrozenCatalog,
) -> LeaderInput:
    """The assignor's input for ``members`` (in their JoinGroup order; those
    without ``metadata`` are left out) against the leader's ``catalog``.

    A member subscribing to no kind (``kinds`` empty) takes every kind; its
    instance id is the JoinGroup's, else its metadata's; a capacity <= 0 counts
    as 1.  The loads members measured on resources they own (metadata v3) become
    the input's ``resource_loads`` (NaN, negative and infinite ones are left out).
    """
    keys = catalog.keys
    all_kinds = frozenset(keys)
    key_sets = {kind: set(kind_keys) for kind, kind_keys in keys.items()}
    by_text: dict[str, dict[str, Key]] = {}
    infos: dict[str, MemberInfo] = {}
    ignored: dict[str, Ignored] = {}
    loads: dict[Resource, float] = {}
    for member in members:
        meta = metadata.get(member.member_id)
        if meta is None:
            continue
        known = tuple(r for r in meta.owned if r[1] in key_sets.get(r[0], ()))
        owned_load: float | None = None
        if meta.loads and len(meta.loads) == len(meta.owned):
            total = math.fsum(meta.loads)  # NaN when some resource is not measured
            if len(known) == len(meta.owned) and 0 <= total < math.inf:
                loads.update(zip(meta.owned, meta.loads, strict=True))  # at C speed
                owned_load = total
            else:
                loads.update(
                    (r, x)
                    for r, x in zip(meta.owned, meta.loads, strict=True)
                    if 0 <= x < math.inf and r[1] in key_sets.get(r[0], ())
                )
        unknown_owned: list[Resource] = []
        mismatched: list[Resource] = []
        if len(known) != len(meta.owned):
            for resource in dict.fromkeys(meta.owned):
                kind, key = resource
                kind_keys = key_sets.get(kind)
                if kind_keys is not None and key in kind_keys:
                    continue
                if kind_keys is not None:
                    if kind not in by_text:
                        by_text[kind] = {str(k): k for k in keys[kind]}
                    listed = by_text[kind].get(str(key))
                    if listed is not None and type(listed) is not type(key):
                        mismatched.append(resource)
                        continue
                unknown_owned.append(resource)
        kinds = all_kinds
        unknown_kinds: tuple[str, ...] = ()
        tags = dict(meta.tags)
        if LEAVING_TAG in tags or DRAINING_TAG in tags:
            kinds = frozenset()  # hands its resources over (before it leaves)
        elif meta.kinds:
            kinds = frozenset(k for k in meta.kinds if k in keys)
            unknown_kinds = tuple(sorted({k for k in meta.kinds if k not in keys}))
        found = Ignored(unknown_kinds, tuple(unknown_owned), tuple(mismatched))
        if found:
            ignored[member.member_id] = found
        infos[member.member_id] = MemberInfo(
            member_id=member.member_id,
            kinds=kinds,
            instance_id=member.group_instance_id or meta.instance_id,
            owned=known,
            generation=meta.owned_generation,
            rack=meta.rack,
            capacity=meta.capacity if meta.capacity > 0 else 1.0,
            user_data=meta.user_data,
            owned_load=owned_load,
            ready=frozenset(meta.ready),
        )
    _keep_ready_in_place(infos, metadata, key_sets)
    data = AssignmentInput(
        resources=dict(keys),
        members=infos,
        resource_racks=dict(catalog.racks),
        resource_attributes={r: dict(a) for r, a in catalog.attributes.items()},
        resource_loads=loads,
    )
    return LeaderInput(data, ignored)


def _keep_ready_in_place(
    infos: dict[str, MemberInfo],
    metadata: Mapping[str, MemberMetadata],
    key_sets: Mapping[str, set[Key]],
) -> None:
    """A resource a member warmed up and reports ready, that nobody owns any more
    (its owner revoked it for the cut-over: :mod:`~workgroup.member.warmup`),
    counts as that member's own, so that sticky assignors hand it there."""
    readies = {mid: meta.ready for mid, meta in metadata.items() if meta.ready and mid in infos}
    if not readies:
        return
    claimed = {r for info in infos.values() for r in info.owned}
    for member_id, ready in readies.items():
        info = infos[member_id]
        extra = tuple(
            r
            for r in dict.fromkeys(ready)
            if r not in claimed and r[1] in key_sets.get(r[0], ()) and r[0] in info.kinds
        )
        if extra:
            claimed.update(extra)
            infos[member_id] = replace(info, owned=(*info.owned, *extra))


# --- the round -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Premises:
    """What a round's decision rests on: the members that take work, with their
    kinds, racks and capacities, and the catalog.  While they hold and every
    member owns only what the decision gives it or the round handed it (nobody
    else decided meanwhile), the follow-up rounds of a cooperative rebalance
    carry the decision out.

    A member that takes nothing (leaving, draining) is no premise: the decision
    already handed its work to the others, so its departure changes nothing
    that decision rests on (while it still owns something, :meth:`hold` fails
    anyway: the decision gives it nothing)."""

    members: Mapping[str, tuple[frozenset[str], str | None, float]]
    resources: Mapping[str, Sequence[Key]]

    @classmethod
    def of(cls, data: AssignmentInput) -> Premises:
        return cls(
            {mid: (m.kinds, m.rack, m.capacity) for mid, m in data.members.items() if m.kinds},
            data.resources,
        )

    def hold(self, data: AssignmentInput, allowed: Mapping[str, Sequence[Resource]]) -> bool:
        """``data`` rests on the same premises, and each member owns only what
        ``allowed`` lists for it."""
        if self.members != Premises.of(data).members:
            return False
        if self.resources is not data.resources and self.resources != data.resources:
            return False
        return all(
            set(allowed.get(mid, ())).issuperset(info.owned) for mid, info in data.members.items()
        )


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """What one round decided, per member (every member of the group has an
    entry): the leader keeps it while it is to be carried out (:meth:`carries`)."""

    #: What the assignor wants each member to own (after the reassignment delay
    #: and refusals).
    target: dict[str, tuple[Resource, ...]]
    #: What each member is handed now: its target minus what is withheld.
    assigned: dict[str, tuple[Resource, ...]]
    #: What each member owned and must give up.
    revoked: dict[str, tuple[Resource, ...]]
    #: Resources of each member's target withheld until their owner has revoked them.
    withheld: dict[str, tuple[Resource, ...]]
    #: Resources each member warms up while another still owns them
    #: (:mod:`~workgroup.member.warmup`); members without warm-ups are absent.
    warming: dict[str, tuple[Resource, ...]] = field(default_factory=dict)
    #: What the round's stages decided (the final target, with the delayed
    #: resources where the assignor put them: the delay and refusals apply anew
    #: each round): what a follow-up round carries out.
    decided: Mapping[str, Sequence[Resource]] = field(default_factory=dict)
    #: What the balancing stage did (``None``: it did not run).
    balanced: Balanced | None = None
    #: What the decision rests on; ``None``: nothing to carry out (the balancing
    #: stage changed nothing, or nothing was withheld).
    premises: Premises | None = None

    @property
    def withheld_count(self) -> int:
        return sum(len(rs) for rs in self.withheld.values())

    @property
    def pending(self) -> bool:
        """A follow-up round is due (something was withheld)."""
        return any(self.withheld.values())

    def carries(self, data: AssignmentInput) -> bool:
        """A round with input ``data`` carries this plan out: its premises hold.
        A member may still own what the plan handed it, besides what it
        decided: the current owner of a move that warms up keeps the resource
        until the cut-over (:mod:`~workgroup.member.warmup` rule 2)."""
        if self.premises is None:
            return False
        allowed = {
            mid: (*self.decided.get(mid, ()), *self.assigned.get(mid, ()))
            for mid in self.decided.keys() | self.assigned.keys()
        }
        return self.premises.hold(data, allowed)


def withholding_claims(
    mode: RebalanceMode, metadata: Mapping[str, MemberMetadata]
) -> dict[str, tuple[Resource, ...]]:
    """The claims that withhold resources in a round: what members still own.

    Cooperative members report what they own.  Eager members report what the
    rebalance made them revoke (so that sticky assignors can keep it in place);
    they own nothing while the group rebalances, so their reports withhold
    nothing.
    """
    if mode == "eager":
        return {}
    return {mid: meta.owned for mid, meta in metadata.items()}


def plan_round(
    member_ids: Sequence[str],
    target: Assignment,
    claims: Mapping[str, Iterable[Resource]],
) -> RoundPlan:
    """What each of ``member_ids`` is handed this round, given the assignor's
    ``target`` and every member's ``claims`` (what it reported owning).

    A resource is withheld from a member while another member claims it and is
    not to keep it: that member must revoke it first.  Every claim counts,
    whatever its generation, so that nothing is handed over before its owner
    has let go.  A claim by a member that keeps the resource too (assignors
    that give a resource several owners) withholds nothing.

    Under an eager protocol members revoke everything before they join, so
    the caller passes no claims (:func:`withholding_claims`) and nothing is
    withheld.

    Raises :class:`~workgroup.member.errors.AssignorError` when ``target``
    names a member that is not in the group.
    """
    unknown = set(target) - set(member_ids)
    if unknown:
        raise AssignorError(f"assignor assigned to unknown members {sorted(unknown)}")
    # One claimant per resource in ``owner`` (built at C speed); the rare resources
    # claimed by several members also in ``shared``.
    claimed: dict[str, set[Resource]] = {}
    owner: dict[Resource, str] = {}
    total = 0
    for claimant, resources in claims.items():
        mine = claimed[claimant] = set(resources)
        owner.update(zip(mine, repeat(claimant), strict=False))
        total += len(mine)
    shared: dict[Resource, set[str]] = {}
    if total != len(owner):
        for claimant, mine in claimed.items():
            for resource in mine:
                if owner[resource] != claimant:
                    shared.setdefault(resource, {owner[resource]}).add(claimant)
    target_sets: dict[str, set[Resource]] = {}

    def keeps(member_id: str, resource: Resource) -> bool:
        if member_id not in target_sets:
            target_sets[member_id] = set(target.get(member_id, ()))
        return resource in target_sets[member_id]

    def blocked(member_id: str, resource: Resource) -> bool:
        claimants = shared.get(resource) or (owner[resource],)
        return any(c != member_id and not keeps(c, resource) for c in claimants)

    out_target: dict[str, tuple[Resource, ...]] = {}
    assigned: dict[str, tuple[Resource, ...]] = {}
    revoked: dict[str, tuple[Resource, ...]] = {}
    withheld: dict[str, tuple[Resource, ...]] = {}
    claimed_by = owner.get
    for member_id in member_ids:
        wanted = tuple(target.get(member_id, ()))
        # Candidates: resources someone else claims (first); then the exact rule.
        held = [
            r
            for r in wanted
            if (claimed_by(r, member_id) != member_id or r in shared) and blocked(member_id, r)
        ]
        given = wanted
        if held:
            skip = set(held)
            given = tuple(r for r in wanted if r not in skip)
        out_target[member_id] = wanted
        assigned[member_id] = given
        withheld[member_id] = tuple(held)
        owned = claimed.get(member_id)
        revoked[member_id] = sorted_resources(owned.difference(given)) if owned else ()
    return RoundPlan(out_target, assigned, revoked, withheld)


def encode_assignments(
    plan: RoundPlan,
    codec: BinaryCodec,
    read: MembersRead,
    *,
    generation: int,
    catalog_hash: bytes,
    loads_known: Collection[str] = frozenset(),
    user_data: bytes | Mapping[str, bytes] = b"",
) -> tuple[tuple[str, bytes], ...]:
    """Each member's SyncGroup assignment for ``plan``, in the plan's member order.

    Blobs use the highest version every member reads; a member whose metadata
    used another version is asked to rejoin with it.  Every member learns
    whether a follow-up round is pending, so that none calls the group settled
    while resources are withheld.  The members of ``loads_known`` learn that
    the leader needs no first loads from them
    (:meth:`~workgroup.member.load_balancing.LeaderBalancing.loads_known`).
    Every member is handed ``user_data``, or its own entry of it (a
    keyspace's next map, whole or in part).
    """
    common = read.common_version
    version = min(common, codec.latest_version)
    out: list[tuple[str, bytes]] = []
    for member_id, given in plan.assigned.items():
        data = AssignmentData(
            assigned=given,
            revoked=plan.revoked[member_id],
            generation=generation,
            catalog_hash=catalog_hash,
            common_version=common,
            rejoin=read.used_versions.get(member_id, common) != common,
            pending=plan.pending,
            warming=plan.warming.get(member_id, ()),
            loads_known=member_id in loads_known,
            user_data=user_data if isinstance(user_data, bytes) else user_data[member_id],
        )
        out.append((member_id, codec.encode_assignment(data, version)))
    return tuple(out)


# --- refusals --------------------------------------------------------------------------


def encode_refusals(resources: Iterable[Resource]) -> str:
    """The :data:`REFUSES_TAG` value of ``resources``."""
    return json.dumps(sorted(([kind, key] for kind, key in resources), key=repr))


def decode_refusals(tags: Iterable[tuple[str, str]]) -> frozenset[Resource]:
    """The resources a member's tags refuse (nothing if the tag is unreadable)."""
    raw = dict(tags).get(REFUSES_TAG)
    if not raw:
        return frozenset()
    try:
        pairs = json.loads(raw)
        return frozenset((str(kind), key) for kind, key in pairs)
    except (ValueError, TypeError):
        return frozenset()


def apply_refusals(
    target: Assignment,
    members: Mapping[str, MemberInfo],
    refusals: Mapping[str, frozenset[Resource]],
) -> Assignment:
    """Move each resource the assignor gave a member that refuses it to the
    member taking its kind that has the fewest resources and does not refuse it
    (nor hold it already).  When no other member can take it, it stays where the
    assignor put it: a resource nobody else can run is better run than idle.
    The assignor stays pure and unaware; this is the leader's last step, as the
    reassignment delay is.
    """
    if not any(refusals.values()):
        return target
    out = {member_id: list(resources) for member_id, resources in target.items()}
    for member_id, refused in sorted(refusals.items()):
        mine = out.get(member_id, [])
        for resource in [r for r in mine if r in refused]:
            candidates = [
                other
                for other, info in members.items()
                if other != member_id
                and resource[0] in info.kinds
                and resource not in refusals.get(other, frozenset())
                and resource not in out.get(other, [])
            ]
            if not candidates:
                continue
            chosen = min(candidates, key=lambda other: (len(out.get(other, [])), other))
            mine.remove(resource)
            out.setdefault(chosen, []).append(resource)
    return out


__all__ = [
    "ASKS_TAG",
    "DRAINING_TAG",
    "LEAVING_TAG",
    "MAX_ROUNDS",
    "REFUSES_TAG",
    "Ignored",
    "LeaderInput",
    "MembersRead",
    "Premises",
    "RoundPlan",
    "apply_refusals",
    "build_input",
    "decode_refusals",
    "encode_assignments",
    "encode_refusals",
    "plan_round",
    "read_members",
    "withholding_claims",
]
