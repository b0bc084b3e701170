"""The Spark plugin without a JVM: its entry point, options, sinks and the shard
query's life (start, progress, graceful and immediate stops, failures) against
fakes of Spark's query objects."""

from __future__ import annotations

import asyncio
import math
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import workgroup
from tests.unit.runtime.test_lease import FakeStore
from workgroup.errors import ConfigError, ErrorCode, WorkgroupError
from workgroup.plugins import installed
from workgroup.runtime.errors import LeaseLostError
from workgroup.runtime.lease import Committed, EndReason, Lease, Slot
from workgroup_spark import (
    BatchProgress,
    JavaMissingError,
    SparkQueries,
    SparkQueryFailed,
    check_fence,
    check_java,
    checkpoint_location,
    fenced,
    resolve_checkpoint_root,
    write_batch_parquet,
)
from workgroup_spark.progress import SparkMetrics
from workgroup_spark.query import ShardQuery, _stop_after_batch
from workgroup_spark.session import SessionOptions

# --- entry point and options ---------------------------------------------------------


def test_the_plugin_is_found_through_its_entry_point() -> None:
    assert "spark" in [p.name for p in installed()]
    app = workgroup.App("etl")
    spark = app.use("spark", checkpoint_root="/ckpt")
    assert isinstance(spark, SparkQueries)
    assert spark.checkpoint_root == "/ckpt"
    assert app.collectors  # its metrics are served with the app's
    assert spark.session.stop in app.cleanups


def test_a_missing_plugin_is_a_clear_config_error() -> None:
    with pytest.raises(ConfigError, match=r"no workgroup plugin named 'nope'.*installed: .*spark"):
        workgroup.App("etl").use("nope")


def test_a_query_registers_a_worker_for_its_kind() -> None:
    app = workgroup.App("etl")
    spark = app.use("spark")

    @app.resources("shard")
    def shards() -> list[str]:
        return ["a"]

    @spark.query("shard", grace_ms=3_000)
    def build(session: Any, lease: Lease) -> Any:
        raise AssertionError("not called at registration")

    assert app.workers["shard"].grace_ms == 3_000
    assert isinstance(app.workers["shard"].handler, ShardQuery)
    app.check()


def test_checkpoint_locations_are_per_kind_and_key_under_any_uri() -> None:
    assert checkpoint_location("/data/ckpt/", "shard", "s-1") == "/data/ckpt/shard/s-1"
    assert checkpoint_location("s3a://b/ckpt", "shard", 7) == "s3a://b/ckpt/shard/7"
    assert checkpoint_location("hdfs://nn/c", "shard", "a/b c") == "hdfs://nn/c/shard/a_b_c"


def test_environment_chooses_where_spark_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKGROUP_SPARK_MASTER", raising=False)
    monkeypatch.delenv("WORKGROUP_SPARK_REMOTE", raising=False)
    options = SessionOptions.from_environment("a", "spark://m:7077", None, {"k": "v"})
    assert options.describe() == "master spark://m:7077"
    assert options.conf["k"] == "v"
    assert options.conf["spark.ui.enabled"] == "false"
    monkeypatch.setenv("WORKGROUP_SPARK_REMOTE", "sc://127.0.0.1:15002")
    options = SessionOptions.from_environment("a", "spark://m:7077", None, None)
    assert options.describe() == "remote sc://127.0.0.1:15002"
    monkeypatch.setenv("WORKGROUP_SPARK_CONF", "spark.cores.max=1, spark.executor.memory=512m")
    options = SessionOptions.from_environment("a", None, None, {"spark.cores.max": "4"})
    assert options.conf["spark.cores.max"] == "1"
    assert options.conf["spark.executor.memory"] == "512m"
    monkeypatch.setenv("WORKGROUP_SPARK_CONF", "spark.cores.max")
    with pytest.raises(ConfigError, match=r"'spark\.cores\.max' is not key=value"):
        SessionOptions.from_environment("a", None, None, None)
    monkeypatch.delenv("WORKGROUP_SPARK_CONF")
    monkeypatch.setenv("WORKGROUP_SPARK_CHECKPOINT_ROOT", "/elsewhere")
    assert SparkQueries(workgroup.App("x")).checkpoint_root == "/elsewhere"


def test_a_relative_checkpoint_root_is_resolved_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("WORKGROUP_SPARK_CHECKPOINT_ROOT", raising=False)
    monkeypatch.delenv("WORKGROUP_SPARK_REMOTE", raising=False)
    monkeypatch.chdir(tmp_path)
    spark = SparkQueries(workgroup.App("x"))  # the default, "spark-checkpoints"
    assert spark.checkpoint_root == str(tmp_path / "spark-checkpoints")
    monkeypatch.chdir("/")  # a later change of directory moves nothing
    assert spark.checkpoint_root == str(tmp_path / "spark-checkpoints")
    assert resolve_checkpoint_root("s3a://b/ckpt", remote=None) == "s3a://b/ckpt"
    assert resolve_checkpoint_root("file:/data/c", remote="sc://h:1") == "file:/data/c"
    assert resolve_checkpoint_root("/data/c", remote="sc://h:1") == "/data/c"


def test_a_relative_checkpoint_root_is_refused_with_spark_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WORKGROUP_SPARK_CHECKPOINT_ROOT", raising=False)
    monkeypatch.setenv("WORKGROUP_SPARK_REMOTE", "sc://127.0.0.1:15002")
    with pytest.raises(ConfigError) as caught:
        SparkQueries(workgroup.App("x"))  # the default root is relative too
    message = str(caught.value)
    assert "'spark-checkpoints' is relative" in message
    assert "Spark Connect server would resolve it" in message
    assert "\n" not in message


def test_a_missing_java_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", "/nonexistent/jdk")
    with pytest.raises(JavaMissingError) as caught:
        check_java()
    message = str(caught.value)
    assert "\n" not in message
    assert "JAVA_HOME has no bin/java" in message
    assert "openjdk-17" in message
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(JavaMissingError, match="no java on PATH"):
        check_java()


# --- progress ----------------------------------------------------------------------------

REPORT = {
    "id": "q",
    "batchId": 7,
    "numInputRows": 1200,
    "inputRowsPerSecond": 400.0,
    "processedRowsPerSecond": "NaN",
    "durationMs": {"triggerExecution": 1500, "addBatch": 1200, "latestOffset": 40},
    "eventTime": {"watermark": "2026-11-25T00:00:10.000Z"},
    "timestamp": "2026-11-25T00:00:11.000Z",
}


def test_a_progress_report_becomes_a_batch() -> None:
    progress = BatchProgress.parse(REPORT)
    assert progress.batch_id == 7
    assert progress.input_rows == 1200
    assert progress.input_rows_per_s == 400.0
    assert progress.processed_rows_per_s == 0.0  # Spark's NaN for an empty batch
    assert progress.duration_s == 1.5
    assert progress.parts_ms == {"addBatch": 1200, "latestOffset": 40}  # the total apart
    assert progress.watermark == pytest.approx(1795564810.0)
    no_watermark = BatchProgress.parse(
        {**REPORT, "eventTime": {"watermark": "1970-01-01T00:00:00.000Z"}}
    )
    assert no_watermark.watermark is None


def test_a_spark_connect_report_counts_its_sources() -> None:
    # A Connect server's progress JSON has these figures per source only.
    report = {k: v for k, v in REPORT.items() if not k.endswith(("Rows", "Second"))}
    report["sources"] = [
        {"numInputRows": 1000, "inputRowsPerSecond": 300.0, "processedRowsPerSecond": 250.0},
        {"numInputRows": 200, "inputRowsPerSecond": 100.0, "processedRowsPerSecond": "NaN"},
    ]
    progress = BatchProgress.parse(report)
    assert (progress.input_rows, progress.input_rows_per_s) == (1200, 400.0)
    assert progress.processed_rows_per_s == 250.0
    assert BatchProgress.parse({**report, "sources": []}).input_rows == 0


@given(
    rows=st.one_of(st.none(), st.integers(0, 2**40)),
    rate=st.one_of(st.none(), st.floats(allow_nan=True), st.text(max_size=5)),
    duration=st.one_of(st.none(), st.integers(0, 10**9)),
    part=st.one_of(st.none(), st.integers(0, 10**9), st.floats(), st.text(max_size=5)),
)
def test_progress_parsing_takes_what_spark_may_send(
    rows: Any, rate: Any, duration: Any, part: Any
) -> None:
    report = {"batchId": 1, "numInputRows": rows, "inputRowsPerSecond": rate,
              "durationMs": {"triggerExecution": duration, "addBatch": part}}  # fmt: skip
    progress = BatchProgress.parse(report)
    assert progress.input_rows >= 0
    assert not math.isnan(progress.input_rows_per_s)
    assert all(isinstance(ms, int) for ms in progress.parts_ms.values())


# --- sinks ------------------------------------------------------------------------------------


def test_batch_files_are_written_atomically_and_a_replay_replaces_them(tmp_path: Path) -> None:
    first = pa.table({"n": [1, 2]})
    path = write_batch_parquet(first, str(tmp_path), 3)
    assert path.endswith("batch-0000000003.parquet")
    write_batch_parquet(pa.table({"n": [1, 2]}), str(tmp_path), 3)  # the replay of batch 3
    assert sorted(os.listdir(tmp_path)) == ["batch-0000000003.parquet"]
    assert pq.read_table(path).to_pylist() == [{"n": 1}, {"n": 2}]


async def _held_lease(store: FakeStore) -> Lease:
    lease = Lease("etl.shard", "shard", "s-0", slot=Slot("t", 0), store=store, commit_timeout_s=2)
    await lease.acquire()
    return lease


async def test_fenced_commits_the_batch_before_writing_it() -> None:
    store = FakeStore()
    lease = await _held_lease(store)
    written: list[int] = []

    def write(batch: Any, batch_id: int) -> None:
        # The batch's fence is committed before anything is written.
        assert f'"spark_batch": {batch_id}' in (store.offsets[lease.slot].metadata or "")
        written.append(batch_id)

    writer = fenced(lease, write)
    await asyncio.to_thread(writer, object(), 5)  # foreachBatch calls it from a JVM thread
    assert written == [5]


async def test_a_fenced_zombie_writes_nothing() -> None:
    store = FakeStore()
    lease = await _held_lease(store)
    written: list[int] = []
    writer = fenced(lease, lambda batch, batch_id: written.append(batch_id))
    store.answers = [ErrorCode.UNKNOWN_MEMBER_ID]  # its session expired at the coordinator
    with pytest.raises(LeaseLostError, match="fenced"):
        await asyncio.to_thread(writer, object(), 6)
    assert written == []
    assert lease.lost


class FakeFence:
    """A portable fence's interface: commits recorded; refuses once ``ended``."""

    def __init__(self) -> None:
        self.ended = False
        self.commits: list[str] = []

    def commit(self, value: str, *, timeout_s: float = 10.0) -> None:
        if self.ended:
            raise LeaseLostError("etl.shard/s-0: fenced by the coordinator (UNKNOWN_MEMBER_ID)")
        self.commits.append(value)

    def check(self, *, timeout_s: float = 10.0) -> None:
        self.commit("check", timeout_s=timeout_s)


def _write_parquet_to(directory: Path) -> Any:
    def write(batch: Any, batch_id: int) -> None:
        write_batch_parquet(pa.table({"n": [batch_id]}), str(directory), batch_id)

    return write


async def test_a_pickled_fenced_writer_carries_the_fence_not_the_lease(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = FakeStore()
    lease = await _held_lease(store)
    fence = FakeFence()
    monkeypatch.setattr(lease, "fence", lambda **options: fence)
    writer = fenced(lease, _write_parquet_to(tmp_path))
    # What Spark Connect does with a foreachBatch function: pickle it for the server.
    from pyspark import cloudpickle  # Spark's own pickler for Python functions

    shipped = pickle.loads(cloudpickle.dumps(writer))
    assert shipped.lease is None
    assert isinstance(shipped.fence, FakeFence)
    shipped(object(), 7)
    assert os.listdir(tmp_path) == ["batch-0000000007.parquet"]
    # Committed before the write, checked again before the rename; never through the lease.
    assert shipped.fence.commits == ['{"spark_batch": 7, "token": 1}'] * 2
    assert store.commits[-1][2] is not None
    assert "spark_batch" not in (store.commits[-1][2] or "")
    shipped.fence.ended = True
    with pytest.raises(LeaseLostError, match="fenced"):
        shipped(object(), 8)
    assert os.listdir(tmp_path) == ["batch-0000000007.parquet"]


def test_a_fence_that_cannot_reach_its_coordinator_writes_nothing(tmp_path: Path) -> None:
    from pyspark import cloudpickle

    from workgroup.fence import FenceTimeoutError, make_fence
    from workgroup.security import Security
    from workgroup_spark.connect_server import free_port

    closed = free_port()
    fence = make_fence(
        bootstrap=f"127.0.0.1:{closed}",
        security=Security(),
        group_id="etl.shard",
        member_id="m-1",
        instance_id=None,
        generation=2,
        topic="t",
        partition=0,
        kind="shard",
        key="s-0",
        token=5,
    )
    # A Fence given to fenced(): what a process other than the daemon does.
    shipped = cloudpickle.dumps(fenced(fence, _write_parquet_to(tmp_path), timeout_s=0.5))
    writer = pickle.loads(shipped)
    with pytest.raises(FenceTimeoutError, match=rf"no verdict from 127\.0\.0\.1:{closed}"):
        writer(object(), 1)
    assert os.listdir(tmp_path) == []


async def test_the_fence_is_checked_again_just_before_the_rename(tmp_path: Path) -> None:
    store = FakeStore()
    lease = await _held_lease(store)
    written: list[str] = []

    def write(batch: Any, batch_id: int) -> None:
        # A slow collect() or transform: the lease ends meanwhile.
        store.answers = [ErrorCode.UNKNOWN_MEMBER_ID]
        written.append(write_batch_parquet(pa.table({"n": [1]}), str(tmp_path), batch_id))

    writer = fenced(lease, write)
    with pytest.raises(LeaseLostError, match="fenced"):
        await asyncio.to_thread(writer, object(), 9)
    assert written == []
    assert os.listdir(tmp_path) == []  # neither the file nor its temporary copy
    check_fence()  # outside a fenced write: nothing to check, no error


# --- the shard query's life ----------------------------------------------------------------


class FakeQuery:
    def __init__(self, name: str) -> None:
        self.name = name
        self.id = "query-id"
        self.isActive = True
        self.trigger_active = False
        self.reports: list[dict[str, Any]] = []
        self.recent_reads = 0  # reads of every kept report (the server serialises each)
        self.failure: Exception | None = None
        self.stopped_at: float | None = None
        self.stopped = threading.Event()
        self.status_reads = 0  # each a round trip on Spark Connect
        self.progress_reads = 0

    @property
    def status(self) -> dict[str, Any]:
        self.status_reads += 1
        return {"isTriggerActive": self.trigger_active}

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        self.recent_reads += 1
        return list(self.reports)

    @recentProgress.setter
    def recentProgress(self, reports: list[dict[str, Any]]) -> None:
        self.reports = list(reports)

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        self.progress_reads += 1
        return self.reports[-1] if self.reports else None

    def exception(self) -> Exception | None:
        return self.failure

    def stop(self) -> None:
        self.isActive = False
        self.stopped_at = time.monotonic()
        self.stopped.set()


class FakeWriter:
    def __init__(self) -> None:
        self.options: dict[str, str] = {}
        self.name = ""
        self.query: FakeQuery | None = None

    def queryName(self, name: str) -> FakeWriter:
        self.name = name
        return self

    def option(self, key: str, value: str) -> FakeWriter:
        self.options[key] = value
        return self

    def start(self) -> FakeQuery:
        self.query = FakeQuery(self.name)
        return self.query


class FakeSession:
    remote = False  # a JVM of the daemon's own

    def __init__(self) -> None:
        self.made = 0
        self.failures: list[BaseException] = []

    def get(self) -> str:
        self.made += 1
        return "spark-session"

    def warm_up(self) -> None:
        self.get()

    def forget_if_gone(self, error: BaseException) -> bool:
        self.failures.append(error)
        return False


def shard_query(
    writer: Any,
    metrics: SparkMetrics | None = None,
    checkpoint_root: str = "/ckpt",
    *,
    remote: bool = False,
) -> ShardQuery:
    session = FakeSession()
    session.remote = remote
    return ShardQuery(
        app_name="etl",
        build=lambda session, lease: writer,
        session=session,  # type: ignore[arg-type]
        checkpoint_root=lambda: checkpoint_root,
        metrics=metrics or SparkMetrics(),
        poll_interval_s=0.02,
    )


async def _until(condition: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_a_revoked_query_finishes_its_batch_then_stops() -> None:
    lease = await _held_lease(FakeStore())
    writer = FakeWriter()
    metrics = SparkMetrics()
    task = asyncio.create_task(shard_query(writer, metrics)(lease))
    await _until(lambda: writer.query is not None)
    query = writer.query
    assert query is not None
    assert query.name == "etl.shard.s-0"
    assert writer.options["checkpointLocation"] == "/ckpt/shard/s-0"
    query.recentProgress = [{**REPORT, "batchId": 0}, {**REPORT, "batchId": 1}]
    labels = ("etl.shard", "shard", "s-0")
    await _until(lambda: metrics.batches.labels(*labels)._value.get() == 2)
    assert metrics.input_rows.labels(*labels)._value.get() == 2400
    assert metrics.active.labels(*labels)._value.get() == 1

    query.trigger_active = True  # a micro-batch in flight
    lease.end(EndReason.REVOKED, grace_s=5.0)
    await asyncio.sleep(0.3)
    assert query.stopped_at is None  # waits for the batch
    query.trigger_active = False
    await asyncio.wait_for(task, 5)
    assert query.stopped_at is not None
    assert metrics.active.labels(*labels)._value.get() == 0


async def test_each_batch_with_a_rate_reports_it_as_the_shards_load() -> None:
    """The first trigger of a run (Spark's 0.0: rows over an infinite interval)
    and an empty batch (NaN) say nothing of the shard's load: a busy shard
    reported idle after each start would draw the leader's balancing to it."""
    reported: list[float] = []
    lease = Lease(
        "etl.shard",
        "shard",
        "s-0",
        slot=Slot("t", 0),
        store=FakeStore(),
        commit_timeout_s=2,
        load_sink=reported.append,
    )
    await lease.acquire()
    writer = FakeWriter()
    task = asyncio.create_task(shard_query(writer)(lease))
    await _until(lambda: writer.query is not None)
    assert writer.query is not None
    writer.query.recentProgress = [
        {**REPORT, "batchId": 4, "numInputRows": 900, "inputRowsPerSecond": 0.0},
        {**REPORT, "batchId": 5, "inputRowsPerSecond": 250.0},
        {**REPORT, "batchId": 6, "inputRowsPerSecond": "NaN"},  # an empty batch
        {**REPORT, "batchId": 7, "inputRowsPerSecond": 300.0},
    ]
    await _until(lambda: len(reported) == 2)
    assert reported == [250.0, 300.0]
    await asyncio.sleep(0.1)
    assert len(reported) == 2  # each batch once
    lease.end(EndReason.REVOKED, grace_s=1.0)
    await asyncio.wait_for(task, 5)


async def test_a_poll_that_finds_one_new_batch_reads_its_report_alone() -> None:
    """Spark keeps a query's last 100 reports, and every read of them is
    serialised on the server and parsed here (a round trip on Connect): a poll
    reads them all only at a run's first batch or when batches were missed."""
    lease = await _held_lease(FakeStore())
    writer, metrics = FakeWriter(), SparkMetrics()
    task = asyncio.create_task(shard_query(writer, metrics)(lease))
    await _until(lambda: writer.query is not None)
    query = writer.query
    assert query is not None
    labels = ("etl.shard", "shard", "s-0")
    batches = metrics.batches.labels(*labels)
    query.recentProgress = [{**REPORT, "batchId": n} for n in range(100, 103)]
    await _until(lambda: batches._value.get() == 3)  # a run's first poll: every report
    assert query.recent_reads == 1
    for batch in range(103, 106):  # one new batch a poll: its report alone
        query.recentProgress = [*query.reports, {**REPORT, "batchId": batch}]
        await _until(lambda n=batch - 99: batches._value.get() == n)  # type: ignore[misc]
    assert query.recent_reads == 1
    query.recentProgress = [*query.reports, *({**REPORT, "batchId": n} for n in (106, 107))]
    await _until(lambda: batches._value.get() == 8)  # two since the last poll: all read
    assert query.recent_reads == 2
    await asyncio.sleep(0.1)
    assert batches._value.get() == 8  # each batch counted once
    lease.end(EndReason.REVOKED, grace_s=1.0)
    await asyncio.wait_for(task, 5)


async def test_a_query_with_batches_back_to_back_stops_as_soon_as_one_completes() -> None:
    """Batches longer than the trigger leave no moment without one running: the
    revoked query stops right after the next batch completes, not at the end of
    the grace period (the next owner waits for it)."""
    lease = await _held_lease(FakeStore())
    writer = FakeWriter()
    task = asyncio.create_task(shard_query(writer)(lease))
    await _until(lambda: writer.query is not None)
    query = writer.query
    assert query is not None
    query.recentProgress = [{**REPORT, "batchId": 3}]
    query.trigger_active = True  # always: batch 4 runs, then batch 5 at once
    lease.end(EndReason.REVOKED, grace_s=30.0)
    await asyncio.sleep(0.3)
    assert query.stopped_at is None  # batch 4 is not done
    completed = time.monotonic()
    query.recentProgress = [*query.recentProgress, {**REPORT, "batchId": 4}]
    await asyncio.wait_for(task, 5)
    assert query.stopped_at is not None
    assert query.stopped_at - completed < 1.0


def _checkpoint(root: Path, planned: int, committed: int) -> Path:
    """``root/shard/s-0`` as Spark leaves it: batches up to ``planned`` in
    ``offsets/``, up to ``committed`` in ``commits/``."""
    location = root / "shard" / "s-0"
    for log, last in (("offsets", planned), ("commits", committed)):
        (location / log).mkdir(parents=True)
        for batch in range(last + 1):
            (location / log / str(batch)).write_text("v1\n")
    return location


async def _running_query(
    checkpoint_root: Path, *, last_batch: int, remote: bool = False
) -> tuple[asyncio.Task[None], FakeQuery, ShardQuery, Lease]:
    """A shard's query running, whose last completed batch (by Spark) is ``last_batch``."""
    lease = await _held_lease(FakeStore())
    writer = FakeWriter()
    handler = shard_query(writer, checkpoint_root=str(checkpoint_root), remote=remote)
    task = asyncio.create_task(handler(lease))
    await _until(lambda: writer.query is not None)
    query = writer.query
    assert query is not None
    query.recentProgress = [{**REPORT, "batchId": last_batch}]
    return task, query, handler, lease


async def _revoked_query(
    checkpoint_root: Path, *, last_batch: int, trigger_active: bool = True, remote: bool = False
) -> tuple[asyncio.Task[None], FakeQuery]:
    """A shard's query whose last completed batch (by Spark) is ``last_batch``,
    revoked with a long grace period: its owner now waits for the batch in flight."""
    task, query, _, lease = await _running_query(
        checkpoint_root, last_batch=last_batch, remote=remote
    )
    query.trigger_active = trigger_active
    lease.end(EndReason.REVOKED, grace_s=30.0)
    return task, query


async def test_a_revoked_query_stops_when_its_batch_commits_in_the_checkpoint(
    tmp_path: Path,
) -> None:
    """Read here, the checkpoint's commit log says when the batch in flight is
    done: the query stops then, before its next batch is planned, without
    asking Spark (a round trip each on Connect) whether a batch runs."""
    checkpoint = _checkpoint(tmp_path, planned=4, committed=3)
    task, query = await _revoked_query(tmp_path, last_batch=3)  # Spark's progress stays
    await asyncio.sleep(0.3)
    assert query.stopped_at is None  # batch 4 runs
    committed = time.monotonic()
    (checkpoint / "commits" / "4").write_text("v1\n")
    await asyncio.wait_for(task, 5)
    assert query.stopped_at is not None
    assert query.stopped_at - committed < 1.0
    assert query.status_reads == 0


async def test_a_checkpoint_behind_sparks_progress_is_not_the_querys(tmp_path: Path) -> None:
    """On Spark Connect, a path on this machine that Spark has gone past (the
    server's checkpoint is on another disk) says nothing: Spark's progress
    decides, as elsewhere."""
    _checkpoint(tmp_path, planned=1, committed=1)  # stale: no batch in flight by it
    task, query = await _revoked_query(tmp_path, last_batch=7, remote=True)  # batch 8 runs
    await asyncio.sleep(0.3)
    assert query.stopped_at is None
    query.recentProgress = [*query.reports, {**REPORT, "batchId": 8}]
    await asyncio.wait_for(task, 5)
    assert query.stopped_at is not None


async def test_a_servers_query_whose_batches_commit_here_is_stopped_by_its_commit_log(
    tmp_path: Path,
) -> None:
    """On Spark Connect, once a poll finds Spark's last batch committed at this
    path, the path is the query's: revoked, the query is watched through its
    commit log at once, without first asking Spark for its progress (a round
    trip in which the next trigger could fire)."""
    checkpoint = _checkpoint(tmp_path, planned=3, committed=3)
    task, query, handler, lease = await _running_query(tmp_path, last_batch=3, remote=True)
    await _until(lambda: query.progress_reads >= 2)  # polls found batch 3 committed here
    handler.poll_interval_s = 60.0  # no poll from now on: every read below is the stop's
    await asyncio.sleep(0.1)
    (checkpoint / "offsets" / "4").write_text("v1\n")  # batch 4 runs
    query.trigger_active = True
    reads = query.progress_reads
    lease.end(EndReason.REVOKED, grace_s=30.0)
    await asyncio.sleep(0.2)
    assert query.stopped_at is None
    assert query.progress_reads == reads
    (checkpoint / "commits" / "4").write_text("v1\n")
    await asyncio.wait_for(task, 5)
    assert query.stopped_at is not None


def _query_done_up_to(batch: int, *, trigger_active: bool = True) -> FakeQuery:
    """A running query whose progress says batch ``batch`` is done."""
    query = FakeQuery("etl.shard.s-0")
    query.recentProgress = [{**REPORT, "batchId": batch}]
    query.trigger_active = trigger_active
    return query


def _stop_in_thread(
    query: FakeQuery, checkpoint: Path, *, checkpoint_here: bool
) -> threading.Thread:
    thread = threading.Thread(
        target=_stop_after_batch,
        args=(query, 30.0, str(checkpoint)),
        kwargs={"checkpoint_here": checkpoint_here},
    )
    thread.start()
    return thread


def test_a_query_of_the_daemons_own_jvm_stops_at_its_commit_without_asking_spark(
    tmp_path: Path,
) -> None:
    checkpoint = _checkpoint(tmp_path, planned=3, committed=2)
    query = _query_done_up_to(2)
    thread = _stop_in_thread(query, checkpoint, checkpoint_here=True)
    assert not query.stopped.wait(0.1)  # batch 3 still runs
    (checkpoint / "commits" / "3").write_text("v1\n")
    thread.join(10)
    assert query.stopped.is_set()
    assert query.progress_reads == 0  # the commit log alone said when


def test_an_idle_query_stops_at_once(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, planned=3, committed=3)
    query = _query_done_up_to(3, trigger_active=False)
    _stop_in_thread(query, checkpoint, checkpoint_here=True).join(10)
    assert query.stopped.is_set()
    assert query.progress_reads == 0
    assert query.status_reads == 1  # Spark says no trigger runs


def test_a_trigger_that_has_not_planned_its_batch_yet_is_waited_for(tmp_path: Path) -> None:
    """Batch 3 is committed and nothing is planned, but a trigger runs: it is
    listing its input.  Stopped now, it would run on into foreachBatch with
    ``stop()`` waiting and its work lost; its batch is awaited instead."""
    checkpoint = _checkpoint(tmp_path, planned=3, committed=3)
    query = _query_done_up_to(3)
    thread = _stop_in_thread(query, checkpoint, checkpoint_here=True)
    assert not query.stopped.wait(0.1)
    (checkpoint / "offsets" / "4").write_text("v1\n")  # the trigger planned batch 4
    assert not query.stopped.wait(0.1)
    reads = query.status_reads
    (checkpoint / "commits" / "4").write_text("v1\n")
    thread.join(10)
    assert query.stopped.is_set()
    assert query.status_reads == reads  # from its plan on, the commit log alone


def test_a_trigger_that_finds_no_new_input_ends_the_wait(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, planned=3, committed=3)
    query = _query_done_up_to(3)
    thread = _stop_in_thread(query, checkpoint, checkpoint_here=True)
    assert not query.stopped.wait(0.1)
    query.trigger_active = False  # no batch: nothing new to read
    thread.join(10)
    assert query.stopped.is_set()
    assert not (checkpoint / "offsets" / "4").exists()


def test_a_servers_query_checks_the_checkpoint_against_sparks_progress(tmp_path: Path) -> None:
    """On Spark Connect the same path may name another machine's disk: this one
    is behind what Spark reports (batch 5 done, 2 committed here), so Spark's
    progress says when the batch in flight is done."""
    checkpoint = _checkpoint(tmp_path, planned=3, committed=2)
    query = _query_done_up_to(5)
    thread = _stop_in_thread(query, checkpoint, checkpoint_here=False)
    assert not query.stopped.wait(0.1)
    (checkpoint / "commits" / "3").write_text("v1\n")  # not the query's: still running
    assert not query.stopped.wait(0.1)
    query.recentProgress = [{**REPORT, "batchId": 6}]
    thread.join(10)
    assert query.stopped.is_set()
    assert query.progress_reads >= 2


def test_a_servers_query_whose_checkpoint_is_here_stops_at_its_commit(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, planned=3, committed=2)
    query = _query_done_up_to(2)
    thread = _stop_in_thread(query, checkpoint, checkpoint_here=False)
    assert not query.stopped.wait(0.1)
    (checkpoint / "commits" / "3").write_text("v1\n")
    thread.join(10)
    assert query.stopped.is_set()
    assert query.progress_reads == 1  # once, to check the checkpoint is the query's


async def test_a_query_that_ends_during_its_batch_is_not_waited_for(tmp_path: Path) -> None:
    """A query that failed or stopped commits nothing more: Spark is asked now
    and then whether it runs, and the wait ends there, not with the grace period."""
    _checkpoint(tmp_path, planned=4, committed=3)
    task, query = await _revoked_query(tmp_path, last_batch=3, trigger_active=False)
    await asyncio.sleep(0.1)
    ended = time.monotonic()
    query.isActive = False
    await asyncio.wait_for(task, 5)
    assert query.stopped_at is not None
    assert query.stopped_at - ended < 2.0


async def test_a_batch_that_outlasts_the_grace_period_is_stopped() -> None:
    lease = await _held_lease(FakeStore())
    writer = FakeWriter()
    task = asyncio.create_task(shard_query(writer)(lease))
    await _until(lambda: writer.query is not None)
    assert writer.query is not None
    writer.query.trigger_active = True  # never finishes
    began = time.monotonic()
    lease.end(EndReason.REVOKED, grace_s=1.2)  # the plugin keeps 1 s of it for stop()
    await asyncio.wait_for(task, 5)
    assert writer.query.stopped_at is not None
    assert writer.query.stopped_at - began < 1.0


async def test_a_lost_lease_stops_the_query_at_once() -> None:
    lease = await _held_lease(FakeStore())
    writer = FakeWriter()
    task = asyncio.create_task(shard_query(writer)(lease))
    await _until(lambda: writer.query is not None)
    assert writer.query is not None
    writer.query.trigger_active = True  # a batch in flight does not matter now
    lease.end(EndReason.LOST)
    task.cancel()  # what the runtime does with a grace of 0
    # Cancelled, or returned if it saw the loss first: either way the query stops.
    await asyncio.gather(task, return_exceptions=True)
    assert await asyncio.to_thread(writer.query.stopped.wait, 5)


async def test_a_failed_query_is_a_failed_handler() -> None:
    lease = await _held_lease(FakeStore())
    writer = FakeWriter()
    metrics = SparkMetrics()
    task = asyncio.create_task(shard_query(writer, metrics)(lease))
    await _until(lambda: writer.query is not None)
    assert writer.query is not None
    writer.query.failure = RuntimeError("Job aborted: input file vanished\n\tat stack")
    writer.query.isActive = False
    with pytest.raises(
        SparkQueryFailed, match=r"etl.shard.s-0 failed: Job aborted: input file vanished$"
    ):
        await asyncio.wait_for(task, 5)
    assert metrics.failures.labels("etl.shard", "shard", "s-0")._value.get() == 1


async def test_build_must_return_a_stream_writer() -> None:
    lease = await _held_lease(FakeStore())
    with pytest.raises(WorkgroupError, match=r"must return a DataStreamWriter \(df.writeStream"):
        await shard_query("not a writer")(lease)


def test_a_connect_session_the_server_closed_is_dropped() -> None:
    from workgroup_spark.session import SessionHolder, SessionOptions

    class Closed:
        stopped = False

        def stop(self) -> None:
            self.stopped = True
            raise RuntimeError("the server no longer has this session")

    gone = RuntimeError("[INVALID_HANDLE.SESSION_CLOSED] The handle 1f2e is invalid.")
    local = SessionHolder(SessionOptions("etl"))
    local._session = Closed()
    assert not local.forget_if_gone(gone)  # a JVM session has no such failure
    remote = SessionHolder(SessionOptions("etl", remote="sc://127.0.0.1:15002"))
    session = remote._session = Closed()
    assert not remote.forget_if_gone(RuntimeError("[TABLE_OR_VIEW_NOT_FOUND] t"))
    assert remote.started
    assert remote.forget_if_gone(gone)
    assert session.stopped  # pyspark's default session is cleared with it
    assert not remote.started  # the next get() opens a new one


async def test_a_query_that_cannot_start_hands_its_error_to_the_session() -> None:
    lease = await _held_lease(FakeStore())
    query = shard_query("not a writer")
    with pytest.raises(WorkgroupError):
        await query(lease)
    assert [type(e) for e in query.session.failures] == [WorkgroupError]  # type: ignore[attr-defined]


def test_stopping_a_session_whose_jvm_is_gone_is_not_a_failure() -> None:
    from workgroup.testing import capture_logs
    from workgroup_spark.session import SessionHolder, SessionOptions

    class Gone:
        @property
        def streams(self) -> Any:
            raise ConnectionRefusedError(111, "Connection refused")

    holder = SessionHolder(SessionOptions("etl"))
    holder._session = Gone()
    with capture_logs() as logs:
        holder.stop()  # no exception: the JVM went with a SIGTERM to the process group
    assert [e["event"] for e in logs] == ["spark.session_gone"]
    assert not holder.started


def test_the_local_checkpoint_manager_is_named_where_each_spark_keeps_it() -> None:
    from workgroup_spark.session import local_checkpoint_manager

    package = "org.apache.spark.sql.execution.streaming"
    old = f"{package}.FileSystemBasedCheckpointFileManager"
    new = f"{package}.checkpointing.FileSystemBasedCheckpointFileManager"
    assert local_checkpoint_manager("4.0.1") == old
    assert local_checkpoint_manager("4.1.0") == new
    assert local_checkpoint_manager("4.3.0") == new
    assert local_checkpoint_manager("5.0.0-preview1") == new


@pytest.mark.parametrize(
    ("root", "local"),
    [
        ("/srv/etl/checkpoints", True),
        ("file:/srv/etl/checkpoints", True),
        ("FILE:///srv/etl/checkpoints", True),
        ("hdfs://namenode:8020/etl", False),
        ("s3a://bucket/etl", False),
        (None, False),
    ],
)
def test_only_checkpoints_on_this_machine_are_local(root: str | None, local: bool) -> None:
    from workgroup_spark.session import is_local_path

    assert is_local_path(root) is local


class ConfSession:
    """A session's ``conf`` and ``version``, as the checkpoint manager's choice uses them."""

    version = "4.3.0"

    def __init__(self, *, refuse: bool = False) -> None:
        self.settings: dict[str, str] = {}
        self.refuse = refuse
        self.conf = self

    def set(self, key: str, value: str) -> None:
        if self.refuse:
            raise RuntimeError("[CANNOT_MODIFY_CONFIG] Cannot modify the value of a config")
        self.settings[key] = value


def test_a_session_for_local_checkpoints_renames_without_starting_processes() -> None:
    from workgroup.testing import capture_logs
    from workgroup_spark.session import (
        CHECKPOINT_MANAGER_SETTING,
        SessionHolder,
        local_checkpoint_manager,
    )

    local = ConfSession()
    SessionHolder(SessionOptions("etl"), checkpoint_root="/srv/ck")._choose_checkpoint_manager(
        local
    )
    assert local.settings == {CHECKPOINT_MANAGER_SETTING: local_checkpoint_manager("4.3.0")}
    for holder in (
        SessionHolder(SessionOptions("etl"), checkpoint_root="s3a://bucket/ck"),  # not local
        SessionHolder(SessionOptions("etl")),  # no checkpoint root known
        SessionHolder(  # the user's choice wins
            SessionOptions("etl", conf={CHECKPOINT_MANAGER_SETTING: "com.example.Manager"}),
            checkpoint_root="/srv/ck",
        ),
    ):
        untouched = ConfSession()
        holder._choose_checkpoint_manager(untouched)
        assert untouched.settings == {}
    with capture_logs() as logs:  # refused: Spark's default, and the session goes on
        SessionHolder(SessionOptions("etl"), checkpoint_root="/srv/ck")._choose_checkpoint_manager(
            ConfSession(refuse=True)
        )
    [refused] = [e for e in logs if e["event"] == "spark.checkpoint_manager_refused"]
    assert refused["error"].startswith("RuntimeError: [CANNOT_MODIFY_CONFIG]")


class FakeGateway:
    """pyspark's gateway as :func:`workgroup_spark.session._end_jvm` finds it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.shut = False

    def shutdown(self) -> None:
        self.shut = True


@pytest.mark.parametrize(
    ("program", "ends_by"),
    [
        ("import sys; sys.stdin.read()", "the end of its input"),  # as Spark's gateway does
        (
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)",
            "a kill",
        ),
    ],
)
def test_a_stopped_session_leaves_no_jvm_behind(
    monkeypatch: pytest.MonkeyPatch, program: str, ends_by: str
) -> None:
    from pyspark import SparkContext

    from workgroup_spark import session as session_module

    jvm = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE)
    gateway = FakeGateway(jvm)
    monkeypatch.setattr(SparkContext, "_gateway", gateway)
    monkeypatch.setattr(SparkContext, "_jvm", object())
    began = time.monotonic()
    session_module._end_jvm(wait_s=2.0)
    assert jvm.poll() is not None, ends_by  # gone before the daemon goes on
    if ends_by == "the end of its input":
        assert time.monotonic() - began < 2.0  # not waited out
    assert gateway.shut
    assert SparkContext._gateway is None  # a new session starts a new JVM
    assert SparkContext._jvm is None


# --- warm-ups (planned moves) ----------------------------------------------------------


def _warming_lease(store: FakeStore, ready: list[str]) -> Lease:
    return Lease(
        "etl.shard",
        "shard",
        "s-0",
        slot=Slot("t", 0),
        store=store,
        role="warming",
        commit_timeout_s=2,
        ready_sink=lambda: ready.append("ready"),
    )


def test_a_query_worker_warms_up_and_its_daemon_starts_spark_before_joining() -> None:
    app = workgroup.App("etl")
    spark = app.use("spark")

    @spark.query("shard")
    def build(session: Any, lease: Lease) -> Any:
        raise AssertionError("not called at registration")

    assert app.workers["shard"].warm_up is True
    assert app.startups == [spark._start_session]
    cold = workgroup.App("etl-cold")
    cold_spark = cold.use("spark", start_before_join=False)
    cold_spark.query("shard", warm_up=False)(build)
    assert cold.workers["shard"].warm_up is False
    assert cold.startups == []


def test_warm_ups_can_be_turned_off_for_the_whole_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKGROUP_SPARK_WARM_UP", "0")
    app = workgroup.App("etl")
    app.use("spark").query("shard")(lambda session, lease: None)
    assert app.workers["shard"].warm_up is False
    assert app.startups == []  # today's plain moves: the first shard starts the session
    monkeypatch.setenv("WORKGROUP_SPARK_WARM_UP", "maybe")
    with pytest.raises(ConfigError, match=r"WORKGROUP_SPARK_WARM_UP='maybe': say 1 or 0"):
        workgroup.App("etl").use("spark")


def test_a_session_that_cannot_start_before_joining_is_logged_not_fatal() -> None:
    from workgroup.testing import capture_logs

    app = workgroup.App("etl")
    spark = app.use("spark")

    def refuse() -> Any:
        raise RuntimeError("Java gateway process exited\nbefore sending its port")

    spark.session.get = refuse  # type: ignore[method-assign]
    with capture_logs() as logs:
        spark._start_session()
    [event] = [e for e in logs if e["event"] == "spark.session_failed"]
    assert event["error"] == "RuntimeError: Java gateway process exited"


async def test_a_warming_shard_prepares_then_starts_its_query_at_the_cut_over(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "shard" / "s-0"
    for log_dir, batches in (("offsets", 3), ("commits", 2)):
        (checkpoint / log_dir).mkdir(parents=True)
        for batch in range(batches):
            (checkpoint / log_dir / str(batch)).write_text("v1\n{}")
    store = FakeStore()
    ready: list[str] = []
    lease = _warming_lease(store, ready)
    writer = FakeWriter()
    built: list[tuple[str, int]] = []

    def build(session: Any, held: Lease) -> Any:
        built.append((held.role, held.token))
        return writer

    handler = ShardQuery(
        app_name="etl",
        build=build,
        session=FakeSession(),  # type: ignore[arg-type]
        checkpoint_root=lambda: str(tmp_path),
        metrics=SparkMetrics(),
        poll_interval_s=0.02,
    )
    from workgroup.testing import capture_logs

    with capture_logs() as logs:
        task = asyncio.create_task(handler(lease))
        await _until(lambda: ready == ["ready"])
        # Ready: the session made and the checkpoint read; nothing built or started.
        await asyncio.sleep(0.1)
        assert handler.session.made == 1  # type: ignore[attr-defined]
        assert built == []
        assert writer.query is None
        [warmed] = [e for e in logs if e["event"] == "spark.query_warmed"]
        assert (warmed["last_batch"], warmed["committed_batch"]) == (2, 1)
        # The cut-over: the runner promotes the lease and takes its token.
        store.offsets[lease.slot] = Committed(4, "")  # the previous owner's token
        lease.promote()
        await lease.acquire()
        await _until(lambda: writer.query is not None)
        # Built once the lease is active, with the token taken at the cut-over.
        assert built == [("active", 5)]
        assert writer.options["checkpointLocation"] == str(checkpoint)
        assert writer.name == "etl.shard.s-0"
        lease.end(EndReason.REVOKED, grace_s=2.0)
        await asyncio.wait_for(task, 5)
    assert writer.query is not None
    assert writer.query.stopped_at is not None


async def test_a_warm_up_called_off_never_starts_the_query(tmp_path: Path) -> None:
    ready: list[str] = []
    lease = _warming_lease(FakeStore(), ready)
    writer = FakeWriter()
    task = asyncio.create_task(shard_query(writer)(lease))
    await _until(lambda: ready == ["ready"])
    lease.end(EndReason.WARMUP_ENDED)  # the move went away: the owner keeps the shard
    await asyncio.wait_for(task, 5)
    assert writer.query is None


def test_a_session_is_warmed_up_once_and_a_failed_warm_up_is_only_logged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import workgroup_spark.session as session_module
    from workgroup.testing import capture_logs
    from workgroup_spark.session import SessionHolder

    runs: list[Any] = []

    def run(session: Any, timeout_s: float) -> None:
        runs.append(session)
        if len(runs) == 2:
            raise RuntimeError("the warm-up query failed: out of memory\nat ...")

    monkeypatch.setattr(session_module, "_run_warm_up_query", run)
    holder = SessionHolder(SessionOptions("etl"))
    sessions = iter(["first", "second"])
    monkeypatch.setattr(holder, "_make", lambda: next(sessions))
    holder.warm_up()
    holder.warm_up()
    assert runs == ["first"]  # once per session
    holder._session = None  # a new session (a Connect session the server closed)
    with capture_logs() as logs:
        holder.warm_up()  # fails: logged, the shard's query starts cold
    assert runs == ["first", "second"]
    [failed] = [e for e in logs if e["event"] == "spark.warm_up_failed"]
    assert failed["error"] == "RuntimeError: the warm-up query failed: out of memory"
    remote = SessionHolder(SessionOptions("etl", remote="sc://127.0.0.1:15002"))
    monkeypatch.setattr(remote, "_make", lambda: "connect-session")
    remote.warm_up()  # the server runs queries already: nothing to warm
    assert runs == ["first", "second"]


def test_a_shipped_fenced_writer_loads_the_fence_path_only(tmp_path: Path) -> None:
    """What a Spark Connect worker imports to run a fenced batch: the sinks and the
    fence, not the daemon's runtime (the app, the lease, logging)."""
    from pyspark import cloudpickle

    from workgroup.fence import make_fence
    from workgroup.security import Security

    fence = make_fence(
        bootstrap="127.0.0.1:9", security=Security(), group_id="etl.shard", member_id="m-1",
        instance_id=None, generation=2, topic="t", partition=0, kind="shard", key="s-0", token=5,
    )  # fmt: skip
    shipped = tmp_path / "writer.pickle"
    shipped.write_bytes(cloudpickle.dumps(fenced(fence, _write_parquet_to(tmp_path))))
    plugin = Path(fenced.__code__.co_filename).resolve().parents[1]
    root = plugin.parents[1]
    probe = (
        "import pickle, sys; "
        f"writer = pickle.loads(open({str(shipped)!r}, 'rb').read()); "
        "print(writer.fence.token, *sorted(m for m in sys.modules if m.startswith(("
        "'workgroup.runtime.app', 'workgroup.runtime.lease', 'workgroup.log', "
        "'workgroup_spark.plugin', 'workgroup_spark.query', 'structlog'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(plugin)])},
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.split() == ["5"]
