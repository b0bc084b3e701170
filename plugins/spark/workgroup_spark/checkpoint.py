"""What a shard's checkpoint says, read where this process can.

A Structured Streaming checkpoint keeps two logs, one file per batch id:
``offsets/<N>`` is written when batch N is planned, before it runs, and
``commits/<N>`` when it has completed (each by an atomic rename).

Rules:

1. Only a local path or a ``file:`` URI is read here; elsewhere (``s3a://``,
   ``hdfs://``) nothing is known (``None``) and callers ask Spark instead.
2. :func:`read_checkpoint` also reads the last files, which brings the log
   into the page cache before a new owner's query starts (a warm-up).
3. :class:`BatchEnd` tells a revoked query's owner when its batch in flight
   has completed: the batch planned last (``offsets/``) is the one in flight
   unless it has a commit already; the moment its ``commits/<N>`` appears it
   is done.  A trigger that has begun but not yet planned its batch shows
   nothing in flight; its plan is ``offsets/<N+1>`` appearing
   (:meth:`BatchEnd.planned_since`).  A stat every few milliseconds: no
   round trip to Spark, so the query is stopped before it plans its next
   batch (Spark Connect's status and progress are a round trip each, 30-150
   ms on a busy server).  A path that names another machine's disk (a
   Connect server's) may exist here too: a checkpoint that has not committed
   the query's last completed batch, by Spark's progress, is not the query's
   (:meth:`BatchEnd.behind`).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True, slots=True)
class CheckpointState:
    """What a shard's checkpoint says: its last planned batch (``offsets/``) and its
    last committed one (``commits/``); ``None``: none yet, or not readable here."""

    last_batch: int | None = None
    committed_batch: int | None = None


def local_path(location: str) -> str | None:
    """The checkpoint's path on this machine (``None``: a remote file system, rule 1)."""
    if location.startswith("file:"):
        return location.removeprefix("file:").removeprefix("//")
    if _URI_SCHEME.match(location):
        return None
    return location


def read_checkpoint(location: str) -> CheckpointState:
    """The checkpoint's last planned and committed batches, their files read (rule 2)."""
    path = local_path(location)
    return CheckpointState() if path is None else _state(path, read=True)


class BatchEnd:
    """Whether a running query's batch in flight has completed, from its
    checkpoint (rule 3); made when the query is revoked."""

    __slots__ = ("_commit", "_next_plan", "_path", "committed")

    def __init__(self, path: str) -> None:
        state = _state(path, read=False)
        planned = state.last_batch
        self._path = path
        #: The last batch committed when the watch was made (``None``: none yet).
        self.committed = state.committed_batch
        in_flight = planned is not None and (self.committed is None or self.committed < planned)
        #: The commit file that ends the batch in flight (``None``: none runs).
        self._commit = os.path.join(path, "commits", str(planned)) if in_flight else None
        #: The offsets file of the batch planned next (batch ids follow each other).
        self._next_plan = os.path.join(path, "offsets", str(0 if planned is None else planned + 1))

    @classmethod
    def of(cls, location: str) -> BatchEnd | None:
        """The watch for a checkpoint (``None``: not readable here, rule 1, or
        not written here: a query that has planned a batch has ``offsets/``)."""
        path = local_path(location)
        if path is None or not os.path.isdir(os.path.join(path, "offsets")):
            return None
        return cls(path)

    def behind(self, completed: int | None) -> bool:
        """Spark says batch ``completed`` is done, yet this checkpoint has not
        committed it: what is read here is not the query's checkpoint (a path on
        another machine's disk, a Connect server's), and says nothing of it."""
        return completed is not None and (self.committed is None or self.committed < completed)

    @property
    def in_flight(self) -> bool:
        """A batch was in flight when the watch was made."""
        return self._commit is not None

    def done(self) -> bool:
        """No batch was in flight, or the one that was has committed."""
        return self._commit is None or os.path.exists(self._commit)

    def planned_since(self) -> BatchEnd | None:
        """The watch of the batch planned after this one was made (``None``: none
        yet): a stat of its ``offsets/`` file."""
        return BatchEnd(self._path) if os.path.exists(self._next_plan) else None


def _state(path: str, *, read: bool) -> CheckpointState:
    """The last batch of each log under ``path`` (``read``: their files too)."""
    return CheckpointState(
        _last_batch(os.path.join(path, "offsets"), read=read),
        _last_batch(os.path.join(path, "commits"), read=read),
    )


def _last_batch(directory: str, *, read: bool) -> int | None:
    """The highest batch id among a checkpoint log's files (``0``, ``1``, ...)."""
    try:
        batches = [int(name) for name in os.listdir(directory) if name.isdigit()]
    except OSError:
        return None
    if not batches:
        return None
    last = max(batches)
    if read:
        with contextlib.suppress(OSError), open(os.path.join(directory, str(last)), "rb") as file:
            file.read()
    return last
