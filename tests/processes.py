"""The processes a test run started, read from ``/proc`` (Linux)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PROC = Path("/proc")


def _stat(pid: int) -> tuple[str, int] | None:
    """The state and parent pid of ``pid`` (``None``: no such process)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # ``pid (command) state ppid ...``: the command may hold spaces and parentheses.
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def is_running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (ended, waiting to be reaped)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def command(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def descendants(root: int) -> list[int]:
    """Every running process below ``root`` (children, their children...)."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] != "Z":
                children.setdefault(stat[1], []).append(int(entry.name))
    found: list[int] = []
    pending = [root]
    while pending:
        below = children.get(pending.pop(), [])
        found.extend(below)
        pending.extend(below)
    return found


def marked(pid: int, name: str, value: str) -> bool:
    """``pid`` started with ``name=value`` in its environment (another user's
    process cannot be read: not ours)."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{name}={value}".encode() in environ.split(b"\0")


def ancestors(pid: int) -> set[int]:
    found: set[int] = set()
    while (stat := _stat(pid)) is not None and stat[1] > 0:
        pid = stat[1]
        found.add(pid)
    return found


#: multiprocessing's helper processes: they serve their parent and end with it.
HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def left_behind(me: int, name: str, value: str) -> list[int]:
    """The running processes ``me`` started: below it, or orphaned (their parent
    died) but started with ``name=value`` in their environment; not ``me`` or
    its ancestors, not its own multiprocessing helpers."""
    mine = set(descendants(me))
    for entry in PROC.iterdir():
        if entry.name.isdigit() and marked(int(entry.name), name, value):
            mine.add(int(entry.name))
    mine -= {me} | ancestors(me)
    helpers = {
        pid for pid in mine if _parent(pid) == me and any(h in command(pid) for h in HELPERS)
    }
    return sorted(pid for pid in mine - helpers if is_running(pid))


def _parent(pid: int) -> int | None:
    stat = _stat(pid)
    return None if stat is None else stat[1]


def threads(pid: int) -> dict[int, tuple[str, int]]:
    """``tid -> (name, niceness)`` of every thread of ``pid`` (one that ends
    meanwhile is left out: HotSpot ends idle compiler threads on big machines)."""
    found = {}
    for task in (PROC / str(pid) / "task").iterdir():
        tid = int(task.name)
        with contextlib.suppress(OSError):
            found[tid] = ((task / "comm").read_text().strip(), os.getpriority(os.PRIO_PROCESS, tid))
    return found
