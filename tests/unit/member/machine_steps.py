"""Small steps the member machine's fake-clock tests share: pick actions, answer callbacks."""

from __future__ import annotations

from workgroup.member.actions import Action, InvokeCallback, SendRequest
from workgroup.member.state import MemberMachine


def only(actions: list[Action], kind: type) -> list:  # type: ignore[type-arg]
    """The actions of ``kind``."""
    return [a for a in actions if isinstance(a, kind)]


def sent(actions: list[Action]) -> SendRequest:
    """The one request among ``actions``."""
    requests = only(actions, SendRequest)
    assert len(requests) == 1, actions
    return requests[0]


def ack_callbacks(m: MemberMachine, actions: list[Action], now: int) -> list[Action]:
    """Report every callback among ``actions`` done; returns what that caused."""
    out: list[Action] = []
    for cb in only(actions, InvokeCallback):
        out += m.callback_done(now, cb.callback_id)
    return out
