"""Hypothesis strategies for the codec's records: one request and one result per API key."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from workgroup.errors import ErrorCode
from workgroup.kafka import apis
from workgroup.kafka import messages as m

text = st.text(max_size=12)
maybe_text = st.none() | text
blob = st.binary(max_size=16)
code = st.sampled_from(list(ErrorCode))
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
#: Durations in milliseconds that survive ``timedelta`` (kio's type for them).
millis = st.integers(0, 2**31 - 1)


def _tuples(strategy: st.SearchStrategy[Any], *, min_size: int = 0) -> st.SearchStrategy[Any]:
    return st.lists(strategy, min_size=min_size, max_size=3).map(tuple)


def requests(api_key: int) -> st.SearchStrategy[Any]:
    """Request records of ``api_key`` (some of them too wide for old versions)."""
    match api_key:
        case apis.API_VERSIONS:
            return st.builds(m.ApiVersions, text, text)
        case apis.METADATA:
            return st.builds(m.Metadata, st.none() | _tuples(text), st.booleans())
        case apis.FIND_COORDINATOR:
            return st.builds(m.FindCoordinator, st.sampled_from([0, 1]), _tuples(text, min_size=1))
        case apis.JOIN_GROUP:
            return st.builds(
                m.JoinGroup,
                text,
                millis,
                millis,
                text,
                text,
                _tuples(st.tuples(text, blob)),
                maybe_text,
                maybe_text,
            )
        case apis.SYNC_GROUP:
            return st.builds(
                m.SyncGroup,
                text,
                int32,
                text,
                _tuples(st.tuples(text, blob)),
                maybe_text,
                maybe_text,
                maybe_text,
            )
        case apis.HEARTBEAT:
            return st.builds(m.Heartbeat, text, int32, text, maybe_text)
        case apis.LEAVE_GROUP:
            member = st.builds(m.LeavingMember, text, maybe_text, maybe_text)
            return st.builds(m.LeaveGroup, text, _tuples(member, min_size=1))
        case apis.OFFSET_COMMIT:
            partition = st.builds(m.CommitPartition, int32, int64, maybe_text, int32)
            topic = st.builds(m.CommitTopic, text, _tuples(partition))
            return st.builds(
                m.OffsetCommit,
                text,
                int32,
                text,
                _tuples(topic),
                maybe_text,
                st.just(-1) | st.integers(0, 2**40),
            )
        case apis.OFFSET_FETCH:
            topic = st.builds(m.FetchTopic, text, _tuples(int32))
            group = st.builds(m.OffsetFetchGroup, text, st.none() | _tuples(topic))
            return st.builds(m.OffsetFetch, _tuples(group, min_size=1), st.booleans())
        case apis.DESCRIBE_GROUPS:
            return st.builds(m.DescribeGroups, _tuples(text))
        case apis.LIST_GROUPS:
            return st.builds(m.ListGroups, _tuples(text), _tuples(text))
        case apis.DELETE_GROUPS:
            return st.builds(m.DeleteGroups, _tuples(text))
        case apis.SASL_HANDSHAKE:
            return st.builds(m.SaslHandshake, text)
        case apis.SASL_AUTHENTICATE:
            return st.builds(m.SaslAuthenticate, blob)
    raise AssertionError(f"no request strategy for API key {api_key}")


def results(api_key: int) -> st.SearchStrategy[Any]:
    """Result records of ``api_key`` (some of them too wide for old versions)."""
    match api_key:
        case apis.API_VERSIONS:
            int16 = st.integers(0, 2**15 - 1)
            versions = st.builds(m.ApiVersionRange, int16, int16, int16)
            return st.builds(m.ApiVersionsResult, code, _tuples(versions))
        case apis.METADATA:
            return st.builds(
                m.MetadataResult,
                st.tuples(st.builds(m.BrokerAddress, int32, text, st.integers(0, 65535))),
                int32,
                text,
                _tuples(st.builds(m.MetadataTopic, text, code)),
            )
        case apis.FIND_COORDINATOR:
            answer = st.builds(m.CoordinatorAnswer, text, code, int32, text, int32, maybe_text)
            return st.builds(m.FindCoordinatorResult, _tuples(answer, min_size=1))
        case apis.JOIN_GROUP:
            return st.builds(
                m.JoinGroupResult,
                code,
                int32,
                maybe_text,
                maybe_text,
                text,
                text,
                _tuples(st.builds(m.JoinedMember, text, maybe_text, blob)),
                st.booleans(),
            )
        case apis.SYNC_GROUP:
            return st.builds(m.SyncGroupResult, code, blob, maybe_text, maybe_text)
        case apis.HEARTBEAT:
            return st.builds(m.HeartbeatResult, code)
        case apis.LEAVE_GROUP:
            return st.builds(
                m.LeaveGroupResult, code, _tuples(st.builds(m.LeftMember, text, maybe_text, code))
            )
        case apis.OFFSET_COMMIT:
            partitions = _tuples(st.builds(m.CommitPartitionResult, int32, code))
            return st.builds(
                m.OffsetCommitResult, _tuples(st.builds(m.CommitTopicResult, text, partitions))
            )
        case apis.OFFSET_FETCH:
            partition = st.builds(m.FetchedPartition, int32, int64, maybe_text, int32, code)
            topic = st.builds(m.FetchedTopic, text, _tuples(partition))
            group = st.builds(m.FetchedGroup, text, _tuples(topic), code)
            return st.builds(m.OffsetFetchResult, _tuples(group, min_size=1))
        case apis.DESCRIBE_GROUPS:
            member = st.builds(m.DescribedMember, text, maybe_text, text, text, blob, blob)
            group = st.builds(m.DescribedGroup, code, text, text, text, text, _tuples(member))
            return st.builds(m.DescribeGroupsResult, _tuples(group))
        case apis.LIST_GROUPS:
            listed = st.builds(m.ListedGroup, text, text, text)
            return st.builds(m.ListGroupsResult, code, _tuples(listed))
        case apis.DELETE_GROUPS:
            return st.builds(m.DeleteGroupsResult, _tuples(st.builds(m.DeletedGroup, text, code)))
        case apis.SASL_HANDSHAKE:
            return st.builds(m.SaslHandshakeResult, code, _tuples(text))
        case apis.SASL_AUTHENTICATE:
            return st.builds(
                m.SaslAuthenticateResult, code, maybe_text, blob, st.integers(0, 2**40)
            )
    raise AssertionError(f"no result strategy for API key {api_key}")
