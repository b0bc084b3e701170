"""Round trips generated from the codec's table, for every API and every version in it.

A request record goes record -> entity -> bytes -> entity -> record and must come
back as what that version keeps of it (:data:`REQUEST_KEEPS`); a result does the
same through the response entity (:data:`RESULT_KEEPS`).  A record whose shape
the version cannot carry (:data:`REQUEST_FITS`, :data:`RESULT_FITS`) must be
refused with UnsupportedVersionError, never cut down silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.errors import ErrorCode, UnsupportedVersionError
from workgroup.kafka import apis
from workgroup.kafka import messages as m
from workgroup.kafka.codec import read_entity, write_entity

from .codec_strategies import requests, results

CLIENT = m.ClientInfo("client-1", "/10.0.0.9")
replace = dataclasses.replace

# --- what each version keeps of a request ---------------------------------------------


def _keep_api_versions(r: m.ApiVersions, v: int) -> m.ApiVersions:
    return r if v >= 3 else replace(r, client_software_name="", client_software_version="")


def _keep_metadata(r: m.Metadata, v: int) -> m.Metadata:
    if v == 0 and not r.topics:
        r = replace(r, topics=None)  # v0: no topics means all topics
    return r if v >= 4 else replace(r, allow_auto_topic_creation=True)


def _keep_join_group(r: m.JoinGroup, v: int) -> m.JoinGroup:
    if v == 0:
        r = replace(r, rebalance_timeout_ms=r.session_timeout_ms)
    if v < 5:
        r = replace(r, group_instance_id=None)
    if v < 8:
        r = replace(r, reason=None)
    return replace(r, client=CLIENT)


def _keep_sync_group(r: m.SyncGroup, v: int) -> m.SyncGroup:
    if v < 3:
        r = replace(r, group_instance_id=None)
    return r if v >= 5 else replace(r, protocol_type=None, protocol_name=None)


def _keep_heartbeat(r: m.Heartbeat, v: int) -> m.Heartbeat:
    return r if v >= 3 else replace(r, group_instance_id=None)


def _keep_leave_group(r: m.LeaveGroup, v: int) -> m.LeaveGroup:
    if v < 3:
        return replace(r, members=(m.LeavingMember(r.members[0].member_id),))
    if v < 5:
        return replace(r, members=tuple(replace(x, reason=None) for x in r.members))
    return r


def _keep_offset_commit(r: m.OffsetCommit, v: int) -> m.OffsetCommit:
    if v == 0:
        r = replace(r, generation_id=-1, member_id="")
    if not 2 <= v <= 4:
        r = replace(r, retention_time_ms=-1)
    if v < 6:
        r = replace(
            r,
            topics=tuple(
                replace(t, partitions=tuple(replace(p, leader_epoch=-1) for p in t.partitions))
                for t in r.topics
            ),
        )
    return r if v >= 7 else replace(r, group_instance_id=None)


def _keep_offset_fetch(r: m.OffsetFetch, v: int) -> m.OffsetFetch:
    return r if v >= 7 else replace(r, require_stable=False)


def _keep_list_groups(r: m.ListGroups, v: int) -> m.ListGroups:
    if v < 4:
        r = replace(r, states_filter=())
    return r if v >= 5 else replace(r, types_filter=())


def _same(r: Any, v: int) -> Any:
    return r


#: What version ``v`` keeps of a request record (besides ``api_version``, always ``v``).
REQUEST_KEEPS: dict[int, Callable[[Any, int], Any]] = {
    apis.API_VERSIONS: _keep_api_versions,
    apis.METADATA: _keep_metadata,
    apis.FIND_COORDINATOR: _same,
    apis.JOIN_GROUP: _keep_join_group,
    apis.SYNC_GROUP: _keep_sync_group,
    apis.HEARTBEAT: _keep_heartbeat,
    apis.LEAVE_GROUP: _keep_leave_group,
    apis.OFFSET_COMMIT: _keep_offset_commit,
    apis.OFFSET_FETCH: _keep_offset_fetch,
    apis.DESCRIBE_GROUPS: _same,
    apis.LIST_GROUPS: _keep_list_groups,
    apis.DELETE_GROUPS: _same,
    apis.SASL_HANDSHAKE: _same,
    apis.SASL_AUTHENTICATE: _same,
}

#: Whether version ``v`` can carry a request record's shape at all.
REQUEST_FITS: dict[int, Callable[[Any, int], bool]] = {
    apis.FIND_COORDINATOR: lambda r, v: v >= 4 or (len(r.keys) == 1 and (v > 0 or r.key_type == 0)),
    apis.LEAVE_GROUP: lambda r, v: v >= 3 or len(r.members) == 1,
    apis.OFFSET_FETCH: lambda r, v: (
        v >= 8 or (len(r.groups) == 1 and (v >= 2 or r.groups[0].topics is not None))
    ),
}

# --- what each version keeps of a result ------------------------------------------------


def _keep_metadata_result(r: m.MetadataResult, v: int) -> m.MetadataResult:
    if v < 1:
        r = replace(r, controller_id=-1)
    return r if v >= 2 else replace(r, cluster_id="")


def _keep_find_coordinator_result(r: m.FindCoordinatorResult, v: int) -> m.FindCoordinatorResult:
    return (
        r if v >= 1 else replace(r, coordinators=(replace(r.coordinators[0], error_message=None),))
    )


def _keep_join_group_result(r: m.JoinGroupResult, v: int) -> m.JoinGroupResult:
    if v < 7:
        r = replace(r, protocol_type=None, protocol_name=r.protocol_name or "")
    if v < 5:
        r = replace(r, members=tuple(replace(x, group_instance_id=None) for x in r.members))
    return r if v >= 9 else replace(r, skip_assignment=False)


def _keep_sync_group_result(r: m.SyncGroupResult, v: int) -> m.SyncGroupResult:
    return r if v >= 5 else replace(r, protocol_type=None, protocol_name=None)


def _keep_leave_group_result(r: m.LeaveGroupResult, v: int) -> m.LeaveGroupResult:
    if v >= 3:
        return r
    error = r.members[0].error if r.error is ErrorCode.NONE and r.members else r.error
    return m.LeaveGroupResult(error)


def _keep_offset_fetch_result(r: m.OffsetFetchResult, v: int) -> m.OffsetFetchResult:
    def group(g: m.FetchedGroup) -> m.FetchedGroup:
        topics = g.topics
        if v < 5:
            topics = tuple(
                replace(t, partitions=tuple(replace(p, leader_epoch=-1) for p in t.partitions))
                for t in topics
            )
        if v < 2:  # no group-level error: it is on every partition
            if g.error is not ErrorCode.NONE:
                topics = tuple(
                    replace(t, partitions=tuple(replace(p, error=g.error) for p in t.partitions))
                    for t in topics
                )
            return replace(g, topics=topics, error=ErrorCode.NONE)
        return replace(g, topics=topics)

    return replace(r, groups=tuple(group(g) for g in r.groups))


def _keep_describe_groups_result(r: m.DescribeGroupsResult, v: int) -> m.DescribeGroupsResult:
    if v >= 4:
        return r
    return replace(
        r,
        groups=tuple(
            replace(g, members=tuple(replace(x, group_instance_id=None) for x in g.members))
            for g in r.groups
        ),
    )


def _keep_list_groups_result(r: m.ListGroupsResult, v: int) -> m.ListGroupsResult:
    if v >= 4:
        return r
    return replace(r, groups=tuple(replace(g, state="") for g in r.groups))


def _keep_sasl_authenticate_result(r: m.SaslAuthenticateResult, v: int) -> m.SaslAuthenticateResult:
    return r if v >= 1 else replace(r, session_lifetime_ms=0)


#: What version ``v`` keeps of a result record.
RESULT_KEEPS: dict[int, Callable[[Any, int], Any]] = {
    apis.API_VERSIONS: _same,
    apis.METADATA: _keep_metadata_result,
    apis.FIND_COORDINATOR: _keep_find_coordinator_result,
    apis.JOIN_GROUP: _keep_join_group_result,
    apis.SYNC_GROUP: _keep_sync_group_result,
    apis.HEARTBEAT: _same,
    apis.LEAVE_GROUP: _keep_leave_group_result,
    apis.OFFSET_COMMIT: _same,
    apis.OFFSET_FETCH: _keep_offset_fetch_result,
    apis.DESCRIBE_GROUPS: _keep_describe_groups_result,
    apis.LIST_GROUPS: _keep_list_groups_result,
    apis.DELETE_GROUPS: _same,
    apis.SASL_HANDSHAKE: _same,
    apis.SASL_AUTHENTICATE: _keep_sasl_authenticate_result,
}

#: Whether version ``v`` can carry a result's shape at all.
RESULT_FITS: dict[int, Callable[[Any, int], bool]] = {
    apis.FIND_COORDINATOR: lambda r, v: v >= 4 or len(r.coordinators) == 1,
    apis.OFFSET_FETCH: lambda r, v: v >= 8 or len(r.groups) == 1,
}


def _request_for(result: Any) -> Any:
    """The request a result answers, where old versions need it to decode the result."""
    if isinstance(result, m.FindCoordinatorResult):
        return m.FindCoordinator(0, tuple(c.key for c in result.coordinators))
    if isinstance(result, m.OffsetFetchResult):
        return m.OffsetFetch(tuple(m.OffsetFetchGroup(g.group_id, None) for g in result.groups))
    return None


VERSIONS = [(api.key, v) for api in apis.APIS.values() for v in api.coordinator_versions]
IDS = [f"{apis.APIS[key].name}-v{v}" for key, v in VERSIONS]


def test_every_api_has_strategies_and_keep_rules() -> None:
    assert set(REQUEST_KEEPS) == set(RESULT_KEEPS) == set(apis.APIS)
    for key in apis.APIS:
        assert requests(key) is not None
        assert results(key) is not None


def test_the_table_is_consistent() -> None:
    for key, api in apis.APIS.items():
        assert api.key == key
        assert apis.API_OF[api.request] is api
        assert apis.API_OF[api.result] is api
        for version in api.coordinator_versions:
            assert apis.has_schema(key, version), (api.name, version)
        if api.member_versions is not None:
            assert set(api.member_versions) <= set(api.coordinator_versions)
        schema = apis.request_schema(key, api.coordinator_versions[-1])
        assert bool(schema.__flexible__) == api.flexible(api.coordinator_versions[-1])
        assert int(schema.__api_key__) == key


@pytest.mark.parametrize(("api_key", "version"), VERSIONS, ids=IDS)
def test_flexible_versions_match_kio(api_key: int, version: int) -> None:
    api = apis.APIS[api_key]
    assert bool(apis.request_schema(api_key, version).__flexible__) == api.flexible(version)
    assert bool(apis.response_schema(api_key, version).__flexible__) == api.flexible(version)


@pytest.mark.parametrize(("api_key", "version"), VERSIONS, ids=IDS)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_request_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    api = apis.APIS[api_key]
    record = data.draw(requests(api_key))
    if not REQUEST_FITS.get(api_key, lambda r, v: True)(record, version):
        with pytest.raises(UnsupportedVersionError):
            api.request_entity(record, version)
        return
    entity = api.request_entity(record, version)
    cls = apis.request_schema(api_key, version)
    assert type(entity) is cls
    body = write_entity(entity)
    decoded, end = read_entity(cls, body)
    assert end == len(body)
    back = api.request_record(version, decoded, CLIENT)
    kept = replace(REQUEST_KEEPS[api_key](record, version), api_version=version)
    assert back == kept


@pytest.mark.parametrize(("api_key", "version"), VERSIONS, ids=IDS)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_result_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    api = apis.APIS[api_key]
    result = data.draw(results(api_key))
    if not RESULT_FITS.get(api_key, lambda r, v: True)(result, version):
        with pytest.raises(UnsupportedVersionError):
            api.result_entity(result, version)
        return
    entity = api.result_entity(result, version)
    cls = apis.response_schema(api_key, version)
    assert type(entity) is cls
    body = write_entity(entity)
    decoded, end = read_entity(cls, body)
    assert end == len(body)
    back = api.result_record(version, decoded, _request_for(result))
    assert back == RESULT_KEEPS[api_key](result, version)
