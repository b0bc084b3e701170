"""The leader's reassignment delay, rule by rule (workgroup.member.delay)."""

from __future__ import annotations

from workgroup.member.delay import ReassignDelay, delay_target

A = [("shard", 0), ("shard", 1)]
B = [("shard", 2), ("shard", 3)]
C = [("shard", 4), ("shard", 5)]


def first_round(delay: ReassignDelay) -> None:
    delay.apply(0, ["a", "b", "c"], {"a": A, "b": B, "c": C}, claimed=[])


def test_a_departed_members_resources_wait_for_the_delay() -> None:
    delay = ReassignDelay(5_000)
    first_round(delay)
    # c left; the assignor would hand its resources to a and b.
    target = {"a": A + C[:1], "b": B + C[1:]}
    held = delay.apply(1_000, ["a", "b"], target, claimed=A + B)
    assert held == {"a": A, "b": B}
    assert delay.next_at == 6_000
    assert delay.delayed == frozenset(C)
    # Before the deadline they are still held back; after it, handed out.
    assert delay.apply(5_999, ["a", "b"], target, claimed=A + B) == {"a": A, "b": B}
    assert delay.apply(6_000, ["a", "b"], target, claimed=A + B) == target
    assert delay.next_at is None


def test_a_newcomer_gets_them_at_once() -> None:
    delay = ReassignDelay(5_000)
    first_round(delay)
    delay.apply(1_000, ["a", "b"], {"a": A + C[:1], "b": B + C[1:]}, claimed=A + B)
    target = {"a": A, "b": B, "c2": C}
    assert delay.apply(2_000, ["a", "b", "c2"], target, claimed=A + B) == target
    assert delay.next_at is None


def test_resources_someone_owns_are_never_held_back() -> None:
    delay = ReassignDelay(5_000)
    first_round(delay)
    target = {"a": A + C, "b": B}
    # a already reports owning c's resources (another leader gave them).
    assert delay.apply(1_000, ["a", "b"], target, claimed=A + B + C) == target


def test_no_delay_changes_nothing_and_forgetting_starts_afresh() -> None:
    target = {"a": A + C, "b": B}
    none = ReassignDelay(0)
    first_round(none)
    assert none.apply(1_000, ["a", "b"], target, claimed=[]) == target
    delay = ReassignDelay(5_000)
    first_round(delay)
    delay.forget()
    assert delay.apply(1_000, ["a", "b"], target, claimed=A + B) == target


def test_a_deadline_that_passed_while_the_stages_ran_is_due_when_recorded() -> None:
    delay = ReassignDelay(5_000)
    first_round(delay)
    # The round that saw c leave began at 1_000; its stages answered at 7_000.
    target = {"a": A + C[:1], "b": B + C[1:]}
    out = delay_target(delay.memory, 5_000, 1_000, ["a", "b"], target, A + B)
    assert out.target == {"a": A, "b": B}
    delay.record(out.memory, 7_000)
    assert delay.next_at == 7_000  # due now: the leader asks for a round at once
    assert delay.delayed == frozenset(C)
    # Recorded in time, the deadline stands.
    on_time = ReassignDelay(5_000)
    first_round(on_time)
    on_time.record(out.memory, 2_000)
    assert on_time.next_at == 6_000
