"""Standbys of slices: the leader's keyspace stage places each slice's standby
twin on members other than its owner, and a slice whose owner is gone goes to
a standby holder of it (the keyspace stage's rule 7), round after round on a
fake clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.member.test_keyspace_warmups import Group, hold_evenly, ids
from workgroup.errors import ConfigError
from workgroup.keyspaces import PlannerSettings, SliceMap
from workgroup.member.keyspace import KeyspaceConfig, MemberKeyspace
from workgroup.member.load_balancing import BalanceSettings
from workgroup.member.pipeline import LeaderPipeline
from workgroup.protocol.metadata import MemberMetadata
from workgroup.types import Resource

TWIN = "users.standby"


class StandbyGroup(Group):
    """A keyspace's group whose slices have ``standbys`` standby holders; its
    members take both kinds and report the twins they hold ready as told."""

    def __init__(self, standbys: int) -> None:
        super().__init__(max_warmups=8)
        config = KeyspaceConfig(
            "users",
            PlannerSettings(
                imbalance_tolerance=0.3,
                min_slices_per_member=2,
                max_slices_per_member=16,
                churn_budget=1.0,
            ),
            standbys=standbys,
        )
        self.pipeline = LeaderPipeline(
            "g",
            reassign_delay_ms=0,
            balance=BalanceSettings(),
            max_warmups=8,
            keyspace=config,
            keyspace_view=MemberKeyspace(config),
        )

    def metadata(self, member_id: str, ready: tuple[Resource, ...]) -> MemberMetadata:
        meta = super().metadata(member_id, ready)
        owned = self.owned[member_id]
        twins_ready = tuple(r for r in ready if r[0] == TWIN and r in owned)
        return replace(meta, kinds=("users", TWIN), ready=(*meta.ready, *twins_ready))

    def standby_holders(self) -> dict[int, set[str]]:
        """``slice id -> the members holding its twin``, as the members hold them now."""
        holders: dict[int, set[str]] = {}
        for mid, owned in self.owned.items():
            for kind, key in owned:
                if kind == TWIN:
                    assert isinstance(key, int)
                    holders.setdefault(key, set()).add(mid)
        return holders

    def settle(self) -> SliceMap:
        """Rounds until nothing is pending, warming or revoked."""
        for _ in range(10):
            smap = self.round()
            if not any(a.pending or a.warming or a.revoked for a in self.assignments.values()):
                return smap
        raise AssertionError("the group never settled")


def started(members: int, standbys: int) -> tuple[StandbyGroup, SliceMap]:
    """``members`` members holding twelve slices evenly, their twins placed."""
    group = StandbyGroup(standbys)
    hold_evenly(group, members)
    smap = group.settle()
    return group, smap


def assert_standbys(group: StandbyGroup, smap: SliceMap, wanted: int) -> None:
    holders = group.standby_holders()
    assert set(holders) == {p.id for p in smap.slices}  # no twin of a retired slice
    for piece in smap.slices:
        assert len(holders[piece.id]) == wanted, piece
        assert piece.owner not in holders[piece.id], piece


@pytest.mark.parametrize(("members", "standbys"), [(3, 1), (4, 2), (3, 2)])
def test_each_slice_has_its_standby_holders_apart_from_its_owner(
    members: int, standbys: int
) -> None:
    group, smap = started(members, standbys)
    assert_standbys(group, smap, standbys)
    # Twins spread: every member holds some, none more than its share.
    counts = [sum(1 for r in owned if r[0] == TWIN) for owned in group.owned.values()]
    assert max(counts) <= -(-len(smap.slices) * standbys // members)


def test_standbys_need_members_other_than_the_owner() -> None:
    group, smap = started(2, 3)
    assert_standbys(group, smap, 1)  # one other member: one standby holder


def test_a_crashed_owner_s_slices_go_to_their_standby_holders_spread() -> None:
    group, before = started(3, 1)
    lost = {p.id for p in before.slices if p.owner == "m0"}
    twin_of = {key: next(iter(holders)) for key, holders in group.standby_holders().items()}
    assert {twin_of[key] for key in lost} == {"m1", "m2"}  # spread over both
    for key in ids(r for r in group.owned["m1"] if r[0] == "users"):
        # m1 busier than m2: placed by load alone, the orphans would go to m2 first.
        group.slice_loads[key] = 1.2
    group.gone("m0")
    after = group.round()
    for key in lost:
        assert after.by_id()[key].owner == twin_of[key]
        assert ("users", key) in group.assignments[twin_of[key]].assigned
        assert after.by_id()[key].token > before.max_token
    settled = group.settle()
    assert_standbys(group, settled, 1)


def test_a_crashed_owner_s_slice_goes_to_the_standby_holder_that_is_ready() -> None:
    group, before = started(3, 2)
    key = next(p.id for p in before.slices if p.owner == "m0")
    first, second = sorted(group.standby_holders()[key])
    group.gone("m0")
    after = group.round({second: ((TWIN, key),)})
    assert after.by_id()[key].owner == second
    # Without a ready report the first by member id is taken.
    group, before = started(3, 2)
    group.gone("m0")
    assert group.round().by_id()[key].owner == first


def test_a_leaving_owner_s_slices_are_cut_over_to_their_ready_standby_holders() -> None:
    group, before = started(3, 1)
    lost = {p.id for p in before.slices if p.owner == "m0"}
    twin_of = {key: next(iter(holders)) for key, holders in group.standby_holders().items()}
    group.leaving.add("m0")
    ready = {mid: tuple(r for r in group.owned[mid] if r[0] == TWIN) for mid in ("m1", "m2")}
    cut = group.round(ready)
    for key in lost:
        assert cut.by_id()[key].owner == twin_of[key]  # a ready twin: no warm-up to wait for
    assert set(group.assignments["m0"].revoked) >= {("users", key) for key in lost}


def test_slices_born_from_a_split_get_new_twins_and_the_retired_one_s_are_dropped() -> None:
    group, before = started(3, 1)
    hot = before.slices[0]
    owner = hot.owner
    assert owner is not None
    (old_holder,) = group.standby_holders()[hot.id]
    group.slice_loads[hot.id] = 100.0
    group.keys[owner] = {hot.start + hot.width // 2: 99.0}
    after = group.round()
    born = {p.id for p in after.slices} - {p.id for p in before.slices}
    assert born
    assert hot.id not in after.by_id()
    assert (TWIN, hot.id) in group.assignments[old_holder].revoked
    settled = group.settle()
    assert_standbys(group, settled, 1)
    assert born <= set(group.standby_holders())


def test_slices_born_from_a_merge_get_new_twins() -> None:
    group, before = started(3, 1)
    for piece in before.slices:  # cold everywhere: neighbours merge
        group.slice_loads[piece.id] = 0.0
    after = group.settle()
    assert len(after.slices) < len(before.slices)
    born = {p.id for p in after.slices} - {p.id for p in before.slices}
    assert born
    assert_standbys(group, after, 1)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "2"])
def test_a_bad_number_of_standbys_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="standbys must be an integer >= 0"):
        KeyspaceConfig("users", standbys=bad)  # type: ignore[arg-type]


def test_the_catalog_lists_each_slice_s_twin() -> None:
    group, smap = started(3, 1)
    assert all(ids(group.owned[mid]) for mid in group.owned)
    view = MemberKeyspace(KeyspaceConfig("users", standbys=1))
    from workgroup.keyspaces.report import encode_map_only

    catalog = view.take(encode_map_only(smap), group_id="g")
    assert catalog == {"users": [p.id for p in smap.slices], TWIN: [p.id for p in smap.slices]}


def test_a_refused_slice_and_a_refused_twin_go_to_members_that_take_them() -> None:
    """``on_failure="release"``: the member whose handler of a slice (or of its
    standby twin) kept failing refuses it; the slice goes to another member
    with a higher token, and the twin is not handed back to it."""
    group, before = started(3, 1)
    slice_id = next(p.id for p in before.slices if p.owner == "m0")
    twin_id = next(key for key, holders in group.standby_holders().items() if "m1" in holders)
    group.refuses = {"m0": (("users", slice_id),), "m1": ((TWIN, twin_id),)}
    for mid, (given_up,) in group.refuses.items():  # released: no longer held
        group.owned[mid] = tuple(r for r in group.owned[mid] if r != given_up)
    after = group.settle()
    moved = after.by_id()[slice_id]
    assert moved.owner in ("m1", "m2")
    assert moved.token > before.max_token
    assert ("users", slice_id) not in group.owned["m0"]
    assert (TWIN, twin_id) not in group.owned["m1"]
