"""The sharded PySpark pipeline (examples/sharded_etl) against one plain query, same input.

Two measurements, on real daemons, Spark and a ``workgroup coordinator`` on loopback:

* **throughput**: a backlog of ``--events`` events in 4 shards (JSON files) is
  processed (a) by one plain PySpark Structured Streaming query reading every
  shard (what a user would write without workgroup: same aggregation, same
  Parquet output, same batch size per shard), in a local JVM and on a Spark
  Connect server, (b) by the workgroup pipeline with 1, 2 and 3 daemons, one
  JVM each (``--daemons``), and (c) by 3 thin daemons (``remote=``) sharing one
  Spark Connect server (``--connect-daemons``).  Records/s counts from the
  moment the first query starts (JVM start-up excluded for both) until the last
  batch is written.  Each workgroup run also gives the time from starting the
  first daemon to the first batch of any shard, and of every shard.
* **failover**: two daemons with input arriving; SIGKILL (then, in a fresh run,
  SIGTERM) the one that owns most shards; for each moved shard, the time until
  its next batch is written by its new owner, and the shard's output gap: from
  the last batch its old owner wrote (after the signal too, if a batch was in
  flight) to the new owner's first.  SIGTERM runs use
  ``--leave-on-stop`` (a scale-down: the shards move at once); a static member
  stopped without it keeps its shards for its restart (the demo's rolling restart).
  Spark fires a 1 s trigger on the whole second, and a shard whose batch is in
  flight when its cut-over comes finishes that batch first: how long a move
  takes depends on where in the second the signal lands.  Trial *i* of *n*
  signals at ``(i + 0.5) / n`` of the trigger interval past the second, so that
  the trials sample that phase evenly instead of by chance.

Usage::

    .venv/bin/python benchmarks/spark_pipeline.py            # everything, with failover
    .venv/bin/python benchmarks/spark_pipeline.py --events 40000 --skip-failover
    .venv/bin/python benchmarks/spark_pipeline.py --daemons 3 --connect-daemons 3 --skip-failover
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.sharded_etl import layout  # noqa: E402
from examples.sharded_etl.cluster import EtlCluster  # noqa: E402
from examples.sharded_etl.feed import Feeder  # noqa: E402
from examples.sharded_etl.verify import verify  # noqa: E402
from workgroup.testing import run_coordinator  # noqa: E402
from workgroup.testing.signals import interrupt_on_termination  # noqa: E402
from workgroup_spark.connect_server import ConnectServer, run_connect_server  # noqa: E402

SHARDS = 4
FILES_PER_BATCH = 25  # per shard; the baseline takes SHARDS times as many per batch
SESSION_MS = 6_000
#: The daemons' trigger interval (the app's ``ETL_TRIGGER_MS``, 1 s unless set):
#: failover trials signal at chosen phases of it (the module's docstring).
TRIGGER_S = int(os.environ.get("ETL_TRIGGER_MS", "1000")) / 1000
#: The issue's targets for a moved shard's first output after each signal.
FAILOVER_TARGETS_S = {"SIGKILL": SESSION_MS / 1000 + 2, "SIGTERM": 2.0}
FAILOVER_LAYOUTS = {"jvm": "2, a JVM each", "connect": "2 thin, one Connect server"}


def make_backlog(data: Path, events: int) -> int:
    feeder = Feeder(data, SHARDS, rate=events // 50, files_per_s=1.0)  # 50 rounds of files
    while feeder.written < events:
        feeder.write_round()
    return feeder.written


def baseline(data: Path, written: int, remote: str | None = None) -> tuple[float, float]:
    """One query over every shard, in a local JVM or on a Connect server (``remote``):
    (records/s, session start seconds)."""
    from pyspark.sql import SparkSession

    from examples.sharded_etl.transform import batch_table
    from workgroup_spark import write_batch_parquet
    from workgroup_spark.session import DEFAULT_CONF

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    began = time.monotonic()
    builder = SparkSession.builder.appName("baseline")
    builder = builder.remote(remote) if remote else builder.master("local[*]")
    for key, value in {**DEFAULT_CONF, "spark.sql.shuffle.partitions": "1"}.items():
        if not remote or key.startswith("spark.sql."):
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    session_s = time.monotonic() - began
    output = str(data / "baseline-output")

    def write(batch: object, batch_id: int) -> None:
        write_batch_parquet(batch_table(batch, batch_id, 0), output, batch_id)

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
        for p in Path(output).glob("batch-*.parquet")
    )
    spark.stop()
    assert processed == written, f"baseline processed {processed} of {written}"
    return written / elapsed, session_s


@dataclass
class ShardedRun:
    rate: float  # records/s from the first query's start to the last batch
    steady_rate: float  # records/s once every shard's query runs
    exactly_once: bool
    first_batch_s: float  # first daemon started -> first batch of any shard
    every_shard_s: float  # first daemon started -> every shard has written a batch


def sharded(data: Path, written: int, daemons: int, remote: str | None = None) -> ShardedRun:
    """The workgroup pipeline on a backlog: ``daemons`` daemons with a JVM each, or
    thin daemons on the Connect server ``remote``."""
    env = {"ETL_TRIGGER_MS": "0", "ETL_FILES_PER_BATCH": str(FILES_PER_BATCH)}
    if remote:
        env["WORKGROUP_SPARK_REMOTE"] = remote
    else:
        # Daemons sharing one machine share its cores: a JVM each, local[cores/n].
        env["WORKGROUP_SPARK_MASTER"] = f"local[{max(1, (os.cpu_count() or 1) // daemons)}]"
    with run_coordinator(log=data / "coordinator.log") as coordinator:
        cluster = EtlCluster(
            data, coordinator.bootstrap, shards=SHARDS, session_ms=SESSION_MS, extra_env=env
        )
        try:
            began = time.time()
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
            # Once every shard's query runs: the rate without start-up skew.
            all_running = max(starts)
            steady = sum(b["events"] for b in batches if b["time"] > all_running)
            steady_rate = steady / (last - all_running) if last > all_running else rate
            firsts = {
                shard: min(b["time"] for b in batches if b["shard"] == shard)
                for shard in {b["shard"] for b in batches}
            }
            cluster.stop_all()
        finally:
            cluster.kill_all()
    result = verify(data, SHARDS, check_summary=False)
    return ShardedRun(
        rate,
        steady_rate,
        result.ok,
        min(firsts.values()) - began,
        max(firsts.values()) - began,
    )


def failover(
    data: Path, how: str, remote: str | None = None, phase: float = 0.0
) -> list[tuple[float, float, float]]:
    """For each moved shard, seconds from the signal until its new owner acquired
    it (lease) and until its new owner's first batch was written (output), and
    from its old owner's last batch to that one (output gap), with JVM daemons,
    or thin daemons on the Connect server ``remote``.  The signal goes ``phase``
    (0-1) of a trigger interval past the interval's start."""
    env = {"WORKGROUP_SPARK_REMOTE": remote} if remote else {}
    with run_coordinator(log=data / "coordinator.log") as coordinator:
        cluster = EtlCluster(
            data, coordinator.bootstrap, shards=SHARDS, session_ms=SESSION_MS, extra_env=env
        )
        feeder = Feeder(data, SHARDS, rate=400)
        extra = ("--leave-on-stop",) if how == "SIGTERM" else ()
        try:
            cluster.start("etl-1", *extra)
            cluster.start("etl-2", *extra)
            feeder.start(seconds=600)
            cluster.wait_for("every shard to commit", lambda: cluster.all_committing(0), 180)
            time.sleep(5)
            if TRIGGER_S > 0:
                time.sleep((phase * TRIGGER_S - time.time() % TRIGGER_S) % TRIGGER_S)
            victim = cluster.busiest()
            moved = sorted(k for k, (m, *_) in cluster.owners().items() if m == victim)
            signalled = time.time()
            if how == "SIGKILL":
                cluster.kill(victim)
            else:
                cluster.terminate(victim)
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
                _, token, acquired = cluster.owners()[shard]
                written = [b for b in cluster.batches() if b["shard"] == shard]
                first = min(b["time"] for b in written if b["token"] == token)
                last_old = max(b["time"] for b in written if b["token"] < token)
                delays.append((acquired - signalled, first - signalled, first - last_old))
            return delays
        finally:
            feeder.stop()
            # Stopped, not only killed: on a Connect server a killed daemon's
            # queries run on, into the next trial's load and this run's files.
            cluster.stop_all()
            cluster.kill_all()


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


#: ``--keep DIR``: every run's data and logs stay in a directory of their own under DIR.
KEEP: Path | None = None


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    if KEEP is not None:
        KEEP.mkdir(parents=True, exist_ok=True)
        yield Path(tempfile.mkdtemp(prefix="run-", dir=KEEP))
        return
    with tempfile.TemporaryDirectory(prefix="wg-spark-bench-") as name:
        yield Path(name)


@contextlib.contextmanager
def connect_server(logs: Path) -> Iterator[tuple[ConnectServer, float]]:
    """A Connect server for the thin-daemon rows: (server, seconds it took to listen)."""
    began = time.monotonic()
    path = os.pathsep.join(
        filter(None, [str(ROOT), str(ROOT / "plugins" / "spark"), os.environ.get("PYTHONPATH")])
    )
    with run_connect_server(logs / "spark-connect.log", env={"PYTHONPATH": path}) as server:
        yield server, time.monotonic() - began


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=600_000)
    parser.add_argument("--daemons", default="1,2,3", help="JVM daemon counts ('' for none)")
    parser.add_argument(
        "--connect-daemons", default="3", help="thin daemon counts on one Connect server"
    )
    parser.add_argument("--trials", type=int, default=2, help="failover trials per signal")
    parser.add_argument(
        "--failover-layouts", default="jvm,connect", help="jvm, connect or both (jvm,connect)"
    )
    parser.add_argument(
        "--signals", default="SIGKILL,SIGTERM", help="failover signals: SIGKILL, SIGTERM or both"
    )
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument(
        "--keep", type=Path, help="keep every run's data and logs under this directory"
    )
    args = parser.parse_args()
    signals = [name for name in args.signals.split(",") if name]
    for name in signals:
        if name not in FAILOVER_TARGETS_S:
            parser.error(f"--signals: {name!r} is neither SIGKILL nor SIGTERM")
    global KEEP
    KEEP = args.keep
    print(f"machine: {os.cpu_count()} cores; {args.events:,} events in {SHARDS} shards; {load()}")

    if not args.skip_throughput:
        rows = []
        starts = []
        with workdir() as data:
            written = make_backlog(data, args.events)
            rate, session_s = baseline(data, written)
            rows.append(("one plain PySpark query, local JVM", 1, rate, rate, "yes (count)"))
            print(f"(local SparkSession start: {session_s:.1f} s, excluded; {load()})")
        for daemons in (int(n) for n in args.daemons.split(",") if n):
            with workdir() as data:
                written = make_backlog(data, args.events)
                run = sharded(data, written, daemons)
                name = f"workgroup, {daemons} daemon(s), a JVM each"
                rows.append((name, daemons, run.rate, run.steady_rate, _yes(run.exactly_once)))
                starts.append((name, run))
                print(f"({name} done; {load()})")
        connect_counts = [int(n) for n in args.connect_daemons.split(",") if n]
        if connect_counts:
            with workdir() as logs, connect_server(logs) as (server, listen_s):
                print(f"(Connect server listening after {listen_s:.1f} s, excluded; {load()})")
                with workdir() as data:
                    written = make_backlog(data, args.events)
                    rate, session_s = baseline(data, written, server.remote)
                    rows.append(("one plain PySpark query, Connect server", 1, rate, rate,
                                 "yes (count)"))  # fmt: skip
                for daemons in connect_counts:
                    with workdir() as data:
                        written = make_backlog(data, args.events)
                        run = sharded(data, written, daemons, server.remote)
                        name = f"workgroup, {daemons} thin daemon(s), one Connect server"
                        rows.append((name, 1, run.rate, run.steady_rate, _yes(run.exactly_once)))
                        starts.append((name, run))
                        print(f"({name} done; {load()})")
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
        print()
        print("| pipeline | first daemon start -> first batch | -> every shard's first batch |")
        print("|---|---:|---:|")
        for name, run in starts:
            print(f"| {name} | {run.first_batch_s:.1f} s | {run.every_shard_s:.1f} s |")

    if not args.skip_failover:
        print()
        print(
            "| daemons | signal | moved shards | lease, median s | lease, max s "
            "| first output, median s | first output, max s | target (output) "
            "| output gap, median s | output gap, max s | load after |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
        for layout_name in args.failover_layouts.split(","):
            with contextlib.ExitStack() as stack:
                remote = None
                if layout_name == "connect":
                    logs = stack.enter_context(workdir())
                    remote = stack.enter_context(connect_server(logs))[0].remote
                for how in signals:
                    target = FAILOVER_TARGETS_S[how]
                    delays: list[tuple[float, float, float]] = []
                    for trial in range(args.trials):
                        with workdir() as data:
                            phase = (trial + 0.5) / args.trials
                            moved = failover(data, how, remote, phase)
                        delays += moved
                        print(
                            f"({layout_name} {how} at {phase:.2f} s past the second: first "
                            f"output {', '.join(f'{d[1]:.2f}' for d in moved)} s, output gap "
                            f"{', '.join(f'{d[2]:.2f}' for d in moved)} s; {load()})"
                        )
                    lease = [d[0] for d in delays]
                    output = [d[1] for d in delays]
                    gap = [d[2] for d in delays]
                    print(
                        f"| {FAILOVER_LAYOUTS[layout_name]} | {how} | {len(delays)} "
                        f"| {statistics.median(lease):.2f} | {max(lease):.2f} "
                        f"| {statistics.median(output):.2f} | {max(output):.2f} "
                        f"| <= {target:.0f} s | {statistics.median(gap):.2f} | {max(gap):.2f} "
                        f"| {os.getloadavg()[0]:.1f} |"
                    )


if __name__ == "__main__":
    # SIGTERM and SIGHUP (timeout, CI, a closed terminal) clean up as Ctrl-C does.
    with interrupt_on_termination():
        main()
