"""Which group requests pass the ACL, and what the answer hides (authorize.py)."""

from __future__ import annotations

import pytest

from workgroup.coordinator.acl import GroupAcl
from workgroup.coordinator.authorize import Allowed, Denied, authorize
from workgroup.coordinator.wire import error_result
from workgroup.errors import ErrorCode
from workgroup.kafka import messages as m

ACL = GroupAcl.parse(
    """
    [[allow]]
    principals = ["alice"]
    groups = ["a-*"]
    operations = ["join", "commit", "delete"]

    [[allow]]
    principals = ["alice"]
    groups = ["watched"]
    operations = ["describe"]
    """
)
ALICE = "User:alice"
DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLIENT = m.ClientInfo("c", "/127.0.0.1")


def join(group: str) -> m.JoinGroup:
    return m.JoinGroup(group, 10_000, 30_000, "", "workgroup", (("v1", b""),), client=CLIENT)


@pytest.mark.parametrize(
    "request_",
    [
        join("b-1"),
        m.SyncGroup("b-1", 1, "m"),
        m.Heartbeat("b-1", 1, "m"),
        m.LeaveGroup("b-1", (m.LeavingMember("m"),)),
        m.OffsetCommit("b-1", 1, "m", ()),
    ],
    ids=["join", "sync", "heartbeat", "leave", "commit"],
)
def test_group_membership_and_commits_need_their_operation(request_: m.GroupRequest) -> None:
    decision = authorize(ACL, ALICE, request_)
    assert isinstance(decision, Denied)
    assert decision.result == error_result(request_, DENIED)
    assert decision.groups == (request_.group_id,)


def test_a_permitted_request_passes_unchanged() -> None:
    request = join("a-1")
    assert authorize(ACL, ALICE, request) == Allowed(request)


def test_describe_and_fetch_hide_only_what_may_not_be_described() -> None:
    described = authorize(ACL, ALICE, m.DescribeGroups(("a-1", "secret", "watched")))
    assert isinstance(described, Allowed)
    assert described.transform is not None
    core_answer = m.DescribeGroupsResult(
        tuple(m.DescribedGroup(ErrorCode.NONE, g, "Stable") for g in ("a-1", "secret", "watched"))
    )
    shown = described.transform(core_answer)
    assert isinstance(shown, m.DescribeGroupsResult)
    assert [(g.group_id, g.error, g.state) for g in shown.groups] == [
        ("a-1", ErrorCode.NONE, "Stable"),  # implied by join
        ("secret", DENIED, ""),
        ("watched", ErrorCode.NONE, "Stable"),
    ]
    fetched = authorize(
        ACL,
        ALICE,
        m.OffsetFetch((m.OffsetFetchGroup("a-1", None), m.OffsetFetchGroup("secret", None))),
    )
    assert isinstance(fetched, Allowed)
    assert fetched.transform is not None
    partition = m.FetchedPartition(0, 5)
    answer = m.OffsetFetchResult(
        (
            m.FetchedGroup("a-1", (m.FetchedTopic("shard", (partition,)),)),
            m.FetchedGroup("secret", (m.FetchedTopic("shard", (partition,)),)),
        )
    )
    hidden = fetched.transform(answer)
    assert isinstance(hidden, m.OffsetFetchResult)
    assert hidden.groups[0] == answer.groups[0]
    assert hidden.groups[1] == m.FetchedGroup("secret", (), DENIED)


def test_list_groups_lists_only_describable_groups() -> None:
    decision = authorize(ACL, ALICE, m.ListGroups())
    assert isinstance(decision, Allowed)
    assert decision.transform is not None
    listed = decision.transform(
        m.ListGroupsResult(
            ErrorCode.NONE,
            tuple(m.ListedGroup(g, "workgroup", "Stable") for g in ("a-1", "b", "watched")),
        )
    )
    assert isinstance(listed, m.ListGroupsResult)
    assert [g.group_id for g in listed.groups] == ["a-1", "watched"]


def test_delete_reaches_the_core_only_for_permitted_groups() -> None:
    decision = authorize(ACL, ALICE, m.DeleteGroups(("a-1", "b", "a-2")))
    assert isinstance(decision, Allowed)
    assert decision.request == m.DeleteGroups(("a-1", "a-2"))
    assert decision.transform is not None
    answer = decision.transform(
        m.DeleteGroupsResult(
            (m.DeletedGroup("a-1", ErrorCode.NONE), m.DeletedGroup("a-2", ErrorCode.NONE))
        )
    )
    assert isinstance(answer, m.DeleteGroupsResult)
    assert {(g.group_id, g.error) for g in answer.groups} == {
        ("a-1", ErrorCode.NONE),
        ("a-2", ErrorCode.NONE),
        ("b", DENIED),
    }
    refused = authorize(ACL, "User:bob", m.DeleteGroups(("a-1",)))
    assert isinstance(refused, Denied)
    assert refused.groups == ("a-1",)
