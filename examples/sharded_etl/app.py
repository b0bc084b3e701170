"""Sharded ETL: per-shard PySpark aggregation into Parquet, and one publisher of a summary.

Each shard is a directory of JSON event files (``<data>/input/<shard>/``).  The
daemon that owns a shard runs one Structured Streaming query on it: every
micro-batch is aggregated per customer and written as
``<data>/output/<shard>/batch-<N>.parquet`` (exactly once: :mod:`workgroup_spark.sinks`).
One process of the group at a time, the publisher, compacts every shard's
output into ``<data>/summary/summary.parquet``, fenced by its lease token.

Run it (the first daemon starts the local coordinator)::

    ETL_DATA=/tmp/etl workgroup run examples.sharded_etl.app:app --instance-id etl-1 &
    ETL_DATA=/tmp/etl workgroup run examples.sharded_etl.app:app --instance-id etl-2 &
    ETL_DATA=/tmp/etl python -m examples.sharded_etl.feed --seconds 60
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import workgroup
from examples.sharded_etl import layout
from examples.sharded_etl.summary import OutputTotals, publish_summary
from examples.sharded_etl.transform import batch_table
from workgroup_spark import fenced, parse_switch, write_batch_parquet

DATA = layout.data_dir()
SHARDS = layout.shard_count()
PUBLISH_EVERY_S = float(os.environ.get("ETL_PUBLISH_EVERY_S", "3"))
TRIGGER_MS = int(os.environ.get("ETL_TRIGGER_MS", "1000"))  # 0: batches back to back
FILES_PER_BATCH = int(os.environ.get("ETL_FILES_PER_BATCH", "50"))
#: A moved shard's warm-up runs one batch of its query dry (its sink checks the fence)
#: where the plan is new: a daemon with a JVM of its own that joins (docs/spark.md).
DRY_RUN = parse_switch("ETL_DRY_RUN", os.environ.get("ETL_DRY_RUN"), default=True)

app = workgroup.App("etl", session_timeout_ms=int(os.environ.get("ETL_SESSION_MS", "6000")),
                    grace_ms=10_000)  # fmt: skip
spark = app.use(
    "spark",
    checkpoint_root=str(DATA / "checkpoints"),
    # Small batches: one partition each.  Spark's warnings about batches falling behind
    # a 1 s trigger would be noise here; its errors still show.
    conf={
        "spark.sql.shuffle.partitions": "1",
        "spark.default.parallelism": "1",
        "spark.log.level": "ERROR",
        # A daemon's own JVM (--layout jvm) compiles with C1 alone: its shards move
        # while its JVM is young (a rolling restart, the demo), when C2 would take
        # most of the CPU (docs/spark.md, "The JIT of a daemon's JVM").
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    },
)


@app.resources("shard")
def shards() -> list[str]:
    return layout.shard_names(SHARDS)


@spark.query("shard", restart_backoff_ms=2_000, dry_run=DRY_RUN)
def aggregate_shard(session: Any, lease: workgroup.Lease) -> Any:
    """One shard's streaming query: events in, per-customer totals per batch out."""
    source = layout.input_dir(DATA, str(lease.key))
    source.mkdir(parents=True, exist_ok=True)
    output = layout.output_dir(DATA, str(lease.key))
    events = (
        session.readStream.schema(layout.EVENT_SCHEMA)
        .option("maxFilesPerTrigger", FILES_PER_BATCH)
        .json(str(source))
    )

    token = lease.token  # not the lease: with Spark Connect, `write` runs in another process

    def write(batch: Any, batch_id: int) -> None:
        table = batch_table(batch, batch_id, token)
        write_batch_parquet(table, str(output), batch_id)  # checks the fence before its rename

    return events.writeStream.foreachBatch(fenced(lease, write)).trigger(
        processingTime=f"{TRIGGER_MS} milliseconds"
    )


@app.leader("publisher")
async def publisher(lease: workgroup.Lease) -> None:
    """Compact every shard's output into one summary, every few seconds, fenced."""
    print(f"publisher: active with token {lease.token}", flush=True)
    totals = OutputTotals(DATA, SHARDS)  # each publication reads only the new batch files
    while not lease.revoked:
        await lease.commit(f"publishing at {time.time():.3f}")  # refused once the lease is gone
        await asyncio.to_thread(publish_summary, DATA, SHARDS, lease.token, totals)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(lease.wait_revoked(), PUBLISH_EVERY_S)
    print(f"publisher: token {lease.token} handed over", flush=True)


def data_dir() -> Path:
    return DATA
