"""Where the sharded ETL keeps its files, and their schemas."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

#: Spark's schema of an input event (JSON lines).
EVENT_SCHEMA = "id LONG, shard STRING, customer STRING, amount_cents LONG, created_at DOUBLE"

#: One row per customer per micro-batch.
OUTPUT_SCHEMA = pa.schema(
    [
        ("shard", pa.string()),
        ("customer", pa.string()),
        ("events", pa.int64()),
        ("amount_cents", pa.int64()),
        ("ids", pa.list_(pa.int64())),
        ("batch", pa.int64()),
        ("token", pa.int64()),
        ("written_at", pa.float64()),
    ]
)


def data_dir() -> Path:
    return Path(os.environ.get("ETL_DATA", "demo-output/data")).resolve()


def shard_count() -> int:
    return int(os.environ.get("ETL_SHARDS", "4"))


def shard_names(count: int) -> list[str]:
    return [f"shard-{i}" for i in range(count)]


def input_dir(data: Path, shard: str) -> Path:
    return data / "input" / shard


def output_dir(data: Path, shard: str) -> Path:
    return data / "output" / shard


def summary_dir(data: Path) -> Path:
    return data / "summary"
