"""What a running daemon watches besides its groups: its identity, whether a
coordinator answers, and whether anyone still reads its output.

Rules:

* one identity per runner: the instance id when given, else ``HOST-PID`` (a
  second runner in the same process gets ``HOST-PID-2``); it is the ``process``
  field of every log line, the ``member`` of the event log and a label of the
  ``workgroup_process_info`` metric, and makes the Kafka client id of every
  group member and admin client: ``workgroup-HOST-PID``, or
  ``workgroup-INSTANCE@HOST-PID`` for a static member (the pid is in it, so that
  a process that takes over an instance id can tell whose place it takes);
* a static member looks at its first group before joining: a member with its
  instance id is the process it replaces (``app.replacing``: running, stopped,
  or on another host).  Kafka and the embedded coordinator describe members;
  Tansu does not, and then nothing is said;
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
:func:`watch` looks at the output every 200 ms and at the groups every second.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import select
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TextIO

from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.errors import WorkgroupError
from workgroup.log import get_logger
from workgroup.member.driver import parse_bootstrap, this_process
from workgroup.member.errors import (
    CoordinatorUnavailableError,
    FencedInstanceError,
    NothingAnswersError,
)
from workgroup.protocol.process import host_and_pid
from workgroup.runtime.local import connect_failure
from workgroup.security import PLAINTEXT, Security

log = get_logger(__name__)

#: How often a long outage is reported (one line each time).
REPORT_EVERY_MS = 30_000
#: How often the watch looks at the output pipes (one poll(2) call each: cheap,
#: and each handler ``print`` into a closed pipe fails meanwhile).
POLL_S = 0.2
#: How often it looks at the groups' coordinators.
GROUPS_EVERY = 5
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


def client_id_of(identity: str, instance_id: str | None) -> str:
    """The Kafka client id of a runner (see the module's rules)."""
    if instance_id is None:
        return f"workgroup-{identity}"
    return f"workgroup-{identity}@{socket.gethostname()}-{os.getpid()}"


_STATIC_CLIENT_ID = re.compile(r"^workgroup-(?P<instance>.*)@(?P<host>.+)-(?P<pid>\d+)$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def report_replaced(
    bootstrap: str,
    group_id: str,
    instance_id: str,
    *,
    security: Security = PLAINTEXT,
    timeout_s: float = 5.0,
) -> str | None:
    """Log ``app.replacing`` when ``group_id`` has a member with ``instance_id``
    (before this process joins); return what it says (``None``: nothing seen)."""
    from workgroup.admin import describe_group  # the admin client: only when static

    try:
        description = await describe_group(
            bootstrap, group_id, security=security, timeout_s=timeout_s
        )
    except WorkgroupError as exc:  # a new group, or describe refused: nothing to say
        log.debug("app.replacing_unknown", group=group_id, error=str(exc))
        return None
    holder = next((m for m in description.members if m.instance_id == instance_id), None)
    if holder is None:
        return None
    found = _STATIC_CLIENT_ID.match(holder.client_id)
    pid = None if found is None else int(found["pid"])
    running: bool | None = None  # not knowable from here
    if found is None or pid is None:
        what = f"replaces member {holder.member_id} ({holder.client_id}, {holder.client_host})"
    elif found["host"] != socket.gethostname():
        what = (
            f"replaces the process {pid} on host {found['host']}: if it still runs, "
            "the coordinator fences it and it exits 1"
        )
    elif pid != os.getpid() and _alive(pid):
        running = True
        what = (
            f"replaces the running process {pid} with the same instance id: the "
            "coordinator fences it and it exits 1"
        )
    else:
        running = False
        what = f"takes the place of its previous run (process {pid}, no longer running)"
    report = log.info if running is False else log.warning
    report(
        "app.replacing",
        group=group_id,
        instance_id=instance_id,
        previous_member=holder.member_id,
        previous_client=holder.client_id,
        previous_pid=pid,
        previous_running=running,
        what=what,
    )
    return what


async def taken_over(
    error: FencedInstanceError,
    bootstrap: str,
    group_id: str,
    instance_id: str,
    *,
    security: Security = PLAINTEXT,
    timeout_s: float = 3.0,
) -> FencedInstanceError:
    """The daemon's words for being fenced: another process took over its instance
    id, and which one (host and pid from its metadata) when DescribeGroups says."""
    from workgroup.admin import describe_group  # the admin client: only when fenced

    who = ""
    try:
        description = await describe_group(
            bootstrap, group_id, security=security, timeout_s=timeout_s
        )
    except WorkgroupError as exc:  # best-effort: the message goes without it
        log.debug("app.taken_over_unknown", group=group_id, error=str(exc))
    else:
        holder = next((m for m in description.members if m.instance_id == instance_id), None)
        # A place taken over keeps the client id it had (KIP-345, on Kafka as on the
        # embedded coordinator), so the newcomer is named by the process tag of
        # the metadata it joined with; a holder naming this process says nothing.
        newcomer = None if holder is None else host_and_pid(holder.process)
        if holder is None or holder.process in (
            this_process(),
            client_id_of(instance_id, instance_id),
        ):
            pass
        elif newcomer is not None:
            who = f" (process {newcomer[1]} on host {newcomer[0]})"
        else:
            who = f" (client {holder.client_id} at {holder.client_host})"
    return FencedInstanceError(
        error.code,
        f"another process took over instance id {instance_id!r} in group {group_id!r}{who}: "
        "this one stops; give each process its own instance id",
    )


def release_identity(identity: str) -> None:
    with _identities_lock:
        _identities.discard(identity)


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def unreachable_hint(bootstrap: str) -> str:
    return f"nothing answers at {bootstrap}; is the coordinator running?"


class OutputClosedError(WorkgroupError):
    """stdout or stderr was closed by its reader: nobody sees the daemon any more."""

    exit_code = OUTPUT_CLOSED_EXIT


async def wait_for_bootstrap(
    bootstrap: str,
    connect_timeout_ms: int | None,
    *,
    probe_timeout_s: float = 0.5,
    clock: Clock = SYSTEM_CLOCK,
) -> None:
    """Return once something accepts connections at one of ``bootstrap``'s
    addresses; raise :class:`NothingAnswersError` (with its hint) when nothing
    does (at once, or after ``connect_timeout_ms`` of ``clock``)."""
    addresses = parse_bootstrap(bootstrap)
    started = clock.monotonic()
    reported_at: float | None = None
    while True:
        failures: list[tuple[str, str]] = []
        for host, port in addresses:
            failure = await asyncio.to_thread(connect_failure, host, port, probe_timeout_s)
            if failure is None:
                if reported_at is not None:
                    log.info("app.coordinator_reachable", bootstrap=bootstrap)
                return
            failures.append((_address(host, port), failure))
        waited_ms = int((clock.monotonic() - started) * 1000)
        if connect_timeout_ms is None or waited_ms >= connect_timeout_ms:
            raise NothingAnswersError(failures, waited_ms=connect_timeout_ms)
        if reported_at is None or (clock.monotonic() - reported_at) * 1000 >= REPORT_EVERY_MS:
            reported_at = clock.monotonic()
            log.warning(
                "app.coordinator_unreachable",
                bootstrap=bootstrap,
                waited_ms=waited_ms,
                gives_up_in_ms=connect_timeout_ms - waited_ms,
                hint=unreachable_hint(bootstrap),
            )
        await clock.sleep(min(POLL_S, (connect_timeout_ms - waited_ms) / 1000))


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
    clock: Clock = SYSTEM_CLOCK,
) -> WorkgroupError:
    """Poll until the daemon must stop; return why (the error it exits with)."""
    tracker = Unreachable(unreachable_timeout_ms)
    tick = 0
    while True:
        tick += 1
        await clock.sleep(POLL_S)
        closed = outputs()
        if closed is not None:
            silence(closed)
            log.warning(
                "app.output_closed",
                stream=closed,
                why=f"the reader of {closed} exited (e.g. '| head'): stopping",
            )
            return OutputClosedError(f"{closed} was closed by its reader; stopped")
        if tick % GROUPS_EVERY:
            continue
        now = clock.monotonic_ms()
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
    "client_id_of",
    "closed_output",
    "process_identity",
    "release_identity",
    "report_replaced",
    "taken_over",
    "unreachable_hint",
    "wait_for_bootstrap",
    "watch",
]
