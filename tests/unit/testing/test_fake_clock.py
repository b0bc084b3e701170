"""The fake clock: time moves only when a test moves it (or jumps when idle)."""

from __future__ import annotations

import asyncio

import pytest

from workgroup.clock import SYSTEM_CLOCK, Clock, wait_within
from workgroup.testing import FakeClock
from workgroup.testing.clock import WALL_START_S, settle


def test_it_is_a_clock_whose_seconds_and_milliseconds_agree() -> None:
    clock: Clock = FakeClock(12.5)
    assert clock.monotonic() == 12.5
    assert clock.monotonic_ms() == 12_500
    assert isinstance(clock, FakeClock)
    clock.advance(0.0015)
    assert clock.monotonic_ms() == 12_501


def test_its_wall_time_moves_with_its_monotonic_time_and_can_be_set() -> None:
    clock: Clock = FakeClock(3.0, wall_start_s=1_000.0)
    assert isinstance(clock, FakeClock)
    assert clock.wall() == 1_000.0
    assert FakeClock().wall() == WALL_START_S
    clock.advance(2.5)
    assert (clock.monotonic(), clock.wall()) == (5.5, 1_002.5)
    clock.advance_to_ms(6_000)
    assert clock.wall() == 1_003.0
    clock.set_wall(900.0)  # a wall clock may be set back; the monotonic time stays
    assert (clock.monotonic(), clock.wall()) == (6.0, 900.0)
    clock.advance(1)
    assert clock.wall() == 901.0


async def test_setting_the_wall_time_wakes_no_sleeper() -> None:
    clock = FakeClock()
    sleeper = asyncio.create_task(clock.sleep(1))
    await clock.wait_for_sleepers(1)
    clock.set_wall(clock.wall() + 3_600)
    await settle()
    assert not sleeper.done()
    clock.advance(1)
    await sleeper


def test_the_system_clock_reads_the_wall_time() -> None:
    import time

    before = time.time()
    assert before <= SYSTEM_CLOCK.wall() <= time.time()


def test_it_never_goes_back() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="never goes back"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="autojump_threshold_s"):
        FakeClock(autojump_threshold_s=-1)


async def test_advancing_wakes_the_sleepers_it_passed_in_deadline_order() -> None:
    clock = FakeClock()
    woke: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    tasks = [asyncio.create_task(sleeper(n, s)) for n, s in (("c", 3), ("a", 1), ("b", 2))]
    await clock.wait_for_sleepers(3)
    assert clock.next_deadline() == 1.0
    clock.advance(2.5)
    await settle()
    assert woke == ["a", "b"]
    assert clock.sleepers == 1
    clock.advance(0.5)
    await asyncio.gather(*tasks)
    assert woke == ["a", "b", "c"]


async def test_a_cancelled_sleep_is_forgotten() -> None:
    clock = FakeClock()
    sleeping = asyncio.create_task(clock.sleep(5))
    await clock.wait_for_sleepers()
    sleeping.cancel()
    await asyncio.gather(sleeping, return_exceptions=True)
    assert clock.sleepers == 0
    assert clock.next_deadline() is None


async def test_run_for_lets_woken_tasks_sleep_again_within_the_span() -> None:
    clock = FakeClock()
    ticks: list[float] = []

    async def every_second() -> None:
        while True:
            await clock.sleep(1)
            ticks.append(clock.monotonic())

    task = asyncio.create_task(every_second())
    await clock.wait_for_sleepers()
    await clock.run_for(3.5)
    task.cancel()
    assert ticks == [1.0, 2.0, 3.0]
    assert clock.monotonic() == 3.5


async def test_autojump_runs_back_offs_in_no_time() -> None:
    clock = FakeClock(autojump_threshold_s=0)
    loop = asyncio.get_running_loop()
    began = loop.time()
    for _ in range(10):
        await clock.sleep(60)
    assert clock.monotonic() == 600.0
    assert loop.time() - began < 5.0


@pytest.mark.parametrize("clock", [SYSTEM_CLOCK, FakeClock(autojump_threshold_s=0)])
async def test_wait_within_says_whether_the_work_finished_in_time(clock: Clock) -> None:
    done = asyncio.get_running_loop().create_future()
    done.set_result(None)
    assert await wait_within(clock, done, 0.0)
    never = asyncio.get_running_loop().create_future()
    assert not await wait_within(clock, never, 0.01)
    assert not never.cancelled()  # left to the caller
    never.cancel()


async def test_wait_within_measures_the_deadline_on_the_clock() -> None:
    clock = FakeClock()
    work = asyncio.get_running_loop().create_future()
    waiting = asyncio.create_task(wait_within(clock, work, 30))
    await clock.wait_for_sleepers()
    clock.advance(29)
    await settle()
    assert not waiting.done()
    work.set_result(None)
    assert await waiting
    assert clock.sleepers == 0  # its deadline is cancelled


def test_advance_to_ms_moves_to_a_whole_millisecond_exactly_and_never_back() -> None:
    clock = FakeClock(1.0)
    clock.advance_to_ms(123_456_789_001)
    assert clock.monotonic_ms() == 123_456_789_001
    clock.advance_to_ms(5)  # already past: no move
    assert clock.monotonic_ms() == 123_456_789_001


async def test_advance_to_ms_wakes_the_sleepers_it_passes() -> None:
    clock = FakeClock()
    sleeper = asyncio.ensure_future(clock.sleep(2.0))
    await clock.wait_for_sleepers(1)
    clock.advance_to_ms(1_999)
    await settle()
    assert not sleeper.done()
    clock.advance_to_ms(2_000)
    await settle()
    assert sleeper.done()
