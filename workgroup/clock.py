"""The one clock: the asyncio drivers feed it to the sans-I/O machines as ``now``,
the runtime measures its deadlines with it, and timestamps (events, a fence's
expiry, the console's and ``workgroup top``'s views) are read from it.

Rules:

1. Code that measures time or waits for a deadline takes a :class:`Clock` (the
   member's driver, leases, handler runs, the runner) and reads nothing else;
   :data:`SYSTEM_CLOCK` is the default.  Tests pass a
   :class:`~workgroup.testing.clock.FakeClock` and move time by hand instead of
   sleeping.
2. A clock is monotonic: it never goes back.  Its seconds and its milliseconds
   are the same time.
3. Its wall time (:meth:`Clock.wall`, seconds since the epoch) is for timestamps
   that other processes or people read; it may jump (the system's clock is set),
   so nothing measures a duration or a deadline on it.
4. No module but this one reads the system's time (``time.time``,
   ``time.monotonic``, ``datetime.now``...): a test checks it.
5. Waiting for work (a task to finish) up to a deadline goes through
   :func:`wait_within`, so that the deadline is measured on the clock.  Polling
   for something the clock cannot see (a thread's flag) sleeps on the event loop.

This module does not import asyncio until a sleep: ``workgroup.fence`` reads
the clock in processes that never start an event loop.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio


class Clock(Protocol):
    """A monotonic clock, a sleep measured on it, and the wall time."""

    def monotonic(self) -> float:
        """Seconds since an arbitrary point."""
        ...

    def monotonic_ms(self) -> int:
        """The same time in whole milliseconds (the ``now`` of machine events)."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch, for timestamps (rule 3)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed on this clock."""
        ...


class SystemClock:
    """The process's monotonic and wall clocks; sleeps on the event loop."""

    def monotonic(self) -> float:
        return time.monotonic()

    def monotonic_ms(self) -> int:
        # monotonic_ns keeps full precision however long the process runs, where
        # monotonic() * 1000 loses sub-millisecond digits to floats.
        return time.monotonic_ns() // 1_000_000

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        import asyncio

        await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


#: The clock everything uses unless given another.
SYSTEM_CLOCK: Clock = SystemClock()


def monotonic_ms() -> int:
    """Milliseconds of the system's monotonic clock (:data:`SYSTEM_CLOCK`)."""
    return SYSTEM_CLOCK.monotonic_ms()


async def wait_within(clock: Clock, future: asyncio.Future[Any], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` seconds of ``clock`` for ``future`` (rule 5);
    ``True`` if it is done.  The future is neither cancelled nor awaited for its result."""
    import asyncio

    if future.done():
        return True
    if isinstance(clock, SystemClock):  # the loop's own timer: no task for the deadline
        await asyncio.wait({future}, timeout=max(timeout_s, 0.0))
        return future.done()
    deadline = asyncio.ensure_future(clock.sleep(max(timeout_s, 0.0)))
    try:
        await asyncio.wait({future, deadline}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        deadline.cancel()
    return future.done()


__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "monotonic_ms", "wait_within"]
