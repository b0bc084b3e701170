"""Exactly-once output from ``foreachBatch``: fence each batch, write it idempotently.

Spark replays a micro-batch whose commit did not reach the checkpoint (the
owner died mid-batch) with the same offsets, hence the same rows.  A sink is
exactly-once if writing batch N twice leaves one copy: :func:`write_batch_parquet`
writes ``batch-<N>.parquet`` to a temporary name and renames it into place
(atomic on a POSIX file system), so a replay replaces the file with the same
content, and readers never see half a file.

Rules:

1. :func:`fenced` puts the lease in front of each batch: the batch's id is
   committed as the shard's checkpoint through the coordinator *before*
   ``write`` runs, and the coordinator refuses that commit once the lease ended
   (:class:`~workgroup.LeaseLostError`): the batch writes nothing and the query fails.
2. In the daemon's own process (a local JVM: PySpark calls ``foreachBatch``
   back in the daemon) the commit goes through the lease.  Pickled and run
   elsewhere (Spark Connect runs the function in the server's Python worker) it
   carries the lease's portable fence (:meth:`workgroup.Lease.fence`) instead:
   the worker talks to the coordinator itself, synchronously.
3. Inside ``write``, :func:`check_fence` asks the coordinator again whether the
   lease is still held (it commits the batch's record once more);
   :func:`write_batch_parquet` calls it just before its rename, so what a writer
   frozen after its lease ended can still do is the rename alone (``docs/spark.md``:
   the remaining window, and why Spark's checkpoint log makes it a same-content replay).
4. The embedded coordinator does not count a fence's requests as the member's
   heartbeats: a dead daemon's member expires however long its query goes on
   running on a Connect server.  On Kafka they do count: give the fence a
   lifetime (``fence_ttl_s``); the query fails once it expires, and the plugin
   restarts it with a fresh fence while the lease is held.
5. A writer made while the plugin builds a shard's query for its *dry run*
   (:mod:`workgroup_spark.dry_run`, a warm-up) is a dry one: it commits
   nothing, and :func:`check_fence` ends its ``write`` there
   (:class:`DryRunEnded`, caught by the writer), before anything is published.
   A dry ``write`` that returns without calling :func:`check_fence` fails the
   dry run (:class:`DryRunUnchecked`): it may have published something, so
   only a query whose sink checks the fence before its commit point may ask
   for dry runs (:func:`write_batch_parquet` does).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from workgroup.errors import WorkgroupError

if TYPE_CHECKING:
    from workgroup.fence import Fence
    from workgroup.runtime.lease import Lease

# This module is what a Spark Connect server's Python worker imports to run a
# fenced batch: only the fence's path at import; logging (structlog) when used.

#: ``write(batch_df, batch_id)``: what ``DataStreamWriter.foreachBatch`` calls.
BatchWriter = Callable[[Any, int], None]

#: The writer and batch id being written in this thread (set by :class:`FencedWriter`).
_current: contextvars.ContextVar[tuple[FencedWriter, int] | None] = contextvars.ContextVar(
    "workgroup_spark_fenced_batch", default=None
)

#: The writers :func:`fenced` made while a dry run's query was built (rule 5).
_dry_writers: contextvars.ContextVar[list[FencedWriter] | None] = contextvars.ContextVar(
    "workgroup_spark_dry_writers", default=None
)


class DryRunEnded(WorkgroupError):
    """A dry run's ``write`` reached :func:`check_fence`: it stops there, unpublished."""


class DryRunUnchecked(WorkgroupError):
    """A dry run's ``write`` returned without calling :func:`check_fence` first."""


class FencedWriter:
    """``write`` behind a lease: what :func:`fenced` returns.  Picklable: a copy
    sent to another process carries the lease's portable fence instead of the lease."""

    def __init__(
        self,
        holder: Lease | Fence,
        write: BatchWriter,
        timeout_s: float,
        fence_ttl_s: float | None,
        dry_run: bool = False,
    ) -> None:
        from workgroup.fence import Fence

        self.lease: Lease | None = None if isinstance(holder, Fence) else holder
        #: Made from the lease when the writer is pickled; given: used everywhere.
        self.fence: Fence | None = holder if isinstance(holder, Fence) else None
        self.write = write
        self.timeout_s = timeout_s
        self.fence_ttl_s = fence_ttl_s
        #: Commits nothing and publishes nothing (rule 5).
        self.dry_run = dry_run
        self.kind, self.key = holder.kind, holder.key
        self._token = holder.token
        self.__name__ = f"fenced_{getattr(write, '__name__', 'write')}"

    @property
    def token(self) -> int:
        """The lease's token now: a writer built while the lease warmed up (no token
        yet) writes under the token taken at the cut-over."""
        return self.lease.token if self.lease is not None else self._token

    def __getstate__(self) -> dict[str, Any]:
        # The lease (an event loop, a coordinator connection) stays in the daemon;
        # the fence is what another process can use on its own.
        fence = self.fence
        if fence is None and self.lease is not None and not self.dry_run:
            fence = self.lease.fence(ttl_s=self.fence_ttl_s)
        token = self.lease.token if self.lease is not None else self._token
        return {**self.__dict__, "lease": None, "fence": fence, "_token": token}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        if not self.dry_run:
            self._commit(batch_id, "spark.batch_fenced")
        current = _current.set((self, batch_id))
        try:
            self.write(batch_df, batch_id)
        except DryRunEnded:
            return  # the dry run went as far as a real batch would before publishing
        finally:
            _current.reset(current)
        if self.dry_run:
            raise DryRunUnchecked(
                f"dry run of {self.kind}/{self.key}: {self.__name__[len('fenced_') :]}() "
                "returned without calling check_fence() before publishing; "
                "turn dry runs off for this query (dry_run=False)"
            )

    def check(self, batch_id: int) -> None:
        """Ask the coordinator again whether the lease is held (by committing the
        batch's record once more: refused once the lease ended).  In a dry run:
        raise :class:`DryRunEnded` (rule 5)."""
        if self.dry_run:
            raise DryRunEnded(f"dry run of {self.kind}/{self.key}: batch {batch_id} not published")
        self._commit(batch_id, "spark.write_fenced")

    def _commit(self, batch_id: int, event: str) -> None:
        record = json.dumps({"spark_batch": batch_id, "token": self.token})
        try:
            if self.lease is not None:
                self.lease.commit_sync(record, self.timeout_s)
            elif self.fence is not None:
                self.fence.commit(record, timeout_s=self.timeout_s)
            else:  # not reachable through pickling; a hand-made copy
                raise WorkgroupError("a fenced writer without its lease or fence")
        except Exception as exc:
            from workgroup.log import get_logger

            get_logger("workgroup.spark.sinks").warning(  # under workgroup's root logger
                event,
                kind=self.kind,
                key=self.key,
                token=self.token,
                batch=batch_id,
                error=f"{type(exc).__name__}: {exc}",
            )
            raise


def fenced(
    lease: Lease | Fence,
    write: BatchWriter,
    *,
    timeout_s: float = 30.0,
    fence_ttl_s: float | None = None,
) -> FencedWriter:
    """``write`` behind the lease: each batch is committed as the lease's checkpoint
    (``{"spark_batch": N, "token": T}``) first; a lease that ended raises
    :class:`~workgroup.LeaseLostError` and the batch writes nothing.  Works with a
    local JVM and with Spark Connect (where the function runs beside the server,
    with the lease's portable fence; ``fence_ttl_s``: its lifetime, for Kafka).
    ``lease`` may also be a :class:`~workgroup.fence.Fence` made elsewhere.
    Made while a dry run's query is built, the writer is a dry one (rule 5)."""
    dry_writers = _dry_writers.get()
    writer = FencedWriter(lease, write, timeout_s, fence_ttl_s, dry_run=dry_writers is not None)
    if dry_writers is not None:
        dry_writers.append(writer)
    return writer


@contextlib.contextmanager
def building_dry_run() -> Iterator[list[FencedWriter]]:
    """Within it, :func:`fenced` makes dry writers (rule 5); yields those it made."""
    writers: list[FencedWriter] = []
    token = _dry_writers.set(writers)
    try:
        yield writers
    finally:
        _dry_writers.reset(token)


def check_fence() -> None:
    """Inside a :func:`fenced` write: raise :class:`~workgroup.LeaseLostError` if
    the lease has ended (the coordinator is asked).  Elsewhere: nothing to check."""
    current = _current.get()
    if current is not None:
        writer, batch_id = current
        writer.check(batch_id)


def batch_path(directory: str, batch_id: int) -> str:
    return os.path.join(directory, f"batch-{batch_id:010d}.parquet")


def write_batch_parquet(table: Any, directory: str, batch_id: int) -> str:
    """Write a ``pyarrow.Table`` as ``<directory>/batch-<N>.parquet``, atomically
    and idempotently (a replay of batch N replaces it).  Inside a :func:`fenced`
    write, the fence is checked just before the rename.  Returns the path."""
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    path = batch_path(directory, batch_id)
    temporary = os.path.join(directory, f".batch-{batch_id:010d}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, temporary)
        check_fence()
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return path
