"""The chaos suite's checker on hand-made records: what it accepts and what it flags."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.harness import Result, check


def start(pid: int, token: int, read: str | None, at: float) -> dict[str, Any]:
    return {"pid": pid, "time": at, "event": "start", "resource": "shard/s0",
            "token": token, "read": read}  # fmt: skip


def sending(pid: int, token: int, n: int, at: float) -> dict[str, Any]:
    return {"pid": pid, "time": at, "event": "sending", "resource": "shard/s0",
            "token": token, "n": n, "sent": at}  # fmt: skip


def commit(pid: int, token: int, n: int, at: float) -> dict[str, Any]:
    return {"pid": pid, "time": at + 0.01, "event": "commit", "resource": "shard/s0",
            "token": token, "n": n, "sent": at}  # fmt: skip


def result(records: list[dict[str, Any]]) -> Result:
    final = {"shard/s0": {"w1"}, "leader/writer": {"w1"}}
    return Result([], records, final, {"s0"})


def test_a_clean_hand_over_passes() -> None:
    records = [
        start(1, 1, None, 0.0), sending(1, 1, 1, 0.1), commit(1, 1, 1, 0.1),
        start(2, 2, "1:1", 1.0), sending(2, 2, 2, 1.1), commit(2, 2, 2, 1.1),
    ]  # fmt: skip
    assert check(result(records))["commits"] == 2


def test_a_commit_taken_but_never_answered_to_its_holder_may_be_read() -> None:
    # The first holder was cancelled (or killed) with 1:2 in flight; the coordinator took it.
    records = [
        start(1, 1, None, 0.0), sending(1, 1, 1, 0.1), commit(1, 1, 1, 0.1),
        sending(1, 1, 2, 0.2),
        start(2, 2, "1:2", 1.0),
    ]  # fmt: skip
    check(result(records))


def test_a_lost_checkpoint_is_flagged() -> None:
    records = [
        start(1, 1, None, 0.0), sending(1, 1, 1, 0.1), commit(1, 1, 1, 0.1),
        sending(1, 1, 2, 0.2), commit(1, 1, 2, 0.2),
        start(2, 2, "1:1", 1.0),  # 1:2 was accepted: reading 1:1 rolls it back
    ]  # fmt: skip
    with pytest.raises(AssertionError, match=r"\(c\) shard/s0: token 2 read 1:1"):
        check(result(records))


def test_a_value_never_sent_is_flagged() -> None:
    records = [
        start(1, 1, None, 0.0), sending(1, 1, 1, 0.1), commit(1, 1, 1, 0.1),
        start(2, 2, "1:7", 1.0),
    ]  # fmt: skip
    with pytest.raises(AssertionError, match=r"\(c\)"):
        check(result(records))


def test_an_older_token_sent_after_a_newer_one_was_accepted_is_flagged() -> None:
    records = [
        start(1, 1, None, 0.0), sending(1, 1, 1, 0.1), commit(1, 1, 1, 0.1),
        start(2, 2, "1:1", 1.0), sending(2, 2, 2, 1.1), commit(2, 2, 2, 1.1),
        sending(1, 1, 2, 1.5), commit(1, 1, 2, 1.5),  # a zombie's commit accepted
    ]  # fmt: skip
    with pytest.raises(AssertionError, match=r"\(b\)"):
        check(result(records))


def test_a_zombie_that_starts_after_its_successor_and_is_refused_passes() -> None:
    # Frozen between taking token 1 and starting: it starts after token 2 did,
    # reads what it could, and its first commit is refused.
    records = [
        start(2, 2, None, 1.0), sending(2, 2, 1, 1.1), commit(2, 2, 1, 1.1),
        start(1, 1, None, 1.5), sending(1, 1, 1, 1.6),
        {"pid": 1, "time": 1.61, "event": "refused", "resource": "shard/s0", "token": 1,
         "sent": 1.6},
    ]  # fmt: skip
    assert check(result(records))["zombies_fenced"] == 1


def test_a_zombie_that_makes_progress_is_flagged() -> None:
    records = [
        start(2, 2, None, 1.0), sending(2, 2, 1, 1.1), commit(2, 2, 1, 1.1),
        start(1, 1, None, 1.5), sending(1, 1, 1, 1.6), commit(1, 1, 1, 1.6),
    ]  # fmt: skip
    with pytest.raises(AssertionError, match=r"\(a\) shard/s0: token 1 \(pid 1\) started after"):
        check(result(records))
