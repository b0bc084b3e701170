"""A dry run of a shard's own query on its new owner, during a warm-up.

A new query's first micro-batch costs far more than the next ones: in a JVM
that ran only the session's warm-up query, the example's first batch took
3.7-11 s (``addBatch``) against 1.2-4.8 s for the following ones, because its
plan (the source's scan, the aggregation in ``foreachBatch``) is new to the
JVM: planning, code generation and compilation, the first reads.  Run once
before the cut-over, that cost moves off the moved shard's critical path.

Rules:

1. Only for a query that asks for it (``spark.query(kind, dry_run=True)``),
   only while its lease warms up (a planned move: the previous owner's query
   still runs, so the dry run adds nothing to the shard's gap), and only
   where the plan is new: in a JVM of the daemon's own that has not yet run
   a batch of it (:mod:`workgroup_spark.query` rule 2).
2. ``build(spark, lease)`` runs with :func:`~workgroup_spark.sinks.building_dry_run`:
   every :func:`~workgroup_spark.fenced` writer it makes is a dry one, which
   commits nothing and stops each ``write`` at its
   :func:`~workgroup_spark.check_fence` (``workgroup_spark.sinks`` rule 5).
   A ``build`` that makes no fenced writer is not run: nothing would stop its
   sink from publishing.
3. The query runs on a scratch checkpoint (``<checkpoint_root>/.dry-run/...``,
   removed afterwards where this process can reach it) until its first
   batch with rows is done, then stops: one batch of the same plan, reading
   the source's oldest files, as a new query on that checkpoint would.
4. A dry run that fails, finds no rows within :data:`DRY_RUN_TIMEOUT_S`, or
   is called off (the lease ended) is reported, never raised: the warm-up goes
   on, and the real query's first batch is only slower.  A source without
   input (an idle shard: Spark's first trigger found nothing) ends it at once,
   rather than holding the move back until the timeout.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workgroup.runtime.lease import Lease
from workgroup_spark.progress import BatchProgress
from workgroup_spark.sinks import building_dry_run

#: How long a dry run waits for its first batch with rows (rule 4).
DRY_RUN_TIMEOUT_S = 60.0
#: How often the dry run's query is polled.
POLL_S = 0.1
#: Why a dry run on a source without input is skipped (rule 4).
NO_INPUT = "no input to run on"
#: Spark's status message once a trigger has found no new input.
_NO_DATA_MESSAGE = "Waiting for data to arrive"


@dataclass(frozen=True, slots=True)
class DryRunOutcome:
    """What a dry run did: ``rows`` in its batch and the batch's
    ``durationMs`` breakdown, or why it did not run one (``skipped``)."""

    rows: int = 0
    duration_ms: dict[str, int] | None = None
    skipped: str | None = None


def scratch_location(checkpoint_root: str, kind: str, key: object) -> str:
    """A checkpoint of the dry run's own, beside the shard's (``.dry-run/``)."""
    from workgroup_spark.query import checkpoint_location

    return checkpoint_location(
        f"{checkpoint_root.rstrip('/')}/.dry-run", kind, f"{key}.{uuid.uuid4().hex[:8]}"
    )


def dry_run(
    spark: Any,
    build: Callable[[Any, Lease], Any],
    lease: Lease,
    *,
    name: str,
    scratch: str,
    called_off: threading.Event,
    timeout_s: float = DRY_RUN_TIMEOUT_S,
) -> DryRunOutcome:
    """Run one batch of ``build``'s query dry (rules 2-4; blocking: call it from
    a thread; ``called_off`` stops it early).  Raises what the query raised."""
    with building_dry_run() as writers:
        writer = build(spark, lease)
    if not writers:
        return DryRunOutcome(skipped="build() made no fenced() writer")
    query = writer.queryName(f"{name}.dry-run").option("checkpointLocation", scratch).start()
    try:
        deadline = time.monotonic() + timeout_s
        while not called_off.is_set():
            if not query.isActive:
                failure = query.exception()
                if failure is not None:
                    raise RuntimeError(_first_line(failure))
                return DryRunOutcome(skipped="the query ended without a batch")
            report = query.lastProgress
            rows = BatchProgress.parse(report).input_rows if report else 0
            if rows > 0:
                # A Spark Connect report leaves the parts a batch did not have as None.
                durations = report.get("durationMs") or {}
                return DryRunOutcome(
                    rows, {k: int(v) for k, v in durations.items() if v is not None}
                )
            if _found_no_input(query):
                return DryRunOutcome(skipped=NO_INPUT)
            if time.monotonic() >= deadline:
                return DryRunOutcome(skipped=f"no rows within {timeout_s:g} s")
            called_off.wait(POLL_S)
        return DryRunOutcome(skipped="called off")
    finally:
        with contextlib.suppress(Exception):  # stopping a failed query may raise its error
            query.stop()
        _remove(scratch)


def _found_no_input(query: Any) -> bool:
    """A trigger has run and found no input: an idle shard's source, where
    waiting for rows would hold the move back until the timeout (rule 4)."""
    try:
        status = query.status
    except Exception:
        return False
    return (
        status.get("message") == _NO_DATA_MESSAGE
        and not status.get("isDataAvailable")
        and not status.get("isTriggerActive")
    )


def _remove(location: str) -> None:
    """Remove the scratch checkpoint where this process reaches it (a local path
    or a ``file:`` URI); elsewhere it stays (a few small files per dry run)."""
    if location.startswith("file:"):
        location = location.removeprefix("file:").removeprefix("//")
    elif ":" in location.split("/", 1)[0]:
        return
    shutil.rmtree(location, ignore_errors=True)


def _first_line(failure: Any) -> str:
    text = str(getattr(failure, "desc", None) or failure).strip()
    return text.splitlines()[0] if text else type(failure).__name__
