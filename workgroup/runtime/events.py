"""The ownership event log: one JSON line per acquired, revoked or lost lease.

Append-only, flushed line by line, so that audits and tests can read what each
process owned and when, even after the process was killed.  ``time`` is the
wall clock (seconds since the epoch, the wall time of the log's
:class:`~workgroup.clock.Clock`: the runner's) for readers comparing logs of
several processes on one machine.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Literal, TextIO

from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.types import Key

#: ``warming`` / ``warmup_ended``: a warm-up began / was called off (no ownership:
#: the warming holder owns the resource only from its ``acquired``).
Event = Literal["acquired", "revoked", "lost", "warming", "warmup_ended"]


class OwnershipLog:
    """Appends ownership events to a JSON-lines file."""

    def __init__(
        self, path: str | os.PathLike[str], member: str, *, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.path = Path(path)
        self.member = member
        self._clock = clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = self.path.open("a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def record(self, event: Event, group: str, kind: str, key: Key, token: int) -> None:
        line = json.dumps(
            {
                "time": self._clock.wall(),
                "member": self.member,
                "pid": os.getpid(),
                "group": group,
                "kind": kind,
                "key": key,
                "event": event,
                "token": token,
            }
        )
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        self._file.close()


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every event of a log; a torn last line (a killed writer) is skipped."""
    events = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def unowned_seconds(
    events: list[dict[str, Any]], *, until: float | None = None
) -> dict[tuple[str, str, str], float]:
    """Seconds each resource had no owner, from the merged logs of every process.

    Per ``(group, kind, key)``: from its first acquisition to ``until`` (default:
    the last event), the time during which no lease of it was held — between a
    revocation or loss and the next acquisition.  A process killed without a
    record still counts as the owner until the next acquisition (what its log
    can say), so the figure is a lower bound after crashes.
    """
    ordered = sorted(events, key=lambda e: e["time"])
    end = until if until is not None else (ordered[-1]["time"] if ordered else 0.0)
    holders: dict[tuple[str, str, str], set[tuple[str, int]]] = {}
    since: dict[tuple[str, str, str], float | None] = {}
    total: dict[tuple[str, str, str], float] = {}
    for e in ordered:
        if e["event"] not in ("acquired", "revoked", "lost"):
            continue  # a warm-up neither takes nor gives up ownership
        resource = (e["group"], e["kind"], str(e["key"]))
        held = holders.setdefault(resource, set())
        lease = (f"{e['member']}/{e.get('pid')}", e["token"])
        if e["event"] == "acquired":
            started = since.get(resource)
            if started is not None:
                total[resource] = total.get(resource, 0.0) + e["time"] - started
            held.clear()  # a newer token supersedes whoever held the resource
            held.add(lease)
            since[resource] = None
            total.setdefault(resource, 0.0)
        else:
            held.discard(lease)
            if not held and since.get(resource) is None:
                since[resource] = e["time"]
    for resource, started in since.items():
        if started is not None:
            total[resource] = total.get(resource, 0.0) + max(end - started, 0.0)
    return total


__all__ = ["Event", "OwnershipLog", "read_events", "unowned_seconds"]
