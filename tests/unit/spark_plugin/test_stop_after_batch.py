"""A revoked query stops once its batch in flight is done (workgroup_spark.query
rule 3): by its checkpoint's commit log where that is the query's, by Spark's
progress elsewhere."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from workgroup_spark.query import _stop_after_batch


class FakeQuery:
    """A running query whose progress says batch ``completed`` is done."""

    def __init__(self, completed: int, *, trigger_active: bool = True) -> None:
        self.completed = completed
        self.trigger_active = trigger_active
        self.progress_reads = 0
        self.status_reads = 0
        self.stopped = threading.Event()
        self.isActive = True

    @property
    def lastProgress(self) -> dict[str, Any]:
        self.progress_reads += 1
        return {"batchId": self.completed}

    @property
    def status(self) -> dict[str, Any]:
        self.status_reads += 1
        return {"isTriggerActive": self.trigger_active}

    def stop(self) -> None:
        self.stopped.set()


def _checkpoint(root: Path, planned: int, committed: int) -> None:
    for log, last in (("offsets", planned), ("commits", committed)):
        (root / log).mkdir(parents=True, exist_ok=True)
        for batch in range(last + 1):
            (root / log / str(batch)).write_text("v1\n")


def _stop_in_thread(query: FakeQuery, checkpoint: Path, *, own_jvm: bool) -> threading.Thread:
    thread = threading.Thread(
        target=_stop_after_batch, args=(query, 30.0, str(checkpoint)), kwargs={"own_jvm": own_jvm}
    )
    thread.start()
    return thread


def test_a_query_of_the_daemons_own_jvm_stops_at_its_commit_without_asking_spark(
    tmp_path: Path,
) -> None:
    _checkpoint(tmp_path, planned=3, committed=2)
    query = FakeQuery(completed=2)
    thread = _stop_in_thread(query, tmp_path, own_jvm=True)
    assert not query.stopped.wait(0.1)  # batch 3 still runs
    (tmp_path / "commits" / "3").write_text("v1\n")
    thread.join(10)
    assert query.stopped.is_set()
    assert query.progress_reads == 0  # the commit log alone said when


def test_an_idle_query_stops_at_once(tmp_path: Path) -> None:
    _checkpoint(tmp_path, planned=3, committed=3)
    query = FakeQuery(completed=3, trigger_active=False)
    _stop_in_thread(query, tmp_path, own_jvm=True).join(10)
    assert query.stopped.is_set()
    assert query.progress_reads == 0
    assert query.status_reads == 1  # Spark says no trigger runs


def test_a_trigger_that_has_not_planned_its_batch_yet_is_waited_for(tmp_path: Path) -> None:
    """Batch 3 is committed and nothing is planned, but a trigger runs: it is
    listing its input.  Stopped now, it would run on into foreachBatch with
    ``stop()`` waiting and its work lost; its batch is awaited instead."""
    _checkpoint(tmp_path, planned=3, committed=3)
    query = FakeQuery(completed=3, trigger_active=True)
    thread = _stop_in_thread(query, tmp_path, own_jvm=True)
    assert not query.stopped.wait(0.1)
    (tmp_path / "offsets" / "4").write_text("v1\n")  # the trigger planned batch 4
    assert not query.stopped.wait(0.1)
    reads = query.status_reads
    (tmp_path / "commits" / "4").write_text("v1\n")
    thread.join(10)
    assert query.stopped.is_set()
    assert query.status_reads == reads  # from its plan on, the commit log alone


def test_a_trigger_that_finds_no_new_input_ends_the_wait(tmp_path: Path) -> None:
    _checkpoint(tmp_path, planned=3, committed=3)
    query = FakeQuery(completed=3, trigger_active=True)
    thread = _stop_in_thread(query, tmp_path, own_jvm=True)
    assert not query.stopped.wait(0.1)
    query.trigger_active = False  # no batch: nothing new to read
    thread.join(10)
    assert query.stopped.is_set()
    assert not (tmp_path / "offsets" / "4").exists()


def test_a_servers_query_checks_the_checkpoint_against_sparks_progress(tmp_path: Path) -> None:
    """On Spark Connect the same path may name another machine's disk: this one
    is behind what Spark reports (batch 5 done, 2 committed here), so Spark's
    progress says when the batch in flight is done."""
    _checkpoint(tmp_path, planned=3, committed=2)
    query = FakeQuery(completed=5)
    thread = _stop_in_thread(query, tmp_path, own_jvm=False)
    assert not query.stopped.wait(0.1)
    (tmp_path / "commits" / "3").write_text("v1\n")  # not the query's: still running
    assert not query.stopped.wait(0.1)
    query.completed = 6
    thread.join(10)
    assert query.stopped.is_set()
    assert query.progress_reads >= 2


def test_a_servers_query_whose_checkpoint_is_here_stops_at_its_commit(tmp_path: Path) -> None:
    _checkpoint(tmp_path, planned=3, committed=2)
    query = FakeQuery(completed=2)
    thread = _stop_in_thread(query, tmp_path, own_jvm=False)
    assert not query.stopped.wait(0.1)
    (tmp_path / "commits" / "3").write_text("v1\n")
    thread.join(10)
    assert query.stopped.is_set()
    assert query.progress_reads == 1  # once, to check the checkpoint is the query's
