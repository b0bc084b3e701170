"""A :class:`~workgroup.clock.Clock` whose time moves only when a test moves it.

Like trio's ``MockClock``: :meth:`FakeClock.advance` moves time forward and wakes
every sleeper whose deadline it passed, in deadline order; with
``autojump_threshold_s`` the clock jumps to the next deadline by itself once
nothing new happened on it for that long in real time (0: at once) and then
for :data:`SETTLE_PASSES` event-loop passes (so that tasks woken or cancelled
meanwhile get to run first), and code that waits out back-offs and deadlines
runs in no time.  Tests pass it where the code takes ``clock=``
(``GroupMember``, ``Lease``, ``HandlerRun``, ``GroupRunner``,
``CoordinatorServer``, ``Directory``) and wait for :meth:`FakeClock.sleepers`
instead of sleeping; the coordinator's harness
(:mod:`workgroup.testing.coordinator`) moves it by whole milliseconds.

Its wall time (:meth:`FakeClock.wall`) starts at ``wall_start_s`` and moves with
the monotonic time; :meth:`FakeClock.set_wall` sets it, as when the system's
clock is set, without moving the monotonic time (nor waking a sleeper).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

#: Event-loop passes :meth:`FakeClock.run_for` lets woken tasks run after each
#: jump, and an autojump waits without any change on the clock.
SETTLE_PASSES = 20

#: Where a :class:`FakeClock`'s wall time starts unless given: a fixed instant
#: (2023-11-14 22:13:20 UTC), so that timestamps in tests are reproducible.
WALL_START_S = 1_700_000_000.0


class FakeClock:
    """A monotonic clock for tests, starting at ``start_s`` seconds, whose wall
    time starts at ``wall_start_s`` seconds since the epoch."""

    def __init__(
        self,
        start_s: float = 0.0,
        *,
        autojump_threshold_s: float | None = None,
        wall_start_s: float = WALL_START_S,
    ) -> None:
        if autojump_threshold_s is not None and autojump_threshold_s < 0:
            raise ValueError(f"autojump_threshold_s must be >= 0, got {autojump_threshold_s}")
        self._ns = _ns(start_s)
        #: Wall time minus monotonic time, in nanoseconds: advancing moves both.
        self._wall_offset_ns = _ns(wall_start_s) - self._ns
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self.autojump_threshold_s = autojump_threshold_s
        self._autojump: asyncio.Handle | None = None
        #: Counts changes on the clock: an autojump countdown from before one is stale.
        self._changes = 0

    def __repr__(self) -> str:
        return f"FakeClock({self.monotonic():.3f} s, {self.sleepers} sleeping)"

    # --- the Clock protocol -------------------------------------------------------

    def monotonic(self) -> float:
        return self._ns / 1e9

    def monotonic_ms(self) -> int:
        return self._ns // 1_000_000

    def wall(self) -> float:
        return (self._ns + self._wall_offset_ns) / 1e9

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._sleepers, (self._ns + _ns(seconds), next(self._order), woken))
        self._changed(loop)
        await woken  # cancelled: advance() skips it

    # --- moving time ------------------------------------------------------------

    @property
    def sleepers(self) -> int:
        """How many sleeps wait for the clock to move."""
        return sum(1 for _, _, woken in self._sleepers if not woken.done())

    def next_deadline(self) -> float | None:
        """When the earliest sleeper wakes (seconds on this clock), if any sleeps."""
        self._drop_cancelled()
        return self._sleepers[0][0] / 1e9 if self._sleepers else None

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` and wake the sleepers it passed (they
        run once the caller yields to the event loop)."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock never goes back (advance by {seconds})")
        self._advance_ns(_ns(seconds))

    def advance_to_ms(self, target_ms: int) -> None:
        """Move time forward to ``target_ms`` whole milliseconds, exactly (the ``now``
        of the sans-I/O machines); no move if the clock is there or past it."""
        self._advance_ns(max(target_ms * 1_000_000 - self._ns, 0))

    def _advance_ns(self, ns: int) -> None:
        self._ns += ns
        while self._sleepers and self._sleepers[0][0] <= self._ns:
            _, _, woken = heapq.heappop(self._sleepers)
            if not woken.done():
                woken.set_result(None)
        self._changed(None)

    def set_wall(self, seconds: float) -> None:
        """Set the wall time to ``seconds`` since the epoch (back or forward, as a
        system clock may be set); the monotonic time and the sleepers stay."""
        self._wall_offset_ns = _ns(seconds) - self._ns

    async def run_for(self, seconds: float) -> None:
        """Move time forward by ``seconds``, one deadline at a time, letting the
        woken tasks run after each (they may sleep again within the span)."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock never goes back (run for {seconds})")
        end = self._ns + _ns(seconds)
        while True:
            self._drop_cancelled()
            if not self._sleepers or self._sleepers[0][0] > end:
                break
            self.advance((self._sleepers[0][0] - self._ns) / 1e9)
            await settle()
        self.advance((end - self._ns) / 1e9)
        await settle()

    async def wait_for_sleepers(self, count: int = 1, timeout_s: float = 10.0) -> None:
        """Return once at least ``count`` sleeps wait on the clock (the code under
        test reached its deadline); ``TimeoutError`` after ``timeout_s`` real seconds."""
        async with asyncio.timeout(timeout_s):
            while self.sleepers < count:  # noqa: ASYNC110 (the clock has no event to wait on)
                await asyncio.sleep(0.001)

    # --- internals ------------------------------------------------------------------

    def _drop_cancelled(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)

    def _changed(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Something happened on the clock: restart the autojump countdown."""
        self._changes += 1
        if self._autojump is not None:
            self._autojump.cancel()
            self._autojump = None
        if self.autojump_threshold_s is None:
            return
        self._drop_cancelled()
        if not self._sleepers:
            return
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
        self._autojump = loop.call_later(
            self.autojump_threshold_s, self._countdown, loop, self._changes, SETTLE_PASSES
        )

    def _countdown(self, loop: asyncio.AbstractEventLoop, changes: int, passes: int) -> None:
        """Jump once ``passes`` more loop passes went by without a change."""
        if changes != self._changes or self.autojump_threshold_s is None:
            return
        if passes > 0:
            self._autojump = loop.call_soon(self._countdown, loop, changes, passes - 1)
            return
        self._autojump = None
        self._drop_cancelled()
        if self._sleepers:
            self.advance((self._sleepers[0][0] - self._ns) / 1e9)


async def settle(passes: int = SETTLE_PASSES) -> None:
    """Let ready tasks run for ``passes`` event-loop passes."""
    for _ in range(passes):
        await asyncio.sleep(0)


def _ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)


__all__ = ["WALL_START_S", "FakeClock", "settle"]
