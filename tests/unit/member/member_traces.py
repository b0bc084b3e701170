"""Records what member machines do: every event a driver feeds a
:class:`~workgroup.member.state.MemberMachine`, with ``now``, the actions it
returned (their meaningful fields, in order), and the state and deadline after.

A refactoring of the machine must leave these traces unchanged; the guard is
``test_member_traces.py``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from workgroup.member.state import MemberMachine

#: The machine's events: each call from a driver is one line of the trace.
EVENTS = (
    "start",
    "coordinator_found",
    "find_coordinator_failed",
    "response",
    "request_failed",
    "callback_done",
    "callback_failed",
    "released",
    "assignment_done",
    "resources_changed",
    "request_rejoin",
    "ready",
    "drain",
    "release",
    "refuse",
    "fail",
    "tick",
    "commit",
    "commit_answered",
    "close",
)


def canonical(value: Any) -> Any:
    """A JSON value that says the same in every process (no addresses, sets sorted)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, BaseException):
        return [type(value).__name__, str(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            "@": type(value).__name__,
            **{f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)},
        }
    if isinstance(value, Mapping):
        items = [[canonical(k), canonical(v)] for k, v in value.items()]
        return sorted(items, key=lambda kv: json.dumps(kv[0], sort_keys=True))
    if isinstance(value, set | frozenset):
        return sorted((canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, tuple | list):
        return [canonical(v) for v in value]
    # Objects such as assignors: their type and name, never their address.
    return [type(value).__name__, getattr(value, "name", None)]


class Recorder:
    """Wraps the machine's events while active; numbers machines by creation."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._ids: dict[int, int] = {}
        self._machines: list[MemberMachine] = []  # keeps ids from being reused
        self._depth = 0

    def machine_id(self, machine: MemberMachine) -> int:
        key = id(machine)
        if key not in self._ids:
            self._ids[key] = len(self._ids)
            self._machines.append(machine)
        return self._ids[key]

    def record(self, machine: MemberMachine, event: str, now: int, actions: list[Any]) -> None:
        line = [
            self.machine_id(machine),
            event,
            now,
            [canonical(a) for a in actions],
            machine.state.name,
            machine.generation,
            machine.next_deadline(),
        ]
        self.lines.append(json.dumps(line, sort_keys=True, separators=(",", ":")))

    def digest(self) -> str:
        sha = hashlib.sha256()
        for line in self.lines:
            sha.update(line.encode())
            sha.update(b"\n")
        return sha.hexdigest()[:24]


@contextmanager
def recording() -> Iterator[Recorder]:
    """Record every machine event (outermost calls only) until the block ends."""
    recorder = Recorder()
    originals = {name: getattr(MemberMachine, name) for name in EVENTS}

    def wrap(name: str, method: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
        @functools.wraps(method)
        def wrapper(self: MemberMachine, now: int, *args: Any, **kwargs: Any) -> list[Any]:
            recorder._depth += 1
            try:
                actions = method(self, now, *args, **kwargs)
            finally:
                recorder._depth -= 1
            if recorder._depth == 0:
                recorder.record(self, name, now, actions)
            return actions

        return wrapper

    for name, method in originals.items():
        setattr(MemberMachine, name, wrap(name, method))
    try:
        yield recorder
    finally:
        for name, method in originals.items():
            setattr(MemberMachine, name, method)
