"""Runs the application's callbacks one at a time, in the order the member
machine issued them (asyncio).

Rules:

1. One callback runs at a time, in the order of the changes (the machine's
   rule 8); the next starts only once the machine heard how the last one ended.
2. A coroutine function runs in the event loop; a plain function in a thread
   of the member's own (:mod:`~workgroup.member.threads`), so that blocking work
   in it does not hold up heartbeats, nor the application's threads it; an
   awaitable it returns is awaited.
3. A callback that raised has still made its change: the machine hears of the
   failure (with its traceback, if asked for) and applies its callback-error
   policy (its rule 12).  A cancellation is not a failure: it ends the runner.
4. While a callback runs, :attr:`CallbackRunner.running` is its action (the
   driver's ``assignment`` is what was owned right after its change).
"""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Awaitable, Callable, Mapping

from workgroup.member.actions import Action, InvokeCallback
from workgroup.member.state import MemberMachine
from workgroup.member.threads import in_member_thread
from workgroup.types import Resource

#: ``callback(resources, generation)``: a coroutine function (run in the event
#: loop) or a plain function (run in a worker thread).
Callback = Callable[[tuple[Resource, ...], int], Awaitable[None] | None]


class CallbackRunner:
    """The queue of callbacks to run, and the one running."""

    def __init__(self, callbacks: Mapping[str, Callback | None], *, log_tracebacks: bool) -> None:
        self._callbacks = dict(callbacks)
        self._log_tracebacks = log_tracebacks
        self._queue: asyncio.Queue[InvokeCallback] = asyncio.Queue()
        #: The callback running now (rule 4).
        self.running: InvokeCallback | None = None

    def put(self, action: InvokeCallback) -> None:
        """Queue ``action``'s callback behind those issued before it (rule 1)."""
        self._queue.put_nowait(action)

    async def join(self) -> None:
        """Wait until every callback queued so far has run."""
        await self._queue.join()

    async def run(
        self,
        machine: MemberMachine,
        feed: Callable[[list[Action]], None],
        now: Callable[[], int],
    ) -> None:
        """Run the queued callbacks until cancelled, feeding ``machine`` how each
        ended (rules 1 and 3)."""
        while True:
            action = await self._queue.get()
            try:
                failure = await self._invoke(action)
                if failure is None:
                    feed(machine.callback_done(now(), action.callback_id))
                else:
                    details = (
                        "".join(traceback.format_exception(failure)).rstrip()
                        if self._log_tracebacks
                        else None
                    )
                    feed(
                        machine.callback_failed(
                            now(), action.callback_id, failure, traceback=details
                        )
                    )
            finally:
                self._queue.task_done()

    async def _invoke(self, action: InvokeCallback) -> Exception | None:
        """Run the application's callback for ``action``; what it raised, if anything."""
        callback = self._callbacks.get(action.kind)
        if callback is None:
            return None
        self.running = action
        try:
            if inspect.iscoroutinefunction(callback):
                await callback(action.resources, action.generation)
            else:
                # A thread: a plain callback that blocks must not stop heartbeats.
                outcome = await in_member_thread(callback, action.resources, action.generation)
                if inspect.isawaitable(outcome):
                    await outcome
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return exc
        finally:
            self.running = None
        return None


__all__ = ["Callback", "CallbackRunner"]
