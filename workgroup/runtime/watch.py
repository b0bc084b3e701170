"""What a running daemon watches besides its groups: its identity, whether a
coordinator answers, and whether anyone still reads its output.

Rules:

* one identity per runner: the instance id when given, else ``HOST-PID`` (a
  second runner in the same process gets ``HOST-PID-2``); it makes the Kafka
  client id (``workgroup-<identity>``) of every group member and admin client,
  the ``process`` field of every log line, the ``member`` of the event log and
  the ``workgroup_process_info`` metric;
* at start, nothing answering at the bootstrap address is said in one line with
  a hint (``app.coordinator_unreachable``); without ``connect_timeout_ms`` the
  daemon exits 1 at once, with it it waits that long (one line per 30 s);
* while running, a group that has looked for its coordinator for 30 s is
  reported in one line every 30 s, not once per attempt; with
  ``unreachable_timeout_ms`` the daemon gives up (exit 1) after that long;
* a closed stdout or stderr (the reader of a pipe exited, ``| head``) stops
  the daemon gracefully with exit status 120, said once, instead of letting
  handlers fail and restart unseen on every ``print``.

:class:`Unreachable` is sans-I/O (times in ms, passed in); the asyncio loop in
:func:`watch` polls once a second.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import select
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TextIO

from workgroup.errors import WorkgroupError
from workgroup.log import get_logger
from workgroup.member.driver import parse_bootstrap
from workgroup.member.errors import CoordinatorUnavailableError
from workgroup.runtime.local import answers

log = get_logger(__name__)

#: How often a long outage is reported (one line each time).
REPORT_EVERY_MS = 30_000
#: How often the watch looks (group states, output pipes).
POLL_S = 1.0
#: Exit status of a daemon whose stdout or stderr was closed (as Python's own
#: status when flushing stdout fails at exit).
OUTPUT_CLOSED_EXIT = 120

_identities: set[str] = set()
_identities_lock = threading.Lock()


def process_identity(instance_id: str | None) -> str:
    """The runner's name: the instance id, else ``HOST-PID`` (``-2``, ``-3``... for
    further runners of the same process)."""
    base = instance_id or f"{socket.gethostname()}-{os.getpid()}"
    with _identities_lock:
        for n in itertools.count(1):
            candidate = base if n == 1 else f"{base}-{n}"
            if instance_id or candidate not in _identities:
                _identities.add(candidate)
                return candidate
    raise AssertionError("unreachable")  # pragma: no cover


def release_identity(identity: str) -> None:
    with _identities_lock:
        _identities.discard(identity)


def unreachable_hint(bootstrap: str) -> str:
    return f"nothing answers at {bootstrap}; is the coordinator running?"


class OutputClosedError(WorkgroupError):
    """stdout or stderr was closed by its reader: nobody sees the daemon any more."""

    exit_code = OUTPUT_CLOSED_EXIT


async def wait_for_bootstrap(
    bootstrap: str, connect_timeout_ms: int | None, *, probe_timeout_s: float = 0.5
) -> None:
    """Return once something accepts connections at one of ``bootstrap``'s
    addresses; raise :class:`CoordinatorUnavailableError` with a hint when nothing
    does (at once, or after ``connect_timeout_ms``)."""
    addresses = parse_bootstrap(bootstrap)
    loop = asyncio.get_running_loop()
    started = loop.time()
    reported_at: float | None = None
    while True:
        for host, port in addresses:
            if await asyncio.to_thread(answers, host, port, probe_timeout_s):
                if reported_at is not None:
                    log.info("app.coordinator_reachable", bootstrap=bootstrap)
                return
        waited_ms = int((loop.time() - started) * 1000)
        if connect_timeout_ms is None or waited_ms >= connect_timeout_ms:
            waited = "" if connect_timeout_ms is None else f" within {connect_timeout_ms} ms"
            raise CoordinatorUnavailableError(
                f"{unreachable_hint(bootstrap)} (no connection{waited}; "
                "--connect-timeout-ms waits for one)"
            )
        if reported_at is None or (loop.time() - reported_at) * 1000 >= REPORT_EVERY_MS:
            reported_at = loop.time()
            log.warning(
                "app.coordinator_unreachable",
                bootstrap=bootstrap,
                waited_ms=waited_ms,
                gives_up_in_ms=connect_timeout_ms - waited_ms,
                hint=unreachable_hint(bootstrap),
            )
        await asyncio.sleep(min(POLL_S, (connect_timeout_ms - waited_ms) / 1000))


@dataclass
class Unreachable:
    """Tracks how long some group has been looking for its coordinator."""

    give_up_after_ms: int | None = None
    report_every_ms: int = REPORT_EVERY_MS
    since: int | None = None
    reported_at: int | None = None

    def observe(self, now: int, looking: Sequence[str]) -> Literal["report", "give_up"] | None:
        """``looking``: the groups without a coordinator at ``now``."""
        if not looking:
            self.since = self.reported_at = None
            return None
        if self.since is None:
            self.since = now
        waited = now - self.since
        if self.give_up_after_ms is not None and waited >= self.give_up_after_ms:
            return "give_up"
        last = self.since if self.reported_at is None else self.reported_at
        if now - last >= self.report_every_ms:
            self.reported_at = now
            return "report"
        return None

    def waited_ms(self, now: int) -> int:
        return 0 if self.since is None else now - self.since


def closed_output(streams: Sequence[tuple[str, TextIO]] = ()) -> str | None:
    """The name of a stream whose pipe reader has gone (``"stdout"``/``"stderr"``)."""
    for name, stream in streams or (("stdout", sys.stdout), ("stderr", sys.stderr)):
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            continue  # replaced by something without a descriptor (tests, pytest)
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        for _, events in poller.poll(0):
            # A pipe whose reader closed reports POLLERR; files and terminals never do.
            if events & select.POLLERR:
                return name
    return None


def silence(name: str) -> None:
    """Point the closed stream at /dev/null, so that the exit does not fail flushing it."""
    stream = sys.stdout if name == "stdout" else sys.stderr
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


async def watch(
    looking: Callable[[], Sequence[str]],
    bootstrap: str,
    unreachable_timeout_ms: int | None,
    *,
    outputs: Callable[[], str | None] = closed_output,
) -> WorkgroupError:
    """Poll until the daemon must stop; return why (the error it exits with)."""
    loop = asyncio.get_running_loop()
    tracker = Unreachable(unreachable_timeout_ms)
    while True:
        await asyncio.sleep(POLL_S)
        closed = outputs()
        if closed is not None:
            silence(closed)
            log.warning(
                "app.output_closed",
                stream=closed,
                why=f"the reader of {closed} exited (e.g. '| head'): stopping",
            )
            return OutputClosedError(f"{closed} was closed by its reader; stopped")
        now = int(loop.time() * 1000)
        groups = looking()
        verdict = tracker.observe(now, groups)
        if verdict == "report":
            log.warning(
                "app.coordinator_unreachable",
                bootstrap=bootstrap,
                groups=list(groups),
                waited_ms=tracker.waited_ms(now),
                hint=unreachable_hint(bootstrap),
            )
        elif verdict == "give_up":
            return CoordinatorUnavailableError(
                f"no coordinator reachable for {tracker.waited_ms(now)} ms "
                f"(groups {', '.join(groups)}; unreachable_timeout_ms={unreachable_timeout_ms}); "
                f"{unreachable_hint(bootstrap)}"
            )


__all__ = [
    "OUTPUT_CLOSED_EXIT",
    "OutputClosedError",
    "Unreachable",
    "closed_output",
    "process_identity",
    "release_identity",
    "unreachable_hint",
    "wait_for_bootstrap",
    "watch",
]
