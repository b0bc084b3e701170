"""``Timers.earliest_hint``: a cheap lower bound the driver arms its timer by."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workgroup.coordinator.timers import Timers

keys = st.sampled_from("abcdef")
operations = st.lists(
    st.one_of(
        st.tuples(st.just("schedule"), keys, st.integers(min_value=0, max_value=1000)),
        st.tuples(st.just("cancel"), keys, st.just(0)),
        st.tuples(st.just("fire"), st.just(""), st.integers(min_value=0, max_value=1000)),
        st.tuples(st.just("settle"), st.just(""), st.just(0)),
    ),
    max_size=60,
)


@given(operations)
def test_hint_never_exceeds_the_next_deadline(ops: list[tuple[str, str, int]]) -> None:
    timers: Timers[str] = Timers()
    for op, key, value in ops:
        if op == "schedule":
            timers.schedule(key, value)
        elif op == "cancel":
            timers.cancel(key)
        elif op == "fire":
            list(timers.due(value))
        else:
            timers.next_deadline()
        hint = timers.earliest_hint()
        armed = [d for k in "abcdef" if (d := timers.deadline(k)) is not None]
        if not armed:
            assert hint is None
        else:
            assert hint is not None
            assert hint <= min(armed)


def test_postponing_leaves_the_hint_and_bringing_forward_lowers_it() -> None:
    timers: Timers[str] = Timers()
    timers.schedule("a", 100)
    timers.schedule("b", 200)
    assert timers.earliest_hint() == 100
    timers.schedule("a", 300)  # a heartbeat: postponed, the heap is not touched
    assert timers.earliest_hint() == 100
    assert timers.next_deadline() == 200  # exact, settles the heap
    assert timers.earliest_hint() == 200
    timers.schedule("b", 50)
    assert timers.earliest_hint() == 50
    timers.cancel("a")
    timers.cancel("b")
    assert timers.earliest_hint() is None
