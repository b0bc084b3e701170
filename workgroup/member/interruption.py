"""How a member's fatal error reaches the task inside its ``async with`` block
(asyncio).

Rules:

1. Inside the block, the first fatal error cancels the task that entered it,
   once, unless that task is waiting on the member itself at that moment
   (``wait_for``, ``wait_stable``, ``wait_closed``): the wait raises the error
   instead.  Outside the block nothing is interrupted.
2. At the block's end that cancellation is taken back (``uncancel``; taken
   first if the block ended before it arrived), and the block ends with the
   member's fatal error instead of the cancellation, unless someone else
   cancelled the task too or the block ended with an exception of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from typing import Any

from workgroup.errors import WorkgroupError


class BlockStage(enum.Enum):
    """Where the task that entered the ``async with`` block stands."""

    #: Not inside the block (before it, after it, or no block at all).
    OUTSIDE = "outside"
    #: Inside it, uninterrupted.
    INSIDE = "inside"
    #: Inside it, cancelled by a fatal error (rule 1).
    INTERRUPTED = "interrupted"


class OwnerInterruption:
    """The task inside the block, and whether a fatal error interrupted it."""

    def __init__(self) -> None:
        self._owner: asyncio.Task[Any] | None = None
        self._stage = BlockStage.OUTSIDE
        #: How many of the owner's waits on the member are under way.
        self._owner_waits = 0

    def entering(self) -> None:
        """The block is being entered by the current task (the member starts)."""
        self._owner = asyncio.current_task()

    def entered(self) -> None:
        """The member started: the block's body runs."""
        self._stage = BlockStage.INSIDE

    async def wait(self, changed: asyncio.Event) -> None:
        """Wait for ``changed``; the owner waiting here hears of a fatal error from
        the wait itself, so it needs no interruption (rule 1)."""
        owner_waits = asyncio.current_task() is self._owner
        self._owner_waits += owner_waits
        try:
            await changed.wait()
        finally:
            self._owner_waits -= owner_waits

    def interrupt(self, error: WorkgroupError) -> None:
        """Rule 1: cancel the owner for ``error``, if that is its way to hear of it."""
        owner = self._owner
        if (
            self._stage is BlockStage.INSIDE
            and owner is not None
            and not owner.done()
            and not self._owner_waits
        ):
            self._stage = BlockStage.INTERRUPTED
            owner.cancel(msg=f"the group member failed: {error}")

    async def leaving(self, exc: BaseException | None) -> bool:
        """The block ends with ``exc``: take the interruption back (rule 2);
        whether there was one."""
        interrupted = self._stage is BlockStage.INTERRUPTED
        self._stage = BlockStage.OUTSIDE
        owner = self._owner
        if interrupted and owner is not None:
            if not isinstance(exc, asyncio.CancelledError):
                # The block ended before our cancellation reached it: take it now.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(0)
            owner.uncancel()
        return interrupted

    def ends_with_error(self, interrupted: bool, exc: BaseException | None) -> bool:
        """Rule 2: whether the block ends with the fatal error that interrupted it."""
        owner = self._owner
        return (
            interrupted
            and owner is not None
            and owner.cancelling() == 0  # nobody else cancelled the task
            and (exc is None or isinstance(exc, asyncio.CancelledError))
        )


__all__ = ["BlockStage", "OwnerInterruption"]
