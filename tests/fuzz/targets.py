"""Fuzz targets: each takes arbitrary bytes and runs one decoding path the way
workgroup runs it on untrusted input.  A target returns normally or raises one
of the errors the path documents (:data:`EXPECTED`); anything else is a bug.

* ``coordinator_request``: a request frame as the embedded coordinator reads it
  from a socket (header, then the body by API key and version);
* ``member_metadata``: a member's metadata as the leader reads it;
* ``assignment``: an assignment as a member reads its SyncGroup answer;
* ``hostile_sync``: a stable follower handed those bytes by a hostile (or
  buggy) leader, through the whole member machine; it must stay consistent:
  owning only resources of its catalog, never raising.

Used by the hypothesis tests in this package and by ``run.py`` (atheris,
coverage-guided).
"""

from __future__ import annotations

from collections.abc import Callable

from workgroup.coordinator import wire
from workgroup.errors import ErrorCode, ProtocolError, WorkgroupError
from workgroup.kafka.messages import JoinGroupResult, SyncGroupResult
from workgroup.member.actions import SendRequest
from workgroup.member.config import MemberConfig
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.protocol import BinaryCodec, Protocol

#: What a decoder may raise on bad input (ProtocolError and its kin, which
#: include MessageTooLargeError and UnsupportedVersionError).
EXPECTED: tuple[type[BaseException], ...] = (WorkgroupError,)
CODEC = BinaryCodec()
CATALOG = {"shard": list(range(8)), "table": ["a", "b"]}
KNOWN = {(kind, key) for kind, keys in CATALOG.items() for key in keys}


def coordinator_request(data: bytes) -> None:
    try:
        header, offset = wire.decode_header(data)
        wire.decode_request(header, data, offset, "127.0.0.1")
    except ProtocolError:
        return


def member_metadata(data: bytes) -> None:
    try:
        CODEC.decode_metadata(data)
    except EXPECTED:
        return


def assignment(data: bytes) -> None:
    try:
        CODEC.decode_assignment(data)
    except EXPECTED:
        return


def stable_follower() -> tuple[MemberMachine, int]:
    """A follower in generation 5 owning shard 0, waiting for its next SyncGroup."""
    config = MemberConfig(
        group_id="g",
        protocols=[Protocol.of("cooperative-sticky")],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        heartbeat_interval_ms=3_000,
    )
    m = MemberMachine(config, CATALOG)
    join = _sent(m.start(0) + m.coordinator_found(1))
    sync = _sent(
        m.response(2, join, JoinGroupResult(ErrorCode.NONE, 5, "workgroup", _wire(m), "l", "me"))
    )
    return m, sync


def hostile_sync(data: bytes) -> None:
    m, sync = stable_follower()
    try:
        same_catalog = CODEC.decode_assignment(data).value.catalog_hash == m.catalog_hash
    except EXPECTED:
        same_catalog = False
    m.response(3, sync, SyncGroupResult(ErrorCode.NONE, data))
    if same_catalog:
        assert m.owned <= KNOWN, f"owns resources outside its catalog: {m.owned - KNOWN}"
    assert m.state in (State.STABLE, State.JOINING), m.state
    m.tick(4)


def _wire(m: MemberMachine) -> str:
    return m.config.protocols[0].wire_name


def _sent(actions: list[object]) -> int:
    requests = [a for a in actions if isinstance(a, SendRequest)]
    assert len(requests) == 1, actions
    return requests[0].request_id


TARGETS: dict[str, Callable[[bytes], None]] = {
    "coordinator_request": coordinator_request,
    "member_metadata": member_metadata,
    "assignment": assignment,
    "hostile_sync": hostile_sync,
}
