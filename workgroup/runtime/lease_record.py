"""What a group's runner records of its leases: metrics and the ownership
event log (:mod:`workgroup.runtime.events`).

Rules:

1. A lease's acquisition is timed from when its resource was assigned (or cut
   over, or promoted) to this process; a run that ends after its resource was
   handed back (the runner's rule 4) leaves the next run's timing alone.
2. The event log records exclusive ownership: ``acquired`` and ``revoked`` /
   ``lost`` of active leases that took a token; standby holders are not in it.
   Warm-ups are recorded as ``warming`` and, when called off, ``warmup_ended``.
"""

from __future__ import annotations

from workgroup.assignors.standby import standby_kind
from workgroup.clock import Clock
from workgroup.runtime.events import OwnershipLog
from workgroup.runtime.handlers import HandlerRun
from workgroup.runtime.lease import EndReason, Lease
from workgroup.runtime.metrics import RuntimeMetrics, end_reason
from workgroup.types import Key, Resource


class LeaseRecord:
    """One group's lease metrics and ownership events."""

    def __init__(
        self, group_id: str, metrics: RuntimeMetrics, events: OwnershipLog | None, clock: Clock
    ) -> None:
        self.group_id = group_id
        self._metrics = metrics
        self._events = events
        self._clock = clock
        self._assigned_at: dict[Resource, float] = {}

    def assigned(self, resource: Resource) -> None:
        """``resource`` is this process's from now: its lease's acquisition is timed from here."""
        self._assigned_at[resource] = self._clock.monotonic()

    def acquired(self, lease: Lease) -> None:
        kind = standby_kind(lease.kind) if lease.role == "standby" else lease.kind
        assigned_at = self._assigned_at.pop((kind, lease.key), None)
        acquire_s = None if assigned_at is None else self._clock.monotonic() - assigned_at
        self._metrics.lease_started(
            self.group_id, lease.kind, lease.role, acquire_s, lease, self._clock
        )
        if self._events is not None and lease.role == "active":
            self._events.record("acquired", self.group_id, lease.kind, lease.key, lease.token)

    def ended(
        self, resource: Resource, run: HandlerRun, event: EndReason, *, handed_back: bool = False
    ) -> None:
        """The end of ``run``; ``handed_back``: the resource already has its next
        run, whose acquisition is still to be timed (rule 1)."""
        if not handed_back:
            self._assigned_at.pop(resource, None)
        if run.failing:
            self._metrics.handler_recovered(self.group_id, resource)
        if run.started:
            self._metrics.lease_ended(
                self.group_id,
                run.lease.kind,
                run.lease.role,
                end_reason(run.lease.end_reason),
                run.lease.key,
            )
        if self._events is not None and run.lease.token and run.lease.role == "active":
            self._events.record(
                "revoked" if event is EndReason.REVOKED else "lost",
                self.group_id,
                run.lease.kind,
                run.lease.key,
                run.lease.token,
            )

    def warming(self, kind: str, key: Key) -> None:
        self._metrics.warmup_started(self.group_id, kind)
        if self._events is not None:
            self._events.record("warming", self.group_id, kind, key, 0)

    def warmup_called_off(self, resource: Resource, warmed_s: float | None) -> None:
        self._metrics.warmup_ended(self.group_id, resource[0], "called_off", warmed_s)
        if self._events is not None:
            self._events.record("warmup_ended", self.group_id, resource[0], resource[1], 0)


__all__ = ["LeaseRecord"]
