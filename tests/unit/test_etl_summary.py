"""The example pipeline's publisher reads each output batch once: its summary over
time equals a compaction of every file, while each publication reads only the
files that are new (reading them all made its CPU grow with the run)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from examples.sharded_etl import layout, summary
from examples.sharded_etl.summary import OutputTotals, compact, publish_summary, read_outputs


def write_batch(data: Path, shard: str, batch: int, rows: dict[str, tuple[int, int]]) -> None:
    directory = layout.output_dir(data, shard)
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(
        [
            {"shard": shard, "customer": customer, "events": events, "amount_cents": amount,
             "ids": list(range(events)), "batch": batch, "token": 1, "written_at": 0.0}
            for customer, (events, amount) in rows.items()
        ],
        schema=layout.OUTPUT_SCHEMA,
    )  # fmt: skip
    pq.write_table(table, layout.output_dir(data, shard) / f"batch-{batch:010d}.parquet")


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every batch file the summary module reads."""
    seen: list[Path] = []
    real = pq.read_table

    def counting(path: Path, *args: object, **kwargs: object) -> pa.Table:
        seen.append(Path(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(summary.pq, "read_table", counting)
    return seen


def test_each_publication_reads_only_new_batches(tmp_path: Path, reads: list[Path]) -> None:
    write_batch(tmp_path, "shard-0", 0, {"alice": (2, 300), "bob": (1, 50)})
    write_batch(tmp_path, "shard-1", 0, {"alice": (1, 10)})
    totals = OutputTotals(tmp_path, 2)
    first = publish_summary(tmp_path, 2, token=1, totals=totals)
    assert (first["events"], first["amount_cents"], first["batches"]) == (4, 360, 2)
    assert len(reads) == 2

    write_batch(tmp_path, "shard-1", 1, {"bob": (3, 7), "carol": (1, 1)})
    second = publish_summary(tmp_path, 2, token=1, totals=totals)
    assert (second["events"], second["amount_cents"], second["batches"]) == (8, 368, 3)
    assert len(reads) == 3  # the new file alone

    published = pq.read_table(layout.summary_dir(tmp_path) / "summary.parquet")
    assert published.equals(compact(read_outputs(tmp_path, 2)))
    assert published.to_pylist() == [
        {"customer": "alice", "events": 3, "amount_cents": 310},
        {"customer": "bob", "events": 4, "amount_cents": 57},
        {"customer": "carol", "events": 1, "amount_cents": 1},
    ]


def test_a_publisher_without_totals_reads_everything(tmp_path: Path, reads: list[Path]) -> None:
    write_batch(tmp_path, "shard-0", 0, {"alice": (2, 300)})
    publish_summary(tmp_path, 1, token=1)
    publish_summary(tmp_path, 1, token=1)
    assert len(reads) == 2
    assert publish_summary(tmp_path, 1, token=1)["events"] == 2


def test_no_output_yet_publishes_an_empty_summary(tmp_path: Path) -> None:
    header = publish_summary(tmp_path, 2, token=1, totals=OutputTotals(tmp_path, 2))
    assert (header["events"], header["batches"]) == (0, 0)
    assert pq.read_table(layout.summary_dir(tmp_path) / "summary.parquet").num_rows == 0
