"""Cost of the coordinator's wire layer per request: header, body, response.

Prints a table of microseconds per operation for typical requests (kafka-python
encodes them).  Run: ``.venv/bin/python benchmarks/wire_codec.py``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from workgroup.coordinator import wire
from workgroup.errors import ErrorCode
from workgroup.kafka import messages as m

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer.group import (
        HeartbeatRequest,
        JoinGroupRequest,
        OffsetCommitRequest,
        SyncGroupRequest,
    )


def per_call_us(fn: Callable[[], object], seconds: float) -> float:
    calls = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(1000):
            fn()
        calls += 1000
        now = time.perf_counter()
        if now >= deadline:
            return (now - started) / calls * 1e6


def payload(request: Any, version: int) -> bytes:
    request.with_header(correlation_id=1, client_id="bench")
    return bytes(request.encode(version=version, header=True))


def cases() -> list[tuple[str, bytes, wire.Result]]:
    proto = JoinGroupRequest.JoinGroupRequestProtocol
    assignment = SyncGroupRequest.SyncGroupRequestAssignment
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    part = topic.OffsetCommitRequestPartition
    members = tuple(m.JoinedMember(f"member-{i}", None, b"x" * 40) for i in range(10))
    return [
        (
            "Heartbeat v4",
            payload(HeartbeatRequest[4](group_id="group", generation_id=3, member_id="m-1"), 4),
            m.HeartbeatResult(ErrorCode.NONE),
        ),
        (
            "JoinGroup v9 (leader, 10 members)",
            payload(
                JoinGroupRequest[9](
                    group_id="group",
                    session_timeout_ms=10_000,
                    rebalance_timeout_ms=30_000,
                    member_id="m-1",
                    protocol_type="consumer",
                    protocols=[proto(name="range", metadata=b"x" * 40)],
                ),
                9,
            ),
            m.JoinGroupResult(ErrorCode.NONE, 3, "consumer", "range", "m-1", "m-1", members),
        ),
        (
            "SyncGroup v5 (leader, 10 assignments)",
            payload(
                SyncGroupRequest[5](
                    group_id="group",
                    generation_id=3,
                    member_id="m-1",
                    assignments=[
                        assignment(member_id=f"member-{i}", assignment=b"y" * 40) for i in range(10)
                    ],
                ),
                5,
            ),
            m.SyncGroupResult(ErrorCode.NONE, b"y" * 40, "consumer", "range"),
        ),
        (
            "OffsetCommit v8 (10 partitions)",
            payload(
                OffsetCommitRequest[8](
                    group_id="group",
                    generation_id_or_member_epoch=3,
                    member_id="m-1",
                    topics=[
                        topic(
                            name="t",
                            partitions=[
                                part(partition_index=i, committed_offset=i, committed_metadata="")
                                for i in range(10)
                            ],
                        )
                    ],
                ),
                8,
            ),
            m.OffsetCommitResult(
                (
                    m.CommitTopicResult(
                        "t", tuple(m.CommitPartitionResult(i, ErrorCode.NONE) for i in range(10))
                    ),
                )
            ),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    args = parser.parse_args()
    table = Table(title="Wire layer cost per request (µs)")
    for column in ("request", "header", "body", "response"):
        table.add_column(column, justify="right" if column != "request" else "left")
    for name, data, result in cases():
        table.add_row(name, *(f"{us:.2f}" for us in measure(data, result, args.seconds)))
    Console().print(table)


def measure(data: bytes, result: wire.Result, seconds: float) -> tuple[float, float, float]:
    header, offset = wire.decode_header(data)
    return (
        per_call_us(lambda: wire.decode_header(data), seconds),
        per_call_us(lambda: wire.decode_request(header, data, offset, "/127.0.0.1"), seconds),
        per_call_us(lambda: wire.encode_response(header, result), seconds),
    )


if __name__ == "__main__":
    main()
