"""A portable fence: a lease's right to write, usable from any process, without a daemon.

``lease.fence()`` returns a :class:`Fence`, a small frozen value (it pickles with
``pickle`` and ``cloudpickle``) that names the coordinator, the group, the
member (id, instance id, generation), the lease's slot, its key and its token.
Any process can then call ``fence.commit(value)`` or ``fence.check()``
synchronously: plain blocking sockets, no event loop, no daemon.

Rules:

1. **commit** sends OffsetCommit(slot, offset=token, metadata=header+value)
   under the fence's member id, instance id and generation, as the lease itself
   does: the coordinator accepts it only while that member is in the group and
   that generation is current.  UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID and
   GROUP_ID_NOT_FOUND end the fence for good (:class:`LeaseLostError`).
2. **A stale generation is not the end of the lease.**  A cooperative
   rebalance that keeps the resource where it is bumps the generation while the
   lease stays held, so the generation in a pickled fence goes stale.  On
   ILLEGAL_GENERATION the fence looks again: DescribeGroups (the member is still
   in the group; what it reported owning when it joined lists the resource;
   its current assignment lists it too, or, while a cooperative rebalance
   revokes it and its handler finishes its work (a Spark query its
   micro-batch), no member's assignment lists it; the assignment names
   generation G' newer than the fence's) and OffsetFetch (the slot is still at
   this token and names this key).  If all hold it retries under G' (kept for
   this process), else :class:`LeaseLostError`.  Why this is safe: a commit
   under generation G' is accepted only while G' is current; in G' no other
   member has the resource, and the next owner can get it only in a later
   generation (cooperative protocols revoke in one generation and assign in the
   next, and a member still finishing the resource's work keeps claiming it),
   at which point the commit under G' is refused.  The slot check catches an
   owner that held the resource between G and G' (its token is higher); the
   "owned when it joined" check catches the resource leaving this member and
   coming back in G'.  What remains (docs/fence.md): it left and came back
   *and* another rebalance followed, no other holder committed a token
   meanwhile, and the daemon's new lease is still taking its token when the
   fence looks.
3. While the group rebalances (REBALANCE_IN_PROGRESS, a group that is not
   Stable when described) the fence looks again every ``REBALANCE_POLL_S``:
   a round ends within a heartbeat interval or two, and the writer's batch
   waits on it (a moved shard's last batch is written during the cut-over's
   rounds: with a growing back-off, rounds of 0.5 s held it up to a second
   more).  On any other retriable code (``RETRIABLE_CODES``) and while the
   coordinator cannot be reached, it tries again with a growing back-off.
   Either way until ``timeout_s``, then it raises a one-line
   :class:`FenceTimeoutError` (retriable) naming the address.
4. **check** proves the lease still holds without writing: a Heartbeat under
   the fence's member id, instance id and generation (the coordinator validates
   it exactly as it validates a commit), then OffsetFetch (the slot is still at
   this token and names this key).  ILLEGAL_GENERATION is looked at as in rule
   2, and so is REBALANCE_IN_PROGRESS after the slot check (Kafka gives it for
   the current generation during a rebalance, Tansu for a stale one as well).
5. **Heartbeats.**  On Kafka an accepted OffsetCommit or Heartbeat extends the
   member's session: a writer that keeps committing with a fence keeps a dead
   daemon's member in the group, so its resources never move.  The embedded
   coordinator does not count requests from a fence (client id
   ``workgroup.fence``) as the member's heartbeats: once the daemon is gone
   (SIGKILL, SIGSTOP), its member expires after the session timeout whatever
   the fence does, and the fence's next use raises :class:`LeaseLostError`.
   On Kafka (and Tansu) give fences a lifetime instead: ``lease.fence(ttl_s=...)``
   makes a fence that refuses itself after ``ttl_s`` seconds (wall clock, so
   keep clocks in step), and the daemon hands out fresh ones.  The expiry is
   read from a :class:`~workgroup.clock.Clock`'s wall time (``clock=``, the
   system's by default; the lease's when it makes the fence).  The deadline of
   ``timeout_s`` bounds blocking socket calls and pauses, which the system
   times, so it is measured on the system's monotonic clock whatever ``clock`` is.
6. **Credentials are not pickled** unless ``include_secrets=True``: a fence
   holds the security protocol, the SASL mechanism and user name, and the
   paths of the TLS files.  The process that uses it takes the SASL password
   from ``$WORKGROUP_SASL_PASSWORD``, or from the file named by
   ``$WORKGROUP_SASL_PASSWORD_FILE``; TLS files are read where the paths point.
7. A fence is used after its lease ended, for another coordinator or group,
   or against a coordinator that cannot be reached: each is a one-line error
   that says which (:class:`LeaseLostError` for the first two).
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from workgroup.client.bootstrap import format_address, parse_bootstrap
from workgroup.client.errors import CoordinatorUnavailableError
from workgroup.client.security import (
    PASSWORD_ENV,
    PASSWORD_FILE_ENV,
    Security,
    deprecated_security_name,
)
from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.errors import (
    LEASE_FENCING_CODES,
    RETRIABLE_CODES,
    CoordinatorError,
    ErrorCode,
    WorkgroupError,
)
from workgroup.runtime.errors import LeaseLostError
from workgroup.runtime.slots import Slot, check_value, decode_metadata, same_key, slot_header
from workgroup.types import Key

if TYPE_CHECKING:
    from workgroup.client.blocking import BlockingCoordinator

# The wire path (the blocking connection, the Kafka records and their codec) is
# imported on a fence's first use, not with this module: a process that only
# unpickles fences, or imports this module for its names, does not pay for it.

_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 1.0
#: How often a fence looks again while the group rebalances (rule 3).
REBALANCE_POLL_S = 0.05

T = TypeVar("T")


class FenceTimeoutError(WorkgroupError):
    """The fence could not reach a verdict within its timeout (the coordinator was
    unreachable, or the group kept rebalancing).  Retriable: nothing is known
    about the lease, and nothing was written unless the coordinator says so later."""

    retriable = True


@dataclass(frozen=True)
class Fence:
    """A lease's right to write, for any process (see the module's rules)."""

    bootstrap: tuple[str, ...]
    #: Without the SASL password unless made with ``include_secrets=True`` (rule 6).
    security: Security
    group_id: str
    member_id: str
    instance_id: str | None
    generation: int
    topic: str
    partition: int
    kind: str
    key: Key
    token: int
    #: Wall-clock time (seconds since the epoch, :meth:`Clock.wall
    #: <workgroup.clock.Clock.wall>`) after which the fence refuses itself
    #: (``lease.fence(ttl_s=...)``, rule 5); ``None``: no expiry.
    expires_at: float | None = None

    def __repr__(self) -> str:
        return (
            f"<Fence {self.kind}/{self.key} token={self.token} group={self.group_id} "
            f"member={self.member_id} generation={self.generation} at {','.join(self.bootstrap)}>"
        )

    @property
    def _name(self) -> str:
        return f"fence of {self.kind}/{self.key!r} (token {self.token}, group {self.group_id!r})"

    # --- public API ---------------------------------------------------------------

    def commit(self, value: str, *, timeout_s: float = 10.0, clock: Clock = SYSTEM_CLOCK) -> None:
        """Store ``value`` as the resource's checkpoint, fenced (rules 1-3); an
        expired fence (rule 5, on ``clock``'s wall time) sends nothing.

        Raises :class:`LeaseLostError` once the lease ended,
        :class:`FenceTimeoutError` if no verdict came within ``timeout_s``,
        :class:`~workgroup.runtime.errors.CheckpointError` for a value that
        cannot be stored (nothing sent).
        """
        from workgroup.kafka.messages import (
            CommitPartition,
            CommitTopic,
            OffsetCommit,
            OffsetCommitResult,
        )

        check_value(value, self.key)
        metadata = slot_header(self.key) + value

        def send(conn: BlockingCoordinator, generation: int, deadline: float) -> ErrorCode:
            result = conn.request(
                OffsetCommit(
                    self.group_id,
                    generation,
                    self.member_id,
                    (
                        CommitTopic(
                            self.topic, (CommitPartition(self.partition, self.token, metadata),)
                        ),
                    ),
                    group_instance_id=self.instance_id,
                ),
                deadline,
            )
            assert isinstance(result, OffsetCommitResult)
            for topic in result.topics:
                for partition in topic.partitions:
                    if topic.name == self.topic and partition.partition == self.partition:
                        return partition.error
            raise CoordinatorError(
                ErrorCode.UNKNOWN_SERVER_ERROR, f"{self._name}: OffsetCommit answered without it"
            )

        self._run("commit", send, timeout_s, clock)

    def check(self, *, timeout_s: float = 10.0, clock: Clock = SYSTEM_CLOCK) -> None:
        """Return if the lease still holds, writing nothing (rule 4); else
        :class:`LeaseLostError` (or :class:`FenceTimeoutError`); an expired
        fence (rule 5, on ``clock``'s wall time) sends nothing."""
        from workgroup.kafka.messages import Heartbeat, HeartbeatResult

        def send(conn: BlockingCoordinator, generation: int, deadline: float) -> ErrorCode:
            result = conn.request(
                Heartbeat(self.group_id, generation, self.member_id, self.instance_id), deadline
            )
            assert isinstance(result, HeartbeatResult)
            if result.error in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS):
                # Did another holder take the resource since this token?
                self._check_slot(conn, deadline)
            if result.error is ErrorCode.REBALANCE_IN_PROGRESS:
                # It proves the generation current on Kafka, but Tansu answers it
                # for a stale generation too: look again as for a stale one
                # (while the group rebalances that means trying again later).
                return ErrorCode.ILLEGAL_GENERATION
            return result.error

        self._run("check", send, timeout_s, clock)

    # --- internals ------------------------------------------------------------------

    def _run(
        self,
        what: str,
        send: Callable[[BlockingCoordinator, int, float], ErrorCode],
        timeout_s: float,
        clock: Clock,
    ) -> None:
        now = clock.wall()
        if self.expires_at is not None and now > self.expires_at:
            raise LeaseLostError(
                f"{self._name} expired {now - self.expires_at:.1f} s ago "
                "(made with a ttl): ask the lease for a new one"
            )
        # Rule 5: the socket timeouts and pauses below are the system's.
        deadline = SYSTEM_CLOCK.monotonic() + timeout_s
        backoff = _BACKOFF_S
        last = "no answer yet"
        while True:
            rebalancing = False
            try:
                with _connection(self) as conn:
                    generation = _generations.get(self._identity, self.generation)
                    error = send(conn, generation, deadline)
                    if error is ErrorCode.NONE:
                        return
                    if error in LEASE_FENCING_CODES:  # the member is gone: never again
                        raise LeaseLostError(
                            f"{self._name} was refused: {error.name} (member {self.member_id!r} "
                            "is no longer in the group: its lease ended)"
                        )
                    if error is ErrorCode.ILLEGAL_GENERATION:
                        if self._look_again(conn, generation, deadline):
                            continue
                        last, rebalancing = "the group was rebalancing", True
                    elif error in RETRIABLE_CODES:  # rule 3
                        if error is ErrorCode.NOT_COORDINATOR:
                            conn.close()
                        last = error.name
                        rebalancing = error is ErrorCode.REBALANCE_IN_PROGRESS
                    else:
                        raise CoordinatorError(error, f"{self._name}: {what} refused: {error.name}")
            except CoordinatorUnavailableError as exc:
                last = str(exc)
            left = deadline - SYSTEM_CLOCK.monotonic()
            from random import uniform  # only when trying again: not with the module

            pause = (REBALANCE_POLL_S if rebalancing else backoff) * uniform(0.5, 1.0)
            if pause >= left:
                # A try with no time left could only say "timed out": the error
                # keeps why the last real try failed (e.g. Connection refused).
                time.sleep(max(left, 0.0))
                raise FenceTimeoutError(
                    f"{self._name}: no verdict from {','.join(self.bootstrap)} within "
                    f"{timeout_s:g} s ({last})"
                )
            time.sleep(pause)
            if not rebalancing:
                backoff = min(backoff * 2, _MAX_BACKOFF_S)

    @property
    def _identity(self) -> tuple[object, ...]:
        return (self.bootstrap, self.group_id, self.member_id, self.kind, self.key, self.token)

    def _look_again(self, conn: BlockingCoordinator, generation: int, deadline: float) -> bool:
        """Rule 2: True if the lease holds in a newer generation (now remembered),
        False to try again later (the group is rebalancing); else LeaseLostError."""
        from workgroup.client.describe import decode_description
        from workgroup.kafka.messages import DescribeGroups, DescribeGroupsResult

        result = conn.request(DescribeGroups((self.group_id,)), deadline)
        assert isinstance(result, DescribeGroupsResult)
        group = result.groups[0]
        if group.error is not ErrorCode.NONE:
            if group.error.retriable:
                return False
            raise CoordinatorError(
                group.error, f"{self._name}: describing the group: {group.error.name}"
            )
        raw = next((m for m in group.members if m.member_id == self.member_id), None)
        if raw is None:
            raise LeaseLostError(
                f"{self._name}: member {self.member_id!r} is not in group {self.group_id!r} at "
                f"{','.join(self.bootstrap)} (state {group.state or 'unknown'}): its lease "
                "ended, or the fence was made for another coordinator or group"
            )
        if group.state != "Stable":
            return False
        if not raw.assignment or not raw.metadata:
            raise LeaseLostError(
                f"{self._name}: generation {generation} is stale and the coordinator does not "
                "describe member assignments, so the fence cannot show the lease still holds"
            )
        members = decode_description(result, self.group_id).members
        member = next(m for m in members if m.member_id == self.member_id)
        joined = member.workgroup_metadata()
        if member.assignment is None or member.generation is None or joined is None:
            why = member.assignment_error or "its metadata does not decode"
            raise LeaseLostError(f"{self._name}: cannot read the member's assignment: {why}")
        if not _has(joined.owned, (self.kind, self.key)):
            raise LeaseLostError(
                f"{self._name}: the resource is no longer assigned to member "
                f"{self.member_id!r} (generation {member.generation}): its lease ended"
            )
        if not self._assigned(member.assignment):
            # Being revoked (rule 2): its handler still finishes, and the member
            # still claims it; nobody else may have it in this generation.
            for other in members:
                if other.member_id == self.member_id:
                    continue
                if other.assignment is None:
                    raise LeaseLostError(
                        f"{self._name}: the resource is being revoked and member "
                        f"{other.member_id!r}'s assignment cannot be read, so the fence "
                        "cannot show nobody else has it"
                    )
                if self._assigned(other.assignment):
                    raise LeaseLostError(
                        f"{self._name}: the resource is now assigned to member "
                        f"{other.member_id!r} (generation {member.generation}): its lease ended"
                    )
        if member.generation <= generation:
            return False
        self._check_slot(conn, deadline)
        _generations[self._identity] = member.generation
        return True

    def _assigned(self, assignment: Mapping[str, Sequence[Key]]) -> bool:
        return any(same_key(key, self.key) for key in assignment.get(self.kind, ()))

    def _check_slot(self, conn: BlockingCoordinator, deadline: float) -> None:
        """LeaseLostError unless the slot is still at this token and names this key."""
        from workgroup.client.slots import fetch_request
        from workgroup.kafka.messages import OffsetFetchResult

        result = conn.request(
            fetch_request(self.group_id, (Slot(self.topic, self.partition),)), deadline
        )
        assert isinstance(result, OffsetFetchResult)
        fetched = result.groups[0]
        if fetched.error is not ErrorCode.NONE:
            raise CoordinatorError(
                fetched.error, f"{self._name}: reading its slot: {fetched.error.name}"
            )
        partition = next(
            (p for t in fetched.topics for p in t.partitions if t.name == self.topic),
            None,
        )
        if partition is None or partition.error is not ErrorCode.NONE:
            code = partition.error if partition is not None else ErrorCode.UNKNOWN_SERVER_ERROR
            raise CoordinatorError(code, f"{self._name}: reading its slot: {code.name}")
        if partition.offset != self.token:
            raise LeaseLostError(
                f"{self._name}: its slot is at token {partition.offset}: the resource changed "
                "hands, the lease ended"
            )
        try:
            named = decode_metadata(partition.metadata).key
        except ValueError:
            named = None
        if named is not None and not same_key(named, self.key):
            raise LeaseLostError(f"{self._name}: its slot names another key ({named!r})")


def _has(resources: tuple[tuple[str, Key], ...], resource: tuple[str, Key]) -> bool:
    return any(kind == resource[0] and same_key(key, resource[1]) for kind, key in resources)


def make_fence(
    *,
    bootstrap: tuple[str, ...] | str,
    security: Security,
    group_id: str,
    member_id: str,
    instance_id: str | None,
    generation: int,
    topic: str,
    partition: int,
    kind: str,
    key: Key,
    token: int,
    include_secrets: bool = False,
    ttl_s: float | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Fence:
    """A :class:`Fence` (``lease.fence()`` calls this); bootstrap addresses are
    checked.  ``ttl_s`` counts from ``clock``'s wall time."""
    addresses = parse_bootstrap(bootstrap)
    if ttl_s is not None and ttl_s <= 0:
        raise WorkgroupError(f"a fence's ttl_s must be > 0, got {ttl_s}")
    return Fence(
        bootstrap=tuple(format_address(h, p) for h, p in addresses),
        security=security if include_secrets else security.without_secrets(),
        group_id=group_id,
        member_id=member_id,
        instance_id=instance_id,
        generation=generation,
        topic=topic,
        partition=partition,
        kind=kind,
        key=key,
        token=token,
        expires_at=None if ttl_s is None else clock.wall() + ttl_s,
    )


# --- this process's connections and what it learnt ------------------------------------

#: Newer generations a fence proved the lease holds in (rule 2), per process.
_generations: dict[tuple[object, ...], int] = {}
_pool: dict[tuple[object, ...], list[BlockingCoordinator]] = {}
_pool_lock = threading.Lock()
_pool_pid = os.getpid()


@atexit.register
def _close_pool() -> None:
    """Close this process's idle fence connections (at exit, or between tests)."""
    with _pool_lock:
        idle = [conn for conns in _pool.values() for conn in conns]
        _pool.clear()
    for conn in idle:
        conn.close()


class _connection:
    """A pooled connection for one call (a forked child starts with an empty pool)."""

    def __init__(self, fence: Fence) -> None:
        self._key = (fence.bootstrap, fence.group_id, fence.security)
        self._fence = fence
        self._conn: BlockingCoordinator | None = None

    def __enter__(self) -> BlockingCoordinator:
        global _pool_pid
        with _pool_lock:
            if _pool_pid != os.getpid():
                _pool.clear()
                _generations.clear()
                _pool_pid = os.getpid()
            free = _pool.get(self._key)
            self._conn = free.pop() if free else None
        if self._conn is None:
            from workgroup.client.blocking import BlockingCoordinator

            self._conn = BlockingCoordinator(
                parse_bootstrap(self._fence.bootstrap),
                self._fence.group_id,
                self._fence.security,
            )
        return self._conn

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        conn = self._conn
        if conn is None:
            return
        if kind is not None and not issubclass(kind, LeaseLostError | CoordinatorError):
            conn.close()
            return
        with _pool_lock:
            _pool.setdefault(self._key, []).append(conn)


def __getattr__(name: str) -> Any:
    return deprecated_security_name(__name__, "FenceSecurity", name)


__all__ = [
    "PASSWORD_ENV",
    "PASSWORD_FILE_ENV",
    "REBALANCE_POLL_S",
    "Fence",
    "FenceTimeoutError",
    "make_fence",
]
