"""The sharded PySpark pipeline (examples/sharded_etl) against one plain query, same input.

Two measurements, on real daemons, JVMs and a ``workgroup coordinator`` on loopback:

* **throughput**: a backlog of ``--events`` events in 4 shards (JSON files) is
  processed (a) by one plain PySpark Structured Streaming query reading every
  shard (what a user would write without workgroup: same aggregation, same
  Parquet output, same batch size per shard) and (b) by the workgroup pipeline
  with 1, 2 and 3 daemons, one SparkSession each.  Records/s counts from the
  moment the first query starts (JVM start-up excluded for both) until the last
  batch is written.
* **failover**: two daemons with input arriving; SIGKILL (then, in a fresh run,
  SIGTERM) the one that owns most shards; for each moved shard, the time until
  its next batch is written by its new owner.  SIGTERM runs use
  ``--leave-on-stop`` (a scale-down: the shards move at once); a static member
  stopped without it keeps its shards for its restart (the demo's rolling restart).

Usage::

    .venv/bin/python benchmarks/spark_pipeline.py            # ≈ 8 minutes on 2 cores
    .venv/bin/python benchmarks/spark_pipeline.py --events 40000 --skip-failover
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.sharded_etl import layout  # noqa: E402
from examples.sharded_etl.cluster import EtlCluster  # noqa: E402
from examples.sharded_etl.feed import Feeder  # noqa: E402
from examples.sharded_etl.verify import verify  # noqa: E402
from workgroup.testing import run_coordinator  # noqa: E402
from workgroup.testing.signals import interrupt_on_termination  # noqa: E402

SHARDS = 4
FILES_PER_BATCH = 25  # per shard; the baseline takes SHARDS times as many per batch
SESSION_MS = 6_000


def make_backlog(data: Path, events: int) -> int:
    feeder = Feeder(data, SHARDS, rate=events // 50, files_per_s=1.0)  # 50 rounds of files
    while feeder.written < events:
        feeder.write_round()
    return feeder.written


def baseline(data: Path, written: int) -> tuple[float, float]:
    """One query over every shard: (records/s, session start seconds)."""
    from pyspark.sql import SparkSession

    from examples.sharded_etl.transform import batch_table
    from workgroup_spark import write_batch_parquet
    from workgroup_spark.session import DEFAULT_CONF

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    began = time.monotonic()
    builder = SparkSession.builder.master("local[*]").appName("baseline")
    for key, value in {**DEFAULT_CONF, "spark.sql.shuffle.partitions": "1"}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    session_s = time.monotonic() - began
    output = data / "baseline-output"

    def write(batch: object, batch_id: int) -> None:
        write_batch_parquet(batch_table(batch, batch_id, 0), str(output), batch_id)

    started = time.monotonic()
    query = (
        spark.readStream.schema(layout.EVENT_SCHEMA)
        .option("maxFilesPerTrigger", FILES_PER_BATCH * SHARDS)
        .json(str(data / "input" / "shard-*"))
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", str(data / "baseline-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.monotonic() - started
    import pyarrow.parquet as pq

    processed = sum(
        sum(pq.read_table(p, columns=["events"])["events"].to_pylist())
        for p in output.glob("batch-*.parquet")
    )
    spark.stop()
    assert processed == written, f"baseline processed {processed} of {written}"
    return written / elapsed, session_s


def sharded(data: Path, written: int, daemons: int) -> tuple[float, float, bool]:
    """The workgroup pipeline on a backlog: (records/s from the first query's start,
    records/s once every shard's query runs, verified exactly once)."""
    with run_coordinator(log=data / "coordinator.log") as coordinator:
        cluster = EtlCluster(
            data,
            coordinator.bootstrap,
            shards=SHARDS,
            session_ms=SESSION_MS,
            extra_env={
                "ETL_TRIGGER_MS": "0",
                "ETL_FILES_PER_BATCH": str(FILES_PER_BATCH),
                # Daemons sharing one machine share its cores: a JVM each, local[cores/n].
                "WORKGROUP_SPARK_MASTER": f"local[{max(1, (os.cpu_count() or 1) // daemons)}]",
            },
        )
        try:
            for i in range(daemons):
                cluster.start(f"etl-{i + 1}")
            cluster.wait_for(
                "the backlog to be processed",
                lambda: cluster.processed() >= written,
                timeout_s=900,
                poll_s=1.0,
            )
            starts = [
                _epoch(e["timestamp"]) for e in cluster.daemon_log_events("spark.query_started")
            ]
            batches = cluster.batches()
            last = max(b["time"] for b in batches)
            rate = written / (last - min(starts))
            # Once every shard's query runs: the rate without JVM start-up skew.
            all_running = max(starts)
            steady = sum(b["events"] for b in batches if b["time"] > all_running)
            steady_rate = steady / (last - all_running) if last > all_running else rate
            cluster.stop_all()
        finally:
            cluster.kill_all()
    result = verify(data, SHARDS, check_summary=False)
    return rate, steady_rate, result.ok


def failover(data: Path, how: str) -> list[float]:
    """Seconds from the signal until each moved shard's next batch on its new owner."""
    with run_coordinator(log=data / "coordinator.log") as coordinator:
        cluster = EtlCluster(data, coordinator.bootstrap, shards=SHARDS, session_ms=SESSION_MS)
        feeder = Feeder(data, SHARDS, rate=400)
        extra = ("--leave-on-stop",) if how == "SIGTERM" else ()
        try:
            cluster.start("etl-1", *extra)
            cluster.start("etl-2", *extra)
            feeder.start(seconds=600)
            cluster.wait_for("every shard to commit", lambda: cluster.all_committing(0), 180)
            time.sleep(5)
            victim = cluster.busiest()
            moved = sorted(k for k, (m, *_) in cluster.owners().items() if m == victim)
            signalled = time.time()
            if how == "SIGKILL":
                cluster.kill(victim)
            else:
                cluster.signal(victim, signal.SIGTERM, "stop")
            delays = []
            for shard in moved:
                cluster.wait_for(
                    f"{shard} on its new owner",
                    lambda s=shard: (
                        cluster.owners()[s][0] != victim  # type: ignore[misc]
                        and cluster.committing(s, signalled, cluster.owners()[s][1])
                    ),
                    timeout_s=120,
                    poll_s=0.05,
                )
                first = min(
                    b["time"]
                    for b in cluster.batches()
                    if b["shard"] == shard and b["token"] == cluster.owners()[shard][1]
                )
                delays.append(first - signalled)
            return delays
        finally:
            feeder.stop()
            cluster.kill_all()


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="wg-spark-bench-") as name:
        yield Path(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=600_000)
    parser.add_argument("--daemons", default="1,2,3")
    parser.add_argument("--trials", type=int, default=2, help="failover trials per signal")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; {args.events:,} events in {SHARDS} shards")

    if not args.skip_throughput:
        rows = []
        with workdir() as data:
            written = make_backlog(data, args.events)
            rate, session_s = baseline(data, written)
            rows.append(("one plain PySpark query", 1, rate, rate, "yes (asserted count)"))
            print(f"(SparkSession start: {session_s:.1f} s, excluded)")
        for daemons in (int(n) for n in args.daemons.split(",")):
            with workdir() as data:
                written = make_backlog(data, args.events)
                rate, steady, ok = sharded(data, written, daemons)
                rows.append(
                    (
                        f"workgroup, {daemons} daemon(s)",
                        daemons,
                        rate,
                        steady,
                        "yes" if ok else "NO",
                    )
                )
        base = rows[0][2]
        print()
        print(
            "| pipeline | JVMs | records/s | vs one query | records/s, all running "
            "| vs one query | exactly once |"
        )
        print("|---|---:|---:|---:|---:|---:|---|")
        for name, jvms, rate, steady, ok in rows:
            print(
                f"| {name} | {jvms} | {rate:,.0f} | {rate / base:.0%} | {steady:,.0f} "
                f"| {steady / base:.0%} | {ok} |"
            )

    if not args.skip_failover:
        print()
        print("| signal | moved shards | median s | max s | target |")
        print("|---|---:|---:|---:|---|")
        for how, target in (("SIGKILL", SESSION_MS / 1000 + 5), ("SIGTERM", 5.0)):
            delays: list[float] = []
            for _ in range(args.trials):
                with workdir() as data:
                    delays += failover(data, how)
            print(
                f"| {how} | {len(delays)} | {statistics.median(delays):.2f} | "
                f"{max(delays):.2f} | < {target:.0f} s |"
            )


if __name__ == "__main__":
    # SIGTERM and SIGHUP (timeout, CI, a closed terminal) clean up as Ctrl-C does.
    with interrupt_on_termination():
        main()
