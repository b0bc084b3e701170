"""The member machine's small parts on their own: ownership and the coordinator lookup."""

from __future__ import annotations

import pytest

from workgroup.errors import CoordinatorError, ErrorCode
from workgroup.member.errors import CoordinatorUnavailableError
from workgroup.member.lookup import CoordinatorLookup
from workgroup.member.ownership import Ownership

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
