"""Generations: which answers still count."""

from __future__ import annotations

from member_sim import StickyTestAssignor

from workgroup.member.generation import NO_GENERATION, NO_GENERATION_ID, Generation
from workgroup.protocol import Protocol

PROTOCOL = Protocol("sticky", StickyTestAssignor())


def test_no_generation_is_invalid_and_anonymous() -> None:
    assert not NO_GENERATION.is_valid
    assert NO_GENERATION.generation_id == NO_GENERATION_ID
    assert NO_GENERATION.member_id == ""
    assert NO_GENERATION.protocol is None


def test_reset_keeps_the_member_id_only() -> None:
    current = Generation(7, "me-1", PROTOCOL)
    reset = current.reset()
    assert reset == Generation(NO_GENERATION_ID, "me-1", None)
    assert not reset.is_valid


def test_an_answer_counts_only_in_the_generation_and_member_id_it_was_sent_under() -> None:
    current = Generation(7, "me-1", PROTOCOL)
    assert current.answers_to(Generation(7, "me-1", PROTOCOL))
    assert not current.answers_to(Generation(6, "me-1", PROTOCOL))
    assert not current.answers_to(Generation(7, "me-2", PROTOCOL))
    assert not current.reset().answers_to(current)
    # A member id handed out by MEMBER_ID_REQUIRED makes older requests stale too.
    assert not NO_GENERATION.with_member_id("me-3").answers_to(NO_GENERATION)
