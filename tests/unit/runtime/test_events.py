"""The ownership event log and the unowned time computed from several logs."""

from __future__ import annotations

from pathlib import Path

from workgroup.runtime.events import OwnershipLog, read_events, unowned_seconds
from workgroup.testing import FakeClock


def event(time: float, member: str, what: str, token: int, key: str = "s0") -> dict[str, object]:
    return {
        "time": time,
        "member": member,
        "pid": 1,
        "group": "g",
        "kind": "shard",
        "key": key,
        "event": what,
        "token": token,
    }


def test_gaps_between_owners_are_summed() -> None:
    events = [
        event(10.0, "a", "acquired", 1),
        event(12.0, "a", "revoked", 1),
        event(12.5, "b", "acquired", 2),
        event(20.0, "b", "lost", 2),
        event(21.0, "c", "acquired", 3),
        event(30.0, "c", "revoked", 3),
    ]
    assert unowned_seconds(events, until=31.0) == {("g", "shard", "s0"): 0.5 + 1.0 + 1.0}


def test_an_unrecorded_crash_is_owned_until_the_next_acquisition() -> None:
    events = [event(0.0, "a", "acquired", 1), event(8.0, "b", "acquired", 2)]
    assert unowned_seconds(events) == {("g", "shard", "s0"): 0.0}


def test_warm_ups_neither_take_nor_give_up_ownership() -> None:
    events = [
        event(0.0, "a", "acquired", 1),
        event(2.0, "b", "warming", 0),
        event(5.0, "a", "revoked", 1),
        event(5.25, "b", "acquired", 2),
        # A warm-up of a shard whose first owner is not in the logs read yet, and
        # one called off: no unowned time from either.
        event(1.0, "c", "warming", 0, key="s1"),
        event(3.0, "c", "warmup_ended", 0, key="s1"),
        event(4.0, "a", "acquired", 1, key="s1"),
    ]
    assert unowned_seconds(events, until=6.0) == {
        ("g", "shard", "s0"): 0.25,
        ("g", "shard", "s1"): 0.0,
    }


def test_the_log_survives_a_torn_last_line(tmp_path: Path) -> None:
    log = OwnershipLog(tmp_path / "events.jsonl", "w1")
    log.record("acquired", "g", "shard", 3, 7)
    log.close()
    with (tmp_path / "events.jsonl").open("a") as f:
        f.write('{"time": 1, "memb')
    [entry] = read_events(tmp_path / "events.jsonl")
    assert (entry["member"], entry["key"], entry["token"]) == ("w1", 3, 7)


def test_events_are_stamped_with_the_wall_time_of_the_logs_clock(tmp_path: Path) -> None:
    clock = FakeClock(wall_start_s=2_000.0)
    log = OwnershipLog(tmp_path / "events.jsonl", "w1", clock=clock)
    log.record("acquired", "g", "shard", 3, 7)
    clock.advance(1.5)
    log.record("revoked", "g", "shard", 3, 7)
    log.close()
    assert [e["time"] for e in read_events(tmp_path / "events.jsonl")] == [2_000.0, 2_001.5]
