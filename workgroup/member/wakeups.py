"""Wakes the member machine at its deadlines (asyncio).

Rules:

1. The machine is ticked once its next deadline has passed, or sooner when
   woken (an event may have moved the deadline); with no deadline, only when
   woken.  The deadline is read again before every wait.
2. With the system clock, the event loop's own timer times the wait; with
   another clock (a test's ``FakeClock``), that clock does
   (:func:`~workgroup.clock.wait_within`).
3. Once ``closed`` is set the loop ends, and no tick follows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from workgroup.clock import Clock, SystemClock, wait_within
from workgroup.member.actions import Action
from workgroup.member.state import MemberMachine


async def run_wakeups(
    machine: MemberMachine,
    clock: Clock,
    *,
    wake: asyncio.Event,
    closed: asyncio.Event,
    feed: Callable[[list[Action]], None],
) -> None:
    """Tick ``machine`` at its deadlines until ``closed`` (rules 1-3)."""
    while not closed.is_set():
        deadline = machine.next_deadline()
        delay = None if deadline is None else max(0.0, (deadline - clock.monotonic_ms()) / 1000)
        wake.clear()
        if delay is None or isinstance(clock, SystemClock):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):  # the loop's own timer
                    await wake.wait()
        else:
            woken = asyncio.ensure_future(wake.wait())
            try:
                await wait_within(clock, woken, delay)
            finally:
                woken.cancel()
        if not closed.is_set():
            feed(machine.tick(clock.monotonic_ms()))


__all__ = ["run_wakeups"]
