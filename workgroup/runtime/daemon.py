"""Running an app as a process: signals and exit codes (the app itself comes
from :func:`workgroup.runtime.loader.load_app` or :meth:`workgroup.App.run`).

Rules:

1. The first SIGINT or SIGTERM stops the app gracefully: with ``drain_on_stop``
   (or ``leave_on_stop`` in groups whose worker warms up) every group drains
   first, for up to ``drain_timeout_ms`` (:class:`AppRunner`, its rule 8); each
   handler gets its grace period, each member keeps its session until its revoked resources are
   released, then leaves (dynamic members, ``--leave-on-stop``) or just stops
   (static members keep their place for a restart).  A second signal exits at
   once (status 130), nothing revoked.
2. A handler thread still running after the stop (it outlived its grace period
   and the member's close timeout), or a call to ``asyncio.to_thread`` still
   running then (a handler that awaited it was cancelled at the end of its
   grace period), cannot be stopped and would keep the process alive: the
   daemon logs ``app.threads_abandoned`` and ends the process, which ends the
   thread.  Its member sent no LeaveGroup, so its resource moves only
   when the session expires, after the thread is gone.  So with a start-up
   function stopped while its thread runs (an engine that does not answer:
   ``app.startup_abandoned``): the member never joined.
3. What the event loop cannot hand to anyone (a task's error nobody read) is
   logged as ``loop.unhandled_error``, so a JSON log stays JSON.
4. The daemon's event loop lends up to ``HANDLER_THREADS`` threads to
   ``asyncio.to_thread`` (asyncio's own default is the CPU count plus 4): every
   handler may block in one for as long as it owns its resource, as the docs
   suggest for blocking work, and none waits for another's to end.  Threads are
   made only when none is idle, and the calls running are counted (rule 2).
   (:meth:`workgroup.App.serve` runs in the caller's loop and leaves its
   executor alone.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from workgroup.log import get_logger, log_loop_errors
from workgroup.runtime.config import Settings
from workgroup.runtime.runner import AppRunner
from workgroup.runtime.spec import DeclaredApp

log = get_logger(__name__)

#: Exit status after a second signal (stop at once, nothing revoked).
FORCED_EXIT = 130
#: Threads ``asyncio.to_thread`` may use at once in a daemon (rule 4).
HANDLER_THREADS = 512


class HandlerThreads(ThreadPoolExecutor):
    """The daemon loop's default executor (rule 4), counting the calls that run."""

    def __init__(self) -> None:
        super().__init__(max_workers=HANDLER_THREADS, thread_name_prefix="asyncio")
        self._lock = threading.Lock()
        self.running = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        def counted() -> Any:
            with self._lock:
                self.running += 1
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.running -= 1

        return super().submit(counted)


async def serve_until_signalled(app: DeclaredApp, settings: Settings) -> None:
    """Run ``app``; the first SIGINT/SIGTERM stops it gracefully, a second at once."""
    loop = asyncio.get_running_loop()
    log_loop_errors(loop)
    to_thread = HandlerThreads()
    loop.set_default_executor(to_thread)  # rule 4
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("app.forced_exit", signal=signal.Signals(signum).name)
            os._exit(FORCED_EXIT)
        log.info("app.signal", signal=signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    runner = AppRunner(app, settings)
    try:
        await runner.run(stop)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        threads = [r for group in runner.groups for r in group.running_threads()]
        if threads or to_thread.running:  # rule 2
            log.error(
                "app.threads_abandoned",
                app=app.name,
                count=len(threads) + to_thread.running,
                first=[f"{kind}/{key}" for kind, key in threads[:3]],
                why="handler threads (or their asyncio.to_thread calls) outlived their grace "
                "period; ending the process ends them",
            )
            _flush_and_exit(0 if sys.exc_info()[0] is None else 1)
        if runner.startup_abandoned:  # rule 2, for a start-up still waiting on its engine
            log.warning(
                "app.startup_abandoned",
                app=app.name,
                why="a start-up function still runs (its engine does not answer); "
                "ending the process ends it",
            )
            _flush_and_exit(0 if sys.exc_info()[0] is None else 1)


def _flush_and_exit(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def run_app(app: DeclaredApp, settings: Settings) -> None:
    """Run ``app`` in this process until a signal (blocking)."""
    asyncio.run(serve_until_signalled(app, settings))


__all__ = ["FORCED_EXIT", "HANDLER_THREADS", "run_app", "serve_until_signalled"]
