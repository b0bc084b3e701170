"""A warm-up's dry run on a real Spark session (a ``local[1]`` JVM in this process):
one batch of the example's own query runs through its fenced ``foreachBatch``,
nothing is committed or published, and no query or scratch checkpoint is left."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from examples.sharded_etl import layout
from examples.sharded_etl.transform import batch_table
from tests.unit.runtime.test_lease import FakeStore
from workgroup.runtime.lease import Lease, Slot
from workgroup_spark import fenced, write_batch_parquet
from workgroup_spark.dry_run import NO_INPUT, dry_run, scratch_location
from workgroup_spark.session import DEFAULT_CONF, SessionHolder, SessionOptions

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

EVENTS_PER_FILE = 20


def _write_input(source: Path, files: int) -> None:
    source.mkdir(parents=True)
    for number in range(files):
        events = [
            {"id": number * 100 + i, "shard": "s-0", "customer": f"c{i % 3}",
             "amount_cents": i, "created_at": 0.0}
            for i in range(EVENTS_PER_FILE)
        ]  # fmt: skip
        (source / f"{number:04d}.json").write_text("".join(json.dumps(e) + "\n" for e in events))


async def test_a_dry_run_runs_one_batch_of_the_shards_query_and_publishes_nothing(
    tmp_path: Path,
) -> None:
    source, output, root = tmp_path / "input", tmp_path / "output", tmp_path / "checkpoints"
    _write_input(source, files=3)
    store = FakeStore()
    lease = Lease("etl.shard", "shard", "s-0", slot=Slot("t", 0), store=store, commit_timeout_s=2)
    written: list[int] = []

    def building(source: Path) -> Any:
        def build(spark: Any, lease: Lease) -> Any:
            events = (
                spark.readStream.schema(layout.EVENT_SCHEMA)
                .option("maxFilesPerTrigger", 1)
                .json(str(source))
            )

            def write(batch: Any, batch_id: int) -> None:
                table = batch_table(batch, batch_id, lease.token)  # the plan runs in Spark
                written.append(table.num_rows)
                write_batch_parquet(table, str(output), batch_id)

            return events.writeStream.foreachBatch(fenced(lease, write)).trigger(
                processingTime="1 second"
            )

        return build

    # The example's quick JIT (docs/spark.md, "The JIT of a daemon's JVM").
    quick_jit = "-XX:TieredStopAtLevel=1"
    conf = {
        **DEFAULT_CONF,
        "spark.sql.shuffle.partitions": "1",
        "spark.driver.extraJavaOptions": quick_jit,
    }
    holder = SessionHolder(SessionOptions("dry-run-test", master="local[1]", conf=conf))
    try:
        spark = await asyncio.to_thread(holder.get)
        # The JVM's own options in conf= reach its launch.
        from pyspark import SparkContext

        jvm = SparkContext._gateway.proc.pid  # spark-submit execs java: the JVM's pid
        assert quick_jit in (Path("/proc") / str(jvm) / "cmdline").read_text().split("\0")
        scratch = scratch_location(str(root), "shard", "s-0")
        outcome = await asyncio.to_thread(
            dry_run, spark, building(source), lease, name="etl.shard.s-0", scratch=scratch,
            called_off=threading.Event(),
        )  # fmt: skip
        assert outcome.skipped is None
        assert outcome.rows == EVENTS_PER_FILE  # one batch: one file
        assert outcome.duration_ms is not None
        assert "addBatch" in outcome.duration_ms
        assert written == [3]  # the aggregation ran: one row per customer
        assert os.listdir(output) == []  # not published, no temporary left
        assert store.commits == []  # nothing committed through the lease
        assert os.listdir(root / ".dry-run" / "shard") == []  # the scratch checkpoint removed
        assert not (root / "shard").exists()  # the shard's own checkpoint untouched
        assert list(spark.streams.active) == []
        # An idle shard (no input yet): skipped as soon as a trigger finds nothing,
        # not after the timeout, which would hold its move back that long.
        idle = tmp_path / "idle"
        idle.mkdir()
        outcome = await asyncio.to_thread(
            dry_run, spark, building(idle), lease, name="etl.shard.s-0",
            scratch=scratch_location(str(root), "shard", "s-0"), called_off=threading.Event(),
        )  # fmt: skip
        assert outcome.skipped == NO_INPUT
        assert list(spark.streams.active) == []
    finally:
        await asyncio.to_thread(holder.stop)  # its JVM too
