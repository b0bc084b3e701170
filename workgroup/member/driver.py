"""The asyncio driver of a group member: feeds the state machine its events and
carries out its actions.

All decisions are the state machine's (``state.py``): when to send which
request, under which generation a commit goes, the order of callbacks and what
a failing one does.  This module only routes its actions to the parts that
carry them out, each a module with its rules: the requests
(:mod:`~workgroup.member.request_sender`, over the member's
:class:`~workgroup.member.transport.CoordinatorConnection`, which also maps
aiokafka's errors), the callbacks (:mod:`~workgroup.member.callback_runner`),
the leader's assignor (:mod:`~workgroup.member.assignor_runner`), the machine's
deadlines (:mod:`~workgroup.member.wakeups`) and the resource source
(:mod:`~workgroup.member.resource_source`).  It keeps the application's side:
waiting for a state, commits awaited, a fatal error interrupting the
``async with`` block, closing.

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
import itertools
import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Unpack, get_args

from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.errors import ConfigError, ProtocolError, WorkgroupError
from workgroup.kafka.messages import (
    CommitTopic,
    FetchedGroup,
    FetchTopic,
    OffsetCommitResult,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
)
from workgroup.keyspaces.persisted import PersistedKeyspace
from workgroup.log import get_logger
from workgroup.member.actions import (
    Action,
    CallbackErrorPolicy,
    Closed,
    CommitDone,
    Failed,
    FindCoordinator,
    InvokeCallback,
    Partition,
    RunAssignor,
    SendRequest,
)
from workgroup.member.assignor_runner import assign
from workgroup.member.background import BackgroundTasks
from workgroup.member.callback_runner import Callback, CallbackRunner
from workgroup.member.commit_waiters import CommitWaiters
from workgroup.member.commits import commit_result
from workgroup.member.config import MemberSettings, member_config
from workgroup.member.errors import InconsistentProtocolError, MemberClosedError
from workgroup.member.interruption import OwnerInterruption
from workgroup.member.keyspace import MemberKeyspace
from workgroup.member.load_balancing import check_load
from workgroup.member.request_sender import RequestSender
from workgroup.member.resource_source import ResourceSource, poll_source, read_source
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.member.transport import (
    CoordinatorConnection,
    map_kafka_error,
    parse_bootstrap,
)
from workgroup.member.wakeups import run_wakeups
from workgroup.protocol.process import PROCESS_TAG
from workgroup.protocol.protocol import Protocol
from workgroup.security import PLAINTEXT, Security
from workgroup.types import Resource

log = get_logger(__name__)

_ids = itertools.count(1)


def this_process() -> str:
    """``HOST-PID`` of the running process (:data:`PROCESS_TAG`), as the daemons'
    logs name it."""
    return f"{socket.gethostname()}-{os.getpid()}"


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
    plain function in a thread of the member's own pool, so blocking work in it
    holds up no heartbeat (and threads the application keeps busy hold up no
    callback).

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
        callbacks = {
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
        self._callbacks = CallbackRunner(callbacks, log_tracebacks=log_tracebacks)
        self._poll_s = resource_poll_interval_ms / 1000
        self._close_timeout_s = close_timeout_ms / 1000
        self._confirm_release = confirm_release
        #: The clock every machine event's ``now`` is read from.
        self._clock = clock
        self._sender = RequestSender(
            self._connection,
            self.config.group_id,
            lookup_timeout_s=self._lookup_timeout_s,
            feed=self._feed,
            now=self._now,
        )
        self._machine: MemberMachine | None = None
        #: ``drain()`` before ``start()``: the first JoinGroup already drains.
        self._drain_at_start = False
        self._background = BackgroundTasks()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        #: The fatal error, once the application may see it (after the describe
        #: that completes an InconsistentProtocolError).
        self._fatal: WorkgroupError | None = None
        #: The task inside ``async with``, interrupted by a fatal error.
        self._interruption = OwnerInterruption()
        self._main: asyncio.Task[None] | None = None
        self._started = False
        self._listeners: list[Callable[[GroupMember], None]] = []
        #: Callers of :meth:`commit_offsets` waiting for the machine's answer.
        self._commits = CommitWaiters()

    # --- public API ---------------------------------------------------------

    @property
    def assignment(self) -> frozenset[Resource]:
        """Resources this member owns.

        While a callback runs: everything owned right after the change that the
        callback reports (callbacks for later changes may be queued behind it).
        """
        running = self._callbacks.running
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
        self._interruption.entering()
        await self.start()
        self._interruption.entered()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        interrupted = await self._interruption.leaving(exc)
        await self.close()
        error = self._fatal
        if error is not None and self._interruption.ends_with_error(interrupted, exc):
            error.__suppress_context__ = True  # the cancellation was only the messenger
            raise error

    async def start(self, *, keyspace_state: PersistedKeyspace | None = None) -> None:
        """Start joining the group (returns at once; see :meth:`wait_stable`).

        ``keyspace_state``: a keyspace's state kept across restarts, read before
        joining, that this member's rounds start above when it leads."""
        if self._started:
            raise WorkgroupError("the member was already started")
        self._started = True
        catalog = await read_source(self._source)
        # The metadata names this process (workgroup.protocol.process): which one
        # holds the member's place now, whatever client id the coordinator kept.
        tags = {PROCESS_TAG: this_process(), **self.config.tags}
        self._machine = MemberMachine(
            replace(self.config, tags=tags),
            catalog,
            confirm_release=self._confirm_release,
            on_callback_error=self._on_callback_error,
        )
        if keyspace_state is not None and self._machine.keyspace is not None:
            self._machine.keyspace.persisted = keyspace_state
        if self._drain_at_start:
            self._machine.drain(self._now(), True)
        machine = self._machine
        runner = self._callbacks.run(machine, self._feed, self._now)
        self._background.spawn(runner, "callbacks", service=True)
        if self._source is not None and callable(self._source):
            polling = poll_source(
                self._poll_s, self.refresh_resources, group_id=self.config.group_id
            )
            self._background.spawn(polling, "resources", service=True)
        self._feed(machine.start(self._now()))
        wakeups = run_wakeups(
            machine, self._clock, wake=self._wake, closed=self._closed, feed=self._feed
        )
        self._main = asyncio.create_task(wakeups, name=f"workgroup-member-{self._client_id}")

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
        await self._interruption.wait(self._changed)

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
        catalog = await read_source(self._source)
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
        commit_id, answer = self._commits.open()
        try:
            self._feed(machine.commit(self._now(), commit_id, tuple(topics), resources))
            outcomes = await answer
        finally:
            self._commits.done(commit_id)
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
                    await self._callbacks.join()
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
        await self._background.stop(grace_s=1.0)  # a LeaveGroup gets a moment to go out
        self._commits.closed()
        await self._connection.close()

    def _now(self) -> int:
        """``now`` for the machine's events: this member's clock, in milliseconds."""
        return self._clock.monotonic_ms()

    def _require_started(self) -> None:
        if not self._started:
            raise WorkgroupError("the member is not started (use async with, or start())")

    # --- the actions ------------------------------------------------------

    def _feed(self, actions: list[Action]) -> None:
        machine, spawn = self._machine, self._background.spawn
        assert machine is not None
        for action in actions:
            if isinstance(action, FindCoordinator):
                spawn(self._sender.find_coordinator(machine), "find-coordinator")
            elif isinstance(action, SendRequest):
                spawn(self._sender.send(machine, action), f"request-{action.request_id}")
            elif isinstance(action, InvokeCallback):
                self._callbacks.put(action)
            elif isinstance(action, RunAssignor):
                spawn(assign(machine, action, self._feed, self._now), f"assignor-{action.run_id}")
            elif isinstance(action, CommitDone):
                self._commits.answer(action)
            elif isinstance(action, Failed):
                # The machine has logged it (member.fatal).
                if isinstance(action.error, InconsistentProtocolError):
                    explaining = self._sender.explain(action.error, self._report_failure)
                    spawn(explaining, "describe-group")
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
        self._interruption.interrupt(error)


def member_keyspace(member: GroupMember) -> MemberKeyspace | None:
    """The keyspace map ``member`` knows and the hot keys it sampled (a member
    started with ``keyspace=``: :mod:`workgroup.member.keyspace`)."""
    machine = member._machine
    return machine.keyspace if machine is not None else None


# CoordinatorConnection, map_kafka_error and parse_bootstrap are the transport's,
# Callback the callback runner's, ResourceSource the resource source's: importable
# from here as before they had modules of their own.
__all__ = [
    "Callback",
    "CallbackErrorPolicy",
    "CoordinatorConnection",
    "GroupMember",
    "ResourceSource",
    "map_kafka_error",
    "member_keyspace",
    "parse_bootstrap",
]
