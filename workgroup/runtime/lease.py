"""A lease: this process's hold on one resource, with a fencing token and checkpoints.

Rules:

1. A lease is *held* from the moment its token was committed until it is
   revoked (a rebalance moves the resource), lost (the session expired, the
   member failed) or fenced (the coordinator refused a commit because the
   member or its generation is no longer current).  It never becomes held again:
   a resource that comes back gets a new lease with a new token.  Its state is
   a :class:`~workgroup.runtime.lease_states.LeaseState`, changed only through
   that module's table of legal moves; every property reads the state.
2. The token is the lease slot's committed offset plus one (see
   :mod:`workgroup.runtime.slots`), committed under the member's generation and
   member id before the handler starts: every change of hands increases it.
   The slot belongs to the key alone; before committing, ``acquire`` checks that
   the slot's header names this key (or nothing yet) and otherwise refuses it
   (``lease.slot_mismatch``, :class:`SlotMismatchError`): the handler does not
   start and no checkpoint is read.  ``checkpoint`` checks it again.
3. ``commit`` checks the lease locally first, then
   lets the coordinator check the member, and does what the answer's
   ``LeaseAction`` in :data:`workgroup.errors.ERROR_MEANINGS` says:
   UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID and GROUP_ID_NOT_FOUND fence the lease
   for good; ILLEGAL_GENERATION and REBALANCE_IN_PROGRESS mean a rebalance is
   under way, and the commit is tried again (with back-off) while the lease is
   held, up to ``commit_timeout_s`` (as is any retriable answer).
4. A *revoked* lease may still commit during its grace period, so that the
   step in flight can record where it ended (as a Kafka consumer commits in
   ``onPartitionsRevoked``): the resource moves only once its handler has
   finished (returned, cancelled at the end of the grace period, its thread
   returned, its child process reaped; see the runner's rules), and the
   coordinator still checks the member.  A lost or fenced lease never sends.
   Every commit names the lease's resource; the member's state machine
   chooses the generation it goes under (its rule 11: the generation a
   revoked resource was given up in), so the coordinator refuses a revoked
   lease's commits once the group moved on.
5. Time (the grace period, the commit timeout, the back-off) is read from the
   lease's :class:`~workgroup.clock.Clock`.
6. ``report_load(value)`` records the resource's current load (any finite,
   non-negative number: records/s, bytes/s) for load balancing; the member
   smooths it and publishes it when it next joins (:mod:`workgroup.member.load_balancing`).
   It never sends anything by itself, and a bad value is a ``ConfigError``.
7. Warm-ups (planned moves, ``warm_up=True``): a lease handed over with a
   warm-up starts with ``role == "warming"`` while another member still holds
   the resource.  It has no token: it cannot commit, fence or produce.  Its
   handler prepares, then awaits :meth:`ready`, which tells the group and
   returns once the cut-over made the lease active (token taken: ``True``) or
   the warm-up was called off (``False``: return).  A standby holder's
   :meth:`ready` says it is ready to take over (the leader prefers it) and
   returns at once; an active holder's does nothing and says so, once.
8. A leader's standby lease (``@app.leader(name, standbys=N)``, ``promotable``)
   is the next leader warming up: its :meth:`ready` tells the group, then
   returns once the lease was promoted to the active one (its token taken:
   ``True``) or ended (``False``); :meth:`promote` makes it active as a
   warming lease's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential

from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.errors import (
    LEASE_FENCING_CODES,
    LEASE_REBALANCING_CODES,
    CoordinatorError,
    ErrorCode,
    WorkgroupError,
)
from workgroup.log import get_logger
from workgroup.member.load_balancing import check_load
from workgroup.runtime.errors import CheckpointError, LeaseLostError, SlotMismatchError
from workgroup.runtime.lease_states import (
    HELD_STATES,
    LIVE_STATES,
    LOST_STATES,
    EndReason,
    LeaseState,
    check_transition,
)
from workgroup.runtime.slots import (
    MAX_METADATA_BYTES,
    Slot,
    check_value,
    checkpoint_limit,
    read_slot,
    slot_header,
)
from workgroup.security import Security
from workgroup.types import Key, Resource

if TYPE_CHECKING:
    from workgroup.fence import Fence

log = get_logger(__name__)

Role = Literal["active", "standby", "warming"]
#: The state a lease of each role starts in.
_FIRST_STATES: dict[str, LeaseState] = {
    "active": LeaseState.ACQUIRING,
    "standby": LeaseState.STANDBY,
    "warming": LeaseState.WARMING,
}
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Committed:
    """A slot's committed offset (-1: never) and metadata."""

    offset: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class FenceOrigin:
    """The member a lease commits as: what :meth:`Lease.fence` copies."""

    bootstrap: tuple[str, ...]
    security: Security
    group_id: str
    member_id: str
    instance_id: str | None
    generation: int


#: Makes a started transactional producer for a transactional id.
ProducerFactory = Callable[[str], Awaitable[Any]]


class SlotStore(Protocol):
    """Commits and reads lease slots through the group's coordinator."""

    async def commit(
        self, slot: Slot, offset: int, metadata: str | None, *, resource: Resource | None = None
    ) -> ErrorCode: ...

    async def fetch(self, slot: Slot) -> Committed: ...


class Lease:
    """This process's hold on one resource (see the module's rules).

    Attributes:
        kind, key: The resource.
        attributes: The resource's attributes from the catalog.
        role: ``"active"`` (the holder that works) or ``"standby"``.
        token: Fencing token: strictly increases every time the resource
            changes hands.  Pass it to downstream systems that can reject stale
            writers.
    """

    def __init__(
        self,
        group_id: str,
        kind: str,
        key: Key,
        *,
        slot: Slot,
        store: SlotStore,
        attributes: Mapping[str, str] | None = None,
        role: Role = "active",
        commit_timeout_s: float = 30.0,
        producers: ProducerFactory | None = None,
        clock: Clock = SYSTEM_CLOCK,
        load_sink: Callable[[float], None] | None = None,
        ready_sink: Callable[[], None] | None = None,
        promotable: bool = False,
        earlier_holder: Callable[[Key], bool] | None = None,
    ) -> None:
        self.group_id = group_id
        self.kind = kind
        self.key = key
        self.attributes: Mapping[str, str] = dict(attributes or {})
        self._role: Role = role
        self.token = 0
        #: The ``Slot(topic, partition)`` this lease uses (a function of the key).
        self.slot = slot
        self._header = slot_header(key)
        #: A pool slot's test of the key its header names: held it before this
        #: lease's key (``None``: the slot is this key's alone).
        self._earlier_holder = earlier_holder
        self._store = store
        self._commit_timeout_s = commit_timeout_s
        self._clock = clock
        self._state = _FIRST_STATES[role]
        self._ended = asyncio.Event()
        #: Why the lease ended, and the detail its description names.
        self._end: tuple[EndReason, str | None] | None = None
        self._stop_by: float | None = None
        self._loop = asyncio.get_running_loop()
        self._producers = producers
        self._producer: Any = None
        self._last_commit_s: float | None = None
        self._load_sink = load_sink
        self._ready_sink = ready_sink
        #: A leader's standby, promoted when its process leads (rule 8).
        self.promotable = promotable and role == "standby"
        #: ready() was reported (once per lease), or said to do nothing (once).
        self._ready_reported = False
        self._ready_ignored_said = False
        #: Set when a warming lease becomes active or ends (what ready() awaits).
        self._settled = asyncio.Event()
        #: When the warm-up began and ended (the lease's clock), for its span.
        self.warming_since: float | None = self._clock.monotonic() if role == "warming" else None
        self.warmed_s: float | None = None

    def __repr__(self) -> str:
        state = "held" if self.held else f"ended ({self.end_reason})" if self.revoked else "new"
        return f"<Lease {self.kind}/{self.key} token={self.token} {self.role} {state}>"

    # --- state ----------------------------------------------------------------

    @property
    def state(self) -> LeaseState:
        """Where the lease stands (:mod:`workgroup.runtime.lease_states`)."""
        return self._state

    @property
    def clock(self) -> Clock:
        """The clock its grace period and commit timeout are measured on (rule 5)."""
        return self._clock

    @property
    def role(self) -> Role:
        """``"active"`` (the holder that works), ``"standby"``, or ``"warming"``
        (a planned move's next holder preparing: rule 7; it becomes ``"active"``
        at the cut-over)."""
        return self._role

    @property
    def warming(self) -> bool:
        """Warming up, not active yet (rule 7)."""
        return self._state is LeaseState.WARMING

    async def ready(self) -> bool:
        """Say this holder is ready (rule 7).  A warming lease returns once it is
        active (``True``) or its warm-up was called off (``False``); a standby
        or active one returns ``True`` at once."""
        if self._role == "active" and self._state is not LeaseState.WARMING:
            if not self._ready_ignored_said:
                self._ready_ignored_said = True
                log.info(
                    "lease.ready_ignored",
                    group=self.group_id,
                    kind=self.kind,
                    key=self.key,
                    why="ready() is for warming and standby holders: this lease is active already",
                )
            return self.held
        self._report_ready("ready")
        if self._role == "standby" and not self.promotable:
            return self.held
        await self._settled.wait()
        return self.held

    def ready_sync(self, timeout_s: float | None = None) -> bool:
        """:meth:`ready` from a worker thread (a plain-function handler)."""
        return self._call_from_thread(self.ready, timeout_s)

    def fall_back(self, why: str) -> None:
        """The warm-up failed or timed out: report it ready all the same, so that
        the move goes on as a plain one (logged once per move)."""
        if self._state is not LeaseState.WARMING or self._ready_reported:
            return
        log.warning(
            "lease.warmup_fallback",
            group=self.group_id,
            kind=self.kind,
            key=self.key,
            why=why,
            then="the move goes on as a plain one",
        )
        self._report_ready(why)

    def _report_ready(self, why: str) -> None:
        if self._ready_reported or not (
            self._state is LeaseState.WARMING or self._state is LeaseState.STANDBY
        ):
            return
        self._ready_reported = True
        if self._state is LeaseState.WARMING and self.warming_since is not None:
            self.warmed_s = self._clock.monotonic() - self.warming_since
        log.info(
            "lease.ready",
            group=self.group_id,
            kind=self.kind,
            key=self.key,
            role=self._role,
            why=why,
            warmed_s=None if self.warmed_s is None else round(self.warmed_s, 3),
        )
        if self._ready_sink is not None:
            self._ready_sink()

    @property
    def ready_reported(self) -> bool:
        """:meth:`ready` (or a fall-back) told the group."""
        return self._ready_reported

    def promote(self) -> None:
        """The cut-over: a warming lease (or a leader's standby: rule 8) becomes
        an active one taking its token (the runner calls :meth:`acquire` next)."""
        self._state = check_transition(self._state, LeaseState.ACQUIRING)
        self._role = "active"

    @property
    def held(self) -> bool:
        """Taken and not ended (a standby lease is held from its start, tokenless)."""
        return self._state in HELD_STATES

    @property
    def revoked(self) -> bool:
        """True once the lease ended (revoked, lost or fenced): finish the step, return."""
        return self._state not in LIVE_STATES

    @property
    def end_reason(self) -> str | None:
        """Why the lease ended: ``"revoked"`` (it moves: finish the step),
        ``"lost"`` (the session is gone: stop at once), ``"fenced ..."``, or ``None``."""
        return None if self._end is None else self._end[0].describe(self._end[1])

    @property
    def lost(self) -> bool:
        """The lease ended without a hand-over (lost or fenced): stop at once."""
        return self._state in LOST_STATES

    @property
    def last_commit_s(self) -> float | None:
        """When (on the lease's clock, in seconds) this holder last committed: its token or a
        checkpoint (``None``: not yet)."""
        return self._last_commit_s

    async def wait_revoked(self) -> None:
        """Return once the lease ended."""
        await self._ended.wait()

    @property
    def can_commit(self) -> bool:
        """Held, or revoked and still within its grace period (rule 4)."""
        if self.held:
            return True
        return self._in_grace()

    def assert_can_commit(self) -> None:
        """Raise :class:`LeaseLostError` unless :attr:`can_commit`."""
        if not self.can_commit:
            raise self._commit_refused()

    def assert_held(self) -> None:
        """Raise :class:`LeaseLostError` if the lease ended."""
        if not self.held:
            raise self._not_held()

    def _commit_refused(self) -> LeaseLostError:
        """Why a lease that cannot commit (rule 4) refuses to."""
        if self._state is LeaseState.REVOKED and self.token > 0:
            return LeaseLostError(
                f"lease {self.kind}/{self.key} (token {self.token}) was revoked and its "
                "grace period is over"
            )
        return self._not_held()

    def _not_held(self) -> LeaseLostError:
        return LeaseLostError(
            f"lease {self.kind}/{self.key} (token {self.token}) is no longer held: "
            f"{self.end_reason or 'not acquired yet'}"
        )

    @property
    def grace_left_s(self) -> float | None:
        """Once ended: seconds left before the handler is cancelled (``None`` before)."""
        if self._stop_by is None:
            return None
        return max(self._stop_by - self._clock.monotonic(), 0.0)

    def end(
        self,
        why: EndReason,
        grace_s: float = 0.0,
        *,
        detail: str | None = None,
    ) -> None:
        """Mark the lease ended (the runtime calls this; handlers read it), with
        ``grace_s`` for the handler to finish its step (rule 4).  ``detail``
        completes :attr:`end_reason` (the refusal's code, the error).  A lease
        ends once: later calls change nothing."""
        if self._state not in LIVE_STATES:
            return
        self._state = check_transition(self._state, why.state)
        self._end = (why, detail)
        self._stop_by = self._clock.monotonic() + max(grace_s, 0.0)
        self._ended.set()
        self._settled.set()

    # --- token ----------------------------------------------------------------

    async def acquire(self) -> int:
        """Take the next token (committed offset + 1) under the member's generation."""
        if checkpoint_limit(self.key) < 0:
            raise CheckpointError(
                f"key {self.key!r} is too long for its lease slot: the header naming it "
                f"is over {MAX_METADATA_BYTES} bytes (Kafka's offset.metadata.max.bytes)"
            )
        async for attempt in self._retrying():
            with attempt:
                if self.revoked:
                    self.assert_held()
                committed = await self._store.fetch(self.slot)
                checkpoint = self._read(committed.metadata)
                token = max(committed.offset, 0) + 1
                await self._commit_checked(token, self._header + (checkpoint or ""))
                self.token = token
                if self._state is LeaseState.ACQUIRING:  # not ended meanwhile
                    self._state = check_transition(self._state, LeaseState.ACTIVE)
                    self._settled.set()
        log.info(
            "lease.acquired", group=self.group_id, kind=self.kind, key=self.key, token=self.token
        )
        return self.token

    # --- checkpoints ------------------------------------------------------------

    async def commit(self, value: str) -> None:
        """Store ``value`` as the resource's checkpoint, fenced by this lease.

        Raises :class:`LeaseLostError` if the lease ended (also while the commit
        was under way, whatever the transport answered: that error is its
        ``__cause__``) or the coordinator fenced it,
        :class:`~workgroup.runtime.errors.CheckpointError` for a value
        that cannot be stored (nothing sent).
        """
        check_value(value, self.key)
        if self.role != "active":
            raise WorkgroupError(
                f"lease {self.kind}/{self.key} is a {self.role} holder: only the active holder "
                "commits" + (" (await lease.ready() first)" if self.role == "warming" else "")
            )
        self.assert_can_commit()
        try:
            async for attempt in self._retrying(until_grace_ends=True):
                with attempt:
                    self.assert_can_commit()
                    await self._commit_checked(self.token, self._header + value)
        except LeaseLostError:
            raise
        except WorkgroupError as exc:
            # The lease ended while the commit was under way: whatever the
            # transport said, the handler's answer is that it lost the lease.
            if self.can_commit:
                raise
            raise self._commit_refused() from exc

    async def checkpoint(self) -> str | None:
        """The last committed checkpoint of the resource, whoever committed it
        (:class:`SlotMismatchError` if the slot names another key)."""
        committed = await self._store.fetch(self.slot)
        return self._read(committed.metadata)

    def commit_sync(self, value: str, timeout_s: float | None = None) -> None:
        """:meth:`commit` from a worker thread (a plain-function handler)."""
        self._call_from_thread(lambda: self.commit(value), timeout_s)

    def checkpoint_sync(self, timeout_s: float | None = None) -> str | None:
        """:meth:`checkpoint` from a worker thread (a plain-function handler)."""
        return self._call_from_thread(self.checkpoint, timeout_s)

    # --- portable fence ------------------------------------------------------------

    def fence(self, *, include_secrets: bool = False, ttl_s: float | None = None) -> Fence:
        """A picklable :class:`~workgroup.fence.Fence` of this lease, for writers in
        other processes (see :mod:`workgroup.fence`).

        ``include_secrets``: put the SASL password in it (otherwise the process
        that uses it reads ``$WORKGROUP_SASL_PASSWORD`` or
        ``$WORKGROUP_SASL_PASSWORD_FILE``).  ``ttl_s``: the fence refuses
        itself that many seconds from now on the lease's clock's wall time (rule 5
        of :mod:`workgroup.fence`).
        :class:`LeaseLostError` unless the lease is held.
        """
        from workgroup.fence import make_fence

        if self.role != "active":
            raise WorkgroupError(
                f"lease {self.kind}/{self.key} is a {self.role} holder: only the active holder "
                "has a fence"
            )
        self.assert_held()
        origin = getattr(self._store, "fence_origin", None)
        if origin is None:
            raise WorkgroupError(
                f"lease {self.kind}/{self.key}: its slot store cannot make portable fences"
            )
        member: FenceOrigin = origin()
        if not member.member_id or member.generation < 0:
            raise LeaseLostError(
                f"lease {self.kind}/{self.key} (token {self.token}): its member is not in "
                "the group right now"
            )
        return make_fence(
            bootstrap=member.bootstrap,
            security=member.security,
            group_id=member.group_id,
            member_id=member.member_id,
            instance_id=member.instance_id,
            generation=member.generation,
            topic=self.slot.topic,
            partition=self.slot.partition,
            kind=self.kind,
            key=self.key,
            token=self.token,
            include_secrets=include_secrets,
            ttl_s=ttl_s,
            clock=self._clock,
        )

    # --- load ---------------------------------------------------------------------

    def report_load(self, value: float) -> None:
        """Report the resource's current load (rule 6): any finite number >= 0 in
        the unit the app chooses (records/s, bytes/s).  Call it as often as
        convenient; the leader balances on the smoothed value.  Safe from
        threads; :class:`~workgroup.errors.ConfigError` for a bad value."""
        load = check_load(value)
        if self._load_sink is not None:
            self._load_sink(load)

    # --- transactional producer --------------------------------------------------

    @property
    def transactional_id(self) -> str:
        """The transactional id of :meth:`producer`: one per group, kind and key."""
        return f"workgroup.{self.group_id}.{self.kind}.{self.key}"

    async def producer(self) -> Any:
        """An aiokafka transactional producer for this resource, started.

        Its transactional id derives from group, kind and key, so the next owner's
        producer fences this one at the broker (InitProducerId bumps the epoch):
        a zombie's transaction fails with ``ProducerFenced``.  One per lease,
        closed when the lease ends.  Needs a Kafka cluster (the embedded
        coordinator has no transactions: :class:`WorkgroupError`).
        """
        if self.role != "active":
            raise WorkgroupError(
                f"a {self.role} lease has no producer: only the active holder writes"
            )
        self.assert_held()
        if self._producer is None:
            if self._producers is None:
                raise WorkgroupError("this lease was made without a producer factory")
            self._producer = await self._producers(self.transactional_id)
        return self._producer

    async def close(self) -> None:
        """Release what the lease opened (its producer); called once it ended."""
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await producer.stop()
            except Exception as exc:  # a fenced producer may fail to stop cleanly
                log.debug("lease.producer_stop_failed", error=f"{type(exc).__name__}: {exc}")

    # --- internals ----------------------------------------------------------------

    def _read(self, metadata: str | None) -> str | None:
        """The checkpoint in this lease's slot, after checking the slot names its key."""
        try:
            return read_slot(metadata, self.key, self.slot, self._earlier_holder)
        except SlotMismatchError as exc:
            log.error(
                "lease.slot_mismatch",
                group=self.group_id,
                kind=self.kind,
                key=self.key,
                slot=self.slot.topic,
                found=exc.found,
                error=str(exc),
            )
            raise

    def _call_from_thread(self, make: Callable[[], Awaitable[T]], timeout_s: float | None) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            # Waiting here for the loop would block the loop itself.
            raise RuntimeError("in the event loop, await lease.commit() / lease.checkpoint()")

        async def call() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout_s)

    async def _commit_checked(self, offset: int, metadata: str | None) -> None:
        resource = (self.kind, self.key)  # the member maps it to its generation (rule 4)
        error = await self._store.commit(self.slot, offset, metadata, resource=resource)
        if error is ErrorCode.NONE:
            self._last_commit_s = self._clock.monotonic()
            return
        if error in LEASE_FENCING_CODES:
            self._fence(error)
            log.warning(
                "lease.fenced", group=self.group_id, kind=self.kind, key=self.key, error=error.name
            )
            raise LeaseLostError(
                f"lease {self.kind}/{self.key} was fenced by the coordinator: {error.name} "
                "(this member is no longer in the group)"
            )
        raise CoordinatorError(error, f"committing lease {self.kind}/{self.key}: {error.name}")

    def _fence(self, error: ErrorCode) -> None:
        """The coordinator refused a commit: the member is gone (rule 3), also
        for a revoked lease in its grace period."""
        if self._state in LIVE_STATES:
            self.end(EndReason.FENCED, detail=error.name)
        elif self._state is LeaseState.REVOKED:
            self._state = check_transition(self._state, LeaseState.FENCED)
            self._end = (EndReason.FENCED, error.name)

    def _in_grace(self) -> bool:
        """Revoked with a token and within its grace period (rule 4)."""
        return (
            self._state is LeaseState.REVOKED
            and self.token > 0
            and self._stop_by is not None
            and self._clock.monotonic() < self._stop_by
        )

    def _retrying(self, *, until_grace_ends: bool = False) -> AsyncRetrying:
        def retriable(exc: BaseException) -> bool:
            usable = self.can_commit if until_grace_ends else not self.revoked
            if isinstance(exc, LeaseLostError) or not usable:
                return False
            if isinstance(exc, CoordinatorError) and exc.code in LEASE_REBALANCING_CODES:
                return True
            return isinstance(exc, WorkgroupError) and exc.retriable

        started = self._clock.monotonic()

        def out_of_time(_: RetryCallState) -> bool:
            return self._clock.monotonic() - started >= self._commit_timeout_s

        return AsyncRetrying(
            retry=retry_if_exception(retriable),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            stop=out_of_time,
            sleep=self._clock.sleep,
            reraise=True,
        )


__all__ = [
    "Committed",
    "EndReason",
    "FenceOrigin",
    "Lease",
    "LeaseState",
    "Role",
    "Slot",
    "SlotStore",
]
