"""The member machine's small parts on their own: ownership, holdings, membership
and the coordinator lookup."""

from __future__ import annotations

import pytest
from member_sim import StickyTestAssignor

from workgroup.errors import CoordinatorError, ErrorCode
from workgroup.member.actions import Action, InvokeCallback
from workgroup.member.config import MemberConfig
from workgroup.member.departure import Departure
from workgroup.member.errors import CallbackError, CoordinatorUnavailableError
from workgroup.member.generation import Generation
from workgroup.member.holdings import GATHER_MS, RELEASE_WINDOW_MS, GiveBack, Holdings
from workgroup.member.intents import Intents
from workgroup.member.lookup import CoordinatorLookup
from workgroup.member.membership import Membership
from workgroup.member.ownership import Ownership
from workgroup.member.requests import RequestIds
from workgroup.member.transitions import State
from workgroup.protocol import AssignmentData, Protocol

A, B, C = ("shard", 0), ("shard", 1), ("shard", 2)


def test_assign_reports_what_was_added_and_give_up_what_was_owned() -> None:
    owned = Ownership()
    assert not owned
    assert owned.assign([B, A], 3) == (B, A)
    assert owned.resources == {A, B}
    assert owned.generation == 3
    assert owned.give_up([B, C]) == (B,)  # C was never owned
    assert owned.assign([A, C], 4) == (C,)
    assert owned.give_up([A, C]) == (A, C)
    assert owned.generation == -1  # nothing owned, no generation


def test_cooperative_reports_what_is_owned_eager_what_was_revoked() -> None:
    owned = Ownership()
    owned.assign([A, B], 5)
    assert owned.report("cooperative") == ((A, B), 5)
    assert owned.report("eager") == ((), -1)
    assert owned.give_up_before_eager_join() == ((A, B), 5)
    assert owned.releasing == {A, B}  # until the application stopped their work
    assert owned.released([A, B]) == (A, B)
    assert not owned
    assert owned.report("eager") == ((A, B), 5)
    assert owned.report("cooperative") == ((), -1)
    owned.assign([C], 6)  # a new assignment replaces the eager report
    assert owned.report("eager") == ((), -1)


def test_lose_forgets_the_eager_report_too() -> None:
    owned = Ownership()
    owned.assign([A], 2)
    owned.give_up_before_eager_join()
    owned.assign([B], 3)
    assert owned.lose() == ((B,), (A,), 3)
    assert owned.report("eager") == ((), -1)
    assert not owned


def backoff(failures: int) -> int:
    return 100 * 2 ** (failures - 1)


def test_one_lookup_at_a_time_and_retries_after_the_backoff() -> None:
    lookup = CoordinatorLookup(None, backoff)
    lookup.start(0)
    lookup.lost(0, immediately=True)
    assert lookup.take_due(0)
    assert not lookup.take_due(1)  # in flight
    unavailable = CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert lookup.failed(10, unavailable) == 100
    assert not lookup.take_due(109)
    assert lookup.take_due(110)
    assert lookup.failed(120, unavailable) == 200
    assert lookup.take_due(320)
    lookup.found()
    assert lookup.known
    assert lookup.failures == 0
    assert lookup.connect_deadline() is None  # no connect timeout


def test_a_lost_coordinator_is_looked_up_after_a_backoff_unless_asked_now() -> None:
    lookup = CoordinatorLookup(None, backoff)
    lookup.lost(1_000, immediately=False)
    assert lookup.next_at == 1_100
    assert not lookup.known


def test_a_fatal_lookup_error_schedules_nothing() -> None:
    lookup = CoordinatorLookup(None, backoff)
    lookup.lost(0, immediately=True)
    assert lookup.take_due(0)
    assert lookup.failed(5, CoordinatorError(ErrorCode.GROUP_AUTHORIZATION_FAILED)) is None
    assert lookup.next_at is None


def test_connect_deadline_bounds_only_the_first_search() -> None:
    lookup = CoordinatorLookup(2_000, backoff)
    lookup.start(500)
    lookup.lost(500, immediately=True)
    assert lookup.connect_deadline() == 2_500
    lookup.take_due(500)
    lookup.failed(600, CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    error = lookup.timeout_error()
    assert isinstance(error, CoordinatorUnavailableError)
    assert "2000 ms" in str(error)
    assert "1 attempt;" in str(error)
    assert "COORDINATOR_NOT_AVAILABLE" in str(error)
    lookup.take_due(700)
    lookup.found()
    assert lookup.connect_deadline() is None  # later outages follow the session rules


def test_in_flight_requests_answer_once_and_know_what_the_coordinator_holds() -> None:
    from workgroup.member.generation import Generation
    from workgroup.member.requests import InFlight, Pending

    generation = Generation(3, "m-1", None)
    requests = InFlight()
    requests.add(1, Pending("heartbeat", generation, 100))
    assert not requests.rebalancing
    assert requests.has("heartbeat")
    requests.add(2, Pending("join", generation, 150))
    assert requests.rebalancing
    assert requests.pop(2) == Pending("join", generation, 150)
    assert requests.pop(2) is None  # a second answer is stale
    requests.clear()
    assert requests.pop(1) is None
    assert not requests.has("heartbeat", "join", "sync", "leave")


def test_releasing_resources_are_reported_until_released_and_owned_again_if_reassigned() -> None:
    owned = Ownership()
    owned.assign([A, B, C], 4)
    assert owned.start_release([A, B]) == (A, B)
    assert owned.resources == {C}
    assert owned.releasing == {A, B}
    assert owned.report("cooperative") == ((A, B, C), 4)  # still claimed: withheld
    assert owned.released([A, C]) == (A,)  # C is owned, not releasing
    assert owned.report("cooperative") == ((B, C), 4)
    assert owned.assign([B, C], 5) == (B,)  # handed back: owned again
    assert not owned.releasing
    owned.start_release([B])
    assert owned.lose() == ((C,), (B,), 5)
    assert not owned


def test_departure_moves_only_as_its_table_says() -> None:
    from workgroup.member.departure import NEXT_STAGES, Departure, DepartureStage
    from workgroup.member.errors import IllegalTransitionError

    assert set(NEXT_STAGES) == set(DepartureStage)
    departure = Departure(dynamic=False)
    assert not departure.sends_leave
    departure.choose_leave(True)
    assert departure.sends_leave
    departure.hand_over(until=5_000)
    assert departure.departing
    assert departure.next_deadline(finishing_round=False) == 5_000
    assert departure.next_deadline(finishing_round=True) is None
    assert not departure.out_of_time(4_999)
    assert departure.out_of_time(5_000)
    with pytest.raises(IllegalTransitionError, match="HANDING_OVER to RELEASING"):
        departure.release_all()
    departure.leave()
    assert not departure.departing
    assert departure.next_deadline(finishing_round=False) is None
    departure.left()
    assert departure.leave_sent
    with pytest.raises(IllegalTransitionError):
        departure.leave()


def test_what_an_answer_says_about_the_member_comes_from_the_error_table() -> None:
    from workgroup.errors import MEMBERSHIP_ENDINGS, MemberCheck, codes_where

    refused = codes_where(lambda m: m.check is MemberCheck.REFUSED)
    assert refused == {
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.ILLEGAL_GENERATION,
    }
    assert all(code.meaning.ends_membership for code in refused)
    assert codes_where(lambda m: m.check is MemberCheck.PASSED) == {
        ErrorCode.NONE,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
    }
    # Of several refusals in one answer the member acts on the most severe.
    ranked = sorted(refused, key=lambda c: MEMBERSHIP_ENDINGS.index(c.meaning.member))
    assert ranked[0] is ErrorCode.FENCED_INSTANCE_ID


def holdings(
    *, confirm_release: bool = False, policy: str = "log"
) -> tuple[Holdings, list[Action]]:
    out: list[Action] = []
    part = Holdings(
        "g",
        RequestIds(),
        out,
        confirm_release=confirm_release,
        on_callback_error=policy,  # type: ignore[arg-type]
    )
    return part, out


def last(out: list[Action]) -> InvokeCallback:
    callback = out[-1]
    assert isinstance(callback, InvokeCallback)
    return callback


def test_holdings_report_each_change_with_what_is_owned_after_it() -> None:
    part, out = holdings()
    assert part.assign([A, B], 3) == (A, B)
    assert part.revoke([B], 3, seen=1_000) == (B,)
    assigned, revoked = out
    assert isinstance(assigned, InvokeCallback)
    assert isinstance(revoked, InvokeCallback)
    assert assigned.kind == "on_assigned"
    assert assigned.owned == {A, B}
    assert revoked.kind == "on_revoked"
    assert revoked.resources == (B,)
    assert revoked.owned == {A}
    assert part.callbacks_running
    assert part.releasing == {B}
    assert part.release_window_until == 0  # only confirmed releases wait in a window
    part.callback_done(assigned.callback_id)
    assert part.callback_done(revoked.callback_id) == (B,)  # on_revoked returned: released
    assert not part.callbacks_running
    assert not part.releasing
    assert part.next_deadline() is None


def test_a_release_that_leaves_others_releasing_keeps_the_window_open_for_them() -> None:
    part, _ = holdings(confirm_release=True)
    part.assign([A, B], 3)
    part.revoke([A, B], 3, seen=1_000)
    # Long after the revocation's window, A's work stops: B may follow within GATHER_MS.
    assert part.confirmed_released([A], now=5_000) == (A,)
    assert part.release_window_until == 5_000 + GATHER_MS
    # The last release opens nothing: no release is left to wait for.
    assert part.confirmed_released([B], now=5_010) == (B,)
    assert part.release_window_until == 5_000 + GATHER_MS
    assert not part.releasing


def test_a_warm_up_ready_while_others_are_not_opens_the_ready_window() -> None:
    intents = Intents()
    intents.start(frozenset(), {A, B})
    assert intents.unready
    assert intents.mark_ready([A], frozenset(), now=2_000) == {A}
    assert intents.ready_window_until == 2_000 + GATHER_MS
    assert intents.mark_ready([A], frozenset(), now=2_001) == set()  # not fresh: no change
    assert intents.mark_ready([B], frozenset(), now=2_003) == {B}
    assert not intents.unready
    assert intents.ready_window_until == 2_000 + GATHER_MS


def test_the_join_waits_in_a_window_only_while_its_kind_is_outstanding() -> None:
    config = MemberConfig(group_id="g", protocols=(Protocol("sticky", StickyTestAssignor()),))
    part, _ = holdings(confirm_release=True)
    intents = Intents()
    member = Membership(config, part, intents, Departure(dynamic=True))
    member.join_at = 100
    part.release_window_until = 500  # nothing releasing: not read
    intents.ready_window_until = 700  # no warm-up: not read
    assert member.join_ready_at() == 100
    intents.start(frozenset(), {A})
    assert member.join_ready_at() == 700
    part.assign([B], 3)
    part.revoke([B], 3, seen=0)  # its window ends at RELEASE_WINDOW_MS
    part.release_window_until = 900
    assert member.join_ready_at() == 900
    intents.mark_ready([A], frozenset(), now=0)
    assert member.join_ready_at() == 900  # every warm-up ready: its window is not read


def test_confirmed_releases_open_the_window_and_a_loss_reports_them_lost() -> None:
    part, out = holdings(confirm_release=True)
    part.assign([A, B], 3)
    part.revoke([B], 3, seen=1_000)
    assert part.release_window_until == 1_000 + RELEASE_WINDOW_MS
    revoked = last(out)
    assert part.callback_done(revoked.callback_id) == ()  # still releasing
    part.lose("session")
    lost = last(out)
    assert lost.kind == "on_lost"
    assert lost.resources == (A, B)


def test_the_callback_error_policy_decides_what_a_failure_does() -> None:
    error = RuntimeError("boom")
    failing, out = holdings(policy="fail")
    failing.assign([A], 3)
    verdict = failing.callback_failed(last(out).callback_id, error, None, may_fail=True)
    assert isinstance(verdict, CallbackError)
    assert verdict.__cause__ is error
    assert failing.callback_failed(last(out).callback_id, error, None, may_fail=False) is None
    releasing, out = holdings(policy="release")
    releasing.assign([A], 3)
    verdict = releasing.callback_failed(last(out).callback_id, error, None, may_fail=True)
    assert verdict == GiveBack((A,), "on_assigned failed in generation 3")
    logging, out = holdings(policy="log")
    logging.assign([A], 3)
    assert logging.callback_failed(last(out).callback_id, error, None, may_fail=True) is None
    assert logging.callback_failed(999, error, None, may_fail=True) is None  # not issued


def test_foreign_resources_are_dropped_from_an_assignment() -> None:
    part, _ = holdings()
    data = AssignmentData(generation=3, assigned=(A, ("other", 1), ("shard", 9)), catalog_hash=b"h")
    kept = part.without_foreign_resources(
        data,
        kinds=("shard",),
        catalog={"shard": (0, 1)},
        catalog_hash=b"h",
        generation=3,
        leader="l",
    )
    assert kept.assigned == (A,)
    newer = part.without_foreign_resources(
        data, kinds=None, catalog={"shard": (0, 1)}, catalog_hash=b"mine", generation=3, leader="l"
    )
    assert newer is data  # a leader with another catalog may know more


def membership() -> Membership:
    config = MemberConfig(group_id="g", protocols=(Protocol("sticky", StickyTestAssignor()),))
    part, _ = holdings()
    return Membership(config, part, Intents(), Departure(dynamic=True))


def test_an_asked_round_keeps_its_first_reason_and_wins_over_a_follow_up() -> None:
    m = membership()
    assert not m.round_due
    m.assigned(follow_up=True)
    assert m.round_due
    assert not m.rejoin_asked
    assert m.ask_rejoin("first")
    assert not m.ask_rejoin("second")
    m.assigned(follow_up=False)  # a round asked for stays asked for
    assert m.rejoin_asked
    assert m.take_rejoin() == "first"
    assert not m.round_due


def test_a_rediscovery_resumes_only_a_stable_member_with_no_round_asked() -> None:
    m = membership()
    for state in (State.FINDING_COORDINATOR, State.JOINING, State.SYNCING, State.STABLE):
        m.enter(state)
    m.generation = Generation(1, "m-1", None)
    m.coordinator_lost()
    m.enter(State.FINDING_COORDINATOR)
    assert m.resumes
    m.coordinator_lost()  # lost again while looking: still resumes
    assert m.resumes
    m.enter(State.STABLE)
    m.ask_rejoin("metadata changed")
    m.coordinator_lost()
    assert not m.resumes
