"""A group's keyspaces as outside readers see them (:mod:`workgroup.client.keyspaces`)
and :meth:`Directory.owner` for a keyspace's keys, without a coordinator."""

from __future__ import annotations

import dataclasses

import pytest

from workgroup.client.describe import GroupDescription, MemberDescription
from workgroup.client.keyspaces import UnknownKeyspaceError, newest_maps, slice_holders
from workgroup.client.owners import join_owners
from workgroup.client.reader import GroupSnapshot
from workgroup.directory import Directory
from workgroup.keyspaces import KeyspaceError, SliceMap
from workgroup.keyspaces.report import KeyspaceReport, encode_map_only, encode_report
from workgroup.protocol.metadata import BinaryCodec, MemberMetadata
from workgroup.runtime.keyspace_slots import slice_slot
from workgroup.runtime.slots import slot_of

GROUP = "shop.users"
KEYS: list[str | int] = [f"user-{i}" for i in range(200)] + list(range(-50, 200))


def spread(count: int, owners: list[str], epoch: int, first_token: int = 1) -> SliceMap:
    """``count`` slices dealt round-robin to ``owners``."""
    base = SliceMap.uniform("users", count, first_token=first_token)
    slices = tuple(
        dataclasses.replace(piece, owner=owners[i % len(owners)])
        for i, piece in enumerate(base.slices)
    )
    return SliceMap("users", slices, base.max_token, epoch)


def member(
    name: str,
    smap: SliceMap | None,
    *,
    assigned: list[int] | None = None,
    reported: SliceMap | None = None,
    loads: dict[int, float] | None = None,
    endpoint: str | None = None,
) -> MemberDescription:
    """A member whose assignment names ``assigned`` (by default, the slices
    ``smap`` gives it) and carries ``smap``; its metadata reports ``reported``."""
    if assigned is None:
        assigned = [] if smap is None else [p.id for p in smap.slices if p.owner == name]
    owned = tuple(("users", slice_id) for slice_id in (loads or {}))
    meta = MemberMetadata(
        kinds=("users",),
        owned=owned,
        user_data=b"" if reported is None else encode_report(KeyspaceReport(reported)),
        tags=(("workgroup.endpoint", endpoint),) if endpoint else (),
        loads=tuple((loads or {}).values()),
    )
    return MemberDescription(
        name,
        None,
        name,
        "127.0.0.1",
        {"users": assigned},
        None,
        7,
        BinaryCodec().encode_metadata(meta),
        {},
        b"" if smap is None else encode_map_only(smap),
    )


def described(*members: MemberDescription) -> GroupDescription:
    return GroupDescription(GROUP, "Stable", "workgroup", "sticky.v1", 7, None, list(members))


def snapshot(description: GroupDescription, loads: dict[str, float] | None = None) -> GroupSnapshot:
    maps, _ = newest_maps(description)
    return GroupSnapshot(
        GROUP,
        description,
        [],
        join_owners(description, []),
        loads or {},
        changed=True,
        keyspaces=maps,
    )


def directory_of(description: GroupDescription) -> Directory:
    directory = Directory("127.0.0.1:1", GROUP)  # never connects: it is handed readings
    directory.take(snapshot(description))
    return directory


def test_the_newest_map_wins_whether_an_assignment_or_a_report_carries_it() -> None:
    old = spread(4, ["a", "b"], epoch=2)
    new = spread(6, ["a", "b"], epoch=3, first_token=5)
    # b's assignment is the old map, but a reports the new one in its metadata.
    maps, read = newest_maps(described(member("a", old, reported=new), member("b", old)))
    assert maps == {"users": new}
    # The maps read are kept by their bytes: the next reading decodes none again.
    again, _ = newest_maps(described(member("a", old, reported=new)), read)
    assert again["users"] is maps["users"]


def test_user_data_that_is_no_keyspace_report_is_passed_over() -> None:
    garbage = dataclasses.replace(member("a", None), assignment_user_data=b"\x01\xff\xff")
    assert newest_maps(described(garbage, member("b", None))) == ({}, {})


def test_a_slice_is_held_only_by_the_member_the_map_names() -> None:
    smap = spread(4, ["a", "b"], epoch=1)
    moved, unassigned = smap.slices[0], smap.slices[1]
    # The map moves slice 0 from a to b while a's assignment still names it;
    # slice 1 is b's in the map, but b's assignment does not name it yet.
    given_to_b = dataclasses.replace(moved, owner="b")
    smap = SliceMap("users", (given_to_b, *smap.slices[1:]), smap.max_token, 1)
    a = member("a", smap, assigned=[moved.id, *[p.id for p in smap.slices if p.owner == "a"]])
    b = member("b", smap, assigned=[p.id for p in smap.slices[2:] if p.owner == "b"])
    seen = snapshot(described(a, b))
    holders = {h.slice.id: h for h in seen.slices("users")}
    assert holders[moved.id].holder is None  # the map gives it to b; a still names it
    assert holders[unassigned.id].holder is None  # b's assignment does not name it yet
    for piece in smap.slices[2:]:
        holder = holders[piece.id].holder
        assert holder is not None
        assert holder.member_id == piece.owner


def test_a_slices_load_is_the_committed_one_else_its_holders_reported_one() -> None:
    smap = spread(2, ["a"], epoch=1)
    first, second = smap.slices
    a = member("a", smap, loads={first.id: 3.0, second.id: 4.0})
    assert first.slot is not None  # a slice's load is in its pool slot, not its id's
    committed = {slice_slot(GROUP, smap, first).topic: 9.5, slot_of(GROUP, second.id).topic: 1.0}
    seen = snapshot(described(a), committed)
    holders = slice_holders(GROUP, smap, seen.resource, seen.loads)
    assert [h.load for h in holders] == [9.5, 4.0]
    shown = holders[0].as_json()
    assert (shown["id"], shown["token"], shown["owner"], shown["load"]) == (
        first.id,
        first.token,
        "a",
        9.5,
    )
    assert shown["share"] == pytest.approx(0.5)


def test_the_directory_answers_every_key_with_its_slice_holder_token_and_endpoint() -> None:
    smap = spread(16, ["a", "b", "c"], epoch=4)
    directory = directory_of(
        described(
            member("a", smap, endpoint="10.0.0.1:80"),
            member("b", smap, endpoint="10.0.0.2:80"),
            member("c", smap),
        )
    )
    endpoints = {"a": "10.0.0.1:80", "b": "10.0.0.2:80", "c": None}
    assert directory.keyspaces() == {"users": smap}
    for key in KEYS:
        owner = directory.owner("users", key)
        piece = smap.slice_for_key(key)
        assert owner is not None
        assert (owner.slice, owner.token) == (piece, piece.token)
        assert (owner.member_id, owner.endpoint) == (piece.owner, endpoints[piece.owner or ""])
        assert owner.generation == 7
        assert owner.as_json()["slice"] == {"id": piece.id, "start": piece.start, "end": piece.end}


def test_a_key_whose_slice_moves_is_owned_by_nobody() -> None:
    before = spread(8, ["a", "b"], epoch=1)
    # The next map gives a's slices to b; a has revoked them, b is not given them yet.
    after = SliceMap(
        "users",
        tuple(dataclasses.replace(p, owner="b") for p in before.slices),
        before.max_token,
        2,
    )
    a = member("a", after, assigned=[])
    b = member("b", after, assigned=[p.id for p in before.slices if p.owner == "b"])
    directory = directory_of(described(a, b))
    for key in KEYS:
        owner = directory.owner("users", key)
        if before.slice_for_key(key).owner == "a":
            assert owner is None, key
        else:
            assert owner is not None
            assert owner.member_id == "b"


@pytest.mark.parametrize("bad", [1.5, True, None, b"user-1", ("user", 1)])
def test_a_key_that_is_neither_str_nor_int_is_a_one_line_error(bad: object) -> None:
    directory = directory_of(described(member("a", spread(2, ["a"], epoch=1))))
    with pytest.raises(KeyspaceError, match="keyspace 'users': keyspace keys are str or int") as e:
        directory.owner("users", bad)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


def test_an_unknown_keyspace_is_a_one_line_error() -> None:
    directory = directory_of(described(member("a", spread(2, ["a"], epoch=1))))
    with pytest.raises(UnknownKeyspaceError, match="has no keyspace 'orders'") as e:
        directory.owner("orders", "user-1")
    assert str(e.value) == "group 'shop.users' has no keyspace 'orders' (keyspaces: users)"
    assert not e.value.retriable
    with pytest.raises(UnknownKeyspaceError, match="carries no map of keyspace 'orders'"):
        snapshot(described(member("a", spread(2, ["a"], epoch=1)))).keyspace("orders")


def test_a_group_without_keyspaces_answers_its_listed_resources_as_before() -> None:
    plain = MemberDescription("a", None, "a", "127.0.0.1", {"shard": [1, 2]}, None, 3)
    directory = directory_of(described(plain))
    assert directory.keyspaces() == {}
    owner = directory.owner("shard", 1)
    assert owner is not None
    assert (owner.member_id, owner.slice) == ("a", None)
    assert directory.owner("orders", 1) is None


def test_a_big_map_routes_every_key_as_a_small_one_does() -> None:
    """From ARRAY_FROM slices a route keeps machine arrays: the same answers."""
    from workgroup.directory import ARRAY_FROM

    smap = spread(ARRAY_FROM + 7, ["a", "b", "c"], epoch=1)
    directory = directory_of(described(member("a", smap), member("b", smap), member("c", smap)))
    for key in [*KEYS, 2**63 - 1, -(2**63), 2**70, "", "\udcff"]:
        owner = directory.owner("users", key)
        assert owner is not None
        assert owner.slice == smap.slice_for_key(key), key
