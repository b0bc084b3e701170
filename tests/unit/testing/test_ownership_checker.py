"""The ownership-event-log checker on hand-written logs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from workgroup.testing.ownership import (
    MemberLog,
    OwnershipViolation,
    check_ownership,
    ownership_intervals,
    parse_events,
    read_log,
)

S = [("shard", k) for k in range(4)]


def ev(event: str, t: float, *keys: int | str, kind: str = "shard", **extra: Any) -> dict[str, Any]:
    return {"event": event, "t": t, "resources": [[kind, k] for k in keys], **extra}


def stable(t: float, *keys: int) -> dict[str, Any]:
    return ev("stable", t, *keys)


def kinds(report_violations: list[Any]) -> list[str]:
    return [v.kind for v in report_violations]


# --- legal histories -----------------------------------------------------------


def test_cooperative_handover_is_legal() -> None:
    a = MemberLog(
        "a",
        [
            ev("assigned", 1, 0, 1, 2, 3),
            stable(1, 0, 1, 2, 3),
            ev("revoked", 5, 2, 3),
            stable(5.1, 0, 1),
        ],
    )
    b = MemberLog("b", [stable(5.05), ev("assigned", 5.2, 2, 3), stable(5.2, 2, 3)])
    report = check_ownership([a, b], S)
    report.raise_for_violations()
    assert report.final_owners == {S[0]: ["a"], S[1]: ["a"], S[2]: ["b"], S[3]: ["b"]}
    assert report.final_load() == {"a": 2, "b": 2}


def test_handover_at_the_same_instant_is_legal() -> None:
    a = MemberLog("a", [ev("assigned", 1, 0), ev("revoked", 2, 0)])
    b = MemberLog("b", [ev("assigned", 2, 0)])
    assert check_ownership([a, b], [S[0]]).ok


def test_killed_owner_then_new_owner_is_legal() -> None:
    a = MemberLog("a", [ev("assigned", 1, 0, 1)], killed_at=3.0)
    b = MemberLog("b", [ev("assigned", 1, 2, 3), ev("assigned", 6, 0, 1)])
    report = check_ownership([a, b], S)
    assert report.ok, report.violations
    killed = [i for i in report.intervals if i.member == "a"]
    assert {i.end for i in killed} == {3.0}
    assert {i.end_reason for i in killed} == {"killed"}


def test_loss_reported_first_after_a_pause_ends_at_the_pause() -> None:
    # a is frozen at 2, its session expires, b gets shard 0 at 5; a resumes at 8
    # and its first event is the loss.
    a = MemberLog(
        "a", [ev("assigned", 1, 0), ev("lost", 8.01, 0), ev("assigned", 10, 1)], paused=[(2.0, 8.0)]
    )
    b = MemberLog("b", [ev("assigned", 5, 0)])
    report = check_ownership([a, b])
    assert report.ok, report.violations
    (lost,) = [i for i in report.intervals if i.member == "a" and i.resource == S[0]]
    assert (lost.end, lost.end_reason) == (2.0, "lost while paused")


def test_eager_rebalance_revoke_all_then_assign() -> None:
    a = MemberLog(
        "a",
        [
            ev("assigned", 1, 0, 1, 2, 3),
            ev("revoked", 4, 0, 1, 2, 3),
            ev("assigned", 4.5, 0, 1),
            stable(4.5, 0, 1),
        ],
    )
    b = MemberLog("b", [ev("assigned", 4.5, 2, 3), stable(4.5, 2, 3)])
    assert check_ownership([a, b], S).ok


def test_clean_close_and_restart_under_the_same_instance_id() -> None:
    first = MemberLog("a#1", [ev("assigned", 1, 0, 1), ev("revoked", 3, 0, 1), ev("closed", 3.1)])
    second = MemberLog("a#2", [ev("assigned", 4, 0, 1)])
    assert check_ownership([first, second], S[:2]).ok


# --- violations -------------------------------------------------------------------


def test_overlap_is_detected_with_its_length() -> None:
    a = MemberLog("a", [ev("assigned", 1, 0), ev("revoked", 5, 0)])
    b = MemberLog("b", [ev("assigned", 4, 0)])
    report = check_ownership([a, b])
    (violation,) = report.violations
    assert violation.kind == "overlap"
    assert violation.resource == S[0]
    assert violation.members == ("a", "b")
    assert "1000.0 ms" in violation.message
    with pytest.raises(OwnershipViolation, match=r"shard:0 owned by a"):
        report.raise_for_violations()


def test_overlap_with_a_process_killed_too_late() -> None:
    a = MemberLog("a", [ev("assigned", 1, 0)], killed_at=6.0)
    b = MemberLog("b", [ev("assigned", 5, 0)])
    assert kinds(check_ownership([a, b]).violations) == ["overlap"]


def test_loss_reported_late_after_a_pause_is_an_overlap() -> None:
    # a logged something else after resuming before admitting the loss: it may
    # have worked on shard 0 meanwhile.
    a = MemberLog(
        "a", [ev("assigned", 1, 0), stable(8.2, 0), ev("lost", 8.5, 0)], paused=[(2.0, 8.0)]
    )
    b = MemberLog("b", [ev("assigned", 5, 0)])
    report = check_ownership([a, b])
    assert "overlap" in kinds(report.violations)


def test_loss_reported_long_after_the_resume_is_an_overlap() -> None:
    a = MemberLog("a", [ev("assigned", 1, 0), ev("lost", 12, 0)], paused=[(2.0, 8.0)])
    b = MemberLog("b", [ev("assigned", 5, 0)])
    assert kinds(check_ownership([a, b], resume_grace=1.0).violations) == ["overlap"]


def test_a_pause_does_not_excuse_a_revocation() -> None:
    # Only a loss is excused: a revocation after a pause means the member did
    # not notice its session had expired.
    a = MemberLog("a", [ev("assigned", 1, 0), ev("revoked", 8.01, 0)], paused=[(2.0, 8.0)])
    b = MemberLog("b", [ev("assigned", 5, 0)])
    assert kinds(check_ownership([a, b]).violations) == ["overlap"]


def test_two_processes_owning_at_the_end() -> None:
    a = MemberLog("a", [ev("assigned", 1, 0)])
    b = MemberLog("b", [ev("assigned", 2, 0)])
    assert sorted(kinds(check_ownership([a, b], [S[0]]).violations)) == ["coverage", "overlap"]


def test_unowned_and_unknown_resources_at_the_end() -> None:
    a = MemberLog("a", [ev("assigned", 1, 0, 1), ev("assigned", 1, 9, kind="other")])
    report = check_ownership([a], S[:3])
    messages = " ".join(v.message for v in report.violations)
    assert kinds(report.violations) == ["coverage", "coverage"]
    assert "shard:2" in messages
    assert "other:9" in messages


def test_inconsistent_logs() -> None:
    a = MemberLog(
        "a",
        [
            ev("assigned", 1, 0),
            ev("assigned", 2, 0),  # already owned
            ev("revoked", 3, 1),  # never owned
            stable(4, 0, 2),  # claims shard 2
            ev("closed", 5),  # still owns shard 0
        ],
    )
    _, problems = ownership_intervals(a)
    messages = [p.message for p in problems]
    assert len(problems) == 4, messages
    assert "already owns" in messages[0]
    assert "does not own" in messages[1]
    assert "disagrees" in messages[2]
    assert "closed while owning" in messages[3]


def test_time_going_backwards_in_one_log() -> None:
    a = MemberLog("a", [ev("assigned", 5, 0), ev("revoked", 4, 0)])
    _, problems = ownership_intervals(a)
    assert [p.kind for p in problems] == ["log"]


def test_duplicate_log_names_are_refused() -> None:
    with pytest.raises(ValueError, match="two logs"):
        check_ownership([MemberLog("a", []), MemberLog("a", [])])


def test_open_intervals_last_for_ever() -> None:
    (interval,), _ = ownership_intervals(MemberLog("a", [ev("assigned", 1, "x")]))
    assert interval.open
    assert math.isinf(interval.end)
    assert interval.resource == ("shard", "x")


# --- reading logs -------------------------------------------------------------------


def test_read_log_and_parse_errors(tmp_path: Path) -> None:
    path = tmp_path / "m1.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in [ev("assigned", 1, 0), stable(1, 0)]) + "\n\n")
    log = read_log(path, killed_at=2.0)
    assert log.name == "m1"
    assert len(log.events) == 2
    assert log.killed_at == 2.0
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        parse_events(['{"event": "stable", "t": 1}', "garbage"])
    with pytest.raises(ValueError, match="line 1 is not an event"):
        parse_events(['{"t": 1}'])


def test_bad_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="strings or integers"):
        ownership_intervals(
            MemberLog("a", [{"event": "assigned", "t": 1, "resources": [["s", 1.5]]}])
        )
