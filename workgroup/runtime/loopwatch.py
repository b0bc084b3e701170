"""Noticing a blocked event loop, and saying what blocked it.

A coroutine handler that calls blocking code (``time.sleep``, a synchronous
HTTP client, a long computation) holds up every other coroutine of the
process: heartbeats stop, the session ends and the leases are fenced.  The
member only notices afterwards (``member.starved late_ms=...``), without a
cause.

Rules:

1. The loop touches a timestamp every ``CHECK_EVERY_S``; a watchdog thread
   looks every ``CHECK_EVERY_S`` whether it is older than ``REPORT_AFTER_MS``.
   It then logs ``app.event_loop_blocked`` once per stall, while the loop is
   still blocked: the task that runs (a handler's task is named
   ``workgroup-handler-KIND/KEY``), the user's innermost frame of the loop's
   thread (``where``: file, line, function, source line; never local
   variables), and the fix; when no task runs, the process itself was held
   up, and the hint says so instead.  When the loop runs again,
   ``app.event_loop_unblocked`` says how long the stall lasted.
2. Cheap: one ``call_later`` per interval on the loop, one sleeping thread;
   nothing is sampled unless a stall is seen.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import traceback
from types import FrameType

from workgroup.clock import SYSTEM_CLOCK
from workgroup.log import get_logger, is_user_frame

log = get_logger(__name__)

#: How often the loop proves it runs, and the watchdog looks.
CHECK_EVERY_S = 0.1
#: A stall this long is reported (well below any session timeout's margin).
REPORT_AFTER_MS = 1_000
HINT = (
    "blocking code runs in a coroutine (async def) handler and holds up every "
    "other one, heartbeats included: make the handler a plain def (it then runs "
    "in a thread of its own), or call the blocking code with "
    "'await asyncio.to_thread(...)'"
)

STARVED_HINT = (
    "no task was running: the process itself was held up (an overloaded machine, "
    "a paused process, a long garbage collection), or a callback blocked"
)


class LoopWatch:
    """Watches the running loop from a thread (rule 1); :meth:`stop` ends it.

    Its times are the system's (:data:`~workgroup.clock.SYSTEM_CLOCK`), not an
    injected clock: it measures how long the real loop stood still."""

    def __init__(self, *, report_after_ms: int = REPORT_AFTER_MS) -> None:
        self._report_after_s = report_after_ms / 1000
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._touched = SYSTEM_CLOCK.monotonic()
        self._last_lag_s = 0.0
        self._stopped = threading.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._thread = threading.Thread(
            target=self._watch, name="workgroup-loop-watch", daemon=True
        )

    def start(self) -> None:
        self._touch()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._timer is not None:
            self._timer.cancel()

    def lag_s(self) -> float:
        """How late the loop runs its timers: at its last tick, or now if it is
        late for the next one (``workgroup_event_loop_lag_seconds``)."""
        overdue = SYSTEM_CLOCK.monotonic() - self._touched - CHECK_EVERY_S
        return max(self._last_lag_s, overdue, 0.0)

    def _touch(self) -> None:
        now = SYSTEM_CLOCK.monotonic()
        if self._timer is not None:  # a tick: how late after the one before
            self._last_lag_s = max(now - self._touched - CHECK_EVERY_S, 0.0)
        self._touched = now
        if not self._stopped.is_set():
            self._timer = self._loop.call_later(CHECK_EVERY_S, self._touch)

    def _watch(self) -> None:
        reported_at: float | None = None  # the stall's start, once reported
        while not self._stopped.wait(CHECK_EVERY_S):
            touched = self._touched
            stalled_s = SYSTEM_CLOCK.monotonic() - touched
            if reported_at is not None and touched > reported_at:
                log.info(
                    "app.event_loop_unblocked",
                    blocked_ms=int((touched - reported_at) * 1000),
                )
                reported_at = None
            if reported_at is None and stalled_s >= self._report_after_s:
                reported_at = touched
                self._report(stalled_s)

    def _report(self, stalled_s: float) -> None:
        task = asyncio.current_task(self._loop)
        frame = sys._current_frames().get(self._loop_thread)
        log.warning(
            "app.event_loop_blocked",
            blocked_ms=int(stalled_s * 1000),
            task=task.get_name() if task is not None else None,
            handler=_handler_of(task),
            where=_user_code(frame),
            # No task runs: the loop waits in its selector, so nothing in the
            # process blocks it; the process itself did not get to run.
            hint=HINT if task is not None else STARVED_HINT,
        )


def _handler_of(task: asyncio.Task[object] | None) -> str | None:
    """``KIND/KEY`` of a handler's task (see ``HandlerRun.start``), else ``None``."""
    if task is None:
        return None
    name = task.get_name()
    prefix = "workgroup-handler-"
    return name.removeprefix(prefix) if name.startswith(prefix) else None


def _user_code(frame: FrameType | None) -> str | None:
    """The innermost user frame of a stack, in one line:
    ``app.py:43 in work: time.sleep(20)``."""
    if frame is None:
        return None
    mine = [f for f in traceback.extract_stack(frame) if is_user_frame(f.filename)]
    if not mine:
        return None
    last = mine[-1]
    return f"{last.filename}:{last.lineno} in {last.name}: {(last.line or '').strip()}"


__all__ = ["CHECK_EVERY_S", "HINT", "REPORT_AFTER_MS", "STARVED_HINT", "LoopWatch"]
