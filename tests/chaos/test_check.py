"""The chaos suite's checker on hand-made records: what it accepts and what it flags."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.chaos.harness import (
    MAX_SHARDS,
    MIN_SHARDS,
    RECOVERY_BOUND_S,
    Disturbance,
    Fault,
    Result,
    change_list,
    check,
)

SLOT = "Slot(topic='workgroup-leases.chaos.shard', partition=0)"


def start(
    pid: int,
    token: int,
    read: str | None,
    at: float,
    *,
    key: str = "s0",
    slot: str = SLOT,
) -> dict[str, Any]:
    return {"pid": pid, "time": at + 0.01, "event": "start", "resource": f"shard/{key}",
            "token": token, "read": read, "slot": slot, "entered": at}  # fmt: skip


def sending(pid: int, token: int, n: int, at: float, *, key: str = "s0") -> dict[str, Any]:
    return {"pid": pid, "time": at, "event": "sending", "resource": f"shard/{key}",
            "token": token, "n": n, "sent": at}  # fmt: skip


def commit(pid: int, token: int, n: int, at: float, *, key: str = "s0") -> dict[str, Any]:
    return {"pid": pid, "time": at + 0.01, "event": "commit", "resource": f"shard/{key}",
            "token": token, "n": n, "sent": at}  # fmt: skip


def end(pid: int, token: int, at: float, *, key: str = "s0") -> dict[str, Any]:
    return {"pid": pid, "time": at, "event": "end", "resource": f"shard/{key}", "token": token}


def result(
    records: list[dict[str, Any]],
    *,
    shards: tuple[str, ...] = ("s0",),
    catalog: list[tuple[float, list[str]]] | None = None,
    faults: list[Fault] | None = None,
    deaths: dict[int, float] | None = None,
    disturbances: list[Disturbance] | None = None,
) -> Result:
    final = {f"shard/{s}": {"w1"} for s in shards} | {"leader/writer": {"w1"}}
    return Result(
        faults or [],
        records,
        final,
        set(shards),
        catalog=catalog or [(-100.0, list(shards))],
        deaths=deaths or {},
        disturbances=disturbances or [],
        instances={1: "w1", 2: "w2", 3: "w3"},
    )


def test_a_clean_hand_over_passes() -> None:
    records = [
        start(1, 1, None, 0.0), sending(1, 1, 1, 0.1), commit(1, 1, 1, 0.1), end(1, 1, 0.5),
        start(2, 2, "s0:1:1", 1.0), sending(2, 2, 2, 1.1), commit(2, 2, 2, 1.1),
    ]  # fmt: skip
    assert check(result(records))["commits"] == 2


def test_a_commit_taken_but_never_answered_to_its_holder_may_be_read() -> None:
    # The first holder was cancelled (or killed) with s0:1:2 in flight; the coordinator took it.
    records = [
        start(1, 1, None, 0.0), sending(1, 1, 1, 0.1), commit(1, 1, 1, 0.1),
        sending(1, 1, 2, 0.2), end(1, 1, 0.5),
        start(2, 2, "s0:1:2", 1.0),
    ]  # fmt: skip
    check(result(records))


def test_a_lost_checkpoint_is_flagged() -> None:
    records = [
        start(1, 1, None, 0.0), sending(1, 1, 1, 0.1), commit(1, 1, 1, 0.1),
        sending(1, 1, 2, 0.2), commit(1, 1, 2, 0.2), end(1, 1, 0.5),
        start(2, 2, "s0:1:1", 1.0),  # s0:1:2 was accepted: reading s0:1:1 rolls it back
    ]  # fmt: skip
    with pytest.raises(AssertionError, match=r"\(c\) shard/s0: token 2 read s0:1:1"):
        check(result(records))


def test_a_value_never_sent_is_flagged() -> None:
    records = [
        start(1, 1, None, 0.0), sending(1, 1, 1, 0.1), commit(1, 1, 1, 0.1), end(1, 1, 0.5),
        start(2, 2, "s0:1:7", 1.0),
    ]  # fmt: skip
    with pytest.raises(AssertionError, match=r"\(c\)"):
        check(result(records))


def test_an_older_token_sent_after_a_newer_one_was_accepted_is_flagged() -> None:
    records = [
        start(1, 1, None, 0.0), sending(1, 1, 1, 0.1), commit(1, 1, 1, 0.1),
        start(2, 2, "s0:1:1", 1.0), sending(2, 2, 2, 1.1), commit(2, 2, 2, 1.1),
        sending(1, 1, 2, 1.5), commit(1, 1, 2, 1.5),  # a zombie's commit accepted
    ]  # fmt: skip
    frozen = Disturbance("pause", 0.2, 1.4, pid=1)
    with pytest.raises(AssertionError, match=r"\(b\)"):
        check(result(records, disturbances=[frozen]))


def test_a_zombie_that_starts_after_its_successor_and_is_refused_passes() -> None:
    # Frozen between taking token 1 and starting: it starts after token 2 did,
    # reads what it could, and its first commit is refused.
    records = [
        start(2, 2, None, 1.0), sending(2, 2, 1, 1.1), commit(2, 2, 1, 1.1),
        start(1, 1, None, 1.5), sending(1, 1, 1, 1.6),
        {"pid": 1, "time": 1.61, "event": "refused", "resource": "shard/s0", "token": 1,
         "sent": 1.6},
        end(1, 1, 1.62),
    ]  # fmt: skip
    frozen = Disturbance("pause", -3.0, 1.4, pid=1)
    assert check(result(records, disturbances=[frozen]))["zombies_fenced"] == 1


def test_a_zombie_that_makes_progress_is_flagged() -> None:
    records = [
        start(2, 2, None, 1.0), sending(2, 2, 1, 1.1), commit(2, 2, 1, 1.1),
        start(1, 1, None, 1.5), sending(1, 1, 1, 1.6), commit(1, 1, 1, 1.6), end(1, 1, 1.7),
    ]  # fmt: skip
    frozen = Disturbance("pause", -3.0, 1.4, pid=1)
    with pytest.raises(AssertionError, match=r"\(a\) shard/s0: token 1 \(pid 1\) started after"):
        check(result(records, disturbances=[frozen]))


# --- (f) foreign checkpoints ----------------------------------------------------------


def test_a_start_that_reads_another_keys_checkpoint_is_flagged() -> None:
    # s1 was removed from the middle: s2 moved into its position, and its slot.
    records = [
        start(1, 1, None, 0.0, key="s1"), sending(1, 1, 1, 0.1, key="s1"),
        commit(1, 1, 1, 0.1, key="s1"), end(1, 1, 0.5, key="s1"),
        start(2, 2, "s1:1:1", 1.0, key="s2"),
    ]  # fmt: skip
    catalog = [(-100.0, ["s1", "s2"]), (0.4, ["s2"])]
    with pytest.raises(AssertionError, match=r"\(f\) shard/s2: token 2 \(pid 2\) read 's1:1:1'"):
        check(result(records, shards=("s2",), catalog=catalog))


# --- (g) shared slots ---------------------------------------------------------------


def test_two_listed_keys_on_one_slot_are_flagged() -> None:
    # A key inserted before s1 took its position: s1, still listed, moved on.
    records = [
        start(1, 1, None, 0.0, key="s1"), end(1, 1, 0.5, key="s1"),
        start(2, 2, None, 1.0, key="s9"),
    ]  # fmt: skip
    catalog = [(-100.0, ["s1"]), (0.4, ["s9", "s1"])]
    with pytest.raises(AssertionError, match=r"\(g\) Slot.*shard/s9 started on it at 1.00"):
        check(result(records, shards=("s9", "s1"), catalog=catalog))


def test_a_slot_reused_only_after_its_key_left_the_list_passes() -> None:
    records = [
        start(1, 1, None, 0.0, key="s1"), end(1, 1, 0.5, key="s1"),
        start(2, 2, None, 1.0, key="s9"),
    ]  # fmt: skip
    catalog = [(-100.0, ["s1"]), (0.4, ["s9"])]
    check(result(records, shards=("s9",), catalog=catalog))


def test_a_key_on_its_own_slot_across_removal_and_restore_passes() -> None:
    other = "Slot(topic='workgroup-leases.chaos.shard.9f', partition=0)"
    records = [
        start(1, 1, None, 0.0), sending(1, 1, 1, 0.1), commit(1, 1, 1, 0.1), end(1, 1, 0.5),
        start(2, 1, None, 0.2, key="s1", slot=other),
        # s0 is out of the list from 1.0 to 5.0, then back, with its own checkpoint.
        start(2, 2, "s0:1:1", 6.0), sending(2, 2, 2, 6.1), commit(2, 2, 2, 6.1),
    ]  # fmt: skip
    catalog = [(-100.0, ["s0", "s1"]), (1.0, ["s1"]), (5.0, ["s1", "s0"])]
    check(result(records, shards=("s1", "s0"), catalog=catalog))


# --- (h) tokens rise ----------------------------------------------------------------


def test_a_token_that_goes_down_is_flagged() -> None:
    # The restored key took the slot of another position: token 1 again.
    records = [
        start(1, 3, None, 0.0), end(1, 3, 0.5),
        start(2, 1, None, 1.0),
    ]  # fmt: skip
    with pytest.raises(AssertionError, match=r"\(h\) shard/s0: token 1 \(pid 2\) started at 1.00"):
        check(result(records))


def test_two_processes_with_one_token_are_flagged() -> None:
    records = [start(1, 2, None, 0.0), end(1, 2, 0.5), start(2, 2, None, 1.0)]
    with pytest.raises(AssertionError, match=r"\(h\) shard/s0: token 2 \(pid 2\)"):
        check(result(records))


def test_a_handler_restarted_within_its_lease_keeps_its_token() -> None:
    records = [
        start(1, 2, None, 0.0), end(1, 2, 0.5),
        start(1, 2, None, 1.0), end(1, 2, 1.5),
        start(2, 3, None, 2.0),
    ]  # fmt: skip
    check(result(records))


def test_a_late_start_of_a_process_no_fault_hit_is_flagged() -> None:
    # Refused at once, so (a) has nothing to say; but nothing froze it either.
    records = [
        start(2, 2, None, 1.0), sending(2, 2, 1, 1.1), commit(2, 2, 1, 1.1),
        start(1, 1, None, 1.5), end(1, 1, 1.6),
    ]  # fmt: skip
    with pytest.raises(AssertionError, match=r"\(h\) shard/s0: token 1 \(pid 1\)"):
        check(result(records))


# --- (i) run intervals --------------------------------------------------------------


def test_a_gracefully_stopped_handler_that_outlives_its_successors_start_is_flagged() -> None:
    # SIGTERM at 0.0; the slow handler ran until 4.0; the successor started at 3.2.
    records = [
        start(1, 1, None, -10.0), sending(1, 1, 1, -9.9), commit(1, 1, 1, -9.9),
        {"pid": 1, "time": 0.0, "event": "slow", "resource": "shard/s0", "token": 1},
        end(1, 1, 4.0),
        start(2, 2, "s0:1:1", 3.2),
    ]  # fmt: skip
    stop = Fault(0.0, "slowstop", "w1", pid=1, owned=["shard/s0"], slow=["s0"], signal="SIGTERM")
    with pytest.raises(
        AssertionError,
        match=r"\(i\) shard/s0: pid 1 \(token 1\) ran until 4.00 while pid 2 \(token 2\) ran "
        r"from 3.20: overlap 0.80 s \(SIGTERM at 0.00\)",
    ):
        check(result(records, faults=[stop], deaths={1: 4.5}))


def test_a_slow_handler_whose_successor_waits_passes() -> None:
    records = [
        start(1, 1, None, -10.0), sending(1, 1, 1, -9.9), commit(1, 1, 1, -9.9),
        end(1, 1, 4.0),
        start(2, 2, "s0:1:1", 4.1),
    ]  # fmt: skip
    stop = Fault(0.0, "slowstop", "w1", pid=1, owned=["shard/s0"], slow=["s0"], signal="SIGINT")
    check(result(records, faults=[stop], deaths={1: 4.5}))


def test_a_killed_process_run_ends_at_its_death() -> None:
    records = [start(1, 1, None, 0.0), start(2, 2, None, 4.0)]
    check(result(records, deaths={1: 1.0}))
    with pytest.raises(AssertionError, match=r"\(i\) shard/s0: pid 1 \(token 1\) ran until 5.00"):
        check(result(records, deaths={1: 5.0}))


def test_an_overlap_of_a_frozen_or_cut_off_holder_is_a_zombie_not_a_violation() -> None:
    records = [start(1, 1, None, 0.0), end(1, 1, 8.0), start(2, 2, None, 4.0)]
    check(result(records, disturbances=[Disturbance("pause", 0.5, 7.9, pid=1)]))
    check(result(records, disturbances=[Disturbance("partition", 0.5, 7.9, instance="w1")]))
    check(result(records, disturbances=[Disturbance("drop", 0.5, 2.0)]))
    # A fault long over, or one that hit someone else, is no excuse.
    with pytest.raises(AssertionError, match=r"\(i\)"):
        check(result(records, disturbances=[Disturbance("drop", -20.0, -10.0)]))
    with pytest.raises(AssertionError, match=r"\(i\)"):
        check(result(records, disturbances=[Disturbance("pause", 0.5, 7.9, pid=2)]))


# --- (e) recovery after a kill ---------------------------------------------------------


def probe(owned: list[str]) -> Fault:
    return Fault(0.0, "probe", "w1", pid=1, owned=owned)


def test_a_slow_recovery_after_a_kill_is_flagged() -> None:
    records = [start(1, 1, None, -5.0), start(2, 2, None, RECOVERY_BOUND_S + 1)]
    with pytest.raises(AssertionError, match=r"\(e\) shard/s0 unowned"):
        check(result(records, faults=[probe(["shard/s0"])], deaths={1: 0.0}))


def test_a_shard_out_of_the_list_at_the_kill_is_not_unowned() -> None:
    # Issue 15: removed 2.1 s before the kill, added back 17.1 s after it,
    # started 5 s later: the kill left nothing unowned.
    records = [start(1, 1, None, -5.0), start(2, 2, None, 22.06)]
    catalog = [(-100.0, ["s0", "s1"]), (-2.1, ["s1"]), (17.1, ["s1", "s0"])]
    figures = check(
        result(
            records,
            shards=("s1", "s0"),
            catalog=catalog,
            faults=[probe(["shard/s0"])],
            deaths={1: 0.0},
        )
    )
    assert figures["recoveries"] == 0
    assert figures["recoveries_not_bounded"] == 1


def test_a_recovery_that_overlaps_another_fault_is_not_bounded() -> None:
    records = [start(1, 1, None, -5.0), start(2, 2, None, RECOVERY_BOUND_S + 1)]
    drop = Disturbance("drop", 2.0, 3.0)
    figures = check(
        result(records, faults=[probe(["shard/s0"])], deaths={1: 0.0}, disturbances=[drop])
    )
    assert figures["recoveries_not_bounded"] == 1


def test_every_violation_is_listed() -> None:
    records = [
        start(1, 3, None, 0.0), end(1, 3, 0.5),
        start(2, 1, "s7:1:1", 1.0),
    ]  # fmt: skip
    with pytest.raises(AssertionError, match=r"(?s)2 violations:.*\(f\).*\(h\)"):
        check(result(records))


# --- the harness's list changes -------------------------------------------------------


def test_list_changes_reach_every_position_and_restore_removed_keys() -> None:
    rng = random.Random(5)
    shards, removed = [f"s{i}" for i in range(6)], []
    seen_removed_at, seen_inserted_at, restored, reordered = set(), set(), set(), 0
    for _ in range(3000):
        kind = rng.choice(["add", "remove", "reorder"])
        before, was_removed = list(shards), list(removed)
        if not change_list(shards, removed, kind, rng):
            assert (kind, len(before)) in {("add", MAX_SHARDS), ("remove", MIN_SHARDS)}
            continue
        assert MIN_SHARDS <= len(shards) <= MAX_SHARDS
        assert len(set(shards)) == len(shards)
        assert not set(shards) & set(removed)
        if kind == "remove":
            (gone,) = set(before) - set(shards)
            seen_removed_at.add(before.index(gone))
        elif kind == "add":
            (new,) = set(shards) - set(before)
            seen_inserted_at.add(shards.index(new))
            if new in was_removed:
                restored.add(new)
        else:
            assert sorted(shards) == sorted(before)
            reordered += shards != before
    assert seen_removed_at == set(range(MAX_SHARDS))
    assert seen_inserted_at == set(range(MAX_SHARDS))
    assert restored
    assert reordered
