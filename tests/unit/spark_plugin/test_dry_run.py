"""A warm-up's dry run of a shard's query: its fenced writer commits nothing and
publishes nothing; the run stops after one batch with rows and removes its
scratch checkpoint.  Spark itself is faked here (tests/e2e/spark/test_dry_run.py
runs a real one)."""

from __future__ import annotations

import os
import pickle
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.unit.runtime.test_lease import FakeStore
from workgroup.runtime.lease import Lease, Slot
from workgroup_spark import fenced, write_batch_parquet
from workgroup_spark.dry_run import dry_run, scratch_location
from workgroup_spark.sinks import DryRunUnchecked, building_dry_run


def _warming_lease(store: FakeStore) -> Lease:
    """A lease not taken yet (no token): what a warm-up's handler holds (made
    in the event loop, as the runtime does)."""
    return Lease("etl.shard", "shard", "s-0", slot=Slot("t", 0), store=store, commit_timeout_s=2)


def _write_parquet_to(directory: Path, reached: list[int]) -> Any:
    def write(batch: Any, batch_id: int) -> None:
        reached.append(batch_id)
        write_batch_parquet(pa.table({"n": [batch_id]}), str(directory), batch_id)

    return write


async def test_a_dry_writer_stops_at_the_fence_check_and_publishes_nothing(tmp_path: Path) -> None:
    store = FakeStore()
    lease = _warming_lease(store)
    reached: list[int] = []
    with building_dry_run() as writers:
        writer = fenced(lease, _write_parquet_to(tmp_path, reached))
    assert writers == [writer]
    assert writer.dry_run
    writer(object(), 4)
    assert reached == [4]  # the write ran up to its check...
    assert os.listdir(tmp_path) == []  # ...and neither the file nor its temporary is left
    assert store.commits == []  # nothing committed through the lease
    # Outside the dry run's build, fenced() makes ordinary writers again.
    assert not fenced(lease, _write_parquet_to(tmp_path, reached)).dry_run


async def test_a_dry_writer_shipped_to_a_connect_worker_stays_dry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lease = _warming_lease(FakeStore())

    def no_fence(**options: Any) -> Any:
        raise AssertionError("a dry writer needs no fence")

    monkeypatch.setattr(lease, "fence", no_fence)
    reached: list[int] = []
    with building_dry_run():
        writer = fenced(lease, _write_parquet_to(tmp_path, reached))
    from pyspark import cloudpickle  # what Spark Connect ships foreachBatch functions with

    shipped = pickle.loads(cloudpickle.dumps(writer))
    assert shipped.dry_run
    assert shipped.lease is None
    assert shipped.fence is None
    shipped(object(), 2)
    assert os.listdir(tmp_path) == []


async def test_a_dry_write_that_never_checks_the_fence_fails_the_dry_run() -> None:
    written: list[int] = []
    with building_dry_run():
        writer = fenced(
            _warming_lease(FakeStore()), lambda batch, batch_id: written.append(batch_id)
        )
    with pytest.raises(DryRunUnchecked, match=r"returned without calling check_fence\(\)"):
        writer(object(), 1)


class FakeQuery:
    """A streaming query whose first batch with rows completes at its ``rows_at``-th poll."""

    def __init__(self, rows_at: int | None) -> None:
        self.rows_at = rows_at
        self.polls = 0
        self.stopped = False
        self.isActive = True

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        self.polls += 1
        if self.rows_at is None or self.polls < self.rows_at:
            return None
        # As a Spark Connect server reports it: rows per source, absent parts None.
        durations = {"addBatch": 900, "triggerExecution": 1000, "walCommit": None}
        sources = [{"numInputRows": 30}]
        return {"batchId": 0, "numInputRows": None, "sources": sources, "durationMs": durations}

    def exception(self) -> None:
        return None

    def stop(self) -> None:
        self.stopped = True


class FakeWriter:
    """A DataStreamWriter: records its name and checkpoint, starts ``query``."""

    def __init__(self, query: FakeQuery) -> None:
        self.query = query
        self.options: dict[str, str] = {}
        self.name = ""

    def queryName(self, name: str) -> FakeWriter:
        self.name = name
        return self

    def option(self, key: str, value: str) -> FakeWriter:
        self.options[key] = value
        return self

    def start(self) -> FakeQuery:
        os.makedirs(self.options["checkpointLocation"])  # Spark makes its checkpoint
        return self.query


async def test_a_dry_run_stops_after_its_first_batch_with_rows(tmp_path: Path) -> None:
    query = FakeQuery(rows_at=3)
    writer = FakeWriter(query)

    def build(spark: Any, lease: Lease) -> Any:
        fenced(lease, lambda batch, batch_id: None)
        return writer

    scratch = scratch_location(str(tmp_path), "shard", "s-0")
    outcome = dry_run(None, build, _warming_lease(FakeStore()), name="etl.shard.s-0",
                      scratch=scratch, called_off=threading.Event())  # fmt: skip
    assert outcome.rows == 30
    assert outcome.duration_ms == {"addBatch": 900, "triggerExecution": 1000}
    assert writer.name == "etl.shard.s-0.dry-run"
    assert writer.options["checkpointLocation"] == scratch
    assert scratch.startswith(f"{tmp_path}/.dry-run/shard/s-0.")  # not the shard's checkpoint
    assert query.stopped
    assert os.listdir(tmp_path / ".dry-run" / "shard") == []  # its scratch removed


async def test_a_build_without_a_fenced_writer_is_not_run_dry(tmp_path: Path) -> None:
    query = FakeQuery(rows_at=1)
    lease = _warming_lease(FakeStore())
    outcome = dry_run(None, lambda spark, lease: FakeWriter(query), lease, name="q",
                      scratch=str(tmp_path / "s"), called_off=threading.Event())  # fmt: skip
    assert outcome.skipped == "build() made no fenced() writer"
    assert query.polls == 0  # never started


async def test_a_dry_run_without_rows_gives_up_at_its_timeout_or_when_called_off(
    tmp_path: Path,
) -> None:
    def build(spark: Any, lease: Lease) -> Any:
        fenced(lease, lambda batch, batch_id: None)
        return FakeWriter(FakeQuery(rows_at=None))

    lease = _warming_lease(FakeStore())
    timed_out = dry_run(None, build, lease, name="q", scratch=str(tmp_path / "a"),
                        called_off=threading.Event(), timeout_s=0.0)  # fmt: skip
    assert timed_out.skipped == "no rows within 0 s"
    called_off = threading.Event()
    called_off.set()
    assert dry_run(None, build, lease, name="q", scratch=str(tmp_path / "b"),
                   called_off=called_off).skipped == "called off"  # fmt: skip
