"""A keyspace's map travels once per round: two members carry it whole, every
other member is handed (and reports back) the part of it it works on."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.member.test_keyspace_warmups import Group
from workgroup.keyspaces import HASH_SPACE, PlannerSettings, SliceMap
from workgroup.keyspaces.partial import PartialMap, part_of, rebuild_map
from workgroup.keyspaces.report import KeyspaceReport, decode_report, encode_report
from workgroup.member.catalog import MemberCatalog
from workgroup.member.keyspace import KeyspaceConfig, MemberKeyspace, keyspace_catalog
from workgroup.member.pipeline import KAFKA_GROUP_RECORD_BYTES
from workgroup.protocol.catalog import catalog_hash, freeze_catalog
from workgroup.testing import capture_logs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "keyspaces"))
from slice_map_strategies import slice_maps


class CarrierGroup(Group):
    """Members that report back what they were handed, led by the member
    each round names (a new leader when it changes)."""

    def __init__(self, names: list[str], config: KeyspaceConfig) -> None:
        super().__init__(0, config)
        for name in names:
            self.join(name)

    def lead(self, leader_id: str) -> SliceMap:
        """One round led by ``leader_id``."""
        if leader_id != self.leader_id:
            self.new_leader()
            self.leader_id = leader_id
        smap = self.round()
        assert isinstance(self.handed[leader_id], SliceMap)  # the leader carries it
        return smap

    def settle(self, leader_id: str) -> SliceMap:
        for _ in range(6):
            smap = self.lead(leader_id)
        return smap


def test_the_group_of_sixty_members_fits_one_kafka_record() -> None:
    """With the map in every member's metadata and assignment, 60 members of
    50 slices each took about 2.5 MB, over the 1 MiB a Kafka broker stores."""
    names = [f"m{i:02d}" for i in range(60)]
    config = KeyspaceConfig("users", PlannerSettings(min_slices_per_member=50))
    group = CarrierGroup(names, config)
    with capture_logs() as logs:
        smap = group.settle("m07")
    assert len(smap.slices) >= 50 * 60
    assert max(group.sizes) < KAFKA_GROUP_RECORD_BYTES // 2
    assert not [e for e in logs if e["event"] == "member.group_record_large"]
    carriers = sorted(mid for mid, m in group.handed.items() if isinstance(m, SliceMap))
    assert carriers == ["m00", "m07"]


def test_a_new_leader_plans_from_the_other_carrier_s_copy() -> None:
    names = ["a", "b", "c", "d"]
    config = KeyspaceConfig("users", PlannerSettings(min_slices_per_member=4))
    group = CarrierGroup(names, config)
    before = group.settle("a")
    carriers = sorted(mid for mid, m in group.handed.items() if isinstance(m, SliceMap))
    assert carriers == ["a", "b"]
    # a leaves; c (handed a part) leads and reads b's whole copy.
    group.gone("a")
    with capture_logs() as logs:
        after = group.lead("c")
    assert not [e for e in logs if e["event"] == "member.keyspace_map_rebuilt"]
    assert after.epoch == before.epoch + 1
    kept = {p.id: p for p in before.slices if p.owner != "a"}
    for piece in after.slices:
        old = kept.get(piece.id)
        if old is not None and old.owner == piece.owner:
            assert piece.token == old.token  # the live members keep their slices
        else:
            assert piece.token > before.max_token
    # b carried it before, so b goes on carrying it beside the new leader.
    assert sorted(mid for mid, m in group.handed.items() if isinstance(m, SliceMap)) == ["b", "c"]


def test_with_both_carriers_gone_the_map_is_rebuilt_from_the_parts() -> None:
    names = ["a", "b", "c", "d"]
    config = KeyspaceConfig("users", PlannerSettings(min_slices_per_member=4))
    group = CarrierGroup(names, config)
    before = group.settle("a")
    for gone in ("a", "b"):  # both carriers crash at once
        group.gone(gone)
    with capture_logs() as logs:
        after = group.lead("c")
    rebuilt = [e for e in logs if e["event"] == "member.keyspace_map_rebuilt"]
    assert len(rebuilt) == 1
    assert rebuilt[0]["parts"] == 2
    survivors = {p.id: p for p in before.slices if p.owner in ("c", "d")}
    assert rebuilt[0]["slices_known"] == len(survivors)
    for piece in after.slices:
        old = survivors.get(piece.id)
        if old is not None and old.owner == piece.owner:
            # A survivor's slice the planner kept: its range, owner and token
            # kept, so its handler goes on undisturbed.
            assert piece == old
        else:
            assert piece.token > before.max_token  # what a and b held is fenced
        assert piece.owner in ("c", "d")
    assert any(piece == survivors.get(piece.id) for piece in after.slices)
    assert after.max_token > before.max_token


@given(slice_maps(max_slices=20), st.data())
def test_a_map_rebuilt_from_parts_keeps_them_and_fences_the_rest(
    smap: SliceMap, data: st.DataObject
) -> None:
    ids = [piece.id for piece in smap.slices]
    parts = [
        part_of(smap, data.draw(st.sets(st.sampled_from(ids))))
        for _ in range(data.draw(st.integers(1, 3)))
    ]
    rebuilt, gaps = rebuild_map(parts)  # a valid map: the whole space, no overlap
    known = {piece.id for part in parts for piece in part.slices}
    by_id = rebuilt.by_id()
    assert {pid for pid in by_id if pid in known} == known
    for pid in known:
        assert by_id[pid] == smap.by_id()[pid]
    new = [p for p in rebuilt.slices if p.id not in known]
    assert len(new) == gaps
    assert all(p.token > smap.max_token and p.owner is None for p in new)
    assert (rebuilt.epoch, rebuilt.keyspace) == (smap.epoch, smap.keyspace)


def test_a_member_handed_its_part_answers_for_its_own_keys_only() -> None:
    smap = SliceMap.uniform("users", 8)
    smap = SliceMap(
        "users",
        tuple(replace(p, owner="me" if i % 2 else "other") for i, p in enumerate(smap.slices)),
        smap.max_token,
        4,
    )
    mine = [p for p in smap.slices if p.owner == "me"]
    member = MemberKeyspace(KeyspaceConfig("users"))
    leader_digest = catalog_hash(freeze_catalog(keyspace_catalog(smap)))
    whole = member.take(encode_report(KeyspaceReport(smap)), group_id="g", generation=5)
    assert whole == keyspace_catalog(smap)
    assert member.carrier
    part = part_of(smap, {p.id for p in mine})
    catalog = member.take(encode_report(KeyspaceReport(part)), group_id="g", generation=6)
    # The same map in another form: adopted, with this generation (commits).
    assert catalog == {"users": [p.id for p in mine]}
    assert member.map == part
    assert member.taken_in == 6
    assert not member.carrier
    assert member.take(encode_report(KeyspaceReport(part)), group_id="g", generation=7) is None
    assert member.taken_in == 7
    # The member's catalog is the part's slices under the leader's digest.
    held = MemberCatalog(None)
    assert held.change(catalog, digest=leader_digest)
    assert held.digest == leader_digest
    assert set(held.keys["users"]) == {p.id for p in mine}
    assert not held.change(catalog, digest=leader_digest)
    # Handed the whole map again (a carrier now): the whole catalog, same digest.
    assert held.change(keyspace_catalog(smap))
    assert held.digest == leader_digest
    assert len(held.keys["users"]) == len(smap.slices)
    # Lookups: its own slices, nothing for another member's.
    assert part.slice_of(mine[0].start) == mine[0]
    assert part.slice_of(smap.slices[0].start) is None
    assert part.slice_of(HASH_SPACE - 1) == mine[-1]
    # Its report is its part (and the keys of its own slices).
    member.record_key_load(mine[0].start, 3.0)
    member.record_key_load(smap.slices[0].start, 9.0)
    report = decode_report(member.user_data("me"))
    assert isinstance(report.map, PartialMap)
    assert report.map == part
    assert dict(report.keys) == {mine[0].start: 3.0}
    # An older whole map changes nothing.
    older = SliceMap("users", smap.slices, smap.max_token, 3)
    assert member.take(encode_report(KeyspaceReport(older)), group_id="g") is None
    assert member.map == part


def test_a_leaving_carrier_hands_the_carrying_to_a_member_that_stays() -> None:
    names = ["a", "b", "c", "d"]
    group = CarrierGroup(names, KeyspaceConfig("users", PlannerSettings(min_slices_per_member=4)))
    group.settle("a")
    assert sorted(m for m, known in group.handed.items() if isinstance(known, SliceMap)) == [
        "a",
        "b",
    ]
    group.leaving = {"b"}
    group.lead("a")
    assert sorted(m for m, known in group.handed.items() if isinstance(known, SliceMap)) == [
        "a",
        "c",
    ]
    # The leader leaving: two members that stay carry it beside it.
    group.leaving = {"a"}
    group.lead("a")
    assert sorted(m for m, known in group.handed.items() if isinstance(known, SliceMap)) == [
        "a",
        "b",
        "c",
    ]
