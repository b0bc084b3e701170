"""SliceLease: owns(key) from the member's current map, and fencing per key with
slice tokens across a split (a holder frozen across it lands none of its writes
once the key's new holder wrote)."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace

import pytest

from workgroup.errors import ErrorCode
from workgroup.keyspaces import (
    HASH_SPACE,
    KeyMovedError,
    PlannerSettings,
    Slice,
    SliceMap,
    key_hash,
)
from workgroup.keyspaces.report import KeyspaceReport, encode_report
from workgroup.member.keyspace import KeyspaceConfig, MemberKeyspace
from workgroup.runtime.handlers import RestartPolicy
from workgroup.runtime.keyspace_slots import pool_slot_key
from workgroup.runtime.keyspaces import KeyspaceGroup, SliceLease
from workgroup.runtime.lease import Committed, EndReason, Lease, Slot
from workgroup.runtime.slots import slot_of
from workgroup.runtime.spec import KeyspaceSpec
from workgroup.sinks.sql import FencedTable
from workgroup.types import Resource

KEY = "user-42"
POINT = key_hash(KEY)
CONFIG = KeyspaceConfig("users")
WHOLE = SliceMap("users", (Slice(1, 0, HASH_SPACE, 1, "m1"),), max_token=1, epoch=1)
#: WHOLE split at the key: the key's half moved to m2, both halves born with new tokens.
SPLIT = SliceMap(
    "users",
    (Slice(2, 0, POINT, 2, "m1"), Slice(3, POINT, HASH_SPACE, 3, "m2")),
    max_token=3,
    epoch=2,
)
TABLE = FencedTable("users", key=("id",), columns=("value",))


class Store:
    """Committed offsets of one group, every commit accepted."""

    def __init__(self) -> None:
        self.offsets: dict[Slot, Committed] = {}

    async def commit(
        self, slot: Slot, offset: int, metadata: str | None, *, resource: Resource | None = None
    ) -> ErrorCode:
        self.offsets[slot] = Committed(offset, metadata)
        return ErrorCode.NONE

    async def fetch(self, slot: Slot) -> Committed:
        return self.offsets.get(slot, Committed(-1, ""))


def view(smap: SliceMap) -> MemberKeyspace:
    member = MemberKeyspace(CONFIG)
    assert member.take(encode_report(KeyspaceReport(smap)), group_id="g") is not None
    return member


async def held(piece: Slice) -> Lease:
    lease = Lease("g.users", "users", piece.id, slot=Slot(f"t{piece.id}", 0), store=Store())
    await lease.acquire()
    assert lease.held
    return lease


@pytest.fixture
def conn() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute(TABLE.create_sql())
    return db


async def test_owns_follows_the_map_the_member_knows() -> None:
    zombie_view = view(WHOLE)
    zombie = SliceLease(await held(WHOLE.slices[0]), WHOLE.slices[0], zombie_view, "m1")
    assert zombie.owns(KEY)
    assert zombie.owns("anyone")
    assert zombie.token_for(KEY) == 1
    zombie_view.take(encode_report(KeyspaceReport(SPLIT)), group_id="g")
    assert not zombie.owns(KEY)  # its slice is gone from the map, whatever the lease says
    with pytest.raises(KeyMovedError, match=r"key 'user-42' is not in slice 1 \(token 1\)"):
        zombie.token_for(KEY)
    successor = SliceLease(await held(SPLIT.slices[1]), SPLIT.slices[1], view(SPLIT), "m2")
    assert successor.owns(KEY)
    assert successor.token_for(KEY) == 3
    successor.lease.end(EndReason.REVOKED)
    assert not successor.owns(KEY)  # an ended lease owns nothing


async def test_a_holder_frozen_across_a_split_lands_none_of_its_writes(
    conn: sqlite3.Connection,
) -> None:
    """The zombie never learnt of the split; its token (the parent's) is below
    the key's new token, so its writes lose once the new holder wrote."""
    zombie = SliceLease(await held(WHOLE.slices[0]), WHOLE.slices[0], view(WHOLE), "m1")
    successor = SliceLease(await held(SPLIT.slices[1]), SPLIT.slices[1], view(SPLIT), "m2")
    assert TABLE.upsert(conn, {"id": KEY, "value": "before"}, zombie.token_for(KEY))
    assert TABLE.upsert(conn, {"id": KEY, "value": "after"}, successor.token_for(KEY))
    assert not TABLE.upsert(conn, {"id": KEY, "value": "late"}, zombie.token_for(KEY))
    assert conn.execute("SELECT value, fence_token FROM users").fetchall() == [("after", 3)]


async def test_sampled_key_loads_reach_the_report_only_for_the_holder_s_slices() -> None:
    member = view(SPLIT)
    lease = SliceLease(await held(SPLIT.slices[1]), SPLIT.slices[1], member, "m2")
    lease.report_key_load(KEY, 7.0)
    assert member.user_data("m2") == encode_report(KeyspaceReport(SPLIT, {POINT: 7.0}))
    assert member.user_data("m1") == encode_report(KeyspaceReport(SPLIT))


def test_a_slice_s_lease_slot_is_its_pool_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    async def handler(lease: SliceLease) -> None:
        return None

    smap = SliceMap.uniform("users", 4)
    spec = KeyspaceSpec("users", handler, PlannerSettings(), None, RestartPolicy())
    group = KeyspaceGroup(spec, "app.users")
    known = view(smap)
    monkeypatch.setattr(group, "view", lambda: known)
    third = smap.slices[2]
    assert group.slot(third.id) == slot_of("app.users", pool_slot_key("users", 2))
    # A slice the map does not know: the slot of its own key.
    assert group.slot(999) == slot_of("app.users", 999)
    assert not group.earlier_holder(third.id)  # live: another slot is its
    assert group.earlier_holder(999)  # in no map: an earlier holder
    assert not group.earlier_holder("999")  # no slice id


async def test_a_warming_slice_owns_nothing_until_the_cut_over_then_takes_its_new_token() -> None:
    """A slice warmed up here: the map names its current owner (m1, token 1);
    once cut over, the lease takes the slice as the map gives it to m2 (token 2),
    after the kept state proved that token."""
    member = view(WHOLE)
    piece = WHOLE.slices[0]
    lease = Lease("g.users", "users", piece.id, slot=Slot("t1", 0), store=Store(), role="warming")
    proved: list[int] = []

    async def cover(token: int, held: Lease) -> bool:
        proved.append(token)
        return held.held

    warming = SliceLease(lease, piece, member, "m2", cover=cover)
    assert warming.role == "warming"
    assert not warming.owns(KEY)
    with pytest.raises(KeyMovedError):
        warming.token_for(KEY)
    ready = asyncio.create_task(warming.ready())
    await asyncio.sleep(0)
    assert not ready.done()  # not cut over yet
    cut = SliceMap("users", (replace(piece, owner="m2", token=2),), max_token=2, epoch=2)
    member.take(encode_report(KeyspaceReport(cut)), group_id="g")
    lease.promote()
    await lease.acquire()
    assert await ready is True
    assert warming.role == "active"
    assert proved == [2]
    assert warming.token == 2
    assert warming.token_for(KEY) == 2


async def test_a_warm_up_called_off_keeps_the_slice_it_warmed() -> None:
    member = view(WHOLE)
    piece = WHOLE.slices[0]
    lease = Lease("g.users", "users", piece.id, slot=Slot("t1", 0), store=Store(), role="warming")
    warming = SliceLease(lease, piece, member, "m2")
    ready = asyncio.create_task(warming.ready())
    await asyncio.sleep(0)
    lease.end(EndReason.REVOKED)
    assert await ready is False
    assert warming.slice == piece
    assert not warming.owns(KEY)


async def test_a_standby_owns_no_key_and_is_ready_at_once() -> None:
    """A slice's standby twin held here: the map names the owner (m1); the
    standby (m2) owns no key, refuses every write, and says it is ready."""
    member = view(WHOLE)
    piece = WHOLE.slices[0]
    reported: list[str] = []
    lease = Lease(
        "g.users",
        "users",
        piece.id,
        slot=Slot("t1", 0),
        store=Store(),
        role="standby",
        ready_sink=lambda: reported.append("ready"),
    )
    standby = SliceLease(lease, piece, member, "m2")
    assert standby.role == "standby"
    assert not standby.owns(KEY)
    with pytest.raises(KeyMovedError):
        standby.token_for(KEY)
    assert await standby.ready() is True
    assert reported == ["ready"]
    assert standby.slice == piece
    # Even a map that names this member (it was handed the slice itself, with an
    # active lease of its own) gives the standby lease no key.
    mine = SliceMap("users", (replace(piece, owner="m2", token=2),), max_token=2, epoch=2)
    member.take(encode_report(KeyspaceReport(mine)), group_id="g")
    assert not standby.owns(KEY)
