"""The checkpoint age a lease reports is measured on the runner's clock, the one
its commits are stamped with."""

from __future__ import annotations

from dataclasses import dataclass

from workgroup.runtime.metrics import RuntimeMetrics
from workgroup.testing import FakeClock
from workgroup.types import Key


@dataclass
class CommittedLease:
    kind: str
    key: Key
    token: int
    last_commit_s: float | None


def test_the_checkpoint_age_moves_with_the_clock_it_is_given() -> None:
    clock = FakeClock(100.0)
    metrics = RuntimeMetrics(per_resource=True)
    lease = CommittedLease("shard", 3, 7, last_commit_s=98.5)
    metrics.lease_started("g", "shard", "active", 0.01, lease, clock)
    labels = {"group": "g", "kind": "shard", "key": "3"}
    assert metrics.registry.get_sample_value("workgroup_checkpoint_age_seconds", labels) == 1.5
    clock.advance(2.0)
    assert metrics.registry.get_sample_value("workgroup_checkpoint_age_seconds", labels) == 3.5
