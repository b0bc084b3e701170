"""A warm-up runs its dry run only where the shard's plan is new (``workgroup_spark.query``
rule 2): in the daemon's own JVM before a batch of the plan ran there, one at a
time, and never on a Spark Connect server (which runs the plan for the shard's
owner already).  Spark is faked; the dry run itself is tested in test_dry_run.py."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from tests.unit.runtime.test_lease import FakeStore
from tests.unit.spark_plugin.test_plugin import REPORT, FakeSession, FakeWriter, _until
from workgroup.runtime.lease import EndReason, Lease, Slot
from workgroup.testing import capture_logs
from workgroup_spark import query as query_module
from workgroup_spark.dry_run import DryRunOutcome
from workgroup_spark.progress import SparkMetrics
from workgroup_spark.query import ShardQuery


class RecordedDryRuns:
    """Stands in for :func:`workgroup_spark.dry_run.dry_run`: counts the runs, and
    how many ran at once; each takes ``seconds`` and finds ``rows``."""

    def __init__(self, rows: int = 50, seconds: float = 0.2) -> None:
        self.rows, self.seconds = rows, seconds
        #: Set: each run lasts until it is opened instead (the test decides when).
        self.gate: threading.Event | None = None
        self.keys: list[str] = []
        self.running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def __call__(self, spark: Any, build: Any, lease: Lease, **options: Any) -> DryRunOutcome:
        with self._lock:
            self.keys.append(str(lease.key))
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        if self.gate is not None:
            assert self.gate.wait(10), "the test never opened the gate"
        else:
            time.sleep(self.seconds)
        with self._lock:
            self.running -= 1
        return DryRunOutcome(rows=self.rows, duration_ms={"addBatch": 100})


class ConnectSession(FakeSession):
    remote = True


def _handler(session: FakeSession, writer: FakeWriter) -> ShardQuery:
    return ShardQuery(
        app_name="etl",
        build=lambda spark, lease: writer,
        session=session,  # type: ignore[arg-type]
        checkpoint_root=lambda: "/ckpt",
        metrics=SparkMetrics(),
        poll_interval_s=0.02,
        dry_run=True,
    )


def _warming(key: str, ready: list[str]) -> Lease:
    return Lease(
        "etl.shard",
        "shard",
        key,
        slot=Slot("t", int(key[-1])),
        store=FakeStore(),
        role="warming",
        commit_timeout_s=2,
        ready_sink=lambda: ready.append(key),
    )


@pytest.fixture
def dry_runs(monkeypatch: pytest.MonkeyPatch) -> RecordedDryRuns:
    recorded = RecordedDryRuns()
    monkeypatch.setattr(query_module, "dry_run", recorded)
    return recorded


async def _warm_up(handler: ShardQuery, keys: list[str]) -> list[dict[str, Any]]:
    """Warm ``keys`` up at once until each is ready, then call the moves off; the
    log events of the dry runs."""
    ready: list[str] = []
    leases = [_warming(key, ready) for key in keys]
    with capture_logs() as logs:
        tasks = [asyncio.create_task(handler(lease)) for lease in leases]
        await _until(lambda: sorted(ready) == sorted(keys))
        for lease in leases:
            lease.end(EndReason.WARMUP_ENDED)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
    return [e for e in logs if e["event"].startswith("spark.") and "dry_run" in e["event"]]


async def test_a_daemon_that_joins_runs_one_dry_run_and_its_other_warm_ups_skip_theirs(
    dry_runs: RecordedDryRuns,
) -> None:
    handler = _handler(FakeSession(), FakeWriter())
    events = await _warm_up(handler, ["s-1", "s-2", "s-3"])
    assert len(dry_runs.keys) == 1  # the first warmed the plan for the others
    assert dry_runs.most_at_once == 1
    assert handler.plan_ran
    skipped = [e for e in events if e["event"] == "spark.dry_run_skipped"]
    assert len(skipped) == 2
    assert {e["why"] for e in skipped} == {
        "a batch of this plan has run in this daemon's session already"
    }
    [ran] = [e for e in events if e["event"] == "spark.query_dry_run"]
    assert ran["rows"] == 50


async def test_a_dry_run_without_rows_leaves_the_next_warm_up_its_own(
    dry_runs: RecordedDryRuns,
) -> None:
    dry_runs.rows = 0  # no input yet: nothing of the plan ran
    handler = _handler(FakeSession(), FakeWriter())
    await _warm_up(handler, ["s-1"])
    await _warm_up(handler, ["s-2"])
    assert dry_runs.keys == ["s-1", "s-2"]
    assert not handler.plan_ran


async def test_a_daemon_that_runs_the_kind_already_takes_shards_without_dry_runs(
    dry_runs: RecordedDryRuns,
) -> None:
    """A drain's shards go to daemons that run the kind already: no dry batch
    stands between the drain and the hand-over."""
    writer = FakeWriter()
    handler = _handler(FakeSession(), writer)
    store = FakeStore()
    owned = Lease("etl.shard", "shard", "s-0", slot=Slot("t", 0), store=store, commit_timeout_s=2)
    await owned.acquire()
    task = asyncio.create_task(handler(owned))
    await _until(lambda: writer.query is not None)
    assert writer.query is not None
    writer.query.recentProgress = [{**REPORT, "batchId": 0, "numInputRows": 0}]
    await asyncio.sleep(0.1)
    assert not handler.plan_ran  # an empty batch ran none of the plan
    writer.query.recentProgress = [*writer.query.reports, {**REPORT, "batchId": 1}]
    await _until(lambda: handler.plan_ran)
    owned.end(EndReason.REVOKED, grace_s=2.0)
    await asyncio.wait_for(task, 5)

    events = await _warm_up(handler, ["s-1"])
    assert dry_runs.keys == []
    [skipped] = events
    assert skipped["why"] == "a batch of this plan has run in this daemon's session already"


async def test_warm_ups_on_a_spark_connect_server_never_run_dry(
    dry_runs: RecordedDryRuns,
) -> None:
    handler = _handler(ConnectSession(), FakeWriter())
    events = await _warm_up(handler, ["s-1", "s-2"])
    assert dry_runs.keys == []
    assert [e["why"] for e in events] == [
        "the Spark Connect server runs this plan for the shard's owner already"
    ] * 2


async def _one_runs_one_waits(
    dry_runs: RecordedDryRuns,
) -> tuple[ShardQuery, list[str], tuple[Lease, Lease], tuple[asyncio.Task[None], ...]]:
    """Two warm-ups on a cold JVM: the first's dry run runs until the test opens
    ``dry_runs.gate``; the second waits for its turn."""
    dry_runs.gate = threading.Event()
    handler = _handler(FakeSession(), FakeWriter())
    ready: list[str] = []
    first, second = _warming("s-1", ready), _warming("s-2", ready)
    running = asyncio.create_task(handler(first))
    await _until(lambda: dry_runs.running == 1)
    waiting = asyncio.create_task(handler(second))
    await asyncio.sleep(0.1)
    assert not waiting.done()  # its turn comes after the first's dry run
    return handler, ready, (first, second), (running, waiting)


async def test_a_warm_up_called_off_while_another_runs_its_dry_run_returns_at_once(
    dry_runs: RecordedDryRuns,
) -> None:
    handler, ready, (first, second), (running, waiting) = await _one_runs_one_waits(dry_runs)
    second.end(EndReason.WARMUP_ENDED)  # its move was called off
    await asyncio.wait_for(waiting, 5)  # while the first's dry run still runs
    assert ready == []
    assert dry_runs.running == 1  # the first still runs
    assert dry_runs.gate is not None
    dry_runs.gate.set()
    await _until(lambda: ready == ["s-1"])
    first.end(EndReason.WARMUP_ENDED)
    await asyncio.wait_for(running, 5)
    # The turn was handed on, not kept by the warm-up called off.
    await _warm_up(handler, ["s-3"])
    assert dry_runs.keys == ["s-1"]


async def test_a_warm_up_cancelled_while_waiting_for_its_turn_leaves_the_turn_free(
    dry_runs: RecordedDryRuns,
) -> None:
    dry_runs.rows = 0  # the plan stays cold: every warm-up wants its own dry run
    handler, ready, (first, _), (running, waiting) = await _one_runs_one_waits(dry_runs)
    waiting.cancel()  # the runtime gave up on it (its grace period ended)
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert dry_runs.gate is not None
    dry_runs.gate.set()
    await _until(lambda: ready == ["s-1"])
    first.end(EndReason.WARMUP_ENDED)
    await asyncio.wait_for(running, 5)
    await asyncio.wait_for(_warm_up(handler, ["s-3"]), 5)  # its turn came: no deadlock
    assert dry_runs.keys == ["s-1", "s-3"]
