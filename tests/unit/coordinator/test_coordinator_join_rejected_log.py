"""The coordinator says why it rejects a JoinGroup (``group.join_rejected``)."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from workgroup.coordinator.config import CoordinatorConfig
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import JoinGroupResult
from workgroup.testing import capture_logs
from workgroup.testing.coordinator import CoordinatorHarness, join_request


def rejections(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == "group.join_rejected"]


def test_an_out_of_range_session_timeout_is_logged_with_the_range() -> None:
    h = CoordinatorHarness(
        CoordinatorConfig(min_session_timeout_ms=6_000, max_session_timeout_ms=300_000)
    )
    with capture_logs() as logs:
        result = h.call(
            join_request("g", "m-1", session_timeout_ms=500, client_id="app"), JoinGroupResult
        )
    assert result.error is ErrorCode.INVALID_SESSION_TIMEOUT
    (entry,) = rejections(logs)
    assert entry["log_level"] == "info"
    assert entry["group"] == "g"
    assert entry["member_id"] == "m-1"
    assert entry["client_id"] == "app"
    assert entry["error"] == "INVALID_SESSION_TIMEOUT"
    assert "session timeout" in entry["reason"]
    assert entry["session_timeout_ms"] == 500
    assert entry["min_session_timeout_ms"] == 6_000
    assert entry["max_session_timeout_ms"] == 300_000


def test_an_inconsistent_protocol_is_logged_with_both_sides_protocols() -> None:
    h = CoordinatorHarness()
    h.form_group("g", 2, protocols=(("sticky", b""), ("range", b"")))
    with capture_logs() as logs:
        member_id, token = h.join_new_member("g", protocols=(("roundrobin", b""),))
    assert h.result(token, JoinGroupResult).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    (entry,) = rejections(logs)
    assert entry["error"] == "INCONSISTENT_GROUP_PROTOCOL"
    assert entry["member_id"] == member_id == ""
    assert entry["group_protocol_type"] == "consumer"
    assert entry["group_protocols"] == ["range", "sticky"]
    assert entry["protocol_type"] == "consumer"
    assert entry["protocols"] == ["roundrobin"]
    assert entry["reason"] == "no protocol of the member is supported by every member of the group"


def test_a_different_protocol_type_is_named_as_the_reason() -> None:
    h = CoordinatorHarness()
    h.form_group("g", 1)
    with capture_logs() as logs:
        _, token = h.join_new_member("g", protocol_type="connect")
    assert h.result(token, JoinGroupResult).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    (entry,) = rejections(logs)
    assert entry["reason"] == "the protocol type differs from the group's"
    assert (entry["group_protocol_type"], entry["protocol_type"]) == ("consumer", "connect")


def test_a_full_group_is_logged_with_its_limit() -> None:
    h = CoordinatorHarness(CoordinatorConfig(group_max_size=1))
    h.form_group("g", 1)
    with capture_logs() as logs:
        _, token = h.join_new_member("g")
    assert h.result(token, JoinGroupResult).error is ErrorCode.GROUP_MAX_SIZE_REACHED
    (entry,) = rejections(logs)
    assert entry["error"] == "GROUP_MAX_SIZE_REACHED"
    assert (entry["group_max_size"], entry["members"]) == (1, 1)


def test_an_unknown_member_id_is_logged() -> None:
    h = CoordinatorHarness()
    h.form_group("g", 1)
    with capture_logs() as logs:
        result = h.call(join_request("g", "ghost"), JoinGroupResult)
    assert result.error is ErrorCode.UNKNOWN_MEMBER_ID
    (entry,) = rejections(logs)
    assert (entry["error"], entry["member_id"]) == ("UNKNOWN_MEMBER_ID", "ghost")
    assert entry["reason"] == "the group does not know the member id"


def test_accepted_joins_log_no_rejection() -> None:
    h = CoordinatorHarness()
    with capture_logs() as logs:
        h.form_group("g", 3)
    assert rejections(logs) == []
