"""workgroup's Spark plugin: one Structured Streaming query per owned shard.

::

    app = workgroup.App("etl")
    spark = app.use("spark", checkpoint_root="/data/checkpoints")

    @app.resources("shard")
    def shards():
        return [f"shard-{i}" for i in range(8)]

    @spark.query("shard")
    def build(session, lease):
        events = session.readStream.schema(SCHEMA).json(f"/data/in/{lease.key}")
        return events.writeStream.foreachBatch(fenced(lease, write))

See :mod:`workgroup_spark.query` for the rules of a shard's query and
``docs/spark.md`` for exactly-once across moves.

Names are loaded on first use: a Spark Connect server's Python worker that
unpickles a fenced ``foreachBatch`` imports :mod:`workgroup_spark.sinks` and the
fence, not the daemon's runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workgroup_spark.java import JavaMissingError, check_java
    from workgroup_spark.plugin import (
        DEFAULT_CHECKPOINT_ROOT,
        DEFAULT_WARMUP_TIMEOUT_MS,
        SparkQueries,
        attach,
        parse_switch,
        resolve_checkpoint_root,
    )
    from workgroup_spark.progress import BatchProgress
    from workgroup_spark.query import SparkQueryFailed, checkpoint_location
    from workgroup_spark.sinks import FencedWriter, check_fence, fenced, write_batch_parquet

#: name -> the module that defines it.
_WHERE = {
    "DEFAULT_CHECKPOINT_ROOT": "workgroup_spark.plugin",
    "DEFAULT_WARMUP_TIMEOUT_MS": "workgroup_spark.plugin",
    "SparkQueries": "workgroup_spark.plugin",
    "attach": "workgroup_spark.plugin",
    "parse_switch": "workgroup_spark.plugin",
    "resolve_checkpoint_root": "workgroup_spark.plugin",
    "BatchProgress": "workgroup_spark.progress",
    "FencedWriter": "workgroup_spark.sinks",
    "check_fence": "workgroup_spark.sinks",
    "fenced": "workgroup_spark.sinks",
    "write_batch_parquet": "workgroup_spark.sinks",
    "JavaMissingError": "workgroup_spark.java",
    "check_java": "workgroup_spark.java",
    "SparkQueryFailed": "workgroup_spark.query",
    "checkpoint_location": "workgroup_spark.query",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'workgroup_spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


__all__ = [
    "DEFAULT_CHECKPOINT_ROOT",
    "DEFAULT_WARMUP_TIMEOUT_MS",
    "BatchProgress",
    "FencedWriter",
    "JavaMissingError",
    "SparkQueries",
    "SparkQueryFailed",
    "attach",
    "check_fence",
    "check_java",
    "checkpoint_location",
    "fenced",
    "parse_switch",
    "resolve_checkpoint_root",
    "write_batch_parquet",
]
