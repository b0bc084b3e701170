"""Running one lease's handler: start, restart with back-off, stop within a grace period.

Rules:

1. The handler starts once the lease has its token (see :meth:`Lease.acquire`).
   A token not taken within the lease's own retries for a retriable reason (a
   rebalance that goes on, a coordinator away) is tried again with back-off
   (``worker.acquire_retrying``, up to ``ACQUIRE_RETRY_MAX_S`` apart) while
   the lease is held: the resource is never left idle here until it moves.
   A coroutine function runs as a task in the event loop; a plain function in a
   thread of its own (a daemon thread, not the event loop's default executor:
   a dozen blocking handlers would take all its workers, and the member's
   assignor and callbacks wait there), so blocking work holds up nothing.
2. A handler that returns is done: the resource stays owned, nothing runs on it
   until it moves.  A handler that raises is started again after an
   exponential back-off, while the lease is held.  :class:`LeaseLostError` ends
   it without a restart, and so does any error once the lease ended (logged
   as ``worker.failed`` with the lease's ``end_reason``, without
   ``restart_in_s``).  Its first failure in a row (and a failure with
   another error) is logged with the user's frames (``worker.failed``, field
   ``exception``; never local variables), later ones in one line with the
   count (``failures``).  An attempt that runs ``healthy_after_s`` without
   failing ends the row.  Once a handler failed ``max_failures`` times in a
   row it is *failing* (``on_failing``: metrics, ``/healthz``), and
   ``on_failure`` decides: ``"retry"`` goes on restarting it, ``"release"``
   and ``"stop"`` stop restarting it and hand it to ``on_gave_up`` (the runner
   gives the resource away or stops the daemon).
3. Stopping (revocation, loss, shutdown) ends the lease first, so the handler
   sees ``lease.revoked``; it may finish its step within ``grace_s``, then its
   task is cancelled.  A thread cannot be killed: a plain function that
   outlives the grace period is reported (``worker.outlived_grace``), and its
   lease refuses every commit.
4. :meth:`HandlerRun.wait_finished` returns only once nothing runs any more:
   the task is done (a child process reaped, see ``isolation.py``) and no
   thread runs the handler.  A thread that outlived its grace period is
   reported again every ``OUTLIVED_LOG_EVERY_S`` with how long it has run on;
   the resource is not released before it ends (the runner's rule).
5. A run started ``after`` another run of the same resource (handed back while
   the old one was still stopping) takes its lease only once that one finished.
6. Every duration (grace period, back-off, ``healthy_after_s``, how long a
   thread outlived its grace) is measured on the lease's clock
   (:mod:`workgroup.clock`); only the poll for a thread's end sleeps on the loop.
7. A warming lease's handler starts at once, without a token.  A failure while
   warming makes the move fall back to a plain one (``Lease.fall_back``) and
   the handler is restarted as rule 2 says.  At the cut-over
   (:meth:`HandlerRun.promote`) the lease takes its token and the running
   handler's ``ready()`` returns; a handler that had returned while warming
   is started again, now active.  A leader's standby run is promoted alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential

from workgroup.clock import wait_within
from workgroup.errors import LEASE_REBALANCING_CODES, CoordinatorError, WorkgroupError
from workgroup.log import describe_error, get_logger, user_frames
from workgroup.runtime.errors import LeaseLostError
from workgroup.runtime.lease import Lease
from workgroup.runtime.lease_states import EndReason

log = get_logger(__name__)

Handler = Callable[[Lease], Awaitable[Any] | Any]

#: How often a thread that outlived its grace period is reported again (rule 4).
OUTLIVED_LOG_EVERY_S = 10.0
#: How often :meth:`HandlerRun.wait_finished` looks whether the thread ended.
THREAD_POLL_S = 0.05


#: What happens once a handler failed ``max_failures`` times in a row.
OnFailure = Literal["retry", "release", "stop"]
ON_FAILURE_CHOICES: tuple[OnFailure, ...] = ("retry", "release", "stop")
#: Default of ``max_failures``.
DEFAULT_MAX_FAILURES = 5
#: An attempt that ran this long without failing ends a row of failures.
HEALTHY_AFTER_S = 60.0
#: The first and the longest wait before trying a token again (rule 1).
ACQUIRE_RETRY_S = 1.0
ACQUIRE_RETRY_MAX_S = 30.0


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Back-off between restarts of a failing handler, and what to do once it
    failed ``max_failures`` times in a row (rule 2)."""

    initial_s: float = 0.1
    max_s: float = 30.0
    on_failure: OnFailure = "retry"
    max_failures: int = DEFAULT_MAX_FAILURES
    healthy_after_s: float = HEALTHY_AFTER_S


@dataclass(slots=True)
class HandlerStats:
    """Counters for metrics and tests, with optional hooks (e.g. Prometheus)."""

    restarts: int = 0
    failures: int = 0
    on_failure: Callable[[], None] | None = None
    on_restart: Callable[[], None] | None = None

    def failed(self) -> None:
        self.failures += 1
        if self.on_failure is not None:
            self.on_failure()

    def restarted(self) -> None:
        self.restarts += 1
        if self.on_restart is not None:
            self.on_restart()


class HandlerRun:
    """One lease and the handler working on it."""

    def __init__(
        self,
        lease: Lease,
        handler: Handler,
        *,
        name: str,
        restart: RestartPolicy,
        stats: HandlerStats,
        on_acquired: Callable[[Lease], None] | None = None,
        after: HandlerRun | None = None,
        on_failing: Callable[[HandlerRun], None] | None = None,
        on_gave_up: Callable[[HandlerRun], None] | None = None,
    ) -> None:
        self.lease = lease
        self._after = after
        self._handler = handler
        self._name = name
        self._restart = restart
        self._stats = stats
        self._on_acquired = on_acquired
        self._task: asyncio.Task[None] | None = None
        self._thread_running = False
        #: The lease was taken and the handler started.
        self.started = False
        self._on_failing = on_failing
        self._on_gave_up = on_gave_up
        #: Failures in a row (rule 2), and the last one's error.
        self.failures_in_row = 0
        self.last_error: str | None = None
        #: Restarts stopped under ``on_failure="release"`` or ``"stop"``.
        self.gave_up = False
        self._attempt = 0
        self._healthy_timer: asyncio.Task[None] | None = None
        self._clock = lease.clock
        self._wait = wait_exponential(multiplier=restart.initial_s, max=restart.max_s)

    def start(self, *, acquired: bool = False) -> None:
        self._task = asyncio.create_task(
            self._main(acquired), name=f"workgroup-handler-{self.lease.kind}/{self.lease.key}"
        )
        self._task.add_done_callback(self._read_outcome)

    def _read_outcome(self, task: asyncio.Task[None]) -> None:
        """Read how the task ended, so that nothing is left for asyncio to print
        (``_main`` logs the handler's own errors; this is anything else)."""
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error(
                "worker.task_failed",
                handler=self._name,
                kind=self.lease.kind,
                key=self.lease.key,
                error=describe_error(error),
                exc_info=error,
            )

    async def stop(self, why: EndReason, grace_s: float) -> None:
        """End the lease, give the handler ``grace_s`` to return, then cancel it."""
        self.lease.end(why, grace_s)
        try:
            await self._stop_task(grace_s)
        finally:
            await self.lease.close()

    @property
    def thread_running(self) -> bool:
        """A worker thread still runs the (plain function) handler."""
        return self._thread_running

    @property
    def finished(self) -> bool:
        """Nothing runs any more (rule 4)."""
        task_done = self._task is None or self._task.done()
        return task_done and not self._thread_running

    async def wait_finished(self) -> None:
        """Return once nothing runs any more (rule 4); call after :meth:`stop`."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task})
        if not self._thread_running:
            return
        clock = self._clock
        since = clock.monotonic()
        reported = since
        while self._thread_running:
            await asyncio.sleep(THREAD_POLL_S)  # the thread's flag: not on the clock
            if clock.monotonic() - reported >= OUTLIVED_LOG_EVERY_S:
                reported = clock.monotonic()
                log.warning(
                    "worker.outlived_grace",
                    handler=self._name,
                    kind=self.lease.kind,
                    key=self.lease.key,
                    outlived_s=round(reported - since, 1),
                    why="a thread cannot be stopped: the resource is released when it returns",
                )
        log.info(
            "worker.thread_ended",
            handler=self._name,
            kind=self.lease.kind,
            key=self.lease.key,
            after_s=round(clock.monotonic() - since, 1),
        )

    async def promote(self) -> None:
        """The cut-over (rule 7): take the token; the handler goes on as the active one
        (a leader's standby too: ``Lease.promotable``)."""
        lease = self.lease
        if not (lease.warming or (lease.promotable and lease.role == "standby" and lease.held)):
            return
        lease.promote()
        try:
            await lease.acquire()
        except LeaseLostError:
            return
        except WorkgroupError as exc:
            log.error(
                "worker.acquire_failed",
                handler=self._name,
                kind=lease.kind,
                key=lease.key,
                error=str(exc),
            )
            lease.end(EndReason.NOT_ACQUIRED, detail=str(exc))
            return
        if self._on_acquired is not None:
            self._on_acquired(lease)
        if self._task is not None and self._task.done() and not lease.revoked:
            self.start(acquired=True)  # it returned while warming: run it as the active one

    def cut_short(self) -> None:
        """Cancel the handler now (its resource was lost while it was stopping)."""
        if self._task is not None:
            self._task.cancel()

    async def _stop_task(self, grace_s: float) -> None:
        task = self._task
        if task is None or task.done():
            return
        if not await wait_within(self._clock, task, grace_s):
            task.cancel()
            # A task gets a moment to unwind; a thread cannot be interrupted.
            await wait_within(self._clock, task, 1.0)
            if self._thread_running:
                log.warning(
                    "worker.outlived_grace",
                    handler=self._name,
                    kind=self.lease.kind,
                    key=self.lease.key,
                    grace_s=grace_s,
                )

    async def _main(self, acquired: bool = False) -> None:
        lease = self.lease
        if self._after is not None:
            await self._after.wait_finished()  # rule 5
            self._after = None
        try:
            if lease.role == "active" and not acquired:  # standby, warming: no token
                await self._acquire()
        except LeaseLostError:
            return
        except WorkgroupError as exc:
            # The lease cannot be taken (not a reason that passes): leave it;
            # the resource stays idle here until it moves (logged, to be seen).
            log.error(
                "worker.acquire_failed",
                handler=self._name,
                kind=lease.kind,
                key=lease.key,
                error=str(exc),
            )
            lease.end(EndReason.NOT_ACQUIRED, detail=str(exc))
            return
        self.started = True
        if self._on_acquired is not None and not lease.warming and not acquired:
            self._on_acquired(lease)
        retrying = AsyncRetrying(
            retry=retry_if_exception(self._restartable),
            wait=self._wait,
            stop=self._gives_up,
            sleep=self._sleep_unless_revoked,
            after=self._log_failure,
            reraise=True,
        )
        try:
            with contextlib.suppress(LeaseLostError):
                async for attempt in retrying:
                    with attempt:
                        if lease.revoked:
                            return
                        if attempt.retry_state.attempt_number > 1:
                            self._stats.restarted()
                        self._attempt_started()
                        await self._call()
        except Exception as exc:
            if not self.gave_up:  # not restartable: its lease ended (rule 2)
                self._log_failure_after_end(exc)
                return
            log.error(
                "worker.gave_up",
                handler=self._name,
                kind=lease.kind,
                key=lease.key,
                failures=self.failures_in_row,
                on_failure=self._restart.on_failure,
                error=self.last_error,
            )
            if self._on_gave_up is not None:
                self._on_gave_up(self)
            return
        finally:
            self._cancel_healthy_timer()
        log.debug("worker.returned", handler=self._name, kind=lease.kind, key=lease.key)

    def _log_failure_after_end(self, exc: Exception) -> None:
        """A handler that raised once its lease ended: not restarted, logged once."""
        self._stats.failed()
        fields: dict[str, Any] = {
            "handler": self._name,
            "kind": self.lease.kind,
            "key": self.lease.key,
            "error": describe_error(exc),
            "lease": self.lease.end_reason,
        }
        frames = getattr(exc, "frames", None) or user_frames(exc)
        if frames:
            fields["exception"] = frames
        log.error("worker.failed", **fields)

    def _attempt_started(self) -> None:
        """An attempt that runs ``healthy_after_s`` ends the row of failures."""
        self._attempt += 1
        self._cancel_healthy_timer()
        if self.failures_in_row:
            self._healthy_timer = asyncio.create_task(self._healthy_after(self._attempt))

    async def _healthy_after(self, attempt: int) -> None:
        await self._clock.sleep(self._restart.healthy_after_s)
        self._ran_healthy(attempt)

    def _ran_healthy(self, attempt: int) -> None:
        if attempt != self._attempt or not self.failures_in_row:
            return
        failing = self.failing
        log.info(
            "worker.recovered",
            handler=self._name,
            kind=self.lease.kind,
            key=self.lease.key,
            after_failures=self.failures_in_row,
        )
        self.failures_in_row = 0
        self.last_error = None
        if failing and self._on_failing is not None:
            self._on_failing(self)

    def _cancel_healthy_timer(self) -> None:
        if self._healthy_timer is not None:
            self._healthy_timer.cancel()
            self._healthy_timer = None

    @property
    def failing(self) -> bool:
        """It failed ``max_failures`` times in a row (rule 2)."""
        return self.failures_in_row >= self._restart.max_failures

    def _gives_up(self, state: RetryCallState) -> bool:
        if self._restart.on_failure == "retry" or not self.failing:
            return False
        self.gave_up = True
        return True

    async def _call(self) -> None:
        call = getattr(self._handler, "__call__", None)  # noqa: B004 (async __call__)
        if inspect.iscoroutinefunction(self._handler) or inspect.iscoroutinefunction(call):
            await self._handler(self.lease)
            return
        result = await self._in_own_thread()
        if inspect.isawaitable(result):
            await result

    async def _in_own_thread(self) -> Any:
        """Run the handler in a daemon thread of its own (rule 1); the result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        context = contextvars.copy_context()

        def settle(outcome: Callable[[], Any]) -> None:
            if not future.done():  # cancelled: the grace period was over
                outcome()

        def target() -> None:
            try:
                result = context.run(self._in_thread)
            except BaseException as exc:
                error = exc
                answer = lambda: settle(lambda: future.set_exception(error))  # noqa: E731
            else:
                answer = lambda: settle(lambda: future.set_result(result))  # noqa: E731
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(answer)

        # Set before the thread starts, cleared by the thread itself: cancelling
        # the awaiting task does not stop it.
        self._thread_running = True
        name = f"workgroup-handler-{self.lease.kind}/{self.lease.key}"
        try:
            threading.Thread(target=target, name=name, daemon=True).start()
        except BaseException:
            self._thread_running = False
            raise
        return await future

    def _in_thread(self) -> Any:
        try:
            return self._handler(self.lease)
        finally:
            self._thread_running = False

    def _restartable(self, exc: BaseException) -> bool:
        if not isinstance(exc, Exception) or isinstance(exc, LeaseLostError):
            return False
        return not self.lease.revoked

    def _log_failure(self, state: RetryCallState) -> None:
        """After each failure that may be retried (rule 2): count, log, report."""
        self._stats.failed()
        self._cancel_healthy_timer()
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        error = describe_error(exc) if exc is not None else "unknown error"
        self.failures_in_row += 1
        changed = error != self.last_error
        self.last_error = error
        fields: dict[str, Any] = {
            "handler": self._name,
            "kind": self.lease.kind,
            "key": self.lease.key,
            "error": error,
            "failures": self.failures_in_row,
        }
        if not (self._restart.on_failure != "retry" and self.failing):
            fields["restart_in_s"] = round(self._wait(state), 3)
        if exc is not None and (self.failures_in_row == 1 or changed):
            # The frames once, not each time (a child process sends its own).
            frames = getattr(exc, "frames", None) or user_frames(exc)
            if frames:
                fields["exception"] = frames
        log.error("worker.failed", **fields)
        if self.lease.warming:  # rule 7
            self.lease.fall_back(f"the handler failed while warming up: {error}")
        if self.failures_in_row != self._restart.max_failures:
            return
        if self._restart.on_failure == "retry":
            log.error(
                "worker.failing",
                handler=self._name,
                kind=self.lease.kind,
                key=self.lease.key,
                failures=self.failures_in_row,
                error=error,
                what="on_failure='retry' goes on restarting it; /healthz answers 503 until "
                "it runs without failing (on_failure='release' would move it elsewhere)",
            )
        if self._on_failing is not None:
            self._on_failing(self)

    async def _acquire(self) -> None:
        """Take the lease's token; a retriable failure is tried again (rule 1)."""
        lease = self.lease
        wait_s = ACQUIRE_RETRY_S
        while True:
            try:
                await lease.acquire()
                return
            except LeaseLostError:
                raise
            except WorkgroupError as exc:
                rebalancing = isinstance(exc, CoordinatorError) and (
                    exc.code in LEASE_REBALANCING_CODES
                )
                if not (exc.retriable or rebalancing) or lease.revoked:
                    raise
                log.warning(
                    "worker.acquire_retrying",
                    handler=self._name,
                    kind=lease.kind,
                    key=lease.key,
                    error=str(exc),
                    retry_in_s=wait_s,
                )
            await self._sleep_unless_revoked(wait_s)
            wait_s = min(wait_s * 2, ACQUIRE_RETRY_MAX_S)

    async def _sleep_unless_revoked(self, seconds: float) -> None:
        revoked = asyncio.ensure_future(self.lease.wait_revoked())
        try:
            await wait_within(self._clock, revoked, seconds)
        finally:
            revoked.cancel()


__all__ = [
    "DEFAULT_MAX_FAILURES",
    "ON_FAILURE_CHOICES",
    "Handler",
    "HandlerRun",
    "HandlerStats",
    "OnFailure",
    "RestartPolicy",
]
