"""``describe`` and ``top`` show warm-ups (and which are ready), draining and leaving
members, from the members' metadata and assignments (no coordinator)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from workgroup.admin import GroupDescription, MemberDescription, decode_warming
from workgroup.cli.describe import render, warming_cell
from workgroup.cli.top import Watch
from workgroup.member.round_plan import DRAINING_TAG, LEAVING_TAG
from workgroup.protocol.metadata import AssignmentData, BinaryCodec, MemberMetadata
from workgroup.testing import FakeClock

CODEC = BinaryCodec()


def member(
    name: str,
    owns: list[int],
    *,
    warming: Sequence[int] = (),
    ready: Sequence[int] = (),
    tag: str | None = None,
) -> MemberDescription:
    meta = MemberMetadata(
        owned=tuple(("shard", k) for k in owns),
        warms_up=True,
        warming=tuple(("shard", k) for k in warming),
        ready=tuple(("shard", k) for k in ready),
        tags=((tag, "1"),) if tag else (),
    )
    return MemberDescription(
        f"{name}-id", name, f"workgroup-{name}", "/127.0.0.1", {"shard": owns} if owns else {},
        None, 3, CODEC.encode_metadata(meta), {"shard": list(warming)} if warming else {},
    )  # fmt: skip


def group(*members: MemberDescription, generation: int = 3) -> GroupDescription:
    return GroupDescription(
        "g", "Stable", "workgroup", "sticky.v1", generation, None, list(members)
    )


def text(description: GroupDescription) -> str:
    out = Console(width=200, record=True)
    out.print(render(description))
    return out.export_text()


def test_a_member_description_says_what_warms_up_what_is_ready_and_who_drains() -> None:
    b = member("b", [4], warming=[2, 3], ready=[3, 9])  # 9: ready but not warming (a twin)
    assert (b.warming, b.ready, b.status) == ({"shard": [2, 3]}, {"shard": [3]}, "warming")
    assert b.as_json()["warming"] == {"shard": [2, 3]}
    assert b.as_json()["ready"] == {"shard": [3]}
    a = member("a", [0, 1], tag=DRAINING_TAG)
    assert (a.draining, a.leaving, a.status) == (True, False, "draining")
    c = member("c", [5], tag=LEAVING_TAG)
    assert (c.as_json()["leaving"], c.status) == (True, "leaving")
    plain = member("d", [6])
    assert (plain.warming, plain.ready, plain.draining, plain.status) == ({}, {}, False, "member")
    # Another protocol type's member: nothing to decode, nothing planned.
    other = MemberDescription("x", None, "c", "h", {"t": [0]}, metadata=b"\x00junk")
    assert (other.ready, other.draining, other.leaving) == ({}, False, False)


def test_the_warming_of_an_assignment_decodes_and_bad_bytes_give_none() -> None:
    blob = CODEC.encode_assignment(
        AssignmentData(assigned=(("shard", 0),), warming=(("shard", 2), ("shard", 1)))
    )
    assert decode_warming("workgroup", blob) == {"shard": [1, 2]}
    assert decode_warming("workgroup", b"\x00junk") == {}
    assert decode_warming("consumer", blob) == {}


def test_the_table_has_warming_and_status_columns_only_when_moves_are_planned() -> None:
    quiet = text(group(member("a", [0, 1]), member("b", [2, 3])))
    assert "status" not in quiet
    assert "warming" not in quiet
    busy = text(
        group(
            member("a", [0, 1, 2, 3], tag=DRAINING_TAG), member("b", [], warming=[2, 3], ready=[3])
        )
    )
    assert "status" in busy
    b_row = next(line for line in busy.splitlines() if "b-id" in line)
    assert "shard: 2, 3 ✓" in b_row
    assert "warming" in b_row
    a_row = next(line for line in busy.splitlines() if "a-id" in line)
    assert "draining" in a_row
    assert warming_cell(member("c", [1])) == "-"


def test_top_notes_draining_undraining_and_warm_ups_starting_and_ending() -> None:
    watch = Watch()
    watch.observe(group(member("a", [0, 1, 2, 3]), member("b", [])), None, 1.0)
    watch.observe(
        group(member("a", [0, 1, 2, 3], tag=DRAINING_TAG), member("b", [], warming=[0, 1])),
        None,
        2.0,
    )
    watch.observe(group(member("a", []), member("b", [0, 1, 2, 3])), None, 3.0)
    notes = [change for _, change in watch.changes]
    assert notes == [
        "a-id draining; b-id warming 0 -> 2",
        "a-id undrained; b-id warming 2 -> 0",
    ]


def test_top_shows_how_long_each_warm_up_has_been_under_way() -> None:
    watch = Watch()
    watch.observe(group(member("a", [0, 1, 2]), member("b", [], warming=[0])), None, 100.0)
    watch.observe(
        group(member("a", [0, 1, 2]), member("b", [], warming=[0, 1], ready=[0])), None, 103.0
    )
    table = watch.warmups(now=104.5)
    assert table is not None
    out = Console(width=200, record=True)
    out.print(watch.view(now=104.5))
    shown = out.export_text()
    rows = {word: line for line in shown.splitlines() for word in line.split() if "shard/" in word}
    # shard/0 was warming at the view's first poll: at least 4.5 s; shard/1 since 103.
    assert "≥ 4.5 s" in rows["shard/0"]
    assert "✓" in rows["shard/0"]
    assert "1.5 s" in rows["shard/1"]
    assert "≥" not in rows["shard/1"]
    # Cut over: no warm-up left, no table.
    watch.observe(group(member("a", [2]), member("b", [0, 1])), None, 106.0)
    assert watch.warmups(now=106.0) is None
    assert watch.warming_since == {}


def test_top_reads_how_long_a_warm_up_has_been_under_way_from_its_clock() -> None:
    clock = FakeClock(wall_start_s=100.0)
    watch = Watch(clock=clock)
    watch.observe(group(member("a", [0, 1, 2])), None, clock.wall())
    clock.advance(2.0)
    watch.observe(group(member("a", [0, 1, 2]), member("b", [], warming=[1])), None, clock.wall())
    clock.advance(7.5)
    out = Console(width=200, record=True)
    out.print(watch.view())  # no ``now``: the clock's
    row = next(line for line in out.export_text().splitlines() if "shard/1" in line)
    assert "7.5 s" in row
    assert "≥" not in row
