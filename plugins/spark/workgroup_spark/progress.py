"""Spark's per-batch progress reports, as metrics and log events per shard.

Labels of every metric: group, kind, key.

| metric | type |
|---|---|
| ``workgroup_spark_batches_total`` | counter: micro-batches completed |
| ``workgroup_spark_input_rows_total`` | counter: rows read |
| ``workgroup_spark_input_rows_per_second`` | gauge: arrival rate, last batch |
| ``workgroup_spark_processed_rows_per_second`` | gauge: processing rate, last batch |
| ``workgroup_spark_batch_duration_seconds`` | histogram: trigger execution time |
| ``workgroup_spark_watermark_timestamp_seconds`` | gauge: event-time watermark |
| ``workgroup_spark_query_active`` | gauge: 1 while the shard's query runs |
| ``workgroup_spark_query_failures_total`` | counter: queries that failed |
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

LABELS = ["group", "kind", "key"]
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """One completed micro-batch, from ``StreamingQueryProgress``."""

    batch_id: int
    input_rows: int
    input_rows_per_s: float
    #: Spark gave an arrival rate (not NaN, as for an empty batch, nor missing).
    input_rate_given: bool
    processed_rows_per_s: float
    duration_s: float
    #: Where the trigger's time went, in ms (Spark's ``durationMs`` without its
    #: total): ``addBatch`` (the sink), ``latestOffset`` (listing the input), ...
    parts_ms: dict[str, int]
    watermark: float | None  # seconds since the epoch; None without a watermark
    timestamp: str

    @classmethod
    def parse(cls, report: Mapping[str, Any]) -> BatchProgress:
        durations = report.get("durationMs") or {}
        watermark = (report.get("eventTime") or {}).get("watermark")
        return cls(
            batch_id=int(report["batchId"]),
            input_rows=int(_total(report, "numInputRows") or 0),
            input_rows_per_s=_rate(_total(report, "inputRowsPerSecond")),
            input_rate_given=_given(_total(report, "inputRowsPerSecond")),
            processed_rows_per_s=_rate(_total(report, "processedRowsPerSecond")),
            duration_s=float(durations.get("triggerExecution") or 0) / 1000,
            parts_ms={
                str(part): int(ms)
                for part, ms in durations.items()
                if part != "triggerExecution" and isinstance(ms, int | float) and math.isfinite(ms)
            },
            watermark=_epoch(watermark),
            timestamp=str(report.get("timestamp", "")),
        )


def _given(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _total(report: Mapping[str, Any], field: str) -> Any:
    """The query's figure, or the sum over its sources: a Spark Connect server's
    progress reports carry these per source only."""
    if report.get(field) is not None:
        return report[field]
    sources = [s.get(field) for s in report.get("sources") or [] if s.get(field) is not None]
    return sum(_rate(v) for v in sources) if sources else None


def _rate(value: Any) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return 0.0
    return rate if rate == rate else 0.0  # Spark reports NaN for an empty batch


def _epoch(value: Any) -> float | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    epoch = parsed.timestamp()
    return epoch if epoch > 0 else None  # 1970-01-01: no watermark yet


class SparkMetrics:
    """The plugin's metrics, registered with every runner of the app."""

    def __init__(self) -> None:
        self.batches = Counter(
            "workgroup_spark_batches", "Micro-batches completed", LABELS, registry=None
        )
        self.input_rows = Counter("workgroup_spark_input_rows", "Rows read", LABELS, registry=None)
        self.input_rate = Gauge(
            "workgroup_spark_input_rows_per_second",
            "Arrival rate in the last batch",
            LABELS,
            registry=None,
        )
        self.processed_rate = Gauge(
            "workgroup_spark_processed_rows_per_second",
            "Processing rate, last batch",
            LABELS,
            registry=None,
        )
        self.duration = Histogram(
            "workgroup_spark_batch_duration_seconds",
            "Trigger execution time of each batch",
            LABELS,
            buckets=DURATION_BUCKETS,
            registry=None,  # served through the app's registry, not the global one
        )
        self.watermark = Gauge(
            "workgroup_spark_watermark_timestamp_seconds",
            "Event-time watermark",
            LABELS,
            registry=None,
        )
        self.active = Gauge(
            "workgroup_spark_query_active", "1 while the query runs", LABELS, registry=None
        )
        self.failures = Counter(
            "workgroup_spark_query_failures", "Queries that failed", LABELS, registry=None
        )

    def collectors(self) -> list[Any]:
        return [
            self.batches,
            self.input_rows,
            self.input_rate,
            self.processed_rate,
            self.duration,
            self.watermark,
            self.active,
            self.failures,
        ]

    def batch(self, labels: tuple[str, str, str], progress: BatchProgress) -> None:
        self.batches.labels(*labels).inc()
        self.input_rows.labels(*labels).inc(progress.input_rows)
        self.input_rate.labels(*labels).set(progress.input_rows_per_s)
        self.processed_rate.labels(*labels).set(progress.processed_rows_per_s)
        self.duration.labels(*labels).observe(progress.duration_s)
        if progress.watermark is not None:
            self.watermark.labels(*labels).set(progress.watermark)
