"""Check ownership event logs: no exclusive resource is ever owned by two members.

Input: one :class:`MemberLog` per member *process* (a restarted member is a new
process with a new log), each the event lines ``workgroup member`` prints
(``{"event": ..., "resources": [[kind, key], ...], "t": unix_time, ...}``), plus
what the test did to the process: when it was killed (SIGKILL) and when it was
frozen (SIGSTOP .. SIGCONT).  Every timestamp must come from one clock (the
processes run on one machine).

When a process owns a resource
------------------------------

A process owns ``r`` from its ``assigned`` event naming ``r`` until the first of

* its ``revoked`` or ``lost`` event naming ``r``;
* its death: the kill time the test recorded (taken *after* the process was
  reaped, so the interval is never shorter than the truth);
* otherwise, if the log simply ends, for ever (the process still runs).

One refinement makes paused processes checkable.  A frozen process cannot act,
so a member paused past its session timeout legitimately has its resources
handed to someone else while it is frozen, and it can only report the loss
after it is resumed.  If a ``lost`` event is the *first* event the process logs
after a pause, and it comes within ``resume_grace`` seconds of the resume, the
ownership is taken to have ended when the pause began: the member reported the
loss before doing anything else.  Any later ``lost`` counts at its own time, so
a member that keeps running on resources it no longer holds is caught.

What is checked
---------------

* **Exclusivity**: no two processes' intervals for one resource overlap (an
  ``assigned`` at the very instant the previous owner's interval ends is a
  legal handover).
* **Log consistency**: a process is not assigned what it already owns, does not
  revoke or lose what it does not own, reports ``stable`` with exactly what its
  events say it owns, and owns nothing when it logs ``closed``.
* **Final coverage** (if the expected resources are given): every resource is
  owned by exactly one process at the end, and nothing else is owned.

Use :func:`check_ownership`; it returns an :class:`OwnershipReport` whose
:meth:`~OwnershipReport.raise_for_violations` raises :class:`OwnershipViolation`
with every problem listed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from workgroup.types import Key, Resource

Event = Mapping[str, Any]

ViolationKind = Literal["overlap", "log", "coverage"]
EndReason = Literal["revoked", "lost", "lost while paused", "killed", "still owned"]


class OwnershipViolation(AssertionError):
    """The logs break the ownership invariant (the message lists every violation)."""

    def __init__(self, violations: Sequence[Violation]) -> None:
        self.violations = tuple(violations)
        lines = [f"{len(self.violations)} ownership violation(s):"]
        lines += [f"  [{v.kind}] {v.message}" for v in self.violations[:50]]
        if len(self.violations) > 50:
            lines.append(f"  ... and {len(self.violations) - 50} more")
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class MemberLog:
    """The events of one member process and what was done to it."""

    name: str
    events: Sequence[Event]
    #: When the process was killed (SIGKILL), taken after it was reaped.
    killed_at: float | None = None
    #: ``(stopped_at, resumed_at)`` of each SIGSTOP .. SIGCONT.
    paused: Sequence[tuple[float, float]] = ()


@dataclass(frozen=True, order=True)
class Ownership:
    """One process's ownership of one resource, ``start <= t < end``."""

    start: float
    end: float
    resource: Resource = field(compare=False)
    member: str = field(compare=False)
    end_reason: EndReason = field(compare=False)

    @property
    def open(self) -> bool:
        return math.isinf(self.end)


@dataclass(frozen=True)
class Violation:
    kind: ViolationKind
    message: str
    resource: Resource | None = None
    members: tuple[str, ...] = ()


@dataclass
class OwnershipReport:
    """Everything :func:`check_ownership` found."""

    intervals: list[Ownership]
    violations: list[Violation]
    #: ``resource -> processes owning it at the end`` (open intervals).
    final_owners: dict[Resource, list[str]]

    @property
    def ok(self) -> bool:
        return not self.violations

    def raise_for_violations(self) -> None:
        if self.violations:
            raise OwnershipViolation(self.violations)

    def final_load(self) -> dict[str, int]:
        """``process -> number of resources it owns at the end``."""
        load: dict[str, int] = {}
        for owners in self.final_owners.values():
            for owner in owners:
                load[owner] = load.get(owner, 0) + 1
        return load


# --- reading logs ---------------------------------------------------------------


def parse_events(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Event lines (JSON, one per line; blank lines skipped) as dicts.

    Raises ``ValueError`` naming the line number of a line that is not an event.
    """
    events: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line {number} is not JSON: {line[:80]!r}") from exc
        if not isinstance(event, dict) or "event" not in event or "t" not in event:
            raise ValueError(f"line {number} is not an event (needs 'event' and 't')")
        events.append(event)
    return events


def read_log(
    path: str | Path,
    *,
    name: str | None = None,
    killed_at: float | None = None,
    paused: Sequence[tuple[float, float]] = (),
) -> MemberLog:
    """A :class:`MemberLog` from a file of event lines."""
    path = Path(path)
    with path.open(encoding="utf-8") as handle:
        events = parse_events(handle)
    return MemberLog(name or path.stem, events, killed_at, tuple(paused))


def _resources(event: Event) -> list[Resource]:
    out: list[Resource] = []
    for item in event.get("resources", ()):
        kind, key = item
        out.append((str(kind), _key(key)))
    return out


def _key(key: Any) -> Key:
    if isinstance(key, bool) or not isinstance(key, int | str):
        raise ValueError(f"resource keys are strings or integers, got {key!r}")
    return key


def _show(resource: Resource) -> str:
    return f"{resource[0]}:{resource[1]}"


# --- intervals ------------------------------------------------------------------


def ownership_intervals(
    log: MemberLog, *, resume_grace: float = 1.0
) -> tuple[list[Ownership], list[Violation]]:
    """One process's ownership intervals, and any inconsistencies in its log."""
    violations: list[Violation] = []
    intervals: list[Ownership] = []
    opened: dict[Resource, float] = {}
    last_t: float | None = None
    pauses = sorted(log.paused)

    def problem(message: str, resource: Resource | None = None) -> None:
        violations.append(Violation("log", f"{log.name}: {message}", resource, (log.name,)))

    for index, event in enumerate(log.events):
        kind = event.get("event")
        t = float(event["t"])
        if last_t is not None and t < last_t:
            problem(f"event {index} ({kind}) is dated before the previous one")
        if kind == "assigned":
            for resource in _resources(event):
                if resource in opened:
                    problem(f"assigned {_show(resource)} it already owns", resource)
                else:
                    opened[resource] = t
        elif kind in ("revoked", "lost"):
            end_reason: EndReason = "revoked" if kind == "revoked" else "lost"
            end = t
            if kind == "lost":
                pause = _pause_before(pauses, t, last_t, resume_grace)
                if pause is not None:
                    end_reason = "lost while paused"
                    end = pause[0]
            for resource in _resources(event):
                start = opened.pop(resource, None)
                if start is None:
                    problem(f"{kind} {_show(resource)} it does not own", resource)
                    continue
                intervals.append(Ownership(start, max(start, end), resource, log.name, end_reason))
        elif kind == "stable":
            claimed = set(_resources(event))
            if claimed != set(opened):
                extra = sorted(_show(r) for r in claimed - set(opened))
                missing = sorted(_show(r) for r in set(opened) - claimed)
                problem(
                    f"stable (generation {event.get('generation')}) disagrees with its "
                    f"events: claims {extra or 'nothing more'}, omits {missing or 'nothing'}"
                )
        elif kind == "closed" and opened:
            problem(f"closed while owning {sorted(_show(r) for r in opened)}")
        last_t = t
    end = log.killed_at if log.killed_at is not None else math.inf
    reason: EndReason = "killed" if log.killed_at is not None else "still owned"
    for resource, start in opened.items():
        intervals.append(Ownership(start, max(start, end), resource, log.name, reason))
    return intervals, violations


def _pause_before(
    pauses: Sequence[tuple[float, float]], t: float, previous_t: float | None, grace: float
) -> tuple[float, float] | None:
    """The pause a ``lost`` at ``t`` is the first thing logged after, if any."""
    for stopped, resumed in reversed(pauses):
        if resumed <= t:
            first_after_resume = previous_t is None or previous_t <= resumed
            if first_after_resume and t - resumed <= grace:
                return stopped, resumed
            return None
    return None


# --- the check --------------------------------------------------------------------


def check_ownership(
    logs: Iterable[MemberLog],
    resources: Collection[Resource] | None = None,
    *,
    resume_grace: float = 1.0,
) -> OwnershipReport:
    """Check exclusivity over every log, and final coverage of ``resources``.

    ``resources``: the resources that must each be owned exactly once at the end
    (``None``: only check that none is owned twice).
    """
    intervals: list[Ownership] = []
    violations: list[Violation] = []
    names: set[str] = set()
    for log in logs:
        if log.name in names:
            raise ValueError(f"two logs are named {log.name!r}")
        names.add(log.name)
        found, problems = ownership_intervals(log, resume_grace=resume_grace)
        intervals.extend(found)
        violations.extend(problems)

    by_resource: dict[Resource, list[Ownership]] = {}
    for interval in intervals:
        by_resource.setdefault(interval.resource, []).append(interval)
    for resource, owned in sorted(by_resource.items(), key=lambda item: _show(item[0])):
        owned.sort()
        holder = owned[0]
        for interval in owned[1:]:
            if interval.start < holder.end and interval.end > interval.start:
                overlap = min(holder.end, interval.end) - interval.start
                violations.append(
                    Violation(
                        "overlap",
                        f"{_show(resource)} owned by {holder.member} "
                        f"[{holder.start:.3f}, {holder.end:.3f}) ({holder.end_reason}) and by "
                        f"{interval.member} from {interval.start:.3f}: "
                        f"{_duration(overlap)} of double ownership",
                        resource,
                        (holder.member, interval.member),
                    )
                )
            if interval.end > holder.end:
                holder = interval

    final: dict[Resource, list[str]] = {}
    for interval in intervals:
        if interval.open:
            final.setdefault(interval.resource, []).append(interval.member)
    for resource, owners in sorted(final.items(), key=lambda item: _show(item[0])):
        if len(owners) > 1:
            violations.append(
                Violation(
                    "coverage",
                    f"{_show(resource)} is owned by {len(owners)} processes at the end: "
                    f"{sorted(owners)}",
                    resource,
                    tuple(sorted(owners)),
                )
            )
    if resources is not None:
        expected = set(resources)
        unowned = sorted(_show(r) for r in expected - set(final))
        if unowned:
            violations.append(
                Violation("coverage", f"{len(unowned)} resource(s) unowned at the end: {unowned}")
            )
        unknown = sorted(_show(r) for r in set(final) - expected)
        if unknown:
            violations.append(
                Violation("coverage", f"resources nobody should own are owned: {unknown}")
            )
    intervals.sort()
    return OwnershipReport(intervals, violations, final)


def _duration(seconds: float) -> str:
    return "for ever" if math.isinf(seconds) else f"{seconds * 1000:.1f} ms"


__all__ = [
    "MemberLog",
    "Ownership",
    "OwnershipReport",
    "OwnershipViolation",
    "Violation",
    "check_ownership",
    "ownership_intervals",
    "parse_events",
    "read_log",
]
