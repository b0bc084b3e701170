"""``isolation="process"``: a handler in a child process that can be killed.

A thread cannot be stopped: a blocking or runaway plain-function handler would
outlive its grace period.  With process isolation the handler (shipped with
cloudpickle, so closures and lambdas work) runs in a fresh ``spawn`` child
process with a :class:`ProcessLease`: the lease's fields, ``revoked`` and
``wait_revoked``, and ``commit`` / ``checkpoint`` forwarded to the parent, whose
lease does the fenced work.  ``fence()`` returns the parent lease's portable
fence (:mod:`workgroup.fence`), for a child that writes without the parent.
On revocation the child is told, gets the grace period, then SIGTERM, then
SIGKILL one second later.

A child never outlives its parent, whatever the handler does (a blocking loop
that never looks at the lease): on Linux it asks the kernel for SIGKILL when the
thread that started it ends (``PR_SET_PDEATHSIG``; that is the event loop's
thread, which owns the child for its whole life), then checks that the parent
did not die before it asked.  Everywhere, the end of the pipe to the parent
(the parent closes it only once the child was reaped) and a thread that looks
at the parent's pid every ``PARENT_POLL_S`` end the child with ``os._exit``.

The handler is signed: HMAC-SHA256 of its pickled bytes, with the key in
``$WORKGROUP_HANDLER_KEY`` (one is made at random, for this process and its
children, if none is set).  The child checks the signature before it unpickles
anything, and refuses a handler whose signature does not match: unpickling runs
code, so bytes that did not come from this app's parent never run.

Messages on the pipe (pickled tuples): child to parent ``("call", id, method,
argument)``, ``("done",)``, ``("failed", text)``; parent to child ``("reply", id,
value, error)`` and ``("revoked",)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import hmac
import inspect
import itertools
import multiprocessing
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from workgroup.errors import WorkgroupError
from workgroup.fence import Fence
from workgroup.log import get_logger, user_frames
from workgroup.member.load_balancing import check_load
from workgroup.runtime.errors import LeaseLostError
from workgroup.runtime.lease import Lease, Role
from workgroup.types import Key

log = get_logger(__name__)

KILL_AFTER_TERM_S = 1.0
#: How often a child looks whether its parent is still there.
PARENT_POLL_S = 0.5
#: Whether children ask Linux for SIGKILL when their parent ends (the pipe and
#: the poll of the parent's pid work without it, only later).
PARENT_DEATH_SIGNAL = sys.platform == "linux"
#: The exit status of a child whose parent is gone (nobody reads it: for ``ps``).
ORPHANED_EXIT = 70
_PR_SET_PDEATHSIG = 1
#: The signing key of shipped handlers (children inherit the environment).
HANDLER_KEY_ENV = "WORKGROUP_HANDLER_KEY"


def handler_key() -> bytes:
    """The key handlers are signed with: ``$WORKGROUP_HANDLER_KEY``, or a random one
    set there for this process and the children it spawns."""
    key = os.environ.get(HANDLER_KEY_ENV)
    if not key:
        key = os.environ[HANDLER_KEY_ENV] = secrets.token_hex(32)
    return key.encode()


def sign(payload: bytes, key: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()


class HandlerFailed(WorkgroupError):
    """The handler raised in its child process (the message is the child's error,
    ``frames`` the user's frames there, see :func:`workgroup.log.user_frames`)."""

    def __init__(self, message: str, frames: str = "") -> None:
        super().__init__(message)
        self.frames = frames


class ProcessLease:
    """The lease as a handler in a child process sees it."""

    def __init__(
        self,
        conn: Connection,
        *,
        group_id: str,
        kind: str,
        key: Key,
        attributes: Mapping[str, str],
        role: Role,
        token: int,
    ) -> None:
        self.group_id = group_id
        self.kind = kind
        self.key = key
        self.attributes = dict(attributes)
        self.role: Role = role
        self.token = token
        self._conn = conn
        self._send_lock = threading.Lock()
        self._revoked = threading.Event()
        self._ids = itertools.count(1)
        self._replies: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def revoked(self) -> bool:
        return self._revoked.is_set()

    async def wait_revoked(self) -> None:
        await asyncio.to_thread(self._revoked.wait)

    def wait_revoked_sync(self, timeout_s: float | None = None) -> bool:
        return self._revoked.wait(timeout_s)

    def assert_held(self) -> None:
        if self._revoked.is_set():
            raise LeaseLostError(f"lease {self.kind}/{self.key} (token {self.token}) was revoked")

    async def commit(self, value: str) -> None:
        await asyncio.to_thread(self.commit_sync, value)

    async def checkpoint(self) -> str | None:
        return await asyncio.to_thread(self.checkpoint_sync)

    def commit_sync(self, value: str, timeout_s: float | None = None) -> None:
        self._call("commit", value, timeout_s)

    def report_load(self, value: float) -> None:
        self._call("report_load", check_load(value), None)

    def checkpoint_sync(self, timeout_s: float | None = None) -> str | None:
        result = self._call("checkpoint", None, timeout_s)
        return None if result is None else str(result)

    def fence(
        self, *, include_secrets: bool = False, ttl_s: float | None = None, timeout_s: float = 10.0
    ) -> Fence:
        """The parent lease's portable fence (:meth:`Lease.fence`): commits sent
        with it go straight to the coordinator, not through the parent."""
        options = {"include_secrets": include_secrets, "ttl_s": ttl_s}
        fence: Fence = self._call("fence", options, timeout_s)
        return fence

    def _call(self, method: str, argument: Any, timeout_s: float | None) -> Any:
        call_id = next(self._ids)
        done = threading.Event()
        slot: list[Any] = []
        self._replies[call_id] = (done, slot)
        with self._send_lock:
            self._conn.send(("call", call_id, method, argument))
        if not done.wait(timeout_s):
            raise WorkgroupError(f"lease.{method} got no answer in {timeout_s} s", retriable=True)
        value, error = slot
        if error is not None:
            kind, message = error
            raise (LeaseLostError if kind == "lost" else WorkgroupError)(message)
        return value

    def _read(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                # The parent closes its end only once this process was reaped:
                # it died, and its lease with it.
                self._revoked.set()
                os._exit(ORPHANED_EXIT)
            if message[0] == "revoked":
                self._revoked.set()
            elif message[0] == "reply":
                _, call_id, value, error = message
                done, slot = self._replies.pop(call_id)
                slot.extend((value, error))
                done.set()


def die_with_parent(parent_pid: int, *, death_signal: bool) -> None:
    """End this process when ``parent_pid`` is no longer its parent: at once on
    Linux with ``death_signal`` (the kernel's SIGKILL), else within
    ``PARENT_POLL_S`` (a daemon thread)."""
    if death_signal:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            log.warning("worker.no_parent_death_signal", errno=ctypes.get_errno())
    # The parent may have died before the signal was asked for.
    if os.getppid() != parent_pid:
        os._exit(ORPHANED_EXIT)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="workgroup-parent-watch", daemon=True).start()


def _child_main(
    conn: Connection,
    payload: bytes,
    signature: bytes,
    fields: dict[str, Any],
    parent_pid: int,
    death_signal: bool,
) -> None:
    """The child process: die with the parent, check the handler's signature,
    then run it with a :class:`ProcessLease`."""
    die_with_parent(parent_pid, death_signal=death_signal)
    key = os.environ.get(HANDLER_KEY_ENV, "").encode()
    if not key or not hmac.compare_digest(sign(payload, key), signature):
        why = "no signing key" if not key else "its signature does not match"
        conn.send(("failed", f"refused to run the shipped handler: {why} ({HANDLER_KEY_ENV})"))
        return
    handler = cloudpickle.loads(payload)
    lease = ProcessLease(conn, **fields)
    try:
        if inspect.iscoroutinefunction(handler):
            asyncio.run(handler(lease))
        else:
            result = handler(lease)
            if inspect.isawaitable(result):
                asyncio.run(_await(result))
    except LeaseLostError:
        pass
    except BaseException as exc:  # reported to the parent, which restarts it
        conn.send(("failed", f"{type(exc).__name__}: {exc}", user_frames(exc)))
        return
    conn.send(("done",))


async def _await(awaitable: Any) -> None:
    await awaitable


class ProcessHandler:
    """A handler that runs in a child process (see the module docstring).

    Called with the parent's :class:`Lease` like any handler; returns when the
    child returns, raises :class:`HandlerFailed` when it fails, and kills it when
    cancelled (the grace period is over).
    """

    def __init__(self, handler: Any) -> None:
        self._payload = cloudpickle.dumps(handler)
        self.__name__ = getattr(handler, "__name__", "handler")

    async def __call__(self, lease: Lease) -> None:
        context = multiprocessing.get_context("spawn")
        parent_conn, child_conn = context.Pipe()
        fields = {
            "group_id": lease.group_id,
            "kind": lease.kind,
            "key": lease.key,
            "attributes": dict(lease.attributes),
            "role": lease.role,
            "token": lease.token,
        }
        process = context.Process(
            target=_child_main,
            args=(
                child_conn,
                self._payload,
                sign(self._payload, handler_key()),
                fields,
                os.getpid(),
                PARENT_DEATH_SIGNAL,
            ),
            name=f"workgroup-{lease.kind}-{lease.key}",
            daemon=True,
        )
        process.start()
        child_conn.close()
        loop = asyncio.get_running_loop()
        messages: asyncio.Queue[Any] = asyncio.Queue()

        def readable() -> None:
            try:
                messages.put_nowait(parent_conn.recv())
            except (EOFError, OSError):
                loop.remove_reader(parent_conn.fileno())
                messages.put_nowait(("exited",))

        loop.add_reader(parent_conn.fileno(), readable)
        watcher = asyncio.create_task(self._forward_revocation(lease, parent_conn))
        answers: set[asyncio.Task[None]] = set()
        finished = False
        try:
            while True:
                message = await messages.get()
                if message[0] == "call":
                    _, call_id, method, argument = message
                    answer = asyncio.create_task(
                        self._answer(lease, parent_conn, call_id, method, argument)
                    )
                    answers.add(answer)
                    answer.add_done_callback(answers.discard)
                    continue
                finished = True
                if message[0] == "done":
                    return
                if message[0] == "failed":
                    raise HandlerFailed(message[1], message[2] if len(message) > 2 else "")
                raise HandlerFailed(f"the handler's process exited ({process.exitcode})")
        finally:
            watcher.cancel()
            for answer in answers:
                answer.cancel()
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(parent_conn.fileno())
            # Cancelled: the grace period is over, so no waiting before SIGTERM.
            await self._end(process, wait_first=finished)
            parent_conn.close()

    async def _forward_revocation(self, lease: Lease, conn: Connection) -> None:
        await lease.wait_revoked()
        with contextlib.suppress(OSError):
            conn.send(("revoked",))

    async def _answer(
        self, lease: Lease, conn: Connection, call_id: int, method: str, argument: Any
    ) -> None:
        value: Any = None
        error: tuple[str, str] | None = None
        try:
            if method == "commit":
                await lease.commit(argument)
            elif method == "checkpoint":
                value = await lease.checkpoint()
            elif method == "fence":
                value = lease.fence(**argument)
            elif method == "report_load":
                lease.report_load(argument)
            else:
                error = ("error", f"unknown lease method {method!r}")
        except LeaseLostError as exc:
            error = ("lost", str(exc))
        except WorkgroupError as exc:
            error = ("error", str(exc))
        with contextlib.suppress(OSError):
            conn.send(("reply", call_id, value, error))

    async def _end(self, process: Any, *, wait_first: bool) -> None:
        """Reap the child; SIGTERM, then SIGKILL, one that lingers."""
        actions = (
            [None, process.terminate, process.kill]
            if wait_first
            else [
                process.terminate,
                process.kill,
            ]
        )
        for action in actions:
            if action is not None:
                action()
            await asyncio.to_thread(process.join, KILL_AFTER_TERM_S)
            if process.exitcode is not None:
                if action is not None:
                    log.warning("worker.process_killed", pid=process.pid, exitcode=process.exitcode)
                return


__all__ = ["HandlerFailed", "ProcessHandler", "ProcessLease"]
