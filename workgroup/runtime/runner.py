"""Running an :class:`~workgroup.runtime.app.App`: one group member per worker kind
and per leader, a lease and a handler per owned resource.

Rules:

1. A revoked resource is released to the group (``GroupMember.release_done``)
   only once its own handler has finished: returned, or cancelled at the end of
   its grace period and its task done (a child process reaped).  Each resource
   on its own: a slow handler holds back no other resource.  Until then the
   member keeps claiming it, so no other member starts it.
2. A plain-function handler whose thread outlives its grace period keeps its
   resource claimed until the thread returns (``worker.outlived_grace`` again
   every ``OUTLIVED_LOG_EVERY_S``).  When the process stops with such a thread,
   the member stops without LeaveGroup after its close timeout (grace +
   ``STOP_MARGIN_MS``, at least 10 s), and the daemon ends the process, which
   ends the thread (``app.threads_abandoned``): the coordinator hands the
   resource out only after the session expired, when the thread is gone.
3. A lost resource (session expired, fatal error) is stopped at once, including
   one still stopping after its revocation; nothing is released for it.
4. A resource handed back while its old handler still stops gets a new handler
   that starts once the old one has finished.  The old one's end is recorded
   (the event log's ``revoked``, metrics) when it finishes; nothing is
   released for it.
5. A handler that failed ``max_failures`` times in a row is *failing*: listed
   by ``/healthz`` (503) and counted by ``workgroup_failing_handlers`` until it
   recovers or stops.  Under ``on_failure="release"`` its lease ends, and the
   member gives the resource up and refuses it for ``RELEASE_REFUSE_MS`` (the
   leader hands it to another process that takes its kind, if there is one);
   under ``"stop"`` the daemon stops with a :class:`HandlerFailedError`
   (exit 3).
6. One clock (``clock=``, :mod:`workgroup.clock`) times everything of a runner:
   its members' machines, its leases' grace periods and its handler runs.
7. Warm-ups (``warm_up=True``; :mod:`workgroup.member.warmup`): a resource to
   warm up gets a handler run with a warming lease at once (after a run of it
   still stopping here); the cut-over's ``on_assigned`` promotes that run
   instead of starting a new one; a warm-up called off stops its run (nothing
   to release: it never owned the resource); one not ready within
   ``warmup_timeout_ms`` falls back to a plain move (logged once).
8. Standby holders report ``lease.ready()`` to the group (``MemberInfo.ready``:
   the leader prefers ready standbys).  A leader's standbys
   (``@app.leader(name, standbys=N)``) are promoted: when this process is
   handed the leadership, the standby run of its twin is not stopped but
   becomes the active run (its ``ready()`` returns ``True``), so the warm
   state it built is used; the twin is released once its token is taken.  A
   warm-up of the resource handed to a process holding such a standby run
   starts no run of its own: the standby run is the warm-up (its ``ready()``
   reports both), with no time limit: the handover waits for it.
9. Drains (:mod:`workgroup.runtime.drains`): each group reads its drain requests
   before its member starts, then every second, and drains or undrains its
   member as they say.  A graceful stop with ``drain_on_stop`` (or with
   ``leave_on_stop`` in a group whose worker warms up) drains every group
   first and waits, up to ``drain_timeout_ms``, until each owns nothing; then
   the members close as usual (``app.drained`` / ``app.drain_timed_out``).
10. The app's start-up functions (``App.add_startup``: a plugin starting its
    engine) run before any group is joined; a stop meanwhile joins nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

import structlog

from workgroup import log as wlog
from workgroup.assignors.standby import (
    StandbyAssignor,
    active_kind,
    is_standby_kind,
    standby_kind,
)
from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.errors import ConfigError, WorkgroupError
from workgroup.log import get_logger
from workgroup.member.driver import GroupMember
from workgroup.member.errors import FencedInstanceError
from workgroup.member.keyspace import KeyspaceConfig
from workgroup.member.transitions import State
from workgroup.protocol.catalog import Catalog, CatalogEntry, FrozenCatalog, freeze_catalog
from workgroup.protocol.endpoint import ENDPOINT_TAG
from workgroup.protocol.protocol import Protocol
from workgroup.runtime.batched_slots import MemberSlotStore
from workgroup.runtime.config import STOP_MARGIN_MS, Settings
from workgroup.runtime.drains import DrainFollower, DrainRequests, drain_before_stop
from workgroup.runtime.errors import HandlerFailedError, ResourceFunctionError
from workgroup.runtime.events import OwnershipLog
from workgroup.runtime.handlers import Handler, HandlerRun, HandlerStats, RestartPolicy
from workgroup.runtime.http import MetricsServer
from workgroup.runtime.keyspace_state import KeyspaceState
from workgroup.runtime.keyspaces import KeyspaceGroup
from workgroup.runtime.lease import Lease
from workgroup.runtime.lease_record import LeaseRecord
from workgroup.runtime.lease_states import EndReason
from workgroup.runtime.legacy import AdminOffsets, check_lease_layout
from workgroup.runtime.loads import LoadReporter, load_group
from workgroup.runtime.local import LOCAL_HOST, LOCAL_PORT, ensure_local_coordinator
from workgroup.runtime.loopwatch import LoopWatch
from workgroup.runtime.metrics import RuntimeMetrics
from workgroup.runtime.producers import ProducerFactory
from workgroup.runtime.slots import Slot, check_group_id, slot_of
from workgroup.runtime.spec import LEADER_KIND, DeclaredApp, ResourceFunction, failure_policy
from workgroup.runtime.topics import LeaseTopics
from workgroup.runtime.watch import (
    client_id_of,
    process_identity,
    release_identity,
    report_replaced,
    taken_over,
    wait_for_bootstrap,
    watch,
)
from workgroup.types import Key, Resource

log = get_logger(__name__)

#: Handlers started per event-loop pass.
START_SLICE = 500
#: How long a process refuses a resource it released after failures (rule 5).
RELEASE_REFUSE_MS = 5 * 60_000
#: How long one read of the drain requests may take (rule 9): a slow one only
#: delays the member's start, never fails it.
DRAIN_READ_TIMEOUT_S = 5.0
#: The embedded coordinator's default address (``workgroup coordinator``).
DEFAULT_BOOTSTRAP = f"{LOCAL_HOST}:{LOCAL_PORT}"


class GroupRunner:
    """One group of the app: its member, and a handler per owned resource."""

    def __init__(
        self,
        *,
        group_id: str,
        kind: str,
        handler: Handler,
        assignors: Sequence[str],
        grace_s: float,
        restart: RestartPolicy,
        settings: Settings,
        source: ResourceFunction,
        events: OwnershipLog | None,
        stats: HandlerStats,
        topics: LeaseTopics,
        producers: ProducerFactory,
        metrics: RuntimeMetrics,
        standbys: int = 0,
        reassign_delay_ms: int = 0,
        warm_up: bool = False,
        warmup_timeout_s: float = 60.0,
        promote_standbys: bool = False,
        client_id: str | None = None,
        on_fatal: Callable[[WorkgroupError], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        keyspace: KeyspaceConfig | None = None,
        slot_for: Callable[[Key], Slot] | None = None,
        earlier_holder: Callable[[Key], bool] | None = None,
    ) -> None:
        self.group_id = group_id
        #: Where a key's lease slot is (a keyspace's pool), and whether a key a
        #: pool slot names held it before (``None``: a slot per key).
        self._slot_for = slot_for
        self._earlier_holder = earlier_holder
        #: A keyspace's group lists the slices of its map (empty before the first).
        self._keyspace = keyspace
        self._clock = clock
        self._on_fatal = on_fatal
        self.kind = kind
        self._handler = handler
        self._grace_s = grace_s
        self._restart = restart
        self._source = source
        #: Its leases' metrics and ownership events (:mod:`~workgroup.runtime.lease_record`).
        self._record = LeaseRecord(group_id, metrics, events, clock)
        self._stats = stats
        self._topics = topics
        self._producers = producers
        check_group_id(group_id)
        self._catalog = FrozenCatalog()
        #: The slot of every key of the catalog (a function of the key alone).
        self._slots: dict[Key, Slot] = {}
        self.runs: dict[Resource, HandlerRun] = {}
        #: Revoked, their handlers still stopping (rule 1).
        self.stopping: dict[Resource, HandlerRun] = {}
        #: Revoked runs still stopping whose resource was handed back (rule 4):
        #: nothing to release, but their end is recorded.
        self._handed_back: set[HandlerRun] = set()
        #: Warming up for a planned move (another member holds them: rule 7).
        self.warming: dict[Resource, HandlerRun] = {}
        self._warmup_timeout_s = warmup_timeout_s
        self._releases: set[asyncio.Task[None]] = set()
        self._standbys = standbys
        #: A leader's standby runs to promote, by the resource they take over (rule 8).
        self._promote_standbys = promote_standbys and standbys > 0
        self.promoting: dict[Resource, HandlerRun] = {}
        protocols = [Protocol.of(name) for name in assignors]
        kinds = [kind]
        if standbys:
            protocols = [
                Protocol(
                    name=f"{name}-standby{standbys}",
                    assignor=StandbyAssignor(protocol.assignor, standbys),
                )
                for name, protocol in zip(assignors, protocols, strict=True)
            ]
            kinds.append(standby_kind(kind))
        self.member = GroupMember(
            settings.bootstrap or DEFAULT_BOOTSTRAP,
            group_id,
            protocols,
            instance_id=settings.instance_id,
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_ms(),
            rebalance_timeout_ms=settings.rebalance_timeout_ms,
            session_margin_ms=settings.session_margin_ms,
            request_timeout_ms=settings.request_timeout_ms,
            connect_timeout_ms=settings.connect_timeout_ms,
            client_id=client_id,
            # A keyspace's catalog is its map, which the member adopts itself.
            resources=self._read_catalog if keyspace is None else None,
            resource_poll_interval_ms=settings.resource_poll_interval_ms,
            kinds=kinds,
            on_assigned=self._assigned,
            on_revoked=self._revoked,
            on_lost=self._lost,
            on_warming=self._warming_started if warm_up else None,
            on_warming_ended=self._warming_ended,
            warm_up=warm_up,
            max_warmups=settings.max_warmups,
            on_callback_error="fail",
            # Rule 2: every handler gets its grace and the cancellation margin
            # (and the hand-over rounds at least 10 s).
            close_timeout_ms=max(int(grace_s * 1000) + STOP_MARGIN_MS, 10_000),
            security=settings.security,
            reassign_delay_ms=reassign_delay_ms,
            confirm_release=True,
            tags={ENDPOINT_TAG: settings.advertise} if settings.advertise else {},
            clock=clock,
            capacity=settings.capacity,
            # A keyspace's planner balances; the member republishes its loads
            # when they move beyond the planner's tolerance.
            imbalance_tolerance=(
                settings.imbalance_tolerance
                if keyspace is None
                else keyspace.settings.imbalance_tolerance
            ),
            max_moves=settings.max_moves,
            balance_interval_ms=settings.balance_interval_ms,
            keyspace=keyspace,
        )
        self._store = MemberSlotStore(self.member)
        #: A keyspace's state kept across restarts (``None``: no keyspace).
        self.keyspace_state = (
            KeyspaceState(group_id, keyspace.name, self.member, topics, clock=clock)
            if keyspace is not None
            else None
        )
        self.warm_up = warm_up
        #: Rule 8: the group's drain requests for this member.
        self.drains = DrainFollower(
            self.member,
            DrainRequests(
                settings.bootstrap or DEFAULT_BOOTSTRAP,
                group_id,
                security=settings.security,
                timeout_s=DRAIN_READ_TIMEOUT_S,
                client_id=client_id or "workgroup-drains",
                topics=topics,
            ),
            instance_id=settings.instance_id,
            clock=clock,
        )
        #: The current loads of what the member owns, for top and the console.
        self.loads = LoadReporter(
            self.member,
            group_id,
            kind,
            AdminOffsets(
                settings.bootstrap or DEFAULT_BOOTSTRAP,
                load_group(group_id),
                security=settings.security,
                timeout_s=DRAIN_READ_TIMEOUT_S,
                client_id=client_id or "workgroup-loads",
            ),
            clock=clock,
            slot_for=slot_for,  # a keyspace's slices: their pool slots
        )
        self._settings = settings
        self._metrics = metrics
        metrics.watch(group_id, self.member, [kind], clock)
        #: Whether the last catalog read was empty (``None``: not read yet).
        self._was_empty: bool | None = None
        self._client_id = client_id

    async def check_lease_layout(self) -> None:
        """Refuse or migrate lease state of the legacy layout (before the member
        starts: :mod:`workgroup.runtime.legacy`)."""
        await self._read_catalog()
        offsets = AdminOffsets(
            self._settings.bootstrap or DEFAULT_BOOTSTRAP,
            self.group_id,
            security=self._settings.security,
            client_id=self._client_id or "workgroup-lease-layout",
        )
        try:
            await check_lease_layout(
                offsets,
                self.group_id,
                self._catalog.keys.get(self.kind, ()),
                migrate=self._settings.migrate_lease_layout,
            )
        finally:
            await offsets.close()

    async def start_member(self) -> None:
        """Start the member; a keyspace's reads its kept state first (its rule 1)."""
        state = self.keyspace_state
        if state is None:
            await self.member.start()
            return
        offsets = AdminOffsets(
            self._settings.bootstrap or DEFAULT_BOOTSTRAP,
            self.group_id,
            security=self._settings.security,
            client_id=self._client_id or "workgroup-keyspace-state",
        )
        try:
            kept = await state.read(offsets)
        finally:
            await offsets.close()
        await self.member.start(keyspace_state=kept)

    async def _read_catalog(self) -> Catalog:
        function = _function_name(self._source)
        try:
            result = self._source()
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            raise ResourceFunctionError(
                self.group_id, function, wlog.describe_error(exc), wlog.user_frames(exc)
            ) from exc
        if result is None:
            raise ResourceFunctionError(
                self.group_id,
                function,
                "expected a list of keys (str or int); a function without a return "
                "statement returns None",
                "",
                what="returned None",
            )
        if isinstance(result, str | bytes) or not isinstance(result, Iterable):
            raise ResourceFunctionError(
                self.group_id,
                function,
                f"expected a list of keys (str or int), got {type(result).__name__}",
                "",
                what="returned no list",
            )
        entries = list(result)
        catalog: dict[str, Sequence[CatalogEntry]] = {self.kind: entries}
        if self._standbys:
            catalog[standby_kind(self.kind)] = entries
        try:
            self._catalog = freeze_catalog(catalog)
        except ConfigError as exc:  # a duplicate, a key neither str nor int
            raise ResourceFunctionError(
                self.group_id, function, str(exc), "", what="returned a bad list"
            ) from exc
        self._say_if_empty(not entries)
        self._metrics.catalog_read(self.group_id, self.kind, len(entries))
        known = self._slots
        self._slots = {
            key: known.get(key)
            or (slot_of(self.group_id, key) if self._slot_for is None else self._slot_for(key))
            for key in self._catalog.keys[self.kind]
        }
        await self._ensure_topics(self._slots.values())
        return catalog

    def _say_if_empty(self, empty: bool) -> None:
        """One line when the catalog becomes empty (not one per poll)."""
        if empty and self._was_empty is not True and self._keyspace is None:
            log.info(
                "group.no_resources",
                group=self.group_id,
                kind=self.kind,
                why=(
                    "the resource function returned an empty list: "
                    "the group has nothing to hand out"
                ),
            )
        self._was_empty = empty

    async def _ensure_topics(self, slots: Iterable[Slot]) -> None:
        """Create the slots' topics that are not known to exist (one request)."""
        try:
            await self._topics.ensure(slot.topic for slot in slots)
        except WorkgroupError as exc:
            if self.member.state is State.FINDING_COORDINATOR:
                # No coordinator either: the member's own lines say so; the
                # topics are created at the first assignment once it is back.
                log.debug("lease.topic_deferred", group=self.group_id, error=str(exc))
                return
            # Commits to a missing topic are retried; say why they fail.
            log.warning("lease.topic_failed", group=self.group_id, error=str(exc))

    def _slot(self, resource: Resource) -> Slot | None:
        """The slot of ``resource``'s key (a standby twin shares its resource's
        slot); ``None`` if the key is not in this process's catalog."""
        return self._slots.get(resource[1])

    async def _assigned(self, resources: tuple[Resource, ...], generation: int) -> None:
        if any(self._slot(resource) is None for resource in resources):
            await self._read_catalog()  # the leader's catalog is newer than ours
        # A topic whose creation failed at the last catalog read: try again now.
        missing = [
            slot
            for slot in map(self._slot, resources)
            if slot is not None and not self._topics.known(slot.topic)
        ]
        if missing:
            await self._ensure_topics(missing)
        for index, resource in enumerate(resources):
            if index and index % START_SLICE == 0:
                await asyncio.sleep(0)  # thousands of starts: let heartbeats through
            standing_by = self.promoting.pop(resource, None)
            if standing_by is not None:  # a leader's standby takes over (rule 8)
                self.runs[resource] = standing_by
                self._record.assigned(resource)
                self._metrics.lease_ended(self.group_id, resource[0], "standby")
                log.info(
                    "worker.standby_promoted",
                    group=self.group_id,
                    kind=resource[0],
                    key=resource[1],
                    ready=standing_by.lease.ready_reported,
                )
                self._spawn(
                    self._promote_standby(resource, standing_by),
                    f"workgroup-promote-{resource[0]}/{resource[1]}",
                )
                continue
            warm = self.warming.pop(resource, None)
            if warm is not None:  # the cut-over (rule 7)
                self.runs[resource] = warm
                self._record.assigned(resource)
                self._metrics.warmup_ended(
                    self.group_id, resource[0], "cut_over", warm.lease.warmed_s
                )
                self._spawn(warm.promote(), f"workgroup-promote-{resource[0]}/{resource[1]}")
                continue
            slot = self._slot(resource)
            if slot is None:
                log.error(
                    "worker.unknown_resource",
                    group=self.group_id,
                    kind=resource[0],
                    key=resource[1],
                    why="not in this process's catalog: no checkpoint slot, not started",
                )
                continue
            kind, key = resource
            standby = is_standby_kind(kind)
            lease = Lease(
                self.group_id,
                active_kind(kind),
                key,
                slot=slot,
                store=self._store,
                attributes=self._catalog.attributes.get((active_kind(kind), key)),
                role="standby" if standby else "active",
                producers=self._producers,
                clock=self._clock,
                load_sink=functools.partial(self.member.report_load, resource),
                ready_sink=self._standby_ready_sink(resource) if standby else None,
                promotable=standby and self._promote_standbys,
                earlier_holder=self._earlier_holder,
            )
            self._record.assigned(resource)
            previous = self.stopping.pop(resource, None)
            if previous is not None:  # rule 4
                self._handed_back.add(previous)
            run = HandlerRun(
                lease,
                self._handler,
                name=self.group_id,
                restart=self._restart,
                stats=self._stats,
                on_acquired=self._record.acquired,
                after=previous,  # rule 4
                on_failing=self._failing_changed,
                on_gave_up=self._gave_up,
            )
            self.runs[resource] = run
            run.start()

    async def _promote_standby(self, resource: Resource, run: HandlerRun) -> None:
        """Rule 8: the standby run takes the token, then its twin is released."""
        try:
            await run.promote()
        finally:
            self.member.release_done(((standby_kind(resource[0]), resource[1]),))

    def _standby_ready_sink(self, twin: Resource) -> Callable[[], None]:
        """What a standby lease's ``ready()`` reports: its twin; a leader's standby
        also the resource, should it warm up for it (rule 8)."""
        reported: tuple[Resource, ...] = (twin,)
        if self._promote_standbys:
            reported = (twin, (active_kind(twin[0]), twin[1]))
        return functools.partial(self.member.ready, reported)

    async def _warming_started(self, resources: tuple[Resource, ...], generation: int) -> None:
        """Start a warming handler per resource (rule 7); a leader's standby run is
        the warm-up of its resource (rule 8)."""
        for resource in resources:
            standing_by = self.runs.get((standby_kind(resource[0]), resource[1]))
            if self._promote_standbys and standing_by is not None:
                if standing_by.lease.ready_reported:
                    self.member.ready((resource,))
                continue
            slot = self._slot(resource)
            if slot is None:
                await self._read_catalog()
                slot = self._slot(resource)
            if slot is None or resource in self.warming or resource in self.runs:
                continue
            kind, key = resource
            lease = Lease(
                self.group_id,
                kind,
                key,
                slot=slot,
                store=self._store,
                attributes=self._catalog.attributes.get(resource),
                role="warming",
                producers=self._producers,
                clock=self._clock,
                load_sink=functools.partial(self.member.report_load, resource),
                ready_sink=functools.partial(self.member.ready, (resource,)),
                earlier_holder=self._earlier_holder,
            )
            run = HandlerRun(
                lease,
                self._handler,
                name=self.group_id,
                restart=self._restart,
                stats=self._stats,
                on_acquired=self._record.acquired,
                after=self.stopping.get(resource),
                on_failing=self._failing_changed,
                on_gave_up=self._gave_up,
            )
            self.warming[resource] = run
            self._record.warming(kind, key)
            run.start()
            self._spawn(
                self._warmup_deadline(lease),
                f"workgroup-warmup-deadline-{kind}/{key}",
            )

    async def _warmup_deadline(self, lease: Lease) -> None:
        """Rule 7: a warm-up not ready in time falls back to a plain move."""
        await self._clock.sleep(self._warmup_timeout_s)
        if lease.warming and not lease.ready_reported:
            lease.fall_back(f"not ready after {self._warmup_timeout_s:g} s (warmup_timeout_ms)")

    async def _warming_ended(self, resources: tuple[Resource, ...], generation: int) -> None:
        """Warm-ups called off (rule 7): stop their handlers; nothing was handed over."""
        runs = [(r, self.warming.pop(r)) for r in resources if r in self.warming]
        await asyncio.gather(*(run.stop(EndReason.WARMUP_ENDED, self._grace_s) for _, run in runs))
        for resource, run in runs:
            self._record.warmup_called_off(resource, run.lease.warmed_s)

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    def _failing_changed(self, run: HandlerRun) -> None:
        """Rule 5: a handler became failing, or recovered."""
        resource = (self._resource_kind(run.lease), run.lease.key)
        if run.failing:
            self._metrics.handler_failing(
                self.group_id, resource, run.failures_in_row, run.last_error or ""
            )
        else:
            self._metrics.handler_recovered(self.group_id, resource)

    def _gave_up(self, run: HandlerRun) -> None:
        """Rule 5: ``on_failure`` is ``"release"`` or ``"stop"``."""
        resource = (self._resource_kind(run.lease), run.lease.key)
        error = run.last_error or "unknown error"
        if self._restart.on_failure == "stop":
            self._metrics.handler_recovered(self.group_id, resource)
            if self._on_fatal is not None:
                self._on_fatal(
                    HandlerFailedError(
                        f"the handler of {self.group_id} {resource[0]}/{resource[1]} failed "
                        f"{run.failures_in_row} times in a row ({error}); "
                        "on_failure='stop' stops the daemon"
                    )
                )
            return
        if self.runs.get(resource) is not run:
            return  # already revoked or lost
        del self.runs[resource]
        log.warning(
            "worker.released",
            group=self.group_id,
            kind=resource[0],
            key=resource[1],
            failures=run.failures_in_row,
            error=error,
            refused_for_s=RELEASE_REFUSE_MS // 1000,
            why="on_failure='release': the resource goes to another process, "
            "and this one refuses it for a while",
        )
        task = asyncio.create_task(
            self._release_failed(resource, run),
            name=f"workgroup-release-failed-{resource[0]}/{resource[1]}",
        )
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _release_failed(self, resource: Resource, run: HandlerRun) -> None:
        try:
            await run.stop(EndReason.RELEASED, 0.0)
        finally:
            self._metrics.handler_recovered(self.group_id, resource)
            self._record.ended(resource, run, EndReason.REVOKED)
            self.member.refuse((resource,), RELEASE_REFUSE_MS, "its handler kept failing")

    async def _revoked(self, resources: tuple[Resource, ...], generation: int) -> None:
        """Stop each revoked handler in the background; release each resource
        once its own handler has finished (rule 1)."""
        idle: list[Resource] = []
        owned_now = self.member.owned_now if self._promote_standbys else frozenset()
        for resource in resources:
            run = self.runs.pop(resource, None)
            if run is None:
                idle.append(resource)  # nothing was started for it
                continue
            taking_over = (active_kind(resource[0]), resource[1])
            if is_standby_kind(resource[0]) and taking_over in owned_now:
                # Rule 8: its on_assigned follows; the twin is released once the
                # token is taken (a JoinGroup sent first would hold the commit up).
                self.promoting[taking_over] = run
                continue
            self.stopping[resource] = run
            task = asyncio.create_task(
                self._stop_and_release(resource, run),
                name=f"workgroup-release-{resource[0]}/{resource[1]}",
            )
            self._releases.add(task)
            task.add_done_callback(self._releases.discard)
        if idle:
            self.member.release_done(idle)

    async def _stop_and_release(self, resource: Resource, run: HandlerRun) -> None:
        try:
            await run.stop(EndReason.REVOKED, self._grace_s)
        except Exception as exc:  # closing the lease failed: the handler still stops
            log.error(
                "worker.stop_failed",
                group=self.group_id,
                key=resource[1],
                error=f"{type(exc).__name__}: {exc}",
            )
        await run.wait_finished()  # a thread that outlived its grace, a child being reaped
        if run in self._handed_back:  # rule 4: the resource is owned again
            self._handed_back.discard(run)
            self._record.ended(resource, run, EndReason.REVOKED, handed_back=True)
            return
        if self.stopping.get(resource) is not run:
            return  # lost meanwhile (rule 3)
        del self.stopping[resource]
        self._record.ended(resource, run, EndReason.REVOKED)
        self.member.release_done((resource,))

    async def _lost(self, resources: tuple[Resource, ...], generation: int) -> None:
        for resource in resources:
            stopping = self.stopping.pop(resource, None)
            if stopping is not None:  # rule 3
                stopping.cut_short()
                self._record.ended(resource, stopping, EndReason.LOST)
        await self._stop(resources, EndReason.LOST, 0.0)

    async def _stop(
        self, resources: tuple[Resource, ...], event: EndReason, grace_s: float
    ) -> None:
        runs = [(r, self.runs.pop(r)) for r in resources if r in self.runs]
        await asyncio.gather(*(run.stop(event, grace_s) for _, run in runs))
        for resource, run in runs:
            self._record.ended(resource, run, event)

    def _resource_kind(self, lease: Lease) -> str:
        return standby_kind(lease.kind) if lease.role == "standby" else lease.kind

    async def stop_all(self, why: EndReason) -> None:
        warming = [*self.warming.values(), *self.promoting.values()]
        self.warming.clear()
        self.promoting.clear()
        await asyncio.gather(*(run.stop(why, 0.0) for run in warming))
        await self._stop(tuple(self.runs), why, self._grace_s)
        # Revoked handlers the member stopped waiting for (rule 2): cancel what can be.
        for run in self.stopping.values():
            run.cut_short()
        if self._releases:
            await asyncio.wait(self._releases, timeout=1.0)
        for task in list(self._releases):  # only threads still run: abandoned
            task.cancel()
        await asyncio.gather(*self._releases, return_exceptions=True)

    def running_threads(self) -> list[Resource]:
        """Resources whose handler thread still runs (it cannot be stopped)."""
        runs = [
            *self.runs.items(),
            *self.stopping.items(),
            *self.warming.items(),
            *self.promoting.items(),
        ]
        return [resource for resource, run in runs if run.thread_running]


class AppRunner:
    """Runs every group of an app until asked to stop."""

    def __init__(
        self, app: DeclaredApp, settings: Settings, *, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        app.check(settings)
        self.app = app
        self._clock = clock
        self.settings = settings
        #: A start-up function's thread still ran when the app stopped (the
        #: daemon ends the process rather than wait for it: daemon.py rule 2).
        self.startup_abandoned = False
        self.metrics = RuntimeMetrics(per_resource=settings.resource_metrics)
        for collector in app.collectors:
            self.metrics.registry.register(collector)
        #: Serving /metrics and /healthz while running (``metrics_port``).
        self.metrics_server: MetricsServer | None = None
        #: Handler counters per group.
        self.stats: dict[str, HandlerStats] = {}
        #: The error that stops the app (``on_failure="stop"``).
        self._failed: WorkgroupError | None = None
        self._failed_event = asyncio.Event()
        #: This runner's name in client ids, logs, the event log and metrics.
        self.identity = identity = process_identity(settings.instance_id)
        #: The Kafka client id of every group member and admin client of the runner.
        self.client_id = client_id = client_id_of(identity, settings.instance_id)
        self.metrics.identify(identity, app.name, settings.instance_id)
        self.events = (
            OwnershipLog(settings.event_log, identity, clock=clock) if settings.event_log else None
        )
        grace_s = settings.grace_ms / 1000
        security = settings.security
        self.producers = ProducerFactory(
            settings.bootstrap or DEFAULT_BOOTSTRAP, security=security, client_id=client_id
        )
        self.topics = LeaseTopics(
            settings.bootstrap or DEFAULT_BOOTSTRAP, client_id=client_id, security=security
        )
        self.groups = [
            GroupRunner(
                group_id=app.group_id(spec.kind),
                kind=spec.kind,
                handler=spec.handler,
                assignors=spec.assignors,
                grace_s=(spec.grace_ms if spec.grace_ms is not None else settings.grace_ms) / 1000,
                restart=failure_policy(spec.restart, spec.on_failure, spec.max_failures, settings),
                settings=settings,
                source=app.sources[spec.kind],
                events=self.events,
                stats=self._stats_for(app.group_id(spec.kind)),
                topics=self.topics,
                producers=self.producers,
                metrics=self.metrics,
                standbys=spec.standbys,
                reassign_delay_ms=spec.reassign_delay_ms,
                warm_up=spec.warm_up,
                warmup_timeout_s=spec.warmup_timeout_ms / 1000,
                client_id=client_id,
                on_fatal=self._fatal,
                clock=clock,
            )
            for spec in app.workers.values()
        ] + [
            GroupRunner(
                group_id=app.group_id(spec.name),
                kind=LEADER_KIND,
                handler=spec.handler,
                assignors=("cooperative-sticky",),
                grace_s=spec.grace_ms / 1000 if spec.grace_ms is not None else grace_s,
                restart=failure_policy(
                    RestartPolicy(), spec.on_failure, spec.max_failures, settings
                ),
                settings=settings,
                source=_one(spec.name),
                events=self.events,
                stats=self._stats_for(app.group_id(spec.name)),
                topics=self.topics,
                producers=self.producers,
                metrics=self.metrics,
                standbys=spec.standbys,
                # A standby is the warm-up of a planned handover (member/warmup.py rule 6).
                warm_up=spec.standbys > 0,
                promote_standbys=True,
                client_id=client_id,
                on_fatal=self._fatal,
                clock=clock,
            )
            for spec in app.leaders.values()
        ]
        for spec in app.keyspaces.values():
            keyspace = KeyspaceGroup(spec, app.group_id(spec.name))
            group = GroupRunner(
                group_id=app.group_id(spec.name),
                kind=spec.name,
                handler=keyspace.handle,
                assignors=("cooperative-sticky",),
                grace_s=(spec.grace_ms if spec.grace_ms is not None else settings.grace_ms) / 1000,
                restart=failure_policy(spec.restart, spec.on_failure, spec.max_failures, settings),
                settings=settings,
                source=keyspace.slice_ids,
                events=self.events,
                stats=self._stats_for(app.group_id(spec.name)),
                topics=self.topics,
                producers=self.producers,
                metrics=self.metrics,
                client_id=client_id,
                on_fatal=self._fatal,
                clock=clock,
                warm_up=spec.warm_up,
                warmup_timeout_s=spec.warmup_timeout_ms / 1000,
                standbys=spec.standbys,
                keyspace=keyspace.config,
                slot_for=keyspace.slot,
                earlier_holder=keyspace.earlier_holder,
            )
            keyspace.member = group.member
            keyspace.state = group.keyspace_state
            self.groups.append(group)

    def _fatal(self, error: WorkgroupError) -> None:
        """Stop the app with ``error`` (a handler under ``on_failure="stop"``)."""
        if self._failed is None:
            self._failed = error
            self._failed_event.set()

    def _stats_for(self, group_id: str) -> HandlerStats:
        stats = HandlerStats(
            on_failure=lambda: self.metrics.handler_failed(group_id),
            on_restart=lambda: self.metrics.handler_restarted(group_id),
        )
        self.stats[group_id] = stats
        return stats

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set; raise the first member's fatal error (or the
        watch's: :mod:`workgroup.runtime.watch`)."""
        # The first runner names the process in every line (signal handlers'
        # too); a context binding names each runner's own tasks.
        named = wlog.process_name() is None
        if named:
            wlog.set_process(self.identity)
        try:
            with structlog.contextvars.bound_contextvars(process=self.identity):
                await self._run(stop)
        finally:
            release_identity(self.identity)
            if named:
                wlog.set_process(None)

    async def _run(self, stop: asyncio.Event) -> None:
        log.info(
            "app.starting",
            app=self.app.name,
            groups=[g.group_id for g in self.groups],
            bootstrap=self.settings.bootstrap or DEFAULT_BOOTSTRAP,
            instance_id=self.settings.instance_id,
        )
        if self.settings.bootstrap is None:
            await asyncio.to_thread(ensure_local_coordinator)
        else:
            await wait_for_bootstrap(
                self.settings.bootstrap, self.settings.connect_timeout_ms, clock=self._clock
            )
        server = self.metrics_server = None
        if self.settings.metrics_port is not None:
            server = self.metrics_server = MetricsServer(
                self.metrics, self.settings.metrics_host, self.settings.metrics_port
            )
            try:
                await server.start()
            except OSError as exc:
                raise ConfigError(
                    f"cannot serve metrics on {self.settings.metrics_host}:"
                    f"{self.settings.metrics_port}: {exc.strerror or exc}"
                ) from exc
        if self.settings.instance_id is not None and self.groups:
            await report_replaced(
                self.settings.bootstrap or DEFAULT_BOOTSTRAP,
                self.groups[0].group_id,
                self.settings.instance_id,
                security=self.settings.security,
            )
        started: list[GroupRunner] = []
        following: list[asyncio.Task[None]] = []
        loop_watch = LoopWatch()
        loop_watch.start()
        self.metrics.watch_loop(loop_watch)
        try:
            ready = await self._start_up(stop)  # plugins get ready before taking anything
            for group in self.groups if ready else ():
                await group.check_lease_layout()
                await group.drains.before_start()  # rule 9
                await group.start_member()
                started.append(group)
                following.append(asyncio.create_task(group.drains.follow()))
                following.append(asyncio.create_task(group.loads.follow()))
            stopping = asyncio.create_task(stop.wait())
            handler_failed = asyncio.create_task(self._failed_event.wait())
            failures = [asyncio.create_task(g.member.wait_closed()) for g in started]
            watching = asyncio.create_task(self._watch(started))
            waited = (stopping, handler_failed, watching, *failures)
            try:
                await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in waited:
                    task.cancel()
                await asyncio.gather(*waited, return_exceptions=True)
            failed = next((g.member.error for g in started if g.member.error), None)
            if isinstance(failed, FencedInstanceError) and self.settings.instance_id is not None:
                fenced = next(g for g in started if g.member.error is failed)
                raise await taken_over(
                    failed,
                    self.settings.bootstrap or DEFAULT_BOOTSTRAP,
                    fenced.group_id,
                    self.settings.instance_id,
                    security=self.settings.security,
                ) from failed
            if failed is not None:
                raise failed
            if self._failed is not None:
                raise self._failed
            if watching.done() and not watching.cancelled():
                raise watching.result()
            await self._drain_before_stop(started)
        finally:
            for task in following:
                task.cancel()
            await asyncio.gather(*following, return_exceptions=True)
            await asyncio.gather(
                *(c.close() for g in self.groups for c in (g.drains, g.loads)),
                return_exceptions=True,
            )
            loop_watch.stop()
            log.info("app.stopping", app=self.app.name)
            leave = True if self.settings.leave_on_stop else None
            await asyncio.gather(
                *(g.member.close(leave=leave) for g in started), return_exceptions=True
            )
            # A member that failed never revoked: stop what still runs.
            await asyncio.gather(*(g.stop_all(EndReason.LOST) for g in started))
            if self.events is not None:
                self.events.close()
            if server is not None:
                await server.close()
            await self._clean_up()
            log.info("app.stopped", app=self.app.name)

    async def _drain_before_stop(self, groups: Sequence[GroupRunner]) -> None:
        """Rule 8: drain the groups that drain before stopping, and wait."""
        draining = [
            g
            for g in groups
            if self.settings.drain_on_stop or (self.settings.leave_on_stop and g.warm_up)
        ]
        if not draining:
            return
        timeout_s = self.settings.drain_timeout_ms / 1000
        log.info(
            "app.draining",
            app=self.app.name,
            groups=[g.group_id for g in draining],
            owned=sum(len(g.member.assignment) for g in draining),
            timeout_s=timeout_s,
        )
        started_at = self._clock.monotonic()
        for group in draining:
            group.drains.drain_to_stop()
        done = await asyncio.gather(*(drain_before_stop(g.member, timeout_s) for g in draining))
        left = {
            g.group_id: len(g.member.assignment)
            for g, ok in zip(draining, done, strict=True)
            if not ok
        }
        if left:
            log.warning(
                "app.drain_timed_out",
                app=self.app.name,
                timeout_s=timeout_s,
                still_owned=left,
                why="stopping anyway: what is still owned is revoked and moves without warm-up",
            )
        else:
            log.info(
                "app.drained",
                app=self.app.name,
                duration_s=round(self._clock.monotonic() - started_at, 3),
            )

    async def _watch(self, groups: Sequence[GroupRunner]) -> WorkgroupError:
        def looking() -> list[str]:
            return [g.group_id for g in groups if g.member.state is State.FINDING_COORDINATOR]

        return await watch(
            looking,
            self.settings.bootstrap or DEFAULT_BOOTSTRAP,
            self.settings.unreachable_timeout_ms,
            clock=self._clock,
        )

    async def _start_up(self, stop: asyncio.Event) -> bool:
        """Run the app's start-up functions before joining (False: stopped meanwhile;
        a thread still starting runs on: the clean-ups stop what it made, and the
        daemon ends the process rather than wait for it)."""
        for function in self.app.startups:
            if inspect.iscoroutinefunction(function):
                starting: asyncio.Future[Any] = asyncio.ensure_future(function())
            else:
                starting = _in_daemon_thread(function)
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait((starting, stopping), return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not starting.done():
                self.startup_abandoned = not inspect.iscoroutinefunction(function)
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
                return False
            starting.result()
        return True

    async def _clean_up(self) -> None:
        for cleanup in self.app.cleanups:
            try:
                result = await asyncio.to_thread(cleanup)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:  # one failing clean-up must not skip the others
                log.error(
                    "app.cleanup_failed", app=self.app.name, error=f"{type(exc).__name__}: {exc}"
                )


def _function_name(function: object) -> str:
    """``billing.list_shards`` (module and qualified name), for error messages."""
    if not hasattr(function, "__qualname__"):  # a callable object: its class
        function = type(function)
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or repr(function)
    return f"{module}.{name}" if module else name


def _one(name: str) -> ResourceFunction:
    """A leader's resources: its one key."""

    def source() -> Sequence[CatalogEntry]:
        return [name]

    return source


def _in_daemon_thread(function: Callable[[], Any]) -> asyncio.Future[Any]:
    """``function()`` in a thread of its own that the process does not wait for at
    exit: a start-up stuck on an engine that never answers (a Spark Connect
    server that is gone) must not keep a stopped daemon alive, as a thread of
    asyncio's default executor would (it is joined when the loop closes)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            outcome = functools.partial(future.set_result, function())
        except BaseException as exc:  # handed to the awaiting task, as to_thread would
            outcome = functools.partial(future.set_exception, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, outcome)

    # The caller's context goes along, as with asyncio.to_thread (the runner's
    # log binding names the process in the start-up's events).
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(run,), name="workgroup-startup", daemon=True).start()
    return future


__all__ = ["DEFAULT_BOOTSTRAP", "AppRunner", "GroupRunner"]
