"""The ownership event log: one JSON line per acquired, revoked or lost lease.

Append-only, flushed line by line, so that audits and tests can read what each
process owned and when, even after the process was killed.  ``time`` is the
wall clock (seconds since the epoch) for readers comparing logs of several
processes on one machine.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Literal, TextIO

from workgroup.types import Key

Event = Literal["acquired", "revoked", "lost"]


class OwnershipLog:
    """Appends ownership events to a JSON-lines file."""

    def __init__(self, path: str | os.PathLike[str], member: str) -> None:
        self.path = Path(path)
        self.member = member
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = self.path.open("a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def record(self, event: Event, group: str, kind: str, key: Key, token: int) -> None:
        line = json.dumps(
            {
                "time": time.time(),
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


__all__ = ["Event", "OwnershipLog", "read_events"]
