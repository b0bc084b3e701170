"""The direct OffsetFetch v8 reader and writer (:mod:`workgroup.kafka.direct`) against the codec.

For any answer the codec writes, the direct reader gives exactly the record the
codec reads back, and the direct writer writes exactly the codec's bytes; bytes
that are not an answer give a one-line ProtocolError.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.coordinator.wire import encode_body
from workgroup.errors import ErrorCode, ProtocolError
from workgroup.kafka import messages as m
from workgroup.kafka.adapter import KafkaRequest, to_result
from workgroup.kafka.apis import APIS, OFFSET_FETCH, response_schema
from workgroup.kafka.codec import read_entity, write_entity
from workgroup.kafka.direct import (
    DIRECT_READERS,
    DIRECT_WRITERS,
    read_offset_fetch_v8,
    write_offset_fetch_v8,
)

from .codec_strategies import code, int32, int64, results

API = APIS[OFFSET_FETCH]
REQUEST = m.OffsetFetch((m.OffsetFetchGroup("g", None),))

#: Answers with long names and metadata too (lengths of two varint bytes and more,
#: the reader's slow path), and many one-partition topics (a group's lease slots).
long_text = st.text(min_size=120, max_size=300)
partition = st.builds(
    m.FetchedPartition, int32, int64, st.none() | st.text(max_size=8) | long_text, int32, code
)
topic = st.builds(
    m.FetchedTopic,
    st.text(max_size=8) | long_text,
    st.lists(partition, max_size=3).map(tuple),
)
many_topics = st.lists(topic, max_size=140).map(tuple)
slot_answers = st.builds(
    m.OffsetFetchResult,
    st.tuples(st.builds(m.FetchedGroup, st.text(max_size=8), many_topics, code)),
)
answers = results(OFFSET_FETCH) | slot_answers


def encoded(result: m.OffsetFetchResult) -> bytes:
    return write_entity(API.result_entity(result, 8))


def by_codec(data: bytes) -> Any:
    entity, end = read_entity(response_schema(OFFSET_FETCH, 8), data, 0)
    assert end == len(data)
    return API.result_record(8, entity, REQUEST)


@settings(max_examples=300, deadline=None)
@given(answers)
def test_the_direct_reader_reads_what_the_codec_reads(result: m.OffsetFetchResult) -> None:
    data = encoded(result)
    assert read_offset_fetch_v8(data) == by_codec(data) == result


def one_line_protocol_error(data: bytes) -> str:
    with pytest.raises(ProtocolError) as caught:
        read_offset_fetch_v8(data)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("malformed OffsetFetchResponse v8")
    return message


@settings(max_examples=200, deadline=None)
@given(answers, st.data())
def test_a_cut_answer_is_a_one_line_error(result: m.OffsetFetchResult, data: st.DataObject) -> None:
    whole = encoded(result)
    cut = data.draw(st.integers(0, len(whole) - 1))
    one_line_protocol_error(whole[:cut])


@settings(max_examples=100, deadline=None)
@given(answers, st.binary(min_size=1, max_size=8))
def test_bytes_after_the_answer_are_a_one_line_error(
    result: m.OffsetFetchResult, extra: bytes
) -> None:
    assert "left over" in one_line_protocol_error(encoded(result) + extra)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_read_as_the_codec_reads_them_or_a_one_line_error(data: bytes) -> None:
    try:
        direct = read_offset_fetch_v8(data)
    except ProtocolError:
        one_line_protocol_error(data)
        return
    assert direct == by_codec(data)


def test_text_that_is_not_utf8_is_a_one_line_error() -> None:
    data = bytearray(encoded(m.OffsetFetchResult((m.FetchedGroup("g", (), ErrorCode.NONE),))))
    data[6] = 0xFF  # the group id's one byte (after the throttle time and two counts)
    assert "invalid start byte" in one_line_protocol_error(bytes(data))


def test_an_error_code_workgroup_does_not_name_reads_as_unknown_server_error() -> None:
    answer = m.OffsetFetchResult(
        (m.FetchedGroup("g", (m.FetchedTopic("t", (m.FetchedPartition(0, 5, "x"),)),)),)
    )
    data = bytearray(encoded(answer))
    # From the end: the answer's tagged fields, the group's, its error code, the
    # topic's tagged fields, the partition's, and then the partition's error code.
    at = len(data) - 1 - 1 - 2 - 1 - 1 - 2
    assert data[at : at + 2] == b"\x00\x00"
    data[at : at + 2] = (9999).to_bytes(2, "big")
    [fetched] = read_offset_fetch_v8(bytes(data)).groups[0].topics
    assert fetched.partitions[0].error is ErrorCode.UNKNOWN_SERVER_ERROR


def test_the_adapter_decodes_offset_fetch_v8_directly_and_to_result_passes_it_on() -> None:
    assert (OFFSET_FETCH, 8) in DIRECT_READERS
    answer = m.OffsetFetchResult(
        (m.FetchedGroup("g", (m.FetchedTopic("t", (m.FetchedPartition(0, 5, "x"),)),)),)
    )
    request = KafkaRequest(REQUEST).prepare({OFFSET_FETCH: (0, 9)})
    assert request.API_VERSION == 8
    decoded = request.decode(encoded(answer))
    assert decoded == answer
    assert to_result(REQUEST, decoded) is decoded


@settings(max_examples=300, deadline=None)
@given(answers)
def test_the_direct_writer_writes_what_the_codec_writes(result: m.OffsetFetchResult) -> None:
    assert write_offset_fetch_v8(result) == encoded(result)


def test_the_coordinator_answers_offset_fetch_v8_through_the_direct_writer() -> None:
    result = m.OffsetFetchResult(
        (m.FetchedGroup("g", (m.FetchedTopic("t", (m.FetchedPartition(0, 7, "x"),)),)),)
    )
    assert DIRECT_WRITERS[(OFFSET_FETCH, 8)] is write_offset_fetch_v8
    assert encode_body(OFFSET_FETCH, 8, result) == encoded(result)
    assert encode_body(OFFSET_FETCH, 7, result) == write_entity(API.result_entity(result, 7))
