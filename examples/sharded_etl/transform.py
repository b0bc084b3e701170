"""The per-batch aggregation, shared by the sharded app and the single-query baseline."""

from __future__ import annotations

import time
from typing import Any

from examples.sharded_etl import layout


def batch_table(batch: Any, batch_id: int, token: int) -> Any:
    """Per shard and customer in one micro-batch: events, amount and the event ids,
    as a ``pyarrow.Table`` (the aggregation runs in Spark; the result is small)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    rows = (
        batch.groupBy("shard", "customer")
        .agg(
            F.count("*").alias("events"),
            F.sum("amount_cents").alias("amount_cents"),
            F.collect_list("id").alias("ids"),
        )
        .collect()
    )
    written_at = time.time()
    return pa.Table.from_pylist(
        [
            {
                "shard": row["shard"],
                "customer": row["customer"],
                "events": row["events"],
                "amount_cents": row["amount_cents"],
                "ids": sorted(row["ids"]),
                "batch": batch_id,
                "token": token,
                "written_at": written_at,
            }
            for row in rows
        ],
        schema=layout.OUTPUT_SCHEMA,
    )
