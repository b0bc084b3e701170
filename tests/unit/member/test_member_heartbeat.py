"""The heartbeat and session timer alone, on plain numbers."""

from __future__ import annotations

from workgroup.member.heartbeat import HeartbeatTimer


def timer() -> HeartbeatTimer:
    return HeartbeatTimer(
        heartbeat_interval_ms=1_000, session_timeout_ms=6_000, rebalance_timeout_ms=20_000
    )


def test_heartbeats_are_due_every_interval_and_back_off_after_failures() -> None:
    t = timer()
    t.schedule(100)
    assert t.next_at == 1_100
    t.failed(1_100, lambda failures: 50 * failures)
    t.failed(1_150, lambda failures: 50 * failures)
    assert (t.failures, t.next_at) == (2, 1_250)
    t.succeeded()
    assert t.failures == 0
    t.due_now(2_000)
    assert t.next_at == 2_000


def test_no_proof_no_session_end() -> None:
    assert timer().session_end() is None


def test_the_session_ends_a_session_timeout_after_the_newest_proof() -> None:
    t = timer()
    t.proved_alive(500, 400, held=False)
    t.proved_alive(900, 300, held=False)  # an older proof changes nothing
    assert t.alive_since == 400
    assert t.session_end() == 6_400
    t.forget_proof()
    assert t.session_end() is None


def test_a_held_answer_proves_the_time_of_the_answer() -> None:
    t = timer()
    t.proved_alive(12_000, 2_000, held=True)
    assert t.alive_since == 11_000  # now minus one heartbeat interval


def test_starvation_is_noticed_and_discounts_older_requests() -> None:
    t = timer()
    t.expect(1_000)
    assert t.observe(1_900) is None  # late, but within the threshold
    assert t.observe(3_500) == 2_500
    assert t.starved_until == 3_500
    assert t.watchdog_at() == 4_500
    t.proved_alive(3_600, 2_000, held=True)  # sent before the freeze: only its send time
    assert t.alive_since == 2_000
    assert t.session_end() == 8_000


def test_the_starvation_threshold_is_bounded_by_a_third_of_the_session() -> None:
    t = HeartbeatTimer(
        heartbeat_interval_ms=2_500, session_timeout_ms=6_000, rebalance_timeout_ms=1
    )
    assert t.starvation_threshold_ms == 2_000
