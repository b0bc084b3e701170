"""One Structured Streaming query per owned shard.

Rules:

1. ``build(spark, lease)`` returns a ``DataStreamWriter`` that has not been
   started.  The plugin names the query ``<app>.<kind>.<key>`` and sets its
   checkpoint location to ``<checkpoint_root>/<kind>/<key>``: every owner of
   the shard uses the same checkpoint, so a moved shard resumes where its
   previous owner stopped.
2. The query starts once the lease is taken (its token committed).
   Handed over with a warm-up (``lease.role == "warming"``: a planned move,
   the previous owner's query still runs), the handler gets ready first: it
   gets the daemon's session (started and warmed up if need be:
   :meth:`~workgroup_spark.session.SessionHolder.warm_up`) and reads the shard's
   checkpoint (its last planned and committed batches), then
   ``await lease.ready()``; at the cut-over, with the lease active and its
   token taken, ``build`` runs and the query starts.  A warm-up called off
   returns; one that fails falls back to a plain move.  A query that asks for
   it (``dry_run=True``) also runs one batch of its own plan dry before it
   says it is ready (:mod:`workgroup_spark.dry_run`), so that its first real
   batch is not the first of its kind in this session; only where that is
   so: the session is this daemon's own JVM (a Spark Connect server runs the
   plan for the shard's current owner already), and no batch of the plan with
   rows has run in it yet (a daemon that joins, not one that takes shards of a
   kind it runs).  Warm-ups run their dry runs one at a time, so the first
   warms the plan and the others skip theirs.
3. Revoked (the shard moves, or the daemon stops): the micro-batch in flight
   may finish, up to the lease's grace period; then the query is stopped and
   the handler returns, which lets the new owner start.  Batches back to back
   (each longer than the trigger) leave no idle moment: the query stops as
   soon as one completes.  The checkpoint's commit log says when, where this
   process can read it (:mod:`workgroup_spark.checkpoint`).  A trigger that
   has begun counts as a batch in flight before its batch is planned.
4. Lost or fenced (the session is gone, someone else may own the shard): the
   query is stopped at once, without waiting for the batch.
5. A query that fails raises :class:`SparkQueryFailed` from the handler:
   the runtime logs it, counts it and starts it again with back-off while the
   lease is held.  A query that ends by itself (``availableNow``) ends the handler.
6. A query that cannot start because the Spark Connect server closed the
   daemon's session drops that session; the restart opens a new one.
7. Every completed batch is a log event (``spark.batch``) and metrics
   (:mod:`workgroup_spark.progress`), and its input rate (rows/s) is the
   shard's load (``lease.report_load``): the leader balances shards on it.
   A batch without a rate is not reported: an empty one (Spark gives NaN)
   and the first of each run of the query (Spark divides its rows by an
   infinite interval and gives 0.0, however busy the shard).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from workgroup.errors import WorkgroupError
from workgroup.log import get_logger
from workgroup.runtime.lease import Lease
from workgroup_spark.checkpoint import BatchEnd, read_checkpoint
from workgroup_spark.dry_run import DryRunOutcome, dry_run, scratch_location
from workgroup_spark.progress import BatchProgress, SparkMetrics
from workgroup_spark.session import SessionHolder

log = get_logger("workgroup.spark.query")  # under workgroup's root logger

#: ``build(spark, lease) -> DataStreamWriter`` (not started).
Build = Callable[[Any, Lease], Any]
#: How often a running query's status and progress are read.
POLL_INTERVAL_S = 1.0
#: Kept from the grace period for ``query.stop()`` itself.
STOP_MARGIN_S = 1.0
#: How often a revoked query's checkpoint is looked at for its batch's commit (a stat).
COMMIT_WATCH_S = 0.01
#: How often Spark is asked meanwhile whether the query still runs (a round trip).
STATUS_EVERY_S = 0.5
#: How often a trigger that has not planned its batch yet is looked at again.
PLAN_WATCH_S = 0.02

_UNSAFE = re.compile(r"[^A-Za-z0-9_.=-]")


class SparkQueryFailed(WorkgroupError):
    """The shard's streaming query failed; the runtime restarts it with back-off."""

    retriable = True


def checkpoint_location(root: str, kind: str, key: object) -> str:
    """``<root>/<kind>/<key>``, with characters a path should not hold replaced."""
    return f"{root.rstrip('/')}/{_UNSAFE.sub('_', kind)}/{_UNSAFE.sub('_', str(key))}"


class ShardQuery:
    """The handler the plugin registers for a kind: runs ``build``'s query for a lease."""

    def __init__(
        self,
        *,
        app_name: str,
        build: Build,
        session: SessionHolder,
        checkpoint_root: Callable[[], str],
        metrics: SparkMetrics,
        poll_interval_s: float = POLL_INTERVAL_S,
        dry_run: bool = False,
    ) -> None:
        self.app_name = app_name
        self.build = build
        self.session = session
        self.checkpoint_root = checkpoint_root
        self.metrics = metrics
        self.poll_interval_s = poll_interval_s
        #: Warm-ups run one batch of the query's own plan dry, where it pays (rule 2).
        self.dry_run = dry_run
        #: A batch of the plan with rows has run in this daemon's session (rule 2).
        self.plan_ran = False
        self._dry_runs = asyncio.Lock()  # one at a time: the first warms the plan
        self.__name__ = getattr(build, "__name__", "spark_query")

    async def __call__(self, lease: Lease) -> None:
        labels = (lease.group_id, lease.kind, str(lease.key))
        name = f"{self.app_name}.{lease.kind}.{lease.key}"
        checkpoint = checkpoint_location(self.checkpoint_root(), lease.kind, lease.key)
        warming = lease.warming
        began = time.monotonic()
        try:
            if warming:
                await asyncio.to_thread(self.session.warm_up)
                state = await asyncio.to_thread(read_checkpoint, checkpoint)
                log.info(
                    "spark.query_warmed",
                    query=name,
                    checkpoint=checkpoint,
                    last_batch=state.last_batch,
                    committed_batch=state.committed_batch,
                    warmed_s=round(time.monotonic() - began, 3),
                )
                if self.dry_run:
                    await self._dry_run_where_it_pays(lease, name)
                if not await lease.ready():
                    log.info("spark.warmup_called_off", query=name, why=lease.end_reason)
                    return  # the move was called off: the previous owner carries on
            building = time.monotonic()
            writer = await self._prepare(lease, name, checkpoint)
            if writer is None:
                return
            starting = time.monotonic()
            query = await _start(writer)
            build_s = round(starting - building, 3)
            start_s = round(time.monotonic() - starting, 3)
        except Exception as exc:
            # A Connect session the server closed: the restart opens a new one.
            self.session.forget_if_gone(exc)
            raise
        self.metrics.active.labels(*labels).set(1)
        log.info(
            "spark.query_started",
            query=name,
            token=lease.token,
            checkpoint=checkpoint,
            id=str(query.id),
            build_s=build_s,
            start_s=start_s,
        )
        last_batch = -1
        # The daemon's own JVM writes the checkpoint at this path; a Spark Connect
        # server's path may name another machine's disk, until a poll finds Spark's
        # batches committed here (rule 3: read then at the stop, not asked again).
        checkpoint_here = not self.session.remote
        try:
            while not lease.revoked:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lease.wait_revoked(), self.poll_interval_s)
                if lease.revoked:
                    break
                last_batch = await asyncio.to_thread(self._report, query, labels, last_batch, lease)
                if not checkpoint_here and last_batch >= 0:
                    found = await asyncio.to_thread(_querys_checkpoint, checkpoint, last_batch)
                    checkpoint_here = found is not None
                if not query.isActive:
                    failure = query.exception()
                    if failure is not None:
                        self.metrics.failures.labels(*labels).inc()
                        raise SparkQueryFailed(f"query {name} failed: {_first_line(failure)}")
                    log.info("spark.query_ended", query=name, token=lease.token)
                    return
            stopping = time.monotonic()
            if lease.lost:
                await asyncio.to_thread(_stop, query)
                how = "at once"
            else:
                grace = lease.grace_left_s or 0.0
                await asyncio.to_thread(
                    _stop_after_batch, query, grace - STOP_MARGIN_S, checkpoint,
                    checkpoint_here=checkpoint_here,
                )  # fmt: skip
                how = "after its batch"
            stop_s = round(time.monotonic() - stopping, 3)
            await asyncio.to_thread(self._report, query, labels, last_batch)
            log.info(
                "spark.query_stopped", query=name, token=lease.token, why=lease.end_reason, how=how,
                stop_s=stop_s,
            )  # fmt: skip
        except asyncio.CancelledError:
            # The grace period is over, or the lease was lost: stop without waiting here.
            _stop_in_background(query)
            log.info(
                "spark.query_stopped", query=name, token=lease.token, why=lease.end_reason,
                how="at once",
            )  # fmt: skip
            raise
        finally:
            self.metrics.active.labels(*labels).set(0)

    async def _dry_run_where_it_pays(self, lease: Lease, name: str) -> None:
        """A dry run unless the plan is warm already or runs elsewhere (rule 2).
        A warm-up called off while another's dry run runs returns at once."""
        turn = asyncio.ensure_future(self._dry_runs.acquire())
        called_off = asyncio.ensure_future(lease.wait_revoked())
        try:
            await asyncio.wait({turn, called_off}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            called_off.cancel()
            if not turn.done():
                turn.cancel()
                turn.add_done_callback(self._hand_on_turn)
        if not turn.done():
            return
        try:
            if lease.revoked:
                return
            why_not = self._why_no_dry_run()
            if why_not is not None:
                log.info("spark.dry_run_skipped", query=name, why=why_not)
                return
            await self._dry_run(lease, name)
        finally:
            self._dry_runs.release()

    def _hand_on_turn(self, turn: asyncio.Future[Any]) -> None:
        """A turn given before its cancel arrived, to a warm-up gone: hand it on."""
        if not turn.cancelled():
            self._dry_runs.release()

    def _why_no_dry_run(self) -> str | None:
        """Why this daemon's next warm-up needs no dry run (``None``: it does)."""
        if self.session.remote:
            return "the Spark Connect server runs this plan for the shard's owner already"
        if self.plan_ran:
            return "a batch of this plan has run in this daemon's session already"
        return None

    async def _dry_run(self, lease: Lease, name: str) -> None:
        """One batch of the shard's plan, dry (rule 2), logged; a failure is logged
        too: the warm-up goes on, only the real query's first batch is slower."""
        began = time.monotonic()
        called_off = threading.Event()
        scratch = scratch_location(self.checkpoint_root(), lease.kind, lease.key)

        async def watch_lease() -> None:
            await lease.wait_revoked()
            called_off.set()

        watcher = asyncio.create_task(watch_lease())
        try:
            spark = await asyncio.to_thread(self.session.get)
            outcome = await asyncio.to_thread(
                dry_run, spark, self.build, lease, name=name, scratch=scratch,
                called_off=called_off,
            )  # fmt: skip
        except asyncio.CancelledError:
            called_off.set()  # the thread stops its query within a poll
            raise
        except Exception as exc:
            self.session.forget_if_gone(exc)
            log.warning(
                "spark.dry_run_failed",
                query=name,
                error=_first_line(exc),
                then="the query's first batch after the cut-over runs cold",
            )
            return
        finally:
            watcher.cancel()
        if outcome.rows > 0:
            self.plan_ran = True
        _log_dry_run(name, outcome, time.monotonic() - began)

    async def _prepare(self, lease: Lease, name: str, checkpoint: str) -> Any:
        """The daemon's session (started if need be) and the shard's writer, named
        and pointed at its checkpoint, not started (``None``: the lease ended)."""
        spark = await asyncio.to_thread(self.session.get)
        if lease.revoked:
            return None
        writer = await asyncio.to_thread(self.build, spark, lease)
        if not hasattr(writer, "start") or not hasattr(writer, "option"):
            raise WorkgroupError(
                f"{self.__name__}() must return a DataStreamWriter "
                f"(df.writeStream...), not {type(writer).__name__}"
            )
        return writer.queryName(name).option("checkpointLocation", checkpoint)

    def _report(
        self,
        query: Any,
        labels: tuple[str, str, str],
        last_batch: int,
        lease: Lease | None = None,
    ) -> int:
        """Metrics, a log event and the lease's load (rule 7) for each batch
        completed since ``last_batch``."""
        latest = query.lastProgress
        if not latest or int(latest["batchId"]) <= last_batch:
            return last_batch
        # The usual poll finds one new batch: its report alone.  The server keeps
        # up to 100 (each serialised and parsed on every read): read them only
        # when batches were missed, or at a run's first.
        one_new = last_batch >= 0 and int(latest["batchId"]) == last_batch + 1
        for report in [latest] if one_new else query.recentProgress:
            progress = BatchProgress.parse(report)
            if progress.batch_id <= last_batch:
                continue
            first_of_run, last_batch = last_batch < 0, progress.batch_id
            self.metrics.batch(labels, progress)
            if progress.input_rows:
                self.plan_ran = True  # rule 2: warm-ups of this kind need no dry run now
            # The first trigger of a run has no rate: Spark divides its rows by
            # an infinite interval (0.0).  Reported, it would tell the leader a
            # busy shard is idle (rule 7).
            if lease is not None and progress.input_rate_given and not first_of_run:
                lease.report_load(progress.input_rows_per_s)
            if progress.input_rows or progress.batch_id == 0:
                log.info(
                    "spark.batch",
                    query=query.name,
                    batch=progress.batch_id,
                    rows=progress.input_rows,
                    rows_per_s=round(progress.processed_rows_per_s, 1),
                    duration_ms=round(progress.duration_s * 1000),
                    parts_ms=progress.parts_ms,
                    began=progress.timestamp,
                    watermark=progress.watermark,
                )
        return last_batch


async def _start(writer: Any) -> Any:
    """Start the query in a thread; if cancelled meanwhile, stop it once it exists."""
    future = asyncio.get_running_loop().run_in_executor(None, writer.start)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:

        def stop_when_started(done: asyncio.Future[Any]) -> None:
            if not done.cancelled() and done.exception() is None:
                _stop_in_background(done.result())

        future.add_done_callback(stop_when_started)
        raise


def _stop(query: Any) -> None:
    with contextlib.suppress(Exception):  # stopping a failed query may raise its error
        query.stop()


def _stop_after_batch(query: Any, wait_s: float, checkpoint: str, *, checkpoint_here: bool) -> None:
    """Let the batch in flight finish (up to ``wait_s``), then stop the query: at
    the first moment no batch runs, or as soon as a batch completes.  A query
    whose batches take longer than its trigger runs them back to back, with no
    idle moment to wait for; stopping right after a batch interrupts only one
    that has just begun (its input is read again by the next owner), so the
    next owner's first output follows this one's last by one batch.  Where the
    checkpoint is readable here its commit log says when the batch is done
    (:class:`~workgroup_spark.checkpoint.BatchEnd`), within milliseconds and
    before the next is planned; elsewhere Spark's progress and status do.

    A checkpoint known to be the query's at this path (``checkpoint_here``: the
    daemon's own JVM, or a Spark Connect server whose batches a poll found
    committed here) has its commit log read at once.  Otherwise a local path
    may name another machine's disk, so Spark's progress is read first to
    check it (:meth:`BatchEnd.behind`); that read took up to 0.29 s on a busy
    JVM, before the watch even began, and a trigger could fire meanwhile."""
    deadline = time.monotonic() + max(wait_s, 0.0)
    batch_end = BatchEnd.of(checkpoint) if checkpoint_here else None
    completed: int | None = None
    if batch_end is None:
        with contextlib.suppress(Exception):
            completed = _last_batch_id(query)
        batch_end = _querys_checkpoint(checkpoint, completed)
    if batch_end is not None:
        _wait_for_commit(query, batch_end, deadline)
    else:
        _wait_for_progress(query, completed, deadline)
    _stop(query)


def _wait_for_commit(query: Any, batch_end: BatchEnd, deadline: float) -> None:
    """Until the batch in flight commits; a query that ended commits nothing
    more, so Spark is asked whether it runs, now and then.  With none in flight
    by the checkpoint, a trigger may have begun without planning its batch yet
    (:func:`_wait_for_plan`)."""
    if not batch_end.in_flight:
        planned = _wait_for_plan(query, batch_end, deadline)
        if planned is None:
            return
        batch_end = planned
    next_status = time.monotonic() + STATUS_EVERY_S
    while not batch_end.done() and time.monotonic() < deadline:
        if time.monotonic() >= next_status:
            try:
                if not query.isActive:
                    return
            except Exception:
                return
            next_status = time.monotonic() + STATUS_EVERY_S
        time.sleep(COMMIT_WATCH_S)


def _wait_for_plan(query: Any, batch_end: BatchEnd, deadline: float) -> BatchEnd | None:
    """The batch a trigger now running plans (``None``: none runs; stop now).

    Spark writes a batch's ``offsets/`` file only once it has listed the new
    input, 20-150 ms into the trigger.  Stopped in that window, the query does
    not stop there: the batch runs on into ``foreachBatch``, ``stop()`` waits
    for it (0.45 s in a planned move on two busy cores) and its work is lost,
    so that the shard's write gap gained a whole idle interval.  Spark's status
    says whether a trigger runs; while one does, its plan is awaited, then its
    commit."""
    while time.monotonic() < deadline:
        planned = batch_end.planned_since()
        if planned is not None:
            return planned
        try:
            running = bool(query.status["isTriggerActive"])
        except Exception:
            return None
        if not running:
            # A trigger that planned, ran and committed a batch since the last look.
            return batch_end.planned_since()
        time.sleep(PLAN_WATCH_S)
    return None


def _wait_for_progress(query: Any, done: int | None, deadline: float) -> None:
    """Until a batch after ``done`` completes, or none runs, by Spark's progress
    and status."""
    while time.monotonic() < deadline:
        # Two reads a poll (each a round trip on Spark Connect): a batch completed
        # (batches back to back), or none runs (a stopped query runs none either).
        try:
            if _last_batch_id(query) != done or not query.status["isTriggerActive"]:
                return
        except Exception:
            return
        time.sleep(0.05)


def _querys_checkpoint(checkpoint: str, completed: int | None) -> BatchEnd | None:
    """The watch of the checkpoint at this path, if it has committed Spark's last
    completed batch ``completed``: then it is the query's (``None``: it is not, or
    is not readable here).  Read after Spark's progress: Spark commits a batch
    before it reports it."""
    batch_end = BatchEnd.of(checkpoint)
    return None if batch_end is None or batch_end.behind(completed) else batch_end


def _last_batch_id(query: Any) -> int | None:
    """The id of the query's last completed batch (``None``: none yet)."""
    progress = query.lastProgress
    return None if not progress else int(progress["batchId"])


def _stop_in_background(query: Any) -> None:
    threading.Thread(target=_stop, args=(query,), name="workgroup-spark-stop", daemon=True).start()


def _log_dry_run(name: str, outcome: DryRunOutcome, seconds: float) -> None:
    if outcome.skipped is not None:
        log.info(
            "spark.dry_run_skipped", query=name, why=outcome.skipped, seconds=round(seconds, 3)
        )
        return
    log.info(
        "spark.query_dry_run",
        query=name,
        rows=outcome.rows,
        seconds=round(seconds, 3),
        duration_ms=outcome.duration_ms,
    )


def _first_line(failure: Any) -> str:
    text = str(getattr(failure, "desc", None) or failure)
    return text.strip().splitlines()[0] if text.strip() else type(failure).__name__
