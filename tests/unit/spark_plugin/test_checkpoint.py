"""What a shard's checkpoint says, read here: its last batches and the end of
the batch in flight (workgroup_spark.checkpoint)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from workgroup_spark.checkpoint import BatchEnd, CheckpointState, read_checkpoint


def _log(root: Path, kind: str, *batches: int) -> None:
    (root / kind).mkdir(parents=True, exist_ok=True)
    for batch in batches:
        (root / kind / str(batch)).write_text("v1\n")
    (root / kind / f".{batches[-1] + 1 if batches else 0}.tmp").write_text("")  # Spark's temp


def test_a_checkpoint_is_read_where_it_is_local(tmp_path: Path) -> None:
    _log(tmp_path, "offsets", 0, 1, 2)
    _log(tmp_path, "commits", 0, 1)
    assert read_checkpoint(str(tmp_path)) == CheckpointState(2, 1)
    assert read_checkpoint(f"file://{tmp_path}") == CheckpointState(2, 1)
    assert read_checkpoint(f"file:{tmp_path}") == CheckpointState(2, 1)
    assert read_checkpoint(str(tmp_path / "never-run")) == CheckpointState()
    assert read_checkpoint("s3a://bucket/ckpt/shard/s-0") == CheckpointState()


def test_the_batch_in_flight_ends_when_its_commit_appears(tmp_path: Path) -> None:
    _log(tmp_path, "offsets", 0, 1, 2)
    _log(tmp_path, "commits", 0, 1)
    batch_end = BatchEnd.of(str(tmp_path))
    assert batch_end is not None
    assert batch_end.in_flight
    assert not batch_end.done()
    (tmp_path / "offsets" / "3").write_text("v1\n")  # not the batch in flight: no end yet
    assert not batch_end.done()
    (tmp_path / "commits" / "2").write_text("v1\n")  # Spark's rename into place
    assert batch_end.done()


def test_no_batch_in_flight_is_done_at_once(tmp_path: Path) -> None:
    _log(tmp_path, "offsets", 0, 1)
    _log(tmp_path, "commits", 0, 1)
    batch_end = BatchEnd.of(f"file://{tmp_path}")
    assert batch_end is not None
    assert not batch_end.in_flight
    assert batch_end.done()


def test_a_first_batch_in_flight_ends_at_its_commit(tmp_path: Path) -> None:
    _log(tmp_path, "offsets", 0)
    batch_end = BatchEnd.of(str(tmp_path))
    assert batch_end is not None
    assert not batch_end.done()
    _log(tmp_path, "commits", 0)
    assert batch_end.done()


def test_a_batch_planned_after_the_watch_is_watched_next(tmp_path: Path) -> None:
    _log(tmp_path, "offsets", 0, 1, 2)
    _log(tmp_path, "commits", 0, 1, 2)
    batch_end = BatchEnd.of(str(tmp_path))
    assert batch_end is not None
    assert not batch_end.in_flight
    assert batch_end.planned_since() is None  # Spark's temp file is no plan
    (tmp_path / "offsets" / "3").write_text("v1\n")
    planned = batch_end.planned_since()
    assert planned is not None
    assert planned.in_flight
    assert not planned.done()
    (tmp_path / "commits" / "3").write_text("v1\n")
    assert planned.done()


def test_a_first_batch_planned_after_the_watch_is_watched_next(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    batch_end = BatchEnd.of(str(tmp_path))
    assert batch_end is not None
    assert not batch_end.in_flight
    (tmp_path / "offsets" / "0").write_text("v1\n")
    planned = batch_end.planned_since()
    assert planned is not None
    assert planned.in_flight


def test_a_checkpoint_not_written_here_is_not_watched(tmp_path: Path) -> None:
    assert BatchEnd.of(str(tmp_path / "on-the-server-only")) is None
    assert BatchEnd.of("hdfs://namenode/ckpt/shard/s-0") is None
    assert BatchEnd.of("s3a://bucket/ckpt/shard/s-0") is None


@given(committed=st.none() | st.integers(0, 50), completed=st.none() | st.integers(0, 50))
def test_a_checkpoint_behind_sparks_progress_is_another_machines(
    committed: int | None, completed: int | None
) -> None:
    """Spark commits a batch before it reports it: the query's own checkpoint,
    read after its progress, has committed at least the batch reported."""
    batch_end = BatchEnd.__new__(BatchEnd)
    batch_end.committed = committed
    behind = completed is not None and (committed is None or committed < completed)
    assert batch_end.behind(completed) is behind
