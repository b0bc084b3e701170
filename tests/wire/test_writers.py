"""The compiled response writers produce exactly kio's bytes, for every supported version."""

from __future__ import annotations

from io import BytesIO
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from workgroup.coordinator import broker as b
from workgroup.coordinator import wire
from workgroup.coordinator.writers import compile_writer
from workgroup.errors import ErrorCode
from workgroup.kafka import messages as m

text = st.text(max_size=12)
maybe_text = st.none() | text
blob = st.binary(max_size=16)
code = st.sampled_from(list(ErrorCode))
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


def results(api_key: int) -> st.SearchStrategy[Any]:
    match api_key:
        case wire.API_VERSIONS:
            return st.builds(
                b.ApiVersionsResult,
                code,
                st.just(wire.ADVERTISED_VERSIONS),
            )
        case wire.METADATA:
            return st.builds(
                b.MetadataResult,
                st.tuples(st.builds(b.BrokerAddress, int32, text, st.integers(0, 65535))),
                int32,
                text,
                st.lists(st.builds(b.MetadataTopic, text, code), max_size=3).map(tuple),
            )
        case wire.FIND_COORDINATOR:
            return st.builds(
                b.FindCoordinatorResult,
                st.tuples(
                    st.builds(b.CoordinatorAnswer, text, code, int32, text, int32, maybe_text)
                ),
            )
        case wire.JOIN_GROUP:
            return st.builds(
                m.JoinGroupResult,
                code,
                int32,
                maybe_text,
                maybe_text,
                text,
                text,
                st.lists(st.builds(m.JoinedMember, text, maybe_text, blob), max_size=3).map(tuple),
                st.booleans(),
            )
        case wire.SYNC_GROUP:
            return st.builds(m.SyncGroupResult, code, blob, maybe_text, maybe_text)
        case wire.HEARTBEAT:
            return st.builds(m.HeartbeatResult, code)
        case wire.LEAVE_GROUP:
            return st.builds(
                m.LeaveGroupResult,
                code,
                st.lists(st.builds(m.LeftMember, text, maybe_text, code), max_size=3).map(tuple),
            )
        case wire.OFFSET_COMMIT:
            partitions = st.lists(st.builds(m.CommitPartitionResult, int32, code), max_size=3)
            return st.builds(
                m.OffsetCommitResult,
                st.lists(
                    st.builds(m.CommitTopicResult, text, partitions.map(tuple)), max_size=2
                ).map(tuple),
            )
        case wire.OFFSET_FETCH:
            partition = st.builds(m.FetchedPartition, int32, int64, maybe_text, int32, code)
            topic = st.builds(m.FetchedTopic, text, st.lists(partition, max_size=3).map(tuple))
            group = st.builds(m.FetchedGroup, text, st.lists(topic, max_size=2).map(tuple), code)
            return st.builds(m.OffsetFetchResult, st.tuples(group))
        case wire.DESCRIBE_GROUPS:
            member = st.builds(m.DescribedMember, text, maybe_text, text, text, blob, blob)
            group = st.builds(
                m.DescribedGroup,
                code,
                text,
                text,
                text,
                text,
                st.lists(member, max_size=3).map(tuple),
            )
            return st.builds(m.DescribeGroupsResult, st.lists(group, max_size=2).map(tuple))
        case wire.LIST_GROUPS:
            listed = st.builds(m.ListedGroup, text, text, text)
            return st.builds(m.ListGroupsResult, code, st.lists(listed, max_size=3).map(tuple))
        case wire.DELETE_GROUPS:
            deleted = st.builds(m.DeletedGroup, text, code)
            return st.builds(m.DeleteGroupsResult, st.lists(deleted, max_size=3).map(tuple))
        case wire.SASL_HANDSHAKE:
            return st.builds(b.SaslHandshakeResult, code, st.lists(text, max_size=3).map(tuple))
        case wire.SASL_AUTHENTICATE:
            return st.builds(
                b.SaslAuthenticateResult, code, maybe_text, blob, st.integers(0, 2**40)
            )
    raise AssertionError(api_key)


#: Schemas the compiled writers leave to kio: tagged fields (ApiVersions v3,
#: SaslAuthenticate v2) and an int64 duration (SaslAuthenticate v1); sent once
#: per connection, so kio's speed is plenty.
KIO_WRITES = {(wire.API_VERSIONS, 3), (wire.SASL_AUTHENTICATE, 1), (wire.SASL_AUTHENTICATE, 2)}

VERSIONS = [
    (api.api_key, version)
    for api in wire.SUPPORTED_APIS.values()
    for version in range(api.min_version, api.max_version + 1)
]


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_compiled_writer_matches_kio(api_key: int, version: int, data: st.DataObject) -> None:
    result = data.draw(results(api_key))
    cls = wire._response_schema(api_key, version)
    entity = wire._ENCODERS[api_key](version, cls, result)
    expected = BytesIO()
    entity_writer(cls)(expected, entity)
    compiled = compile_writer(cls)
    if compiled is None:
        assert (api_key, version) in KIO_WRITES
        return
    assert compiled(entity) == expected.getvalue()


def test_only_tagged_schemas_fall_back_to_kio() -> None:
    fallbacks = {
        (api_key, version)
        for api_key, version in VERSIONS
        if compile_writer(wire._response_schema(api_key, version)) is None
    }
    assert fallbacks == KIO_WRITES
