"""Check the sharded ETL's output: every event exactly once, the summary the sum of the shards."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from examples.sharded_etl import layout
from examples.sharded_etl.summary import compact, current, read_outputs


@dataclass
class Verification:
    """What was checked, and each problem found (none: exactly once)."""

    input_events: int = 0
    output_events: int = 0
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0
    batches: int = 0
    summary_events: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def input_events(data: Path, shards: int) -> dict[int, tuple[str, int]]:
    """``id -> (customer, amount_cents)`` of every event written to an input directory."""
    events: dict[int, tuple[str, int]] = {}
    for shard in layout.shard_names(shards):
        for path in sorted(layout.input_dir(data, shard).glob("*.json")):
            for line in path.read_text().splitlines():
                if line:
                    event = json.loads(line)
                    events[event["id"]] = (event["customer"], event["amount_cents"])
    return events


def processed_ids(data: Path, shards: int) -> list[int]:
    ids: list[int] = []
    for shard in layout.shard_names(shards):
        for path in sorted(layout.output_dir(data, shard).glob("batch-*.parquet")):
            for row_ids in pq.read_table(path, columns=["ids"])["ids"].to_pylist():
                ids.extend(row_ids)
    return ids


def verify(data: Path, shards: int, *, check_summary: bool = True) -> Verification:
    result = Verification()
    inputs = input_events(data, shards)
    outputs = read_outputs(data, shards)
    ids = [i for row in outputs["ids"].to_pylist() for i in row]
    counts = Counter(ids)
    result.input_events = len(inputs)
    result.output_events = len(ids)
    result.batches = len(
        set(zip(outputs["shard"].to_pylist(), outputs["batch"].to_pylist(), strict=True))
    )
    result.duplicates = sum(n - 1 for n in counts.values() if n > 1)
    result.missing = len(inputs.keys() - counts.keys())
    result.unexpected = len(counts.keys() - inputs.keys())
    if result.duplicates:
        result.problems.append(f"{result.duplicates} events were processed more than once")
    if result.missing:
        result.problems.append(f"{result.missing} events were never processed")
    if result.unexpected:
        result.problems.append(f"{result.unexpected} processed events are not in the input")
    # Amounts per customer: the aggregation itself, not only the ids.
    expected: Counter[str] = Counter()
    for customer, amount in inputs.values():
        expected[customer] += amount
    got = {row["customer"]: row["amount_cents"] for row in compact(outputs).to_pylist()}
    if not result.problems and got != dict(expected):
        result.problems.append("per-customer amounts in the output differ from the input")
    if check_summary:
        header = current(data)
        path = layout.summary_dir(data) / "summary.parquet"
        if not header or not path.exists():
            result.problems.append("no summary was published")
        else:
            summary = {r["customer"]: r for r in pq.read_table(path).to_pylist()}
            result.summary_events = header["events"]
            shards_total = {r["customer"]: r for r in compact(outputs).to_pylist()}
            if summary != shards_total:
                result.problems.append(
                    f"the summary ({header['events']} events, token {header['token']}) is not "
                    f"the sum of the shards ({len(ids)} events)"
                )
    return result
