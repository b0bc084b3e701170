"""Runs the stages of the leader's round that decide its target off the event
loop (asyncio).

Rules:

1. :func:`~workgroup.member.round_stages.run_round_stages` (the assignor, the
   reassignment delay, refusals, balancing) runs in a thread of the member's own
   (:mod:`~workgroup.member.threads`): a slow assignor or a large balancing holds
   up no heartbeat, and the application's threads hold up no round.
2. What it returns, or its failure as a :class:`~workgroup.errors.WorkgroupError`,
   goes to the machine (``assignment_done``), whose to judge it is (it fails
   the member on an error).  An exception
   that is not a ``WorkgroupError`` is a bug of the assignor: it is logged
   with its traceback (``member.assignor_failed``) and wrapped.
"""

from __future__ import annotations

from collections.abc import Callable

from workgroup.errors import WorkgroupError
from workgroup.log import get_logger
from workgroup.member.actions import Action, RunAssignor
from workgroup.member.round_stages import RoundResult, run_round_stages
from workgroup.member.state import MemberMachine
from workgroup.member.threads import in_member_thread

log = get_logger(__name__)


async def run_assignor(action: RunAssignor) -> RoundResult | WorkgroupError:
    """The result of ``action``'s stages, or the failure of one."""
    try:
        return await in_member_thread(run_round_stages, action.stages)
    except WorkgroupError as exc:
        return exc
    except Exception as exc:
        log.exception("member.assignor_failed", assignor=action.assignor.name)
        return WorkgroupError(f"{type(exc).__name__}: {exc}")


async def assign(
    machine: MemberMachine,
    action: RunAssignor,
    feed: Callable[[list[Action]], None],
    now: Callable[[], int],
) -> None:
    """Run ``action``'s stages and feed ``machine`` their result (rule 2)."""
    result = await run_assignor(action)
    feed(machine.assignment_done(now(), action.run_id, result))


__all__ = ["assign", "run_assignor"]
