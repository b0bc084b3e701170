"""Exactly-once output from ``foreachBatch``: fence each batch, write it idempotently.

Spark replays a micro-batch whose commit did not reach the checkpoint (the
owner died mid-batch) with the same offsets, hence the same rows.  A sink is
exactly-once if writing batch N twice leaves one copy: :func:`write_batch_parquet`
writes ``batch-<N>.parquet`` to a temporary name and renames it into place
(atomic on a POSIX file system), so a replay replaces the file with the same
content, and readers never see half a file.

:func:`fenced` puts the lease in front of each batch: the batch's id is committed
as the shard's checkpoint through the coordinator *before* anything is written,
and the coordinator refuses that commit from a member whose session is gone.
A zombie (paused past its session, then resumed) therefore fails its next batch
before writing; see ``docs/spark.md`` for the one window the lease cannot close
and why Spark's checkpoint log makes it harmless.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from typing import Any

from workgroup.log import get_logger
from workgroup.runtime.lease import Lease

log = get_logger("workgroup.spark.sinks")  # under workgroup's root logger

#: ``write(batch_df, batch_id)``: what ``DataStreamWriter.foreachBatch`` calls.
BatchWriter = Callable[[Any, int], None]


def fenced(lease: Lease, write: BatchWriter, *, timeout_s: float = 30.0) -> BatchWriter:
    """``write`` behind the lease: each batch is committed as the lease's checkpoint
    (``{"spark_batch": N, "token": T}``) first; a lease that was lost or fenced
    raises :class:`~workgroup.LeaseLostError` and the batch writes nothing."""

    def fenced_write(batch_df: Any, batch_id: int) -> None:
        record = json.dumps({"spark_batch": batch_id, "token": lease.token})
        try:
            lease.commit_sync(record, timeout_s)
        except Exception as exc:
            log.warning(
                "spark.batch_fenced",
                kind=lease.kind,
                key=lease.key,
                token=lease.token,
                batch=batch_id,
                error=f"{type(exc).__name__}: {exc}",
            )
            raise
        write(batch_df, batch_id)

    fenced_write.__name__ = f"fenced_{getattr(write, '__name__', 'write')}"
    return fenced_write


def batch_path(directory: str, batch_id: int) -> str:
    return os.path.join(directory, f"batch-{batch_id:010d}.parquet")


def write_batch_parquet(table: Any, directory: str, batch_id: int) -> str:
    """Write a ``pyarrow.Table`` as ``<directory>/batch-<N>.parquet``, atomically
    and idempotently (a replay of batch N replaces it).  Returns the path."""
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    path = batch_path(directory, batch_id)
    temporary = os.path.join(directory, f".batch-{batch_id:010d}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return path
