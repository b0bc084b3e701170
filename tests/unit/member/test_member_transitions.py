"""The member's transition table: every (from, to) pair is either listed or refused."""

from __future__ import annotations

import itertools

import pytest

from workgroup.errors import WorkgroupError
from workgroup.member.errors import IllegalTransitionError
from workgroup.member.transitions import NEXT_STATES, State, check_transition

PAIRS = list(itertools.product(State, State))
PAIR_IDS = [f"{a.name}->{b.name}" for a, b in PAIRS]


def test_the_table_covers_every_state() -> None:
    assert set(NEXT_STATES) == set(State)


@pytest.mark.parametrize(("current", "target"), PAIRS, ids=PAIR_IDS)
def test_every_pair_is_accepted_or_refused(current: State, target: State) -> None:
    if target in NEXT_STATES[current]:
        assert check_transition(current, target) is target
    else:
        with pytest.raises(IllegalTransitionError, match=f"from {current.name} to {target.name}"):
            check_transition(current, target)


def test_final_states_go_nowhere() -> None:
    for final in (State.CLOSED, State.FATAL):
        assert NEXT_STATES[final] == frozenset()


def test_every_state_but_the_final_ones_may_fail() -> None:
    for state in set(State) - {State.CLOSED, State.FATAL}:
        assert State.FATAL in NEXT_STATES[state]


def test_every_state_is_reachable_from_unjoined() -> None:
    seen, todo = {State.UNJOINED}, [State.UNJOINED]
    while todo:
        for nxt in NEXT_STATES[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert seen == set(State)


def test_an_illegal_transition_is_a_workgroup_error_not_retriable() -> None:
    with pytest.raises(WorkgroupError) as info:
        check_transition(State.STABLE, State.SYNCING)
    assert not info.value.retriable
    assert "STABLE" in str(info.value)
