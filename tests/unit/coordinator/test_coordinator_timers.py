"""The keyed timer heap: postponing is free, cancelling is lazy, firing is ordered."""

from __future__ import annotations

from workgroup.coordinator.timers import Timers


def test_fires_in_deadline_order_and_only_when_due() -> None:
    timers: Timers[str] = Timers()
    timers.schedule("b", 20)
    timers.schedule("a", 10)
    timers.schedule("c", 30)
    assert timers.next_deadline() == 10
    assert list(timers.due(9)) == []
    assert list(timers.due(20)) == ["a", "b"]
    assert timers.next_deadline() == 30
    assert "c" in timers
    assert "a" not in timers


def test_cancelled_key_never_fires() -> None:
    timers: Timers[str] = Timers()
    timers.schedule("a", 10)
    timers.cancel("a")
    assert timers.next_deadline() is None
    assert list(timers.due(100)) == []


def test_postponing_moves_the_deadline_without_growing_the_heap() -> None:
    timers: Timers[str] = Timers()
    timers.schedule("a", 10)
    for deadline in range(11, 1_000):
        timers.schedule("a", deadline)
    assert len(timers._heap) == 1
    assert timers.next_deadline() == 999
    assert list(timers.due(998)) == []
    assert list(timers.due(999)) == ["a"]


def test_bringing_a_deadline_earlier_takes_effect() -> None:
    timers: Timers[str] = Timers()
    timers.schedule("a", 100)
    timers.schedule("a", 5)
    assert timers.next_deadline() == 5
    assert list(timers.due(5)) == ["a"]
    # The stale entry at 100 must not fire the key again.
    assert list(timers.due(1_000)) == []


def test_rescheduling_after_cancel_at_the_same_deadline_fires_once() -> None:
    timers: Timers[str] = Timers()
    timers.schedule("a", 10)
    timers.cancel("a")
    timers.schedule("a", 10)
    assert list(timers.due(10)) == ["a"]
    assert list(timers.due(10)) == []


def test_firing_may_rearm_other_keys() -> None:
    timers: Timers[str] = Timers()
    timers.schedule("a", 10)
    fired = []
    for key in timers.due(50):
        fired.append(key)
        if key == "a":
            timers.schedule("b", 20)  # armed while firing, due within the same sweep
    assert fired == ["a", "b"]


def test_equal_deadlines_fire_in_scheduling_order() -> None:
    timers: Timers[int] = Timers()
    for key in (3, 1, 2):
        timers.schedule(key, 7)
    assert list(timers.due(7)) == [3, 1, 2]


def test_len_and_clear() -> None:
    timers: Timers[str] = Timers()
    timers.schedule("a", 1)
    timers.schedule("b", 2)
    assert len(timers) == 2
    assert timers.deadline("b") == 2
    timers.clear()
    assert len(timers) == 0
    assert timers.next_deadline() is None
