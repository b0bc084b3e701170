"""The console's view, computed from readings and times (no server, no clock)."""

from __future__ import annotations

from typing import Any

import pytest

from workgroup.admin import GroupDescription, LeaseSlot, MemberDescription
from workgroup.assignors.standby import standby_kind
from workgroup.client.owners import ResourceOwner, join_owners
from workgroup.console.model import TIMELINE_LIMIT, ConsoleModel, GroupRead, ResourceRows
from workgroup.member.round_plan import DRAINING_TAG
from workgroup.protocol.endpoint import ENDPOINT_TAG
from workgroup.protocol.metadata import BinaryCodec, MemberMetadata

CODEC = BinaryCodec()


def member(
    name: str, keys: list[int], *, kind: str = "shard", load: float | None = None
) -> MemberDescription:
    owned = tuple((kind, k) for k in keys)
    meta = MemberMetadata(
        kinds=(kind,),
        owned=owned,
        tags=((ENDPOINT_TAG, f"10.0.0.1:{8000 + len(name)}"),),
        loads=tuple(load / len(keys) for _ in keys) if load is not None and keys else (),
    )
    return MemberDescription(
        f"{name}-id", name, f"workgroup-{name}", "/127.0.0.1", {kind: keys}, None, 3,
        CODEC.encode_metadata(meta),
    )  # fmt: skip


def described(*members: MemberDescription, generation: int = 3) -> GroupDescription:
    return GroupDescription(
        "g", "Stable", "workgroup", "sticky.v1", generation, None, list(members)
    )


def slot(key: int, token: int, checkpoint: str | None) -> LeaseSlot:
    return LeaseSlot(f"workgroup-leases.g.{key}", key, token, checkpoint)


def test_the_view_joins_members_resources_and_slots() -> None:
    model = ConsoleModel("127.0.0.1:9092", started=100.0)
    view = model.update(
        [GroupRead("g", described(member("a", [0, 1], load=30.0), member("b", [2])),
                   [slot(0, 4, "at-4"), slot(1, 2, None), slot(7, 9, "old")])],
        now=100.0,
    )  # fmt: skip
    [group] = view["groups"]
    members = {m["name"]: m for m in group["members"]}
    assert members["a"]["owns"] == 2
    assert members["a"]["endpoint"] == "10.0.0.1:8001"
    assert members["a"]["load"] == 30.0
    assert members["b"]["load"] is None  # it reported none
    rows = {(r["kind"], r["key"]): r for r in group["resources"]}
    assert rows["shard", 0]["owner_name"] == "a"
    assert (rows["shard", 0]["token"], rows["shard", 0]["checkpoint"]) == (4, "at-4")
    assert rows["shard", 2]["token"] is None  # no slot yet
    assert rows[None, 7]["owner"] is None  # a slot nobody owns
    assert group["unowned"] == 1
    assert group["resources"][-1]["key"] == 7  # unowned last


def test_checkpoint_ages_count_from_the_change_and_are_lower_bounds_at_first() -> None:
    model = ConsoleModel("c", started=100.0)
    members = described(member("a", [0, 1]))
    model.update([GroupRead("g", members, [slot(0, 4, "x"), slot(1, 2, "y")])], now=100.0)
    view = model.update([GroupRead("g", members, [slot(0, 4, "x"), slot(1, 2, "z")])], now=130.0)
    rows = {r["key"]: r for r in view["groups"][0]["resources"]}
    # Unchanged since the first reading: at least 30 s old.
    assert (rows[0]["checkpoint_age_s"], rows[0]["age_at_least"]) == (30.0, True)
    # Changed at 130: 0 s old, exactly.
    assert (rows[1]["checkpoint_age_s"], rows[1]["age_at_least"]) == (0.0, False)
    view = model.update([GroupRead("g", members, [slot(0, 4, "x"), slot(1, 2, "z")])], now=135.0)
    rows = {r["key"]: r for r in view["groups"][0]["resources"]}
    assert rows[1]["checkpoint_age_s"] == 5.0


def test_the_timeline_shows_appearing_moves_leaving_and_gone_groups() -> None:
    model = ConsoleModel("c", started=0.0)
    model.update([GroupRead("g", described(member("a", [0, 1]), member("b", [2])), [])], now=1.0)
    model.update([GroupRead("g", described(member("a", [0, 1, 2]), generation=5), [])], now=2.0)
    view = model.update([], now=3.0)
    whats = [(e["what"], e["time"]) for e in view["timeline"]]
    assert whats == [("gone", 3.0), ("rebalance", 2.0), ("appeared", 1.0)]  # newest first
    rebalance = view["timeline"][1]
    assert rebalance["left"] == ["b"]
    assert rebalance["joined"] == []
    assert rebalance["generation"] == 5
    assert rebalance["moved"] == [{"kind": "shard", "key": 2, "from": "b", "to": "a"}]


def test_event_logs_merge_into_the_timeline_by_time_and_it_stays_bounded() -> None:
    model = ConsoleModel("c", started=0.0)
    model.add_events(
        [{"time": 1.5, "member": "a", "group": "g", "kind": "shard", "key": 0,
          "event": "acquired", "token": 4}]
    )  # fmt: skip
    view = model.update([GroupRead("g", described(member("a", [0])), [])], now=2.0)
    assert [(e["source"], e["what"]) for e in view["timeline"]] == [
        ("coordinator", "appeared"),
        ("event-log", "acquired"),
    ]
    model.add_events(
        [{"time": 3.0 + i, "group": "g", "event": "revoked"} for i in range(TIMELINE_LIMIT + 10)]
    )
    assert len(model.update([], now=5_000.0)["timeline"]) == TIMELINE_LIMIT


def test_standby_resources_show_as_the_standby_role_of_their_kind() -> None:
    model = ConsoleModel("c", started=0.0)
    standby = member("b", [0], kind=standby_kind("shard"))
    view = model.update([GroupRead("g", described(member("a", [0]), standby), [])], now=1.0)
    roles = sorted((r["kind"], r["role"], r["owner_name"]) for r in view["groups"][0]["resources"])
    assert roles == [("shard", "active", "a"), ("shard", "standby", "b")]


def test_a_group_that_could_not_be_read_says_why() -> None:
    model = ConsoleModel("c", started=0.0)
    view = model.update([GroupRead("g", None, [], "lease slots not read: timed out")], now=1.0)
    [group] = view["groups"]
    assert (group["state"], group["error"]) == ("Empty", "lease slots not read: timed out")


def test_the_view_shows_warm_ups_at_their_resource_and_draining_members() -> None:
    def planned(
        name: str, keys: list[int], warming: list[int], ready: list[int], tag: str | None
    ) -> MemberDescription:
        meta = MemberMetadata(
            kinds=("shard",),
            owned=tuple(("shard", k) for k in keys),
            warms_up=True,
            warming=tuple(("shard", k) for k in warming),
            ready=tuple(("shard", k) for k in ready),
            tags=((tag, "1"),) if tag else (),
        )
        return MemberDescription(
            f"{name}-id", name, f"workgroup-{name}", "/127.0.0.1",
            {"shard": keys} if keys else {}, None, 3, CODEC.encode_metadata(meta),
            {"shard": warming} if warming else {},
        )  # fmt: skip

    model = ConsoleModel("c", started=0.0)
    view = model.update(
        [GroupRead("g", described(planned("a", [0, 1, 2], [], [], DRAINING_TAG),
                                  planned("b", [], [0, 1], [1], None)), [])],
        now=1.0,
    )  # fmt: skip
    [group] = view["groups"]
    members = {m["name"]: m for m in group["members"]}
    assert (members["a"]["status"], members["a"]["warming"]) == ("draining", 0)
    assert (members["b"]["status"], members["b"]["warming"], members["b"]["ready"]) == (
        "warming",
        2,
        1,
    )
    rows = {r["key"]: r for r in group["resources"]}
    assert rows[0]["owner_name"] == "a"  # the owner keeps it while b warms up
    assert (rows[0]["warming_by"], rows[0]["warming_ready"]) == ("b", False)
    assert (rows[1]["warming_by"], rows[1]["warming_ready"]) == ("b", True)
    assert (rows[2]["warming_by"], rows[2]["warming_ready"]) == (None, False)
    assert (rows[0]["warming_for_s"], rows[0]["warming_at_least"]) == (0.0, True)
    # Four seconds on, b warms up shard 2 too (a new warm-up: exact); 0 and 1 go on.
    view = model.update(
        [GroupRead("g", described(planned("a", [0, 1, 2], [], [], DRAINING_TAG),
                                  planned("b", [], [0, 1, 2], [1], None)), [])],
        now=5.0,
    )  # fmt: skip
    rows = {r["key"]: r for r in view["groups"][0]["resources"]}
    assert (rows[0]["warming_for_s"], rows[0]["warming_at_least"]) == (4.0, True)
    assert (rows[2]["warming_for_s"], rows[2]["warming_at_least"]) == (0.0, False)


def test_rows_are_made_when_read_and_a_reading_seen_before_is_not_compared_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[object] = []
    make_row = ResourceRows._row

    def counted(rows: ResourceRows, r: ResourceOwner) -> dict[str, Any]:
        made.append(r.key)
        return make_row(rows, r)

    monkeypatch.setattr(ResourceRows, "_row", counted)
    model = ConsoleModel("c", started=0.0)
    members = described(member("a", list(range(10))), member("b", list(range(10, 20))))
    resources = join_owners(members, [slot(3, 4, "x")])
    view = model.update([GroupRead("g", members, [slot(3, 4, "x")], None, {}, resources)], now=1.0)
    [group] = view["groups"]
    assert (group["resource_count"], group["unowned"], made) == (20, 0, [])
    assert [r["key"] for r in group["resources"][:5]] == [0, 1, 2, 3, 4]
    assert made == [0, 1, 2, 3, 4]  # that page's rows only
    assert group["resources"][3]["token"] == 4
    # The same reading again (the client layer's reader when nothing changed).
    again = model.update([GroupRead("g", members, [slot(3, 4, "x")], None, {}, resources)], 31.0)
    [group] = again["groups"]
    assert [e["what"] for e in again["timeline"]] == ["appeared"]
    assert [m["owns"] for m in group["members"]] == [10, 10]
    assert (group["resources"][3]["checkpoint_age_s"], group["resources"][3]["age_at_least"]) == (
        30.0,
        True,
    )


def test_a_keyspace_shows_its_slices_ranges_holders_tokens_loads_and_heat() -> None:
    import dataclasses

    from workgroup.client.keyspaces import slice_holders
    from workgroup.client.reader import GroupSnapshot
    from workgroup.keyspaces import SliceMap

    base = SliceMap.uniform("users", 4)
    owners = ["a-id", "b-id", "a-id", "b-id"]
    smap = SliceMap(
        "users",
        tuple(dataclasses.replace(p, owner=o) for p, o in zip(base.slices, owners, strict=True)),
        base.max_token,
        epoch=2,
    )
    ids = [p.id for p in smap.slices]

    def keyspace_member(name: str, assigned: list[int], loads: list[float]) -> MemberDescription:
        meta = MemberMetadata(
            kinds=("users",), owned=tuple(("users", i) for i in assigned), loads=tuple(loads)
        )
        return MemberDescription(
            f"{name}-id", name, name, "127.0.0.1", {"users": assigned}, None, 3,
            CODEC.encode_metadata(meta),
        )  # fmt: skip

    # b has not been given slice 4 yet (it moves); a reported loads 2 and 8.
    d = described(
        keyspace_member("a", [ids[0], ids[2]], [2.0, 8.0]), keyspace_member("b", [ids[1]], [4.0])
    )
    joined = join_owners(d, [])
    seen = GroupSnapshot("g", d, [], joined, keyspaces={"users": smap})
    holders = slice_holders("g", smap, seen.resource, {})
    model = ConsoleModel("127.0.0.1:9092", started=0.0)
    view = model.update(
        [GroupRead("g", d, [], resources=joined, keyspaces={"users": (smap, holders)})], now=1.0
    )
    [keyspace] = view["groups"][0]["keyspaces"]
    assert {k: keyspace[k] for k in ("name", "epoch", "max_token", "slice_count", "moving")} == {
        "name": "users", "epoch": 2, "max_token": 4, "slice_count": 4, "moving": 1,
    }  # fmt: skip
    # Metadata carries loads compactly: to a few parts in 10,000.
    assert (keyspace["total_load"], keyspace["max_load"]) == pytest.approx((14.0, 8.0), rel=1e-3)
    rows = keyspace["slices"]
    assert [r["id"] for r in rows] == ids
    assert [r["owner_name"] for r in rows] == ["a", "b", "a", None]
    assert rows[3]["map_owner"] == "b"  # moving to b
    assert [r["token"] for r in rows] == [p.token for p in smap.slices]
    assert [r["load"] for r in rows][:3] == pytest.approx([2.0, 4.0, 8.0], rel=1e-3)
    assert [r["heat"] for r in rows][:3] == pytest.approx([0.25, 0.5, 1.0], rel=1e-3)
    assert (rows[3]["load"], rows[3]["heat"]) == (None, None)
    assert [r["offset"] for r in rows] == [0.0, 0.25, 0.5, 0.75]
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert rows[0]["range"] == "[0x0000000000000000, 0x4000000000000000)"
    assert rows[3]["range"] == "[0xc000000000000000, 0x10000000000000000)"


def test_a_group_without_keyspaces_shows_none() -> None:
    view = ConsoleModel("127.0.0.1:9092", started=0.0).update(
        [GroupRead("g", described(member("a", [0])), [])], now=1.0
    )
    assert view["groups"][0]["keyspaces"] == []
