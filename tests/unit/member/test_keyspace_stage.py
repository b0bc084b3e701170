"""The leader's keyspace stage in the round pipeline: the map carried by the
members, the next map planned, every member handed its slices and the map."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.kafka.messages import JoinedMember
from workgroup.keyspaces import PlannerSettings, SliceMap
from workgroup.keyspaces.hashing import HASH_SPACE
from workgroup.keyspaces.persisted import PersistedKeyspace
from workgroup.keyspaces.report import KeyspaceReport, decode_report, encode_report
from workgroup.keyspaces.slices import Slice
from workgroup.member.keyspace import KeyspaceConfig, MemberKeyspace, keyspace_catalog
from workgroup.member.keyspace_stage import KeyspaceRound, withhold_overlaps
from workgroup.member.load_balancing import BalanceSettings
from workgroup.member.pipeline import LeaderPipeline
from workgroup.member.round_plan import LEAVING_TAG, plan_round
from workgroup.member.round_stages import run_round_stages
from workgroup.protocol.catalog import FrozenCatalog, catalog_hash, freeze_catalog
from workgroup.protocol.metadata import AssignmentData, MemberMetadata
from workgroup.protocol.protocol import Protocol
from workgroup.testing import capture_logs
from workgroup.types import Resource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "keyspaces"))
from slice_map_strategies import slice_maps

from tests.unit.member.keyspace_handed import handed_map

PROTOCOL = Protocol.of("cooperative-sticky")
CONFIG = KeyspaceConfig(
    "users", PlannerSettings(min_slices_per_member=4, max_slices_per_member=16, churn_budget=1.0)
)
MEMBERS = ("m0", "m1", "m2")


def metadata(
    report: KeyspaceReport | None = None,
    *,
    owned: tuple[Resource, ...] = (),
    loads: tuple[float, ...] = (),
    leaving: bool = False,
) -> MemberMetadata:
    return MemberMetadata(
        kinds=("users",),
        owned=owned,
        owned_generation=1 if owned else -1,
        loads=loads,
        user_data=encode_report(report or KeyspaceReport()),
        tags=((LEAVING_TAG, "1"),) if leaving else (),
    )


def leader(
    persisted: PersistedKeyspace | None = None, config: KeyspaceConfig = CONFIG
) -> LeaderPipeline:
    """A leader's pipeline (``persisted``: the state its process read before joining)."""
    view = MemberKeyspace(config)
    view.persisted = persisted
    return LeaderPipeline(
        "g",
        reassign_delay_ms=0,
        balance=BalanceSettings(),
        max_warmups=0,
        keyspace=config,
        keyspace_view=view,
    )


def round_(
    metas: dict[str, MemberMetadata],
    now: int = 0,
    persisted: PersistedKeyspace | None = None,
    *,
    pipeline: LeaderPipeline | None = None,
    generation: int = 2,
) -> dict[str, AssignmentData]:
    """One leader round through the pipeline (a new leader's unless
    ``pipeline``); each member's assignment."""
    pipeline = pipeline or leader(persisted)
    joined = [
        JoinedMember(mid, None, PROTOCOL.codec.encode_metadata(m)) for mid, m in metas.items()
    ]
    run = pipeline.begin(
        now, 1, PROTOCOL, joined, generation=generation, catalog=FrozenCatalog(), catalog_hash=b""
    )
    assert run.stages.keyspace is not None
    taken = pipeline.take(run.run_id)
    assert taken is not None
    blobs = pipeline.finish(now, taken, run_round_stages(run.stages))
    return {mid: PROTOCOL.codec.decode_assignment(blob).value for mid, blob in blobs}


def leader_round(
    metas: dict[str, MemberMetadata], now: int = 0, persisted: PersistedKeyspace | None = None
) -> tuple[LeaderPipeline, dict[str, AssignmentData]]:
    """:func:`round_`, with the leader's pipeline after it."""
    pipeline = leader(persisted)
    return pipeline, round_(metas, now, pipeline=pipeline)


def check_handed(
    assignments: dict[str, AssignmentData],
    smap: SliceMap,
    owned: Mapping[str, tuple[Resource, ...]] | None = None,
    before: SliceMap | None = None,
) -> None:
    """Each member is handed the slices the map gives it, under the map's catalog;
    only a slice another member still owns, or one overlapping a slice of
    ``before`` another member still owns that the map no longer has, is
    withheld (until it is revoked)."""
    owned = owned or {}
    digest = catalog_hash(freeze_catalog(keyspace_catalog(smap)))
    live = smap.by_id()
    old = before.by_id() if before is not None else {}
    for mid, data in assignments.items():
        assert data.catalog_hash == digest
        mine = {("users", piece.id) for piece in smap.slices if piece.owner == mid}
        assert set(data.assigned) <= mine
        others = {r for other, rs in owned.items() if other != mid for r in rs}
        gone = [old[key] for _, key in others if key in old and key not in live]
        for _, key in mine - set(data.assigned) - others:
            piece = live[key]  # withheld: it overlaps a slice still held elsewhere
            assert any(g.start < piece.end and piece.start < g.end for g in gone)


def test_a_first_round_cuts_a_fresh_map_and_spreads_it() -> None:
    assignments = round_({mid: metadata() for mid in MEMBERS})
    smap = handed_map(assignments)
    assert smap.keyspace == "users"
    assert smap.epoch == 1
    assert 4 * len(MEMBERS) <= len(smap.slices) <= 16 * len(MEMBERS)
    assert {piece.owner for piece in smap.slices} == set(MEMBERS)
    for mid, data in assignments.items():
        assert set(data.assigned) == {
            ("users", piece.id) for piece in smap.slices if piece.owner == mid
        }
    check_handed(assignments, smap)


def test_members_adopt_the_map_and_report_it_back() -> None:
    smap = handed_map(round_({mid: metadata() for mid in MEMBERS}))
    member = MemberKeyspace(CONFIG)
    catalog = member.take(encode_report(KeyspaceReport(smap)), group_id="g")
    assert catalog == keyspace_catalog(smap)
    assert member.take(encode_report(KeyspaceReport(smap)), group_id="g") is None  # not newer
    older = SliceMap(smap.keyspace, smap.slices, max_token=smap.max_token, epoch=0)
    assert member.take(encode_report(KeyspaceReport(older)), group_id="g") is None
    assert member.take(b"\x09garbage", group_id="g") is None  # logged, map kept
    assert (
        member.take(encode_report(KeyspaceReport(SliceMap.uniform("other", 2))), group_id="g")
        is None
    )
    assert member.map == smap
    mine = next(piece for piece in smap.slices if piece.owner == "m0")
    theirs = next(piece for piece in smap.slices if piece.owner == "m1")
    member.record_key_load(mine.start, 5.0)
    member.record_key_load(theirs.start, 9.0)  # its slice is m1's to report
    report = decode_report(member.user_data("m0"))
    assert report.map == smap
    assert dict(report.keys) == {mine.start: 5.0}


def test_a_leaving_member_s_slices_go_to_the_others_with_higher_tokens() -> None:
    smap = handed_map(round_({mid: metadata() for mid in MEMBERS}))
    owned = {mid: tuple(("users", p.id) for p in smap.slices if p.owner == mid) for mid in MEMBERS}
    metas = {
        mid: metadata(KeyspaceReport(smap), owned=owned[mid], leaving=mid == "m0")
        for mid in MEMBERS
    }
    assignments = round_(metas)
    after = handed_map(assignments)
    assert after.epoch == smap.epoch + 1
    assert {piece.owner for piece in after.slices} == {"m1", "m2"}
    assert assignments["m0"].assigned == ()
    assert set(assignments["m0"].revoked) == set(owned["m0"])
    before = smap.by_id()
    for piece in after.slices:
        old = before.get(piece.id)
        if old is None or old.owner != piece.owner:
            assert piece.token > smap.max_token
    assert assignments["m1"].pending
    check_handed(assignments, after, owned, smap)


def test_a_hot_key_reported_by_its_owner_gets_a_slice_of_its_own() -> None:
    smap = handed_map(round_({mid: metadata() for mid in MEMBERS}))
    hot_slice = smap.slices[0]
    point = hot_slice.start + hot_slice.width // 2
    metas = {}
    for mid in MEMBERS:
        mine = [p for p in smap.slices if p.owner == mid]
        loads = tuple(100.0 if p is hot_slice else 1.0 for p in mine)
        keys = {point: 99.0} if hot_slice.owner == mid else {}
        metas[mid] = metadata(
            KeyspaceReport(smap, keys),
            owned=tuple(("users", p.id) for p in mine),
            loads=loads,
        )
    after = handed_map(round_(metas))
    hot = after.slice_of(point)
    assert (hot.start, hot.end) == (point, point + 1)
    assert hot.token > smap.max_token


def test_a_round_that_changed_the_map_is_probed_an_interval_later() -> None:
    """The slices a round cut, merged or moved are measured by their owners, who
    rejoin by themselves only for what they published: the leader looks again."""
    interval = BalanceSettings().balance_interval_ms
    pipeline, assignments = leader_round({mid: metadata() for mid in MEMBERS}, now=1_000)
    assert pipeline.probe_at == 1_000 + interval
    smap = handed_map(assignments)
    # Every member holds its slices (a third of the space each), and no load
    # anywhere: nothing to split, merge or move.
    metas = {}
    for mid in MEMBERS:
        mine = tuple(("users", p.id) for p in smap.slices if p.owner == mid)
        metas[mid] = metadata(KeyspaceReport(smap), owned=mine, loads=(0.0,) * len(mine))
    pipeline, assignments = leader_round(metas, now=5_000)
    assert handed_map(assignments) == smap
    assert pipeline.probe_at is None


def test_rounds_that_wait_for_a_member_not_yet_synced_probe_ever_later() -> None:
    """A member that has not synced its slices yet holds none, so each round waits
    for it; where a round takes longer than the interval (Tansu holds JoinGroup
    half a session), a probe every interval would keep it from ever syncing."""
    interval = BalanceSettings().balance_interval_ms
    pipeline = leader()
    smap = handed_map(round_({mid: metadata() for mid in MEMBERS}, now=0, pipeline=pipeline))
    late = MEMBERS[-1]
    metas = {}
    for mid in MEMBERS:
        mine = tuple(("users", p.id) for p in smap.slices if p.owner == mid)
        if mid == late:
            mine = ()
        metas[mid] = metadata(KeyspaceReport(smap), owned=mine, loads=(0.0,) * len(mine))
    delays = []
    now = 0
    for generation in range(3, 10):
        now += 100_000
        assert handed_map(round_(metas, now, pipeline=pipeline, generation=generation)) == smap
        assert pipeline.probe_at is not None
        delays.append(pipeline.probe_at - now)
    assert delays == [interval * 2**n for n in (0, 1, 2, 3, 4, 4, 4)]
    # Once the member holds its slices the rounds stop waiting, and a round
    # that changes nothing plans no probe.
    mine = tuple(("users", p.id) for p in smap.slices if p.owner == late)
    metas[late] = metadata(KeyspaceReport(smap), owned=mine, loads=(0.0,) * len(mine))
    round_(metas, now + 100_000, pipeline=pipeline, generation=10)
    assert pipeline.probe_at is None


@settings(max_examples=60, deadline=None)
@given(st.lists(slice_maps(max_slices=12), min_size=1, max_size=3), st.integers(0, 2))
def test_the_round_starts_from_the_newest_map_and_never_reuses_a_token(
    carried: list[SliceMap], without_map: int
) -> None:
    """Whoever leads, and whatever maps the members carry (a leader change, a
    member back from a partition): the next map starts from the newest, and
    every slice born or moved takes a token above every token any member saw."""
    maps = [SliceMap("users", m.slices, max_token=m.max_token, epoch=m.epoch) for m in carried]
    metas = {
        mid: metadata(KeyspaceReport(maps[i] if i < len(maps) and i != without_map else None))
        for i, mid in enumerate(MEMBERS)
    }
    reported = [decode_report(m.user_data).map for m in metas.values()]
    known = [m for m in reported if m is not None]
    assignments = round_(metas)
    after = handed_map(assignments)
    seen = max((m.max_token for m in known), default=0)
    assert after.max_token >= seen
    if known:
        newest = max(known, key=lambda m: (m.epoch, m.max_token))
        assert after.epoch in (newest.epoch, newest.epoch + 1)
        start = newest.by_id()
        for piece in after.slices:
            old = start.get(piece.id)
            if old is None or old.owner != piece.owner:
                assert piece.token > seen, (piece, seen)
            else:
                assert piece.token == old.token
    assert all(piece.owner in MEMBERS for piece in after.slices)
    check_handed(assignments, after)


def test_a_member_keeps_a_bounded_sample_of_its_heaviest_keys() -> None:
    member = MemberKeyspace(KeyspaceConfig("users", max_sampled_keys=4))
    smap = SliceMap.uniform("users", 1)
    smap = SliceMap("users", (replace(smap.slices[0], owner="m0"),), max_token=1, epoch=1)
    assert member.take(encode_report(KeyspaceReport(smap)), group_id="g") is not None
    for point in range(100):
        member.record_key_load(point, float(point))
    report = decode_report(member.user_data("m0"))
    assert dict(report.keys) == {96: 96.0, 97: 97.0, 98: 98.0, 99: 99.0}
    assert not decode_report(member.user_data("m1")).keys  # not m1's slice: forgotten
    assert not decode_report(member.user_data("m0")).keys


def ranges(smap: SliceMap) -> list[tuple[int, int]]:
    return [(piece.start, piece.end) for piece in smap.slices]


def test_after_a_full_restart_the_kept_map_keeps_its_ranges_with_tokens_above_it() -> None:
    before = handed_map(round_({f"old-{i}": metadata() for i in range(3)}))
    kept = PersistedKeyspace(before.max_token + 5, before.epoch, before)  # +5: issued, unused
    # Nobody carries a map: every process restarted.
    assignments = round_({mid: metadata() for mid in MEMBERS}, persisted=kept)
    after = handed_map(assignments)
    assert ranges(after) == ranges(before)
    assert min(piece.token for piece in after.slices) > kept.max_token
    assert after.epoch > before.epoch
    assert {piece.owner for piece in after.slices} == set(MEMBERS)
    check_handed(assignments, after)


def test_with_the_tokens_kept_but_no_map_the_next_map_starts_above_them() -> None:
    # A broker that keeps no commit metadata, or a map that could not be read.
    kept = PersistedKeyspace(max_token=500, epoch=7)
    after = handed_map(round_({mid: metadata() for mid in MEMBERS}, persisted=kept))
    assert min(piece.id for piece in after.slices) > 500
    assert min(piece.token for piece in after.slices) > 500
    assert after.epoch == 8


def test_a_map_the_members_carry_wins_over_an_older_kept_one_and_keeps_its_owners() -> None:
    smap = handed_map(round_({mid: metadata() for mid in MEMBERS}))
    owned = {mid: tuple(("users", p.id) for p in smap.slices if p.owner == mid) for mid in MEMBERS}
    metas = {mid: metadata(KeyspaceReport(smap), owned=owned[mid]) for mid in MEMBERS}
    older = PersistedKeyspace(1, 0, SliceMap.uniform("users", 1))
    for kept in (None, older, PersistedKeyspace(smap.max_token, smap.epoch, smap)):
        after = handed_map(round_(metas, persisted=kept))
        assert after == smap  # nothing moved, nothing re-issued


def test_a_member_from_before_the_restart_does_not_bring_back_its_old_tokens() -> None:
    old = handed_map(round_({mid: metadata() for mid in MEMBERS}))
    # After the restart more tokens were issued and kept; then m0, paused since
    # before the restart under the same member id, comes back with its old map.
    kept = PersistedKeyspace(old.max_token + 100, old.epoch + 3)
    metas = {mid: metadata() for mid in MEMBERS}
    metas["m0"] = metadata(KeyspaceReport(old))
    after = handed_map(round_(metas, persisted=kept))
    assert after.epoch > kept.epoch
    assert min(piece.token for piece in after.slices) > kept.max_token


def test_a_member_remembers_the_generation_that_handed_it_its_map() -> None:
    smap = handed_map(round_({mid: metadata() for mid in MEMBERS}))
    member = MemberKeyspace(CONFIG)
    assert member.taken_in == -1
    member.take(encode_report(KeyspaceReport(smap)), group_id="g", generation=5)
    assert member.taken_in == 5
    member.take(encode_report(KeyspaceReport(smap)), group_id="g", generation=6)  # handed again
    assert member.taken_in == 6
    older = SliceMap(smap.keyspace, smap.slices, max_token=smap.max_token, epoch=0)
    member.take(encode_report(KeyspaceReport(older)), group_id="g", generation=7)
    assert member.taken_in == 6  # not its map: it may not commit it under generation 7


# --- a slice merged away while its holder still stops it -------------------------------

HALF = HASH_SPACE // 2
MERGING = KeyspaceConfig(
    "users", PlannerSettings(min_slices_per_member=1, max_slices_per_member=16, churn_budget=1.0)
)


def ignored_warnings(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "member.ignored"]


def test_a_slice_merged_away_stays_claimed_without_warnings_until_its_holder_lets_go() -> None:
    # m1 leaves while its handler of slice 1 stops; slice 1 merges with m0's
    # slice 2 into one slice for m0, which overlaps slice 1's range.
    before = SliceMap(
        "users",
        (Slice(1, 0, HALF, 3, "m1", slot=0), Slice(2, HALF, HASH_SPACE, 3, "m0", slot=1)),
        max_token=3,
        epoch=1,
    )
    pipeline = leader(config=MERGING)
    with capture_logs() as logs:
        first = round_(
            {
                "m0": metadata(KeyspaceReport(before), owned=(("users", 2),), loads=(0.0,)),
                "m1": metadata(
                    KeyspaceReport(before), owned=(("users", 1),), loads=(0.0,), leaving=True
                ),
            },
            pipeline=pipeline,
        )
    merged_map = handed_map(first)
    (merged,) = merged_map.slices
    assert merged.owner == "m0"
    assert merged.id > 2
    assert {piece_id for _, piece_id in merged_map.retired} == {1, 2}
    # Not started on m0 while m1 still holds slice 1 (nor while m0 holds slice 2).
    assert first["m0"].assigned == ()
    assert first["m0"].pending
    assert first["m0"].revoked == (("users", 2),)
    assert first["m1"].revoked == (("users", 1),)
    assert ignored_warnings(logs) == []

    # m0 let go of slice 2; m1's handler of slice 1 still stops.  The claim is
    # expected (no warning) and still withholds the merged slice, whether the
    # leader remembers slice 1's range or is a new leader that never saw it.
    merged_report = KeyspaceReport(merged_map)
    stopping = {
        "m0": metadata(merged_report),
        "m1": metadata(merged_report, owned=(("users", 1),), loads=(0.0,), leaving=True),
    }
    for who in (pipeline, leader(config=MERGING)):
        with capture_logs() as logs:
            second = round_(stopping, pipeline=who, generation=3)
        assert handed_map(second).slices == merged_map.slices
        assert second["m0"].assigned == ()
        assert second["m0"].pending
        assert second["m1"].revoked == (("users", 1),)
        assert ignored_warnings(logs) == []

    # A slice no map ever retired is still an unknown claim, and warned about.
    with capture_logs() as logs:
        round_(
            {**stopping, "m0": metadata(merged_report, owned=(("users", 99),), loads=(0.0,))},
            pipeline=leader(config=MERGING),
            generation=3,
        )
    (warning,) = ignored_warnings(logs)
    assert warning["ignored"] == {
        "m0": {"unknown_kinds": [], "unknown_owned": [["users", 99]], "key_type_mismatches": []}
    }

    # Once m1 let go, the merged slice starts on m0.
    third = round_({"m0": metadata(merged_report)}, pipeline=pipeline, generation=4)
    assert third["m0"].assigned == (("users", merged.id),)
    assert not third["m0"].pending


def test_a_slice_overlapping_one_another_member_releases_is_withheld_from_the_rest() -> None:
    # A slice m1 still holds, gone from the next map: of the next map's slices
    # only those overlapping its range wait (a range the leader never saw: those
    # born after it); m1's own and those m2 already holds are handed as planned.
    current = SliceMap.uniform("users", 4)
    quarter = HASH_SPACE // 4
    released = Slice(50, 0, 2 * quarter, 50, "m1")
    round_ = KeyspaceRound(MERGING, current, 60, ranges={50: (released.start, released.end)})
    next_map = SliceMap(
        "users",
        (
            Slice(51, 0, quarter, 51, "m0", slot=0),
            Slice(52, quarter, 2 * quarter, 52, "m1", slot=1),
            Slice(53, 2 * quarter, 3 * quarter, 53, "m0", slot=2),
            Slice(3, 3 * quarter, HASH_SPACE, 3, "m2", slot=3),
        ),
        max_token=60,
        epoch=current.epoch + 1,
    )
    target = {
        "m0": [("users", 51), ("users", 53)],
        "m1": [("users", 52)],
        "m2": [("users", 3)],
    }
    claims = {"m1": (("users", 50),), "m2": (("users", 3),)}
    planned = plan_round(("m0", "m1", "m2"), target, claims)
    plan = withhold_overlaps(planned, round_, next_map, claims)
    assert plan.assigned == {"m0": (("users", 53),), "m1": (("users", 52),), "m2": (("users", 3),)}
    assert plan.withheld["m0"] == (("users", 51),)
    unseen = withhold_overlaps(planned, replace(round_, ranges={}), next_map, claims)
    assert unseen.assigned == {"m0": (), "m1": (("users", 52),), "m2": (("users", 3),)}
    assert set(unseen.withheld["m0"]) == {("users", 51), ("users", 53)}
    assert withhold_overlaps(planned, round_, next_map, {"m2": (("users", 3),)}) is planned


def test_a_group_too_large_for_a_kafka_record_is_warned_about_once_per_doubling() -> None:
    """Metadata too large for one Kafka record (1 MiB by default): 20 members
    that each report a whole map of 8,000 slices (members report it whole only
    when they carry it; see test_keyspace_carriers.py) take 2 MB."""
    names = [f"m{i:02d}" for i in range(20)]
    settings = PlannerSettings(min_slices_per_member=1, max_slices_per_member=400)
    config = KeyspaceConfig("users", settings)
    smap = SliceMap.uniform("users", 8_000)
    smap = SliceMap(
        "users",
        tuple(replace(p, owner=names[i % 20]) for i, p in enumerate(smap.slices)),
        smap.max_token,
        3,
    )
    metas = {
        mid: metadata(
            KeyspaceReport(smap),
            owned=tuple(("users", p.id) for p in smap.slices if p.owner == mid),
        )
        for mid in names
    }
    pipeline = leader(config=config)
    with capture_logs() as logs:
        for generation in (2, 3):
            round_(metas, pipeline=pipeline, generation=generation)
    warned = [e for e in logs if e["event"] == "member.group_record_large"]
    assert len(warned) == 1  # the same size again: not warned twice
    assert warned[0]["bytes"] > warned[0]["limit"] == 1024 * 1024
    assert warned[0]["members"] == 20
    small = {mid: metadata() for mid in names[:3]}
    with capture_logs() as logs:
        round_(small)
    assert not [e for e in logs if e["event"] == "member.group_record_large"]
