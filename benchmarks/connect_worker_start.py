"""How long a new streaming query on a Spark Connect server takes to its first batch
written, with the server's warm worker pool and without it (cold workers).

A shard that moves to another daemon starts a new query; on a Connect server that
query's ``foreachBatch`` runs in a new Python worker.  This measures that start
alone, without daemons or a coordinator: one Connect server per layout on
loopback, ``--queries`` queries one after the other, each one micro-batch of
Spark's ``rate-micro-batch`` source (``availableNow``) written by a batch
function that imports what a fenced sink imports (``workgroup_spark.sinks``,
pyarrow).  Per query: ``start()`` returning, and the first batch's Parquet file
written (its own clock), both from just before ``start()``.

Usage::

    .venv/bin/python benchmarks/connect_worker_start.py --queries 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "plugins" / "spark"))

from workgroup.testing.signals import interrupt_on_termination  # noqa: E402
from workgroup_spark.connect_server import run_connect_server  # noqa: E402


def batch_writer(directory: str) -> Any:
    """The batch function: one row (when it ran) as ``batch-<N>.parquet``."""

    def write(batch: Any, batch_id: int) -> None:
        import pyarrow as pa

        from workgroup_spark.sinks import write_batch_parquet

        write_batch_parquet(pa.table({"ran_at": [time.time()]}), directory, batch_id)

    return write


def first_batch_at(directory: Path) -> float:
    import pyarrow.parquet as pq

    files = sorted(directory.glob("batch-*.parquet"))
    return float(pq.read_table(files[0])["ran_at"][0].as_py())


def measure(remote: str, scratch: Path, queries: int) -> list[tuple[float, float]]:
    """``(start() s, first batch written s)`` for each query."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(remote).getOrCreate()
    results = []
    try:
        for index in range(queries):
            output = scratch / f"output-{index}"
            began = time.time()
            query = (
                spark.readStream.format("rate-micro-batch")
                .option("rowsPerBatch", 10)
                .load()
                .writeStream.foreachBatch(batch_writer(str(output)))
                .option("checkpointLocation", str(scratch / f"checkpoint-{index}"))
                .trigger(availableNow=True)
                .start()
            )
            started = time.time()
            query.awaitTermination(300)
            failure = query.exception()
            if failure is not None:
                raise RuntimeError(f"query {index} failed: {failure}")
            results.append((started - began, first_batch_at(output) - began))
    finally:
        spark.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=5)
    parser.add_argument("--layouts", default="cold,warm", help="cold, warm or both, in order")
    args = parser.parse_args()
    path = os.pathsep.join(
        filter(None, [str(ROOT), str(ROOT / "plugins" / "spark"), os.environ.get("PYTHONPATH")])
    )
    rows = []
    for layout in args.layouts.split(","):
        with tempfile.TemporaryDirectory(prefix="wg-worker-start-") as name:
            scratch = Path(name)
            with run_connect_server(
                scratch / "logs" / "server.log",
                env={"PYTHONPATH": path},
                warm_workers=layout == "warm",
            ) as server:
                results = measure(server.remote, scratch, args.queries)
        load = os.getloadavg()[0]
        rows.append((layout, results, load))
        print(f"({layout} done; load average {load:.1f})", flush=True)
    print()
    print(
        "| Python workers | queries | start() median s | first batch median s "
        "| first batch max s | load after |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for layout, results, load in rows:
        starts = [r[0] for r in results]
        firsts = [r[1] for r in results]
        print(
            f"| {layout} | {len(results)} | {statistics.median(starts):.2f} "
            f"| {statistics.median(firsts):.2f} | {max(firsts):.2f} | {load:.1f} |"
        )


if __name__ == "__main__":
    with interrupt_on_termination():
        main()
