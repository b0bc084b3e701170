"""``workgroup top`` written to a pipe: after each poll only what is new (no coordinator)."""

from __future__ import annotations

import time

from rich.console import Console, RenderableType

from workgroup.admin import GroupDescription, MemberDescription
from workgroup.cli.top import HISTORY, PipedView, Watch

REFUSED = "nothing answers at 127.0.0.1:1: Connection refused"


def group(generation: int, *names: str) -> GroupDescription:
    members = [
        MemberDescription(f"{n}-id", n, f"client-{n}", "/127.0.0.1", {"shard": [i]})
        for i, n in enumerate(names)
    ]
    return GroupDescription("g", "Stable", "workgroup", "sticky.v1", generation, None, members)


def text(parts: list[RenderableType]) -> list[str]:
    out = Console(width=200, record=True)
    for part in parts:
        out.print(part)
    return out.export_text().splitlines()


def stamp(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def test_an_error_met_by_poll_after_poll_is_written_once() -> None:
    watch, piped = Watch(), PipedView()
    written = []
    for at in range(100, 105):
        watch.observe(None, REFUSED, float(at))
        written += text(piped.update(watch, float(at)))
    assert written == [f"{stamp(100)} error: {REFUSED}"]
    # Another error is a line; the first one again, after it, is a line again.
    watch.observe(None, "no group 'g'", 105.0)
    assert text(piped.update(watch, 105.0)) == [f"{stamp(105)} error: no group 'g'"]
    watch.observe(None, REFUSED, 106.0)
    assert text(piped.update(watch, 106.0)) == [f"{stamp(106)} error: {REFUSED}"]
    watch.observe(None, REFUSED, 107.0)
    assert text(piped.update(watch, 107.0)) == []


def test_the_group_is_written_when_it_changes_with_the_change_as_a_line() -> None:
    watch, piped = Watch(), PipedView()
    watch.observe(group(1, "a"), None, 100.0, {})
    first = text(piped.update(watch, 100.0))
    assert first[0] == stamp(100)
    assert "g: Stable, workgroup/sticky.v1, generation 1" in first[1]
    assert sum("a-id" in line for line in first) == 1
    # The same group, poll after poll: nothing.
    for at in (101.0, 102.0):
        watch.observe(group(1, "a"), None, at, {})
        assert text(piped.update(watch, at)) == []
    # b joins: the change, then the group again.
    watch.observe(group(2, "a", "b"), None, 103.0, {})
    joined = text(piped.update(watch, 103.0))
    assert joined[0] == f"{stamp(103)} generation 1 -> 2; joined b-id"
    assert joined[1] == stamp(103)
    assert sum("b-id" in line for line in joined[2:]) == 1  # one row of the table
    # The coordinator goes away and comes back with the same group: the error
    # once, then the group again (the reader sees it answer again).
    watch.observe(None, REFUSED, 104.0)
    assert text(piped.update(watch, 104.0)) == [f"{stamp(104)} error: {REFUSED}"]
    watch.observe(group(2, "a", "b"), None, 105.0, {})
    again = text(piped.update(watch, 105.0))
    assert again[0] == stamp(105)
    assert any("generation 2" in line for line in again)
    # A load that changes is a change of the table.
    watch.observe(group(2, "a", "b"), None, 106.0, {"x": 1.0})
    assert text(piped.update(watch, 106.0)) != []


def test_changes_between_two_writes_are_all_written_up_to_the_history() -> None:
    watch, piped = Watch(), PipedView()
    watch.observe(group(1, "a"), None, 100.0, {})
    piped.update(watch, 100.0)
    for generation in range(2, 2 + HISTORY + 3):
        watch.observe(group(generation, "a"), None, 100.0 + generation, {})
    lines = text(piped.update(watch, 120.0))
    changes = [line for line in lines if "->" in line]
    # The watch keeps the last HISTORY changes: those are written, oldest first.
    first = 2 + 3
    assert changes == [
        f"{stamp(100.0 + g)} generation {g - 1} -> {g}" for g in range(first, first + HISTORY)
    ]
