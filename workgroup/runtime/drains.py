"""Drain requests that outlive the members they name (``workgroup drain``).

A drained member stays in its group and owns nothing (the member machine's rule
15: it tags its metadata, the leader moves what it owns away, with warm-ups
where the group has them).  The request to drain it is stored where every
back-end keeps it across member restarts: in committed offsets.

Rules:

1. **A companion group holds the requests**: ``workgroup-drains.<group>``
   (:func:`drain_group`).  It never has members, so a simple commit (generation
   -1, no member id) is accepted by the embedded coordinator, Kafka and Tansu,
   and the request outlives every member of ``<group>``.  The group's own
   offsets cannot hold it: a group with members accepts commits only from them.
2. **One slot per named member**: partition 0 of the topic
   ``workgroup-drains.<group>.<digest>``, the digest of ``instance:<id>`` or
   ``member:<id>`` (:class:`DrainTarget`), as the lease slots name their keys.
   Two operators draining two members never overwrite each other's request:
   there is no shared list to read, change and write back.
3. **The committed offset is the request**: :data:`DRAINED` (1) drained,
   :data:`UNDRAINED` (0) undrained, nothing committed: never drained.  It works
   on Tansu, which keeps no commit metadata.  The metadata names the target
   (a header, as the lease slots do); a slot whose header names another
   target is ignored (a digest collision: never in practice).
4. **Who is drained** (:func:`is_drained`): a member is drained when the slot
   of its instance id or the slot of its member id says so.  By instance id a
   request survives restarts; by member id it ends with the member (a
   restarted dynamic member has a new id).
5. **Each group runner follows its requests** (:class:`DrainFollower`): it
   reads its two slots (one OffsetFetch, its own connection to the companion
   group's coordinator) before its member starts, so that a drained member
   takes nothing at its first join, then every :data:`DRAIN_POLL_S`, and calls
   ``member.drain()`` when the answer changes.  A failed read is logged once
   per failure streak and leaves the member as it was.
6. **Draining to stop** (``drain_on_stop``, or ``leave_on_stop`` with warm-up
   workers): the follower keeps the member drained whatever the requests say;
   :func:`drain_before_stop` waits until the member owns, warms and releases
   nothing, for up to the drain timeout; then the member stops as usual (what
   it still owns is revoked and moves without warm-up).
7. **Authorisation**: the embedded coordinator checks a commit to a companion
   group against the ``drain`` operation on ``<group>`` and a read against
   ``describe`` on it (:mod:`workgroup.coordinator.acl`); a Kafka cluster
   checks its own ACLs on the companion group's name.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.coordinator.acl import DRAIN_GROUP_PREFIX
from workgroup.errors import ErrorCode, WorkgroupError
from workgroup.kafka.messages import CommitPartition, CommitTopic, FetchedGroup, FetchTopic
from workgroup.log import get_logger
from workgroup.member.driver import GroupMember
from workgroup.runtime.legacy import AdminOffsets
from workgroup.runtime.slots import Slot, check_group_id, key_digest
from workgroup.runtime.topics import LeaseTopics
from workgroup.security import PLAINTEXT, Security

log = get_logger(__name__)

#: The committed offset of a drain request (rule 3).
DRAINED = 1
#: The committed offset once undrained.
UNDRAINED = 0
#: How often a runner reads its drain requests (rule 5).
DRAIN_POLL_S = 1.0
#: Starts a drain slot's metadata; the target's JSON and a newline follow.
HEADER_MAGIC = "wg-drain:"

TargetKind = Literal["instance", "member"]


@dataclass(frozen=True, slots=True)
class DrainTarget:
    """A member named by its instance id (lasts across restarts) or its member id."""

    by: TargetKind
    id: str

    def __post_init__(self) -> None:
        if self.by not in ("instance", "member"):
            raise ValueError(f"a drain target is an instance or a member, not {self.by!r}")
        if not self.id:
            raise ValueError(f"empty {self.by} id")

    @property
    def name(self) -> str:
        """``instance:<id>`` or ``member:<id>``: what the slot's digest is of."""
        return f"{self.by}:{self.id}"

    def __str__(self) -> str:
        return f"{self.by} id {self.id!r}"


def drain_group(group_id: str) -> str:
    """The companion group that holds ``group_id``'s drain requests (rule 1)."""
    return DRAIN_GROUP_PREFIX + check_group_id(group_id)


def drain_slot(group_id: str, target: DrainTarget) -> Slot:
    """Where the request to drain ``target`` in ``group_id`` is committed (rule 2)."""
    return Slot(f"{drain_group(group_id)}.{key_digest(target.name)}", 0)


def encode_request(target: DrainTarget, drained: bool) -> tuple[int, str]:
    """The offset and metadata committed to ask for ``target`` drained or not (rule 3)."""
    header = json.dumps(target.name, ensure_ascii=False)
    return (DRAINED if drained else UNDRAINED), f"{HEADER_MAGIC}{header}\n"


def decode_request(target: DrainTarget, offset: int, metadata: str | None) -> bool | None:
    """What ``target``'s slot asks: drained (True), undrained (False), nothing
    (None: never committed, or a header naming another target: rule 3)."""
    if offset < 0:
        return None
    if metadata:
        if not metadata.startswith(HEADER_MAGIC):
            return None
        try:
            named = json.loads(metadata[len(HEADER_MAGIC) :].split("\n", 1)[0])
        except json.JSONDecodeError:
            return None
        if named != target.name:
            return None
    return offset == DRAINED


def targets_of(instance_id: str | None, member_id: str | None) -> tuple[DrainTarget, ...]:
    """The slots that may name one member (rule 4)."""
    out = []
    if instance_id:
        out.append(DrainTarget("instance", instance_id))
    if member_id:
        out.append(DrainTarget("member", member_id))
    return tuple(out)


def fetch_topics(group_id: str, targets: Iterable[DrainTarget]) -> tuple[FetchTopic, ...]:
    """The OffsetFetch topics of ``targets``' slots (always listed: Tansu
    truncates a fetch of every offset)."""
    slots = {drain_slot(group_id, t) for t in targets}
    return tuple(FetchTopic(s.topic, (s.partition,)) for s in sorted(slots, key=lambda s: s.topic))


def requests_in(
    fetched: FetchedGroup, group_id: str, targets: Iterable[DrainTarget]
) -> dict[DrainTarget, bool | None]:
    """What each target's slot asks, from an OffsetFetch of the companion group.
    A slot missing from the answer, or answered with an error (an unknown topic:
    nobody ever drained it), asks nothing."""
    offsets = {
        (t.name, p.partition): (p.offset, p.metadata)
        for t in fetched.topics
        for p in t.partitions
        if p.error is ErrorCode.NONE
    }
    out: dict[DrainTarget, bool | None] = {}
    for target in targets:
        slot = drain_slot(group_id, target)
        found = offsets.get((slot.topic, slot.partition))
        out[target] = None if found is None else decode_request(target, *found)
    return out


def is_drained(requests: Mapping[DrainTarget, bool | None]) -> bool:
    """Rule 4: drained when any slot naming the member asks for it."""
    return any(asked is True for asked in requests.values())


class DrainRequests:
    """Reads and writes one group's drain requests (rules 1-3), on a connection of
    its own to the companion group's coordinator."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group_id: str,
        *,
        security: Security = PLAINTEXT,
        timeout_s: float = 10.0,
        client_id: str = "workgroup-drains",
        topics: LeaseTopics | None = None,
    ) -> None:
        self.group_id = check_group_id(group_id)
        self._offsets = AdminOffsets(
            bootstrap,
            drain_group(group_id),
            security=security,
            timeout_s=timeout_s,
            client_id=client_id,
        )
        self._topics = topics or LeaseTopics(bootstrap, client_id=client_id, security=security)

    async def read(self, targets: Iterable[DrainTarget]) -> dict[DrainTarget, bool | None]:
        """What each target's slot asks (see :func:`requests_in`)."""
        targets = tuple(targets)
        if not targets:
            return {}
        fetched = await self._offsets.fetch(fetch_topics(self.group_id, targets))
        if fetched.error not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
            raise _refused(fetched.error, f"reading the drain requests of group {self.group_id!r}")
        return requests_in(fetched, self.group_id, targets)

    async def write(self, target: DrainTarget, drained: bool) -> None:
        """Ask for ``target`` drained (or undrained); the slot's topic is created
        first where the broker needs one (Kafka, Tansu)."""
        slot = drain_slot(self.group_id, target)
        await self._topics.ensure([slot.topic])
        offset, metadata = encode_request(target, drained)
        result = await self._offsets.commit(
            [CommitTopic(slot.topic, (CommitPartition(slot.partition, offset, metadata),))]
        )
        errors = {p.error for t in result.topics for p in t.partitions}
        errors.discard(ErrorCode.NONE)
        if errors:
            error = min(errors)
            what = "drain" if drained else "undrain"
            raise _refused(error, f"asking to {what} {target} in group {self.group_id!r}")

    async def close(self) -> None:
        await self._offsets.close()


class DrainNotAllowedError(WorkgroupError):
    """The coordinator's ACL does not let this principal drain the group."""

    exit_code = 6


def _refused(error: ErrorCode, what: str) -> WorkgroupError:
    if error is ErrorCode.GROUP_AUTHORIZATION_FAILED:
        return DrainNotAllowedError(
            f"{what}: not authorised (GROUP_AUTHORIZATION_FAILED); on the embedded "
            "coordinator the ACL must allow 'drain' on the group"
        )
    return WorkgroupError(f"{what}: {error.name}", retriable=error.retriable)


class Drainable(Protocol):
    """What a :class:`DrainFollower` needs of a member (a ``GroupMember``)."""

    @property
    def member_id(self) -> str: ...

    @property
    def draining(self) -> bool: ...

    def drain(self, draining: bool = True) -> None: ...


class RequestReader(Protocol):
    """What a :class:`DrainFollower` needs of a :class:`DrainRequests`."""

    group_id: str

    async def read(self, targets: Iterable[DrainTarget]) -> dict[DrainTarget, bool | None]: ...

    async def close(self) -> None: ...


class DrainFollower:
    """Keeps one member drained as its group's requests say (rules 5-6)."""

    def __init__(
        self,
        member: Drainable,
        requests: RequestReader,
        *,
        instance_id: str | None,
        interval_s: float = DRAIN_POLL_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._member = member
        self._requests = requests
        self._instance_id = instance_id
        self._interval_s = interval_s
        self._clock = clock
        #: Drained to stop (rule 6): held whatever the requests say.
        self._to_stop = False
        self._requested = False
        self._failing = False

    @property
    def requested(self) -> bool:
        """Whether the last read found a request to drain this member."""
        return self._requested

    async def before_start(self) -> None:
        """Read the requests once, so that a drained member takes nothing at its
        first join (``GroupMember.drain`` before ``start``)."""
        await self._poll(member_id=None)

    async def follow(self) -> None:
        """Read the requests every ``interval_s`` until cancelled."""
        while True:
            await self._clock.sleep(self._interval_s)
            await self._poll(member_id=self._member.member_id or None)

    def drain_to_stop(self) -> None:
        """Drain now and stay drained (rule 6)."""
        self._to_stop = True
        self._apply()

    async def _poll(self, member_id: str | None) -> None:
        targets = targets_of(self._instance_id, member_id)
        if not targets:
            return
        try:
            requested = is_drained(await self._requests.read(targets))
        except WorkgroupError as exc:
            if not self._failing:
                log.warning(
                    "drain.read_failed",
                    group=self._requests.group_id,
                    error=str(exc),
                    why="the member stays as it is; reading again",
                )
            self._failing = True
            return
        if self._failing:
            log.info("drain.read_recovered", group=self._requests.group_id)
        self._failing = False
        if requested != self._requested:
            log.info(
                "drain.requested" if requested else "drain.request_withdrawn",
                group=self._requests.group_id,
                instance_id=self._instance_id,
                member_id=member_id,
            )
        self._requested = requested
        self._apply()

    async def close(self) -> None:
        await self._requests.close()

    def _apply(self) -> None:
        wanted = self._requested or self._to_stop
        if self._member.draining != wanted:
            self._member.drain(wanted)


def drained(member: GroupMember) -> bool:
    """The member owns, warms and releases nothing (and is draining)."""
    return (
        member.draining
        and not member.assignment
        and not member.warming
        and not member.releasing
        and member.stable
    )


async def drain_before_stop(member: GroupMember, timeout_s: float) -> bool:
    """Wait until ``member`` (already draining) owns nothing, up to ``timeout_s``;
    whether it did (rule 6)."""
    try:
        async with asyncio.timeout(timeout_s):
            await member.wait_for(drained)
    except (TimeoutError, WorkgroupError):  # out of time, or the member failed
        return False
    return True


__all__ = [
    "DRAINED",
    "DRAIN_POLL_S",
    "UNDRAINED",
    "DrainFollower",
    "DrainNotAllowedError",
    "DrainRequests",
    "DrainTarget",
    "decode_request",
    "drain_before_stop",
    "drain_group",
    "drain_slot",
    "drained",
    "encode_request",
    "fetch_topics",
    "is_drained",
    "requests_in",
    "targets_of",
]
