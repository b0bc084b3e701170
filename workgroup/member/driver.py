"""The asyncio driver of a group member: feeds the state machine its events and
carries out its actions.

All decisions are the state machine's (``state.py``): when to send which
request, under which generation a commit goes, the order of callbacks and what
a failing one does.  This module only carries them out: it sends the machine's
requests over the member's :class:`~workgroup.member.transport.CoordinatorConnection`
(which also maps aiokafka's errors), runs callbacks one at a time (coroutine
functions in the event loop, plain functions in a worker thread, so heartbeats
keep flowing while a long revocation runs), runs the leader's assignor in a
worker thread, polls the resource source and wakes the machine at its
deadlines.

Example::

    async with GroupMember("localhost:9092", "indexers", [Protocol("sticky", assignor)],
                           resources={"shard": range(12)}, on_assigned=start) as member:
        async with asyncio.timeout(30):
            await member.wait_stable()
        await member.wait_closed()  # raises the member's fatal error, if it fails
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import os
import socket
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Unpack, get_args

from workgroup.assignors.base import Assignment
from workgroup.clock import SYSTEM_CLOCK, Clock, SystemClock, wait_within
from workgroup.errors import ConfigError, ProtocolError, WorkgroupError
from workgroup.kafka.messages import (
    CommitTopic,
    FetchedGroup,
    FetchTopic,
    OffsetCommit,
    OffsetCommitResult,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
)
from workgroup.log import describe_error, get_logger, user_frames
from workgroup.member.actions import (
    Action,
    CallbackErrorPolicy,
    Closed,
    CommitDone,
    CommitOutcome,
    Failed,
    FindCoordinator,
    InvokeCallback,
    Partition,
    RunAssignor,
    SendRequest,
)
from workgroup.member.commits import commit_result
from workgroup.member.config import MemberSettings, member_config
from workgroup.member.errors import InconsistentProtocolError, MemberClosedError
from workgroup.member.load_balancing import check_load
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.member.transport import (
    CoordinatorConnection,
    kafka_errors,
    map_kafka_error,
    parse_bootstrap,
)
from workgroup.protocol.catalog import Catalog
from workgroup.protocol.process import PROCESS_TAG
from workgroup.protocol.protocol import Protocol
from workgroup.security import PLAINTEXT, Security
from workgroup.types import Resource

log = get_logger(__name__)

#: ``callback(resources, generation)``: a coroutine function (run in the event
#: loop) or a plain function (run in a worker thread).
Callback = Callable[[tuple[Resource, ...], int], Awaitable[None] | None]
#: A fixed catalog, or a (possibly async) function returning the current one.
ResourceSource = Catalog | Callable[[], Catalog | Awaitable[Catalog]]

_ids = itertools.count(1)


def this_process() -> str:
    """``HOST-PID`` of the running process (:data:`PROCESS_TAG`), as the daemons'
    logs name it."""
    return f"{socket.gethostname()}-{os.getpid()}"


#: How long the DescribeGroups that explains an INCONSISTENT_GROUP_PROTOCOL may take.
DESCRIBE_TIMEOUT_S = 5.0


class GroupMember:
    """A member of a workgroup group: joins, owns what the group assigns it, and
    tells the application through its callbacks.

    Use it as ``async with GroupMember(...) as member:`` (or call :meth:`start`
    and :meth:`close`).  Inside the ``async with`` block, a fatal error of the
    member (say FENCED_INSTANCE_ID: another process started with the same
    instance id) interrupts the block: the task that entered it is cancelled and
    the block ends with the member's fatal error instead of the cancellation (a
    :meth:`wait_stable`, :meth:`wait_for` or :meth:`wait_closed` under way in
    that task raises the error itself instead).

    Callbacks are called as ``callback(resources, generation)`` with what
    *changes*: ``on_assigned`` gets the resources added, ``on_revoked`` those
    taken away in a rebalance (another member gets them once the callback has
    returned), ``on_lost`` those lost without a revocation (session expired,
    fatal error: someone else may own them already, stop at once).  A change
    with no resources is not reported.  While a callback runs, :attr:`assignment`
    is the full set owned right after its change.  Callbacks run one at a time in
    the order of the changes; a coroutine function runs in the event loop, a
    plain function in a worker thread (``asyncio.to_thread``), so blocking work
    in it does not hold up heartbeats.

    Args:
        bootstrap: ``HOST:PORT[,HOST:PORT...]`` or a sequence of them (IPv6 as
            ``[ADDR]:PORT``): the embedded coordinator or any Kafka brokers.  A
            malformed address is a :class:`~workgroup.errors.ConfigError` here; a
            host that does not resolve or refuses connections is retried.
        group_id: The group to join.
        protocols: The protocols this member speaks, most preferred first (all
            of one protocol type); the coordinator picks one every member speaks.
        instance_id: Static membership (KIP-345): a stable id per process.  A
            static member sends no LeaveGroup when it closes, so a restart within
            the session timeout gets its resources back and moves nothing else.
            ``None``: dynamic membership.
        session_timeout_ms: How long the coordinator keeps the member without a
            heartbeat; the member reports its resources lost once it can no
            longer prove its session (``session_margin_ms`` before it can end).
        session_margin_ms: How long before its session can end on the
            coordinator the member reports its resources lost, so that its
            handlers stop before another member's start.  ``None`` (the
            default): a tenth of the session or 500 ms, whichever is larger, as
            long as two heartbeat intervals of the session remain
            (:class:`~workgroup.member.config.MemberConfig`, rule 1).
        rebalance_timeout_ms: How long a rebalance may wait for this member to
            rejoin (its revocations included).
        heartbeat_interval_ms: Time between heartbeats (below the session timeout).
        resources: The catalog ``{kind: [keys]}``, or a (sync or async) callable
            returning it, polled every ``resource_poll_interval_ms``.
        on_assigned: ``callback(resources, generation)`` for resources added.
        on_revoked: ``callback(resources, generation)`` for resources revoked.
        on_lost: ``callback(resources, generation)`` for resources lost.
        on_warming: ``callback(resources, generation)`` for resources to warm up
            (``warm_up=True``): prepare, then call :meth:`ready`; another member
            owns them until the cut-over round assigns them here (``on_assigned``).
        on_warming_ended: ``callback(resources, generation)`` for warm-ups called
            off (the move went away, the member lost its session or closes).
        on_callback_error: What a callback that raises does: ``"log"`` (the
            default) logs one ``member.callback_failed`` line and keeps the
            change; ``"release"`` also gives back the resources whose
            ``on_assigned`` failed (the member rejoins and the group hands them
            to another member); ``"fail"`` fails the member with a
            :class:`~workgroup.member.errors.CallbackError` whose ``__cause__`` is
            the callback's exception.
        log_tracebacks: Add the callback's traceback (without local variables)
            to ``member.callback_failed``.
        kinds: The kinds of resources this member takes (``None``: every kind).
        rack: This member's rack, for rack-aware assignors.
        capacity: This member's relative capacity (> 0), for weighted assignors
            and load balancing (its share of the load).
        user_data: Opaque bytes the leader's assignor receives with the member.
        tags: Free-form labels sent in the member's metadata.
        client_id: The Kafka client id (default ``workgroup-<instance id or N>``).
        retry_backoff_ms: First back-off after a failed lookup or request; it
            doubles per failure up to one second.
        connect_timeout_ms: Fail (a
            :class:`~workgroup.member.errors.CoordinatorUnavailableError` from
            :meth:`wait_stable`) if no coordinator was found this long after
            :meth:`start`; every failed attempt before is logged as a warning.
            ``None`` (the default): keep trying.
        resource_poll_interval_ms: How often a callable ``resources`` is read.
        request_timeout_ms: Time limit of the coordinator lookup, OffsetCommit
            and OffsetFetch; a connection that lost a request is replaced after
            it.  ``None`` (the default): the session timeout, at most 30 s.
            Heartbeats time out after the session, JoinGroup and SyncGroup after
            the rebalance timeout.
        close_timeout_ms: How long :meth:`close` waits for revocations and the
            LeaveGroup.
        security: TLS and SASL settings for a cluster that requires them
            (:class:`~workgroup.security.Security`; default plain TCP).
        reassign_delay_ms: As the leader, how long the resources of a member
            that left wait before they go to others, so that a restarted process
            (a new member) gets them back without moving anything else (Kafka
            Connect's scheduled rebalance delay; :mod:`workgroup.member.delay`).
        confirm_release: A revoked resource stays claimed (no other member gets
            it) until :meth:`release_done` names it, not only until
            ``on_revoked`` returns: work that stops in the background releases
            each resource on its own (the state machine's rule 9).  A closing
            member heartbeats until every revoked resource was released.
        clock: The clock every machine event's ``now`` is read from
            (:class:`~workgroup.clock.Clock`; the runtime shares its own).
        imbalance_tolerance, max_moves, balance_interval_ms: As the leader, load
            balancing after the assignor (:mod:`workgroup.member.load_balancing`): at
            most ``max_moves`` moves (0: off) bring the busiest member within
            ``imbalance_tolerance`` of the mean load; while a round ends above
            it, a probing rebalance follows every ``balance_interval_ms``.
            Loads come from :meth:`report_load`.
        warm_up, max_warmups: Planned moves with a warm-up
            (:mod:`workgroup.member.warmup`): this member warms resources up
            before it takes them (``on_warming``, :meth:`ready`); as the leader,
            at most ``max_warmups`` warm-ups run in the group at once (0: plain
            moves).

    Raises:
        ConfigError: A setting that cannot work.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group_id: str,
        protocols: Sequence[Protocol],
        *,
        resources: ResourceSource | None = None,
        on_assigned: Callback | None = None,
        on_revoked: Callback | None = None,
        on_lost: Callback | None = None,
        on_warming: Callback | None = None,
        on_warming_ended: Callback | None = None,
        on_callback_error: CallbackErrorPolicy = "log",
        log_tracebacks: bool = False,
        client_id: str | None = None,
        resource_poll_interval_ms: int = 5_000,
        close_timeout_ms: int = 30_000,
        security: Security = PLAINTEXT,
        confirm_release: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        **settings: Unpack[MemberSettings],
    ) -> None:
        self.config = member_config(group_id, protocols, settings, "GroupMember()")
        if resource_poll_interval_ms <= 0 or close_timeout_ms <= 0:
            raise ConfigError("poll interval and close timeout must be > 0")
        if on_callback_error not in get_args(CallbackErrorPolicy):
            raise ConfigError(
                f"on_callback_error must be one of {', '.join(get_args(CallbackErrorPolicy))}, "
                f"got {on_callback_error!r}"
            )
        self._client_id = client_id or f"workgroup-{self.config.instance_id or next(_ids)}"
        #: Where and how this member connects (``lease.fence()`` copies them).
        self.bootstrap = tuple(
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            for host, port in parse_bootstrap(bootstrap)
        )
        self.security = security
        self._connection = CoordinatorConnection(
            bootstrap,
            client_id=self._client_id,
            # aiokafka applies one timeout to every request of a connection; the
            # JoinGroup may be held for the whole rebalance timeout.
            request_timeout_ms=max(
                self.config.join_timeout_ms, self.config.effective_request_timeout_ms
            ),
            security=security,
        )
        self._lookup_timeout_s = self.config.effective_request_timeout_ms / 1000
        self._source = resources
        self._callbacks: dict[str, Callback | None] = {
            "on_assigned": on_assigned,
            "on_revoked": on_revoked,
            "on_lost": on_lost,
            "on_warming": on_warming,
            "on_warming_ended": on_warming_ended,
        }
        if self.config.warm_up and on_warming is None:
            raise ConfigError(
                "warm_up=True needs an on_warming callback: it starts the warm-ups that "
                "ready() then reports"
            )
        self._on_callback_error = on_callback_error
        self._log_tracebacks = log_tracebacks
        self._poll_s = resource_poll_interval_ms / 1000
        self._close_timeout_s = close_timeout_ms / 1000
        self._confirm_release = confirm_release
        #: The clock every machine event's ``now`` is read from.
        self._clock = clock
        self._machine: MemberMachine | None = None
        #: ``drain()`` before ``start()``: the first JoinGroup already drains.
        self._drain_at_start = False
        self._tasks: set[asyncio.Task[None]] = set()
        #: Loops that run until cancelled (callbacks, resource polling).
        self._services: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._callback_queue: asyncio.Queue[InvokeCallback] = asyncio.Queue()
        #: The callback running now (its ``owned`` is :attr:`assignment` meanwhile).
        self._running_callback: InvokeCallback | None = None
        #: The fatal error, once the application may see it (after the describe
        #: that completes an InconsistentProtocolError).
        self._fatal: WorkgroupError | None = None
        #: The task inside ``async with`` (interrupted by a fatal error).
        self._owner: asyncio.Task[Any] | None = None
        self._in_context = False
        self._interrupted = False
        #: How many of the owner's waits (wait_for, wait_closed) are under way.
        self._owner_waits = 0
        self._main: asyncio.Task[None] | None = None
        self._started = False
        self._listeners: list[Callable[[GroupMember], None]] = []
        self._commit_ids = itertools.count(1)
        #: Callers of :meth:`commit_offsets` waiting for the machine's answer.
        self._commits: dict[int, asyncio.Future[Mapping[Partition, CommitOutcome]]] = {}

    # --- public API ---------------------------------------------------------

    @property
    def assignment(self) -> frozenset[Resource]:
        """Resources this member owns.

        While a callback runs: everything owned right after the change that the
        callback reports (callbacks for later changes may be queued behind it).
        """
        running = self._running_callback
        if running is not None:
            return running.owned
        return self._machine.owned if self._machine else frozenset()

    @property
    def generation(self) -> int:
        """The group generation this member is in (-1: none)."""
        return self._machine.generation if self._machine else -1

    @property
    def protocol(self) -> str | None:
        """Wire name of the protocol the group chose (e.g. ``sticky.v2``)."""
        machine = self._machine
        return machine.protocol.wire_name if machine and machine.protocol else None

    @property
    def member_id(self) -> str:
        """The member id the coordinator gave this member ("" before joining)."""
        return self._machine.member_id if self._machine else ""

    @property
    def is_leader(self) -> bool:
        """Whether this member leads the group (runs the assignor)."""
        return bool(self._machine and self._machine.is_leader)

    @property
    def state(self) -> State:
        return self._machine.state if self._machine else State.UNJOINED

    @property
    def metadata_versions(self) -> Mapping[str, int]:
        """Metadata version used per protocol (lowered by version probing)."""
        return self._machine.used_versions if self._machine else {}

    @property
    def error(self) -> WorkgroupError | None:
        """The fatal error that stopped the member, if any."""
        return self._fatal

    @property
    def stable(self) -> bool:
        """Settled: STABLE with no callback running and no rejoin pending."""
        return bool(self._machine and self._machine.settled)

    async def __aenter__(self) -> GroupMember:
        self._owner = asyncio.current_task()
        await self.start()
        self._in_context = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        self._in_context = False
        owner, interrupted = self._owner, self._interrupted
        if interrupted and owner is not None:
            if not isinstance(exc, asyncio.CancelledError):
                # The block ended before our cancellation reached it: take it now.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(0)
            owner.uncancel()
        await self.close()
        error = self._fatal
        if (
            interrupted
            and error is not None
            and owner is not None
            and owner.cancelling() == 0  # nobody else cancelled the task
            and (exc is None or isinstance(exc, asyncio.CancelledError))
        ):
            error.__suppress_context__ = True  # the cancellation was only the messenger
            raise error

    async def start(self) -> None:
        """Start joining the group (returns at once; see :meth:`wait_stable`)."""
        if self._started:
            raise WorkgroupError("the member was already started")
        self._started = True
        catalog = await self._read_source()
        # The metadata names this process (workgroup.protocol.process): which one
        # holds the member's place now, whatever client id the coordinator kept.
        tags = {PROCESS_TAG: this_process(), **self.config.tags}
        self._machine = MemberMachine(
            replace(self.config, tags=tags),
            catalog,
            confirm_release=self._confirm_release,
            on_callback_error=self._on_callback_error,
        )
        if self._drain_at_start:
            self._machine.drain(self._now(), True)
        self._services.add(self._spawn(self._run_callbacks(), "callbacks"))
        if self._source is not None and callable(self._source):
            self._services.add(self._spawn(self._poll_source(), "resources"))
        self._feed(self._machine.start(self._now()))
        self._main = asyncio.create_task(self._run(), name=f"workgroup-member-{self._client_id}")

    async def wait_stable(self) -> None:
        """Wait until the member is settled: STABLE in the current generation with
        its assignment, no callback running or queued, no rejoin pending (a
        cooperative follow-up round, version probing, :meth:`request_rejoin`).

        Raises the member's fatal error (e.g. a
        :class:`~workgroup.member.errors.CoordinatorUnavailableError` once
        ``connect_timeout_ms`` passed), or :class:`MemberClosedError` if it was
        closed.  Bound the wait with ``asyncio.timeout``.
        """
        await self.wait_for(lambda member: member.stable)

    async def wait_for(self, predicate: Callable[[GroupMember], bool]) -> None:
        """Wait until ``predicate(member)`` holds (checked after every change).

        Raises like :meth:`wait_stable`.
        """
        self._require_started()
        while not predicate(self):
            if self._fatal is not None:
                raise self._fatal
            if self._closed.is_set():
                raise MemberClosedError("the member is closed")
            await self._next_change()

    async def wait_closed(self) -> None:
        """Wait until the member stops: return when it was closed, raise its fatal
        error when it failed.

        ``await member.wait_closed()`` is how a program that has nothing else to
        do keeps its member running, and hears when it fails.
        """
        self._require_started()
        while self._fatal is None:
            if self._closed.is_set():
                return
            await self._next_change()
        raise self._fatal

    async def _next_change(self) -> None:
        self._changed.clear()
        # The task inside ``async with`` waiting here hears of a fatal error from
        # the wait itself: it needs no interruption.
        owner_waits = asyncio.current_task() is self._owner
        self._owner_waits += owner_waits
        try:
            await self._changed.wait()
        finally:
            self._owner_waits -= owner_waits

    def add_listener(self, listener: Callable[[GroupMember], None]) -> None:
        """Call ``listener(member)`` after every change of the member's state
        (in the event loop; keep it short: metrics, health checks)."""
        self._listeners.append(listener)

    @property
    def rebalances(self) -> int:
        """Generations this member joined."""
        return self._machine.rebalances if self._machine else 0

    @property
    def heartbeat_age_s(self) -> float | None:
        """Seconds since the newest request that proved the session alive was sent."""
        since = self._machine.alive_since if self._machine else None
        return None if since is None else (self._now() - since) / 1000

    def request_rejoin(self, reason: str = "requested by the application") -> None:
        """Ask for a rebalance (a new generation), e.g. after this member's
        situation changed.  Acted on once the member is STABLE with no callback
        running; ignored while a rebalance is under way anyway."""
        self._require_started()
        assert self._machine is not None
        self._feed(self._machine.request_rejoin(self._now(), reason))

    @property
    def releasing(self) -> frozenset[Resource]:
        """Revoked resources not yet released (see ``confirm_release``)."""
        return self._machine.releasing if self._machine else frozenset()

    def release_done(self, resources: Iterable[Resource]) -> None:
        """The work on revoked ``resources`` has stopped: another member may get
        them now (with ``confirm_release``; others are ignored)."""
        machine = self._machine
        if machine is not None and not self._closed.is_set():
            self._feed(machine.released(self._now(), resources))

    @property
    def owned_now(self) -> frozenset[Resource]:
        """What the machine owns now: unlike :attr:`assignment` in a callback, with
        the changes whose callbacks are still queued."""
        return self._machine.owned if self._machine else frozenset()

    @property
    def warming(self) -> frozenset[Resource]:
        """Resources this member warms up (another member owns them meanwhile)."""
        return self._machine.warming if self._machine else frozenset()

    def ready(self, resources: Iterable[Resource]) -> None:
        """The warm-ups of ``resources`` are ready: the next round may hand them
        over (others are ignored).  Safe only from the event loop's thread."""
        machine = self._machine
        if machine is not None and not self._closed.is_set():
            self._feed(machine.ready(self._now(), resources))

    @property
    def draining(self) -> bool:
        """The member takes nothing until :meth:`drain` ``(False)``."""
        return self._machine.draining if self._machine else self._drain_at_start

    @property
    def moves_total(self) -> Mapping[tuple[str, str], int]:
        """``(reason, how) -> moves begun`` while this member led its group
        (:mod:`~workgroup.member.moves`)."""
        return self._machine.moves_total if self._machine else {}

    def drain(self, draining: bool = True) -> None:
        """Move everything this member owns to others (with warm-ups where the
        group has them) and take nothing until ``drain(False)``.  Before
        :meth:`start`, the member joins drained."""
        if self._machine is None:
            self._drain_at_start = draining
            return
        self._feed(self._machine.drain(self._now(), draining))

    def report_load(self, resource: Resource, value: float) -> None:
        """Record ``value`` (finite, >= 0: records/s, bytes/s, ...) as the current
        load of ``resource``; the member publishes its smoothed load the next time
        it joins (:mod:`workgroup.member.load_balancing`).  Safe from any thread.
        A bad value is a :class:`~workgroup.errors.ConfigError`."""
        load = check_load(value)
        machine = self._machine
        if machine is not None:
            machine.loads.record(resource, load, self._now())

    def measured_load(self, resource: Resource) -> float | None:
        """The smoothed load of ``resource`` measured from :meth:`report_load`
        (``None``: none reported)."""
        machine = self._machine
        return None if machine is None else machine.loads.load(resource)

    def refuse(self, resources: Iterable[Resource], for_ms: int, reason: str) -> None:
        """Give up ``resources`` (no callback) and refuse them for ``for_ms``:
        the leader hands them to another member that takes their kind, if any
        (the state machine's rule 10)."""
        machine = self._machine
        if machine is not None and not self._closed.is_set():
            self._feed(machine.refuse(self._now(), resources, for_ms, reason))

    async def refresh_resources(self) -> None:
        """Read the resource source now (the leader rebalances if it changed)."""
        if self._machine is None:
            return
        catalog = await self._read_source()
        self._feed(self._machine.resources_changed(self._now(), catalog))

    async def commit_offsets(
        self,
        topics: Sequence[CommitTopic],
        *,
        resources: Mapping[Partition, Resource] | None = None,
    ) -> OffsetCommitResult:
        """OffsetCommit with this member's member id and instance id.

        The state machine chooses the generation (its rule 11): the current one,
        except for a partition whose ``resources`` entry (``(topic, partition)``
        -> resource) names a resource the member gave up and is still releasing,
        which goes under the generation it was given up in.  The coordinator
        accepts that only until the group moves on, so nothing is committed for a
        resource once its next owner may hold it (Kafka's commits in
        ``onPartitionsRevoked``).  A partition for a resource the member neither
        owns nor releases is not sent (ILLEGAL_GENERATION in the result), nor is
        anything once the member is closed, failed or left (UNKNOWN_MEMBER_ID).

        The coordinator accepts a commit only from a current member of the
        current generation: the fence against a member that missed a rebalance
        (a paused process, a replaced static member); a refusal reaches the
        member's state machine (its resources are lost, it rejoins), and an
        accepted commit proves its session alive as a heartbeat does.
        Per-partition errors are in the result; a lost connection is a
        :class:`~workgroup.member.errors.CoordinatorUnavailableError`.
        """
        self._require_started()
        machine = self._machine
        assert machine is not None
        commit_id = next(self._commit_ids)
        answer: asyncio.Future[Mapping[Partition, CommitOutcome]] = (
            asyncio.get_running_loop().create_future()
        )
        self._commits[commit_id] = answer
        try:
            self._feed(machine.commit(self._now(), commit_id, tuple(topics), resources))
            outcomes = await answer
        finally:
            self._commits.pop(commit_id, None)
        return commit_result(topics, outcomes)

    async def fetch_offsets(self, topics: Sequence[FetchTopic]) -> FetchedGroup:
        """OffsetFetch of this group's committed offsets for ``topics``."""
        self._require_started()
        request = OffsetFetch(groups=(OffsetFetchGroup(self.config.group_id, tuple(topics)),))
        # It may wait behind a JoinGroup the coordinator holds on the same
        # connection: its timeout says nothing about the connection.
        result = await self._connection.request(
            request, self._lookup_timeout_s, may_wait_behind_held=True
        )
        assert isinstance(result, OffsetFetchResult)
        if len(result.groups) != 1:
            raise ProtocolError(f"OffsetFetch answered {len(result.groups)} groups, asked for 1")
        return result.groups[0]

    async def close(self, *, leave: bool | None = None) -> None:
        """Revoke, leave (dynamic members) and release every connection.

        The member heartbeats until the revocation callbacks have returned and
        (with ``confirm_release``) every revoked resource was released, for up to
        ``close_timeout_ms``; then it leaves.  A static member sends no
        LeaveGroup (its instance id keeps its place for a restart) unless
        ``leave=True`` (scale-down: its resources move at once instead of
        waiting for its session to expire).  Out of time, it stops without
        LeaveGroup: what it has not released moves only once its session
        expires (``member.close_timed_out``).
        """
        if not self._started:
            return
        machine = self._machine
        if machine is not None and not self._closed.is_set():
            self._feed(machine.close(self._now(), leave=leave))
            try:
                async with asyncio.timeout(self._close_timeout_s):
                    await self._closed.wait()
                    # A FATAL member closes at once; its on_lost may still be queued.
                    await self._callback_queue.join()
            except TimeoutError:
                log.error(
                    "member.close_timed_out",
                    group=self.config.group_id,
                    releasing=len(machine.releasing),
                    timeout_s=self._close_timeout_s,
                    why="stopping without LeaveGroup: the unreleased resources move "
                    "once the session expires",
                )
        self._closed.set()
        self._changed.set()
        self._wake.set()
        if self._main is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._main
        # The service loops never end by themselves: waiting for them took the full second.
        pending = [t for t in self._tasks if not t.done() and t not in self._services]
        if pending:
            # A LeaveGroup sent on a fatal error gets a moment to go out.
            await asyncio.wait(pending, timeout=1.0)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for waiter in self._commits.values():  # their requests were cancelled
            if not waiter.done():
                waiter.set_exception(MemberClosedError("the member closed before the commit"))
        await self._connection.close()

    def _now(self) -> int:
        """``now`` for the machine's events: this member's clock, in milliseconds."""
        return self._clock.monotonic_ms()

    def _require_started(self) -> None:
        if not self._started:
            raise WorkgroupError("the member is not started (use async with, or start())")

    # --- the loop -----------------------------------------------------------

    async def _run(self) -> None:
        machine = self._machine
        assert machine is not None
        while not self._closed.is_set():
            deadline = machine.next_deadline()
            delay = None if deadline is None else max(0.0, (deadline - self._now()) / 1000)
            self._wake.clear()
            if delay is None or isinstance(self._clock, SystemClock):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):  # the loop's own timer
                        await self._wake.wait()
            else:  # another clock (a test's FakeClock) times the machine's deadlines
                woken = asyncio.ensure_future(self._wake.wait())
                try:
                    await wait_within(self._clock, woken, delay)
                finally:
                    woken.cancel()
            if not self._closed.is_set():
                self._feed(machine.tick(self._now()))

    def _feed(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, FindCoordinator):
                self._spawn(self._find_coordinator(), "find-coordinator")
            elif isinstance(action, SendRequest):
                self._spawn(self._send(action), f"request-{action.request_id}")
            elif isinstance(action, InvokeCallback):
                self._callback_queue.put_nowait(action)
            elif isinstance(action, RunAssignor):
                self._spawn(self._assign(action), f"assignor-{action.run_id}")
            elif isinstance(action, CommitDone):
                waiter = self._commits.get(action.commit_id)
                if waiter is not None and not waiter.done():
                    waiter.set_result(action.outcomes)
            elif isinstance(action, Failed):
                # The machine has logged it (member.fatal).
                if isinstance(action.error, InconsistentProtocolError):
                    self._spawn(self._explain_and_report(action.error), "describe-group")
                else:
                    self._report_failure(action.error)
            elif isinstance(action, Closed):
                self._closed.set()
        self._wake.set()
        self._changed.set()
        for listener in self._listeners:
            listener(self)

    def _report_failure(self, error: WorkgroupError) -> None:
        """Let the application see the fatal error; interrupt its ``async with``."""
        self._fatal = error
        self._changed.set()
        owner = self._owner
        if (
            self._in_context
            and owner is not None
            and not owner.done()
            and not self._owner_waits
            and not self._interrupted
        ):
            self._interrupted = True
            owner.cancel(msg=f"the group member failed: {error}")

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=f"workgroup-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- actions ------------------------------------------------------------

    async def _find_coordinator(self) -> None:
        """One lookup per FindCoordinator: the machine's back-off is the retry policy."""
        machine = self._machine
        assert machine is not None
        try:
            await self._lookup()
        except WorkgroupError as exc:
            self._feed(machine.find_coordinator_failed(self._now(), exc))
            return
        self._feed(machine.coordinator_found(self._now()))

    async def _lookup(self) -> int:
        # Anything unexpected (not a network error) is fatal rather than a lookup
        # that never answers.
        with kafka_errors(f"finding the coordinator of group {self.config.group_id!r}"):
            node_id = await self._connection.find(self.config.group_id, self._lookup_timeout_s)
        log.debug("member.coordinator", node=node_id, group=self.config.group_id)
        return node_id

    async def _send(self, action: SendRequest) -> None:
        machine = self._machine
        assert machine is not None
        try:
            result = await self._connection.request(
                action.request,
                action.timeout_ms / 1000,
                beside_held=action.beside_held,
                may_wait_behind_held=action.may_wait_behind_held,
            )
        except WorkgroupError as exc:
            if isinstance(action.request, OffsetCommit):
                self._feed(machine.commit_answered(self._now(), action.request_id, exc))
            else:
                self._feed(machine.request_failed(self._now(), action.request_id, exc))
            return
        if isinstance(action.request, OffsetCommit):
            assert isinstance(result, OffsetCommitResult)
            self._feed(machine.commit_answered(self._now(), action.request_id, result))
        else:
            self._feed(machine.response(self._now(), action.request_id, result))

    async def _explain_and_report(self, error: InconsistentProtocolError) -> None:
        """Add what the group speaks to the error (one DescribeGroups), then report it."""
        try:
            summary = await self._connection.describe(self.config.group_id, DESCRIBE_TIMEOUT_S)
            if summary:
                error.args = (f"{error}; {summary}",)
        except Exception as exc:  # the error stands as it is
            log.debug("member.describe_failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._report_failure(error)

    async def _assign(self, action: RunAssignor) -> None:
        machine = self._machine
        assert machine is not None
        try:
            target: Assignment | WorkgroupError = await asyncio.to_thread(
                action.assignor.assign, action.input
            )
        except WorkgroupError as exc:
            target = exc
        except Exception as exc:
            log.exception("member.assignor_failed", assignor=action.assignor.name)
            target = WorkgroupError(f"{type(exc).__name__}: {exc}")
        self._feed(machine.assignment_done(self._now(), action.run_id, target))

    async def _run_callbacks(self) -> None:
        machine = self._machine
        assert machine is not None
        while True:
            action = await self._callback_queue.get()
            try:
                failure = await self._invoke(action)
                if failure is None:
                    self._feed(machine.callback_done(self._now(), action.callback_id))
                else:  # the machine applies on_callback_error (its rule 12)
                    details = (
                        "".join(traceback.format_exception(failure)).rstrip()
                        if self._log_tracebacks
                        else None
                    )
                    self._feed(
                        machine.callback_failed(
                            self._now(),
                            action.callback_id,
                            failure,
                            traceback=details,
                        )
                    )
            finally:
                self._callback_queue.task_done()

    async def _invoke(self, action: InvokeCallback) -> Exception | None:
        """Run the application's callback for ``action``; what it raised, if anything."""
        callback = self._callbacks.get(action.kind)
        if callback is None:
            return None
        self._running_callback = action
        try:
            if inspect.iscoroutinefunction(callback):
                await callback(action.resources, action.generation)
            else:
                # A thread: a plain callback that blocks must not stop heartbeats.
                outcome = await asyncio.to_thread(callback, action.resources, action.generation)
                if inspect.isawaitable(outcome):
                    await outcome
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return exc
        finally:
            self._running_callback = None
        return None

    async def _read_source(self) -> Catalog:
        source = self._source
        if source is None:
            return {}
        if callable(source):
            value = source()
            if inspect.isawaitable(value):
                value = await value
            catalog: Catalog = value
        else:
            catalog = source
        # Not validated here: the machine freezes (and validates) every catalog it
        # is given, so a bad source is still a ConfigError at start.
        return catalog

    async def _poll_source(self) -> None:
        """Re-read the resource source every poll interval.  A failure is logged
        once in full (the user's frames, never local variables), then as one
        line with the count at the 2nd, 4th, 8th... failure in a row, again in
        full when the error changes, and ``member.resource_source_recovered``
        once it reads again; the member keeps its last list meanwhile."""
        failures = 0
        last_error: str | None = None
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                await self.refresh_resources()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                error = getattr(exc, "summary", None) or describe_error(exc)
                if error != last_error:
                    last_error = error
                    frames = getattr(exc, "frames", None) or user_frames(exc)
                    log.error(
                        "member.resource_source_failed",
                        group=self.config.group_id,
                        error=error,
                        failures=failures,
                        hint="the member keeps its last list of resources",
                        **({"exception": frames} if frames else {}),
                    )
                elif failures & (failures - 1) == 0:  # 2, 4, 8, ...
                    log.error(
                        "member.resource_source_failing",
                        group=self.config.group_id,
                        error=error,
                        failures=failures,
                    )
            else:
                if failures:
                    log.info(
                        "member.resource_source_recovered",
                        group=self.config.group_id,
                        failures=failures,
                    )
                failures = 0
                last_error = None


# CoordinatorConnection, map_kafka_error and parse_bootstrap are the transport's,
# importable from here as before it had its own module.
__all__ = [
    "Callback",
    "CallbackErrorPolicy",
    "CoordinatorConnection",
    "GroupMember",
    "ResourceSource",
    "map_kafka_error",
    "parse_bootstrap",
]
