"""The processes a test run started, read from ``/proc`` (Linux)."""

from __future__ import annotations

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
