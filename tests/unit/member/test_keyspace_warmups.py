"""Planned moves of slices with a warm-up: the leader's keyspace stage and
warm-up stage together (the keyspace stage's rule 6), round after round on a
fake clock.  While a move is staged the map keeps the slice with its current
owner and token; at the cut-over the map names the next owner and the token
rises."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from tests.unit.member.keyspace_handed import handed_maps
from workgroup.kafka.messages import JoinedMember
from workgroup.keyspaces import PlannerSettings, SliceMap
from workgroup.keyspaces.report import KeyspaceReport, encode_report
from workgroup.member.keyspace import KeyspaceConfig, KnownMap, MemberKeyspace
from workgroup.member.load_balancing import BalanceSettings
from workgroup.member.pipeline import LeaderPipeline
from workgroup.member.round_plan import LEAVING_TAG, REFUSES_TAG, encode_refusals
from workgroup.member.round_stages import run_round_stages
from workgroup.protocol.catalog import FrozenCatalog
from workgroup.protocol.metadata import AssignmentData, MemberMetadata
from workgroup.protocol.protocol import Protocol
from workgroup.types import Resource

PROTOCOL = Protocol.of("cooperative-sticky")
CONFIG = KeyspaceConfig(
    "users",
    PlannerSettings(
        imbalance_tolerance=0.3, min_slices_per_member=4, max_slices_per_member=16, churn_budget=1.0
    ),
)
ROUND_MS = 500  # between rounds on the fake clock


class Group:
    """A keyspace's group as its leader sees it: each member's map, what it
    owns and warms, round after round on a fake clock."""

    def __init__(self, max_warmups: int, config: KeyspaceConfig = CONFIG) -> None:
        self.max_warmups = max_warmups
        self.config = config
        self.new_leader()
        #: The member leading the rounds (the map goes to it whole).
        self.leader_id = ""
        #: Each round's metadata and assignments, in bytes (a Kafka record's size).
        self.sizes: list[int] = []
        self.now = 0
        self.generation = 1
        self.map: SliceMap | None = None
        #: What each member was handed last round (whole or its part).
        self.handed: dict[str, KnownMap] = {}
        self.owned: dict[str, tuple[Resource, ...]] = {}
        self.warming: dict[str, tuple[Resource, ...]] = {}
        self.warms_up: dict[str, bool] = {}
        self.leaving: set[str] = set()
        #: What each member refuses (``on_failure="release"``), in its tags.
        self.refuses: dict[str, tuple[Resource, ...]] = {}
        #: A slice's load as its owner reports it (1.0 unless set): even loads,
        #: so that no slice is split or merged.
        self.slice_loads: dict[int, float] = {}
        #: ``member id -> its sampled key loads by hash point``.
        self.keys: dict[str, dict[int, float]] = {}

    def new_leader(self) -> None:
        """Another member leads from the next round: a pipeline with no memory."""
        self.pipeline = LeaderPipeline(
            "g",
            reassign_delay_ms=0,
            balance=BalanceSettings(),
            max_warmups=self.max_warmups,
            keyspace=self.config,
            keyspace_view=MemberKeyspace(self.config),
        )

    def join(self, member_id: str, *, warms_up: bool = True) -> None:
        self.owned[member_id] = ()
        self.warming[member_id] = ()
        self.warms_up[member_id] = warms_up

    def gone(self, member_id: str) -> None:
        """The member crashed: it is no longer in the group and hands nothing over."""
        for table in (self.owned, self.warming, self.warms_up):
            del table[member_id]
        self.handed.pop(member_id, None)

    def metadata(self, member_id: str, ready: tuple[Resource, ...]) -> MemberMetadata:
        owned = self.owned[member_id]
        return MemberMetadata(
            kinds=("users",),
            owned=owned,
            owned_generation=self.generation - 1 if owned else -1,
            loads=tuple(self.slice_loads.get(key, 1.0) for key in ids(owned)),
            user_data=encode_report(
                KeyspaceReport(self.handed.get(member_id, self.map), self.keys.get(member_id, {}))
            ),
            tags=(
                *(((LEAVING_TAG, "1"),) if member_id in self.leaving else ()),
                *(
                    ((REFUSES_TAG, encode_refusals(self.refuses[member_id])),)
                    if self.refuses.get(member_id)
                    else ()
                ),
            ),
            warms_up=self.warms_up[member_id],
            warming=self.warming[member_id],
            ready=tuple(r for r in ready if r in self.warming[member_id]),
        )

    def round(self, ready: dict[str, tuple[Resource, ...]] | None = None) -> SliceMap:
        """One round: each member's assignment taken as the member takes it
        (revoked given up, assigned owned, warming kept); the map handed out.
        ``ready``: what each member reports ready of what it warms."""
        ready = ready or {}
        self.now += ROUND_MS
        joined = [
            JoinedMember(mid, None, PROTOCOL.codec.encode_metadata(self.metadata(mid, rs)))
            for mid, rs in ((mid, ready.get(mid, ())) for mid in self.owned)
        ]
        run = self.pipeline.begin(
            self.now,
            self.generation,
            PROTOCOL,
            joined,
            generation=self.generation,
            catalog=FrozenCatalog(),
            catalog_hash=b"",
            leader_id=self.leader_id,
        )
        taken = self.pipeline.take(run.run_id)
        assert taken is not None
        blobs = self.pipeline.finish(self.now, taken, run_round_stages(run.stages))
        self.sizes.append(sum(len(m.metadata) for m in joined) + sum(len(b) for _, b in blobs))
        self.assignments: dict[str, AssignmentData] = {
            mid: PROTOCOL.codec.decode_assignment(blob).value for mid, blob in blobs
        }
        smap, self.handed = handed_maps(self.assignments)
        for mid, data in self.assignments.items():
            self.owned[mid] = data.assigned
            self.warming[mid] = data.warming
        self.map = smap
        self.generation += 1
        return smap


def ids(resources: Iterable[Resource]) -> list[int]:
    """The slice ids of ``resources``."""
    out = []
    for _, key in resources:
        assert isinstance(key, int)
        out.append(key)
    return out


def owners(smap: SliceMap) -> dict[int, tuple[str | None, int]]:
    return {piece.id: (piece.owner, piece.token) for piece in smap.slices}


def started_group(max_warmups: int = 8) -> tuple[Group, SliceMap]:
    """m0 and m1 holding twelve slices: as many as three members need, so that
    a third one joining brings moves and no split."""
    group = Group(max_warmups)
    hold_evenly(group, 2)
    assert group.round() == group.map  # the members hold it: nothing changes
    return group, group.map


def hold_evenly(group: Group, members: int) -> SliceMap:
    """Members ``m0``, ``m1``, ... join ``group`` and hold twelve slices in turn."""
    for i in range(members):
        group.join(f"m{i}")
    uniform = SliceMap.uniform("users", 12)
    group.map = SliceMap(
        "users",
        tuple(replace(p, owner=f"m{i % members}") for i, p in enumerate(uniform.slices)),
        max_token=uniform.max_token,
        epoch=1,
    )
    for piece in group.map.slices:
        assert piece.owner is not None
        group.owned[piece.owner] += (("users", piece.id),)
    return group.map


def test_a_moved_slice_warms_up_while_the_map_keeps_its_owner_and_token() -> None:
    group, before = started_group()
    group.join("m2")
    during = group.round()
    warming = group.assignments["m2"].warming
    assert warming  # the planner moves slices to m2: each is warmed up first
    assert group.assignments["m2"].assigned == ()
    for mid in ("m0", "m1"):
        assert group.assignments[mid].revoked == ()  # the owners keep them meanwhile
    # The map still routes every key to the member that serves it, with its token:
    # nothing but staged moves changed, so the map is the one the members carry.
    assert during == before
    # Rounds while the warm-up goes on: the move stands, the map stays put.
    during = group.round()
    assert group.assignments["m2"].warming == warming
    assert during == before
    # m2 is ready: the moves are cut over; the map names m2 with higher tokens.
    cut = group.round({"m2": warming})
    moved = set(ids(warming))
    old = before.by_id()
    for piece in cut.slices:
        if piece.id in moved:
            assert piece.owner == "m2"
            assert piece.token > before.max_token  # the fence: the old owner's token is stale
        else:
            assert (piece.owner, piece.token) == (old[piece.id].owner, old[piece.id].token)
    assert cut.epoch == before.epoch + 1
    revoked = {r for mid in ("m0", "m1") for r in group.assignments[mid].revoked}
    assert revoked == set(warming)
    # Handed to m2 in the follow-up round (its handlers go on as the active
    # ones), with a token of the cut-over or later.
    after = group.round()
    handed = group.assignments["m2"].assigned
    assert handed
    assert all(after.by_id()[k].owner == "m2" for k in ids(handed))
    assert all(after.by_id()[k].token > before.max_token for k in ids(handed))


def test_at_most_max_warmups_run_and_the_other_moves_wait_with_their_owner() -> None:
    group, before = started_group(max_warmups=1)
    group.join("m2")
    during = group.round()
    first = group.assignments["m2"].warming
    assert len(first) == 1
    assert during == before  # the waiting moves stay with their owners too
    cut = group.round({"m2": first})
    (key,) = ids(first)
    assert cut.by_id()[key].owner == "m2"
    assert cut.by_id()[key].token > before.max_token
    # A cut-over counts until it is handed out: the other moves still wait.
    assert group.assignments["m2"].warming == first
    assert all(owners(cut)[p.id] == owners(before)[p.id] for p in cut.slices if p.id != key)
    group.round()
    assert ("users", key) in group.assignments["m2"].assigned
    # The round that hands the slice over plans nothing else (nobody holds it
    # yet: the planner waits for the hand-over); the next begins the next warm-up.
    after = group.round()
    (second,) = ids(group.assignments["m2"].warming)
    assert second != key
    assert owners(after)[second] == owners(before)[second]


def test_a_warm_up_that_fails_or_times_out_falls_back_to_a_plain_move() -> None:
    """The member's side reports a failed or timed-out warm-up ready (the
    warm-up module's rule 4): the move is cut over as a plain one at once."""
    group, before = started_group()
    group.join("m2")
    assert group.round() == before
    warming = group.assignments["m2"].warming
    cut = group.round({"m2": warming})
    assert {p.id for p in cut.slices if p.owner == "m2"} == set(ids(warming))
    assert all(cut.by_id()[k].token > before.max_token for k in ids(warming))


def test_a_member_that_does_not_warm_up_gets_plain_moves() -> None:
    group, before = started_group()
    group.join("m2", warms_up=False)
    after = group.round()
    assert group.assignments["m2"].warming == ()
    mine = [p for p in after.slices if p.owner == "m2"]
    assert mine
    assert all(p.token > before.max_token for p in mine)
    assert set(group.assignments["m2"].assigned).isdisjoint(("users", p.id) for p in mine)


def test_max_warmups_zero_means_plain_moves() -> None:
    group, before = started_group(max_warmups=0)
    group.join("m2")
    after = group.round()
    assert group.assignments["m2"].warming == ()
    mine = [p for p in after.slices if p.owner == "m2"]
    assert mine
    assert all(p.token > before.max_token for p in mine)


def test_a_slice_whose_owner_is_gone_is_handed_out_at_once() -> None:
    group, before = started_group()
    lost = {p.id for p in before.slices if p.owner == "m0"}
    group.gone("m0")
    after = group.round()
    assert group.assignments["m1"].warming == ()
    assert {p.id for p in after.slices if p.owner == "m1"} >= lost
    assert set(ids(group.assignments["m1"].assigned)) >= lost
    assert all(after.by_id()[k].token > before.max_token for k in lost)


def test_a_leaving_member_s_slices_warm_up_on_the_others_first() -> None:
    group, _ = started_group()
    group.join("m2")
    for _ in range(10):  # m2 warms and takes its share
        group.round({mid: group.warming[mid] for mid in group.warming})
        if not any(a.pending or a.warming for a in group.assignments.values()):
            break
    else:
        raise AssertionError("the group never settled")
    settled = group.map
    assert settled is not None
    leaving = {p.id for p in settled.slices if p.owner == "m0"}
    group.leaving.add("m0")
    during = group.round()
    warmed = {k for mid in ("m1", "m2") for k in ids(group.assignments[mid].warming)}
    assert warmed == leaving
    assert group.assignments["m0"].revoked == ()
    assert {p.id for p in during.slices if p.owner == "m0"} == leaving
    cut = group.round({mid: group.warming[mid] for mid in ("m1", "m2")})
    assert not any(p.owner == "m0" for p in cut.slices)
    assert set(group.assignments["m0"].revoked) == {("users", k) for k in leaving}


def test_a_leaving_member_s_slice_stays_with_the_member_warming_it() -> None:
    """The planner places a leaving member's slices as it places orphans, by load;
    once one is warming, the loads moving in the meantime (here, the warming
    member's own slices heating up) must not send it to another member: that
    would call the warm-up off, round after round."""
    group, _ = started_group()
    group.join("m2")
    for _ in range(10):
        group.round({mid: group.warming[mid] for mid in group.warming})
        if not any(a.pending or a.warming for a in group.assignments.values()):
            break
    else:
        raise AssertionError("the group never settled")
    group.leaving.add("m0")
    group.round()
    warmed = {mid: set(group.warming[mid]) for mid in ("m1", "m2")}
    assert all(warmed.values())
    for mid in ("m1", "m2"):  # each warmer in turn becomes the busier one
        for _, key in group.owned[mid]:
            group.slice_loads[key] = 1.3
        group.round()
        for warmer in ("m1", "m2"):
            assert warmed[warmer] <= set(group.warming[warmer]), warmer
        for _, key in group.owned[mid]:
            group.slice_loads[key] = 1.0


def test_slices_born_from_a_split_are_handed_out_without_a_warm_up() -> None:
    group, before = started_group()
    hot = before.slices[0]
    point = hot.start + hot.width // 2
    owner = hot.owner
    assert owner is not None
    group.slice_loads[hot.id] = 100.0
    group.keys[owner] = {point: 99.0}
    after = group.round()
    born = {p.id for p in after.slices} - {p.id for p in before.slices}
    assert born
    assert after.slice_of(point).id in born
    warming = {k for a in group.assignments.values() for k in ids(a.warming)}
    assert warming.isdisjoint(born)
