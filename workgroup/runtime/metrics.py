"""Prometheus metrics of a running app (one registry per runner).

| metric | type | labels |
|---|---|---|
| ``workgroup_rebalances_total`` | counter | group |
| ``workgroup_rebalance_seconds`` | histogram: from leaving settled to settled again | group |
| ``workgroup_owned_resources`` | gauge | group, kind, role |
| ``workgroup_member_stable`` | gauge: 1 while settled | group |
| ``workgroup_heartbeat_age_seconds`` | gauge: since the newest proof of the session | group |
| ``workgroup_handler_restarts_total`` | counter | group |
| ``workgroup_handler_failures_total`` | counter | group |
| ``workgroup_failing_handlers`` | gauge: failed ``max_failures`` times in a row | group |
| ``workgroup_lease_acquire_seconds`` | histogram: assignment to token committed | group |
| ``workgroup_leases_ended_total`` | counter: revoked, lost or fenced | group, kind, reason |
| ``workgroup_warming_leases`` | gauge: warm-ups running here | group, kind |
| ``workgroup_warmup_seconds`` | histogram: warm-up start to ``ready()`` | group |
| ``workgroup_warmups_total`` | counter: warm-ups ended | group, kind, outcome |
| ``workgroup_moves_total`` | counter: moves begun while this process led | group, reason, how |
| ``workgroup_catalog_resources`` | gauge: resources in the list last read | group, kind |
| ``workgroup_event_loop_lag_seconds`` | gauge: how late the loop runs timers | |
| ``workgroup_process_info`` | info: always 1 | identity, app, instance_id, host, pid |
| ``workgroup_lease_token`` | gauge (``resource_metrics``) | group, kind, key |
| ``workgroup_checkpoint_age_seconds`` | gauge (``resource_metrics``) | group, kind, key |

Moves are counted by the group's leader, in the round each begins
(:mod:`workgroup.member.moves`): ``reason`` is join, rebalance, balance,
drain, leave, failover or catalog, ``how`` warmup or plain.  Every process
counts the rounds it led, so the group's moves are
``sum by (group, reason, how) (rate(workgroup_moves_total[5m]))``.

A lease ends *revoked* (handed over), *lost* (the session is gone) or *fenced*
(the coordinator refused its commit).  The checkpoint age counts from the
holder's last commit, its token's included.

Every series of a group exists from the moment the process watches it, at 0
(owned resources per kind, failures, restarts, ended leases), so alert rules
and dashboards see a value, not an absent series.  The per-resource series
are off by default: one series per key can be too many for Prometheus.

Resources nobody owns, across the processes of a group:
``max by (group) (workgroup_catalog_resources) - sum by (group)
(workgroup_owned_resources{role="active"})`` (the alert rules in ``deploy/``).
How long a resource had no owner at all is not something one process can see;
:func:`workgroup.runtime.events.unowned_seconds` computes it from the ownership
event logs of every process.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import generate_latest

from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.member.driver import GroupMember
from workgroup.member.moves import MOVE_HOWS, MOVE_REASONS
from workgroup.types import Key, Resource

#: ``workgroup_leases_ended_total``'s reasons.
END_REASONS = ("revoked", "lost", "fenced")


class LagSource(Protocol):
    """What reports the event loop's lag (:class:`~workgroup.runtime.loopwatch.LoopWatch`)."""

    def lag_s(self) -> float: ...


class HeldLease(Protocol):
    """What the per-resource series read of a lease."""

    @property
    def kind(self) -> str: ...

    @property
    def key(self) -> Key: ...

    @property
    def token(self) -> int: ...

    @property
    def last_commit_s(self) -> float | None: ...


REBALANCE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
ACQUIRE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


class RuntimeMetrics:
    """The app's metrics; groups register their member and report their leases."""

    def __init__(self, *, per_resource: bool = False) -> None:
        self.per_resource = per_resource
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.rebalances = Counter(
            "workgroup_rebalances", "Rebalances (generations joined)", ["group"], registry=r
        )
        self.rebalance_seconds = Histogram(
            "workgroup_rebalance_seconds",
            "From leaving the settled state to settled again",
            ["group"],
            buckets=REBALANCE_BUCKETS,
            registry=r,
        )
        self.owned = Gauge(
            "workgroup_owned_resources", "Leases held", ["group", "kind", "role"], registry=r
        )
        self.stable = Gauge("workgroup_member_stable", "1 while settled", ["group"], registry=r)
        self.heartbeat_age = Gauge(
            "workgroup_heartbeat_age_seconds",
            "Seconds since the newest request that proved the session alive was sent",
            ["group"],
            registry=r,
        )
        self.restarts = Counter(
            "workgroup_handler_restarts", "Handler restarts", ["group"], registry=r
        )
        self.failures = Counter(
            "workgroup_handler_failures", "Handler failures", ["group"], registry=r
        )
        self.failing = Gauge(
            "workgroup_failing_handlers",
            "Handlers that failed max_failures times in a row (also on /healthz)",
            ["group"],
            registry=r,
        )
        self.acquire_seconds = Histogram(
            "workgroup_lease_acquire_seconds",
            "From assignment to the lease's token committed",
            ["group"],
            buckets=ACQUIRE_BUCKETS,
            registry=r,
        )
        self.leases_ended = Counter(
            "workgroup_leases_ended",
            "Leases that ended: revoked (handed over), lost (session gone), fenced",
            ["group", "kind", "reason"],
            registry=r,
        )
        self.warming = Gauge(
            "workgroup_warming_leases",
            "Resources warming up here for a planned move (another process holds them)",
            ["group", "kind"],
            registry=r,
        )
        self.warmup_seconds = Histogram(
            "workgroup_warmup_seconds",
            "Time from a warm-up's start to its ready()",
            ["group"],
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=r,
        )
        self.warmups = Counter(
            "workgroup_warmups",
            "Warm-ups ended, by outcome: cut_over (the resource moved here) or called_off",
            ["group", "kind", "outcome"],
            registry=r,
        )
        self.moves = Counter(
            "workgroup_moves",
            "Moves begun while this process led its group, by reason and how (warmup/plain)",
            ["group", "reason", "how"],
            registry=r,
        )
        self.catalog = Gauge(
            "workgroup_catalog_resources",
            "Resources in the group's list as this process last read it",
            ["group", "kind"],
            registry=r,
        )
        self.loop_lag = Gauge(
            "workgroup_event_loop_lag_seconds",
            "How late the event loop runs its timers (a blocked or starved loop)",
            registry=r,
        )
        self.lease_token = Gauge(
            "workgroup_lease_token",
            "Fencing token of each lease held (resource_metrics)",
            ["group", "kind", "key"],
            registry=r,
        )
        self.checkpoint_age = Gauge(
            "workgroup_checkpoint_age_seconds",
            "Seconds since each held lease's last commit (resource_metrics)",
            ["group", "kind", "key"],
            registry=r,
        )
        self.process = Info(
            "workgroup_process",
            "This process: the identity in its client ids, logs and event log",
            registry=r,
        )
        self._members: dict[str, GroupMember] = {}
        #: ``(group, resource) -> "failed N times in a row: error"``.
        self._failing: dict[tuple[str, Resource], str] = {}

    def identify(self, identity: str, app: str, instance_id: str | None) -> None:
        """Publish the runner's identity (``workgroup_process_info``)."""
        self.process.info(
            {
                "identity": identity,
                "app": app,
                "instance_id": instance_id or "",
                "host": socket.gethostname(),
                "pid": str(os.getpid()),
            }
        )

    def watch_loop(self, source: LagSource) -> None:
        """Publish the event loop's lag as ``source`` measures it."""
        self.loop_lag.set_function(source.lag_s)

    def watch(
        self,
        group: str,
        member: GroupMember,
        kinds: Iterable[str] = (),
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """Follow ``member``'s rebalances and stability (timed on ``clock``, the
        member's); every series of the group starts at 0 for ``kinds``."""
        self._members[group] = member
        self.stable.labels(group).set(0)
        self.failures.labels(group)
        self.restarts.labels(group)
        self.failing.labels(group).set(0)
        self.rebalances.labels(group)
        for move_reason in MOVE_REASONS:
            for how in MOVE_HOWS:
                self.moves.labels(group, move_reason, how)
        for kind in kinds:
            self.owned.labels(group, kind, "active").inc(0)
            for reason in END_REASONS:
                self.leases_ended.labels(group, kind, reason)
        self.heartbeat_age.labels(group).set_function(_age_of(member))
        unsettled_since: list[int | None] = [clock.monotonic_ms()]
        seen = [member.rebalances]
        moves_seen: dict[tuple[str, str], int] = dict(member.moves_total)

        def changed(m: GroupMember) -> None:
            if m.rebalances != seen[0]:
                self.rebalances.labels(group).inc(m.rebalances - seen[0])
                seen[0] = m.rebalances
            for (why, how), count in m.moves_total.items():
                before = moves_seen.get((why, how), 0)
                if count != before:
                    # Lower: the member's machine started afresh, its totals from 0.
                    self.moves.labels(group, why, how).inc(
                        count - before if count > before else count
                    )
                    moves_seen[why, how] = count
            settled = m.stable
            self.stable.labels(group).set(1 if settled else 0)
            if settled and unsettled_since[0] is not None:
                elapsed = (clock.monotonic_ms() - unsettled_since[0]) / 1000
                self.rebalance_seconds.labels(group).observe(elapsed)
                unsettled_since[0] = None
            elif not settled and unsettled_since[0] is None:
                unsettled_since[0] = clock.monotonic_ms()

        member.add_listener(changed)

    def catalog_read(self, group: str, kind: str, count: int) -> None:
        """The resource list was read: ``count`` resources (every member reads
        it, so the list's size less the resources owned is what nobody owns)."""
        self.catalog.labels(group, kind).set(count)

    def lease_started(
        self,
        group: str,
        kind: str,
        role: str,
        acquire_s: float | None,
        lease: HeldLease | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.owned.labels(group, kind, role).inc()
        if acquire_s is not None:
            self.acquire_seconds.labels(group).observe(acquire_s)
        if self.per_resource and lease is not None and role == "active":
            key = str(lease.key)
            self.lease_token.labels(group, kind, key).set(lease.token)
            held = lease

            def age() -> float:
                last = held.last_commit_s
                return float("nan") if last is None else max(clock.monotonic() - last, 0.0)

            self.checkpoint_age.labels(group, kind, key).set_function(age)

    def lease_ended(
        self, group: str, kind: str, role: str, reason: str = "revoked", key: object = None
    ) -> None:
        self.owned.labels(group, kind, role).dec()
        if role == "active":
            self.leases_ended.labels(group, kind, reason).inc()
            if self.per_resource and key is not None:
                for gauge in (self.lease_token, self.checkpoint_age):
                    with contextlib.suppress(KeyError):
                        gauge.remove(group, kind, str(key))

    def warmup_started(self, group: str, kind: str) -> None:
        self.warming.labels(group, kind).inc()

    def warmup_ended(self, group: str, kind: str, outcome: str, warmed_s: float | None) -> None:
        """A warm-up ended: ``cut_over`` or ``called_off``; ``warmed_s``: until ready()."""
        self.warming.labels(group, kind).dec()
        self.warmups.labels(group, kind, outcome).inc()
        if warmed_s is not None:
            self.warmup_seconds.labels(group).observe(warmed_s)

    def handler_failed(self, group: str) -> None:
        self.failures.labels(group).inc()

    def handler_restarted(self, group: str) -> None:
        self.restarts.labels(group).inc()

    def handler_failing(self, group: str, resource: Resource, failures: int, error: str) -> None:
        """``resource``'s handler failed ``failures`` times in a row (``max_failures``)."""
        if (group, resource) not in self._failing:
            self.failing.labels(group).inc()
        self._failing[group, resource] = f"failed {failures} times in a row: {error}"

    def handler_recovered(self, group: str, resource: Resource) -> None:
        """It is no longer failing: it ran long enough, or it stopped."""
        if self._failing.pop((group, resource), None) is not None:
            self.failing.labels(group).dec()

    def unhealthy(self) -> list[str]:
        """Why the app is not healthy: each group whose member is not settled,
        and each failing handler."""
        problems = [
            f"{group}: handler of {kind}/{key} {why}"
            for (group, (kind, key)), why in sorted(self._failing.items(), key=repr)
        ]
        for group, member in sorted(self._members.items()):
            if not member.stable:
                state = member.state.value
                # STABLE but not settled: a callback or a follow-up round is due.
                problems.append(f"{group}: {state}{' (settling)' if state == 'stable' else ''}")
        return problems

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _age_of(member: GroupMember) -> Callable[[], float]:
    def age() -> float:
        value = member.heartbeat_age_s
        return float("nan") if value is None else value

    return age


def end_reason(why: str | None) -> str:
    """A lease's ``end_reason`` as a ``workgroup_leases_ended_total`` reason."""
    if why is None or why == "revoked":
        return "revoked"
    return "fenced" if why.startswith("fenced") else "lost"


__all__ = ["END_REASONS", "RuntimeMetrics", "end_reason"]
