"""The member's own threads: its work never queues behind the application's.

Rules:

1. The leader's round stages (:mod:`~workgroup.member.assignor_runner`) and the
   application's plain-function callbacks (:mod:`~workgroup.member.callback_runner`)
   run in threads of the member's own pool, never in the event loop's default
   executor.  The application may fill that one (it has the CPU count plus 4
   threads): handlers that each await ``asyncio.to_thread(blocking)`` for as long
   as they own their resource, as the docs suggest for blocking work.  A leader
   whose assignor waited there for a free thread would hold up every round of
   its group, and no handler ends before a round revokes it.
2. The pool makes a thread when none is idle, up to ``MAX_THREADS`` (each member
   runs one callback and at most one round at a time), and keeps idle ones for
   the next call.  The caller's context goes along, as with ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

#: Threads of the member's pool, for every member of the process (rule 2).
MAX_THREADS = 64

_P = ParamSpec("_P")
_T = TypeVar("_T")

_pool = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="workgroup-member")


async def in_member_thread(
    function: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
) -> _T:
    """``function(*args, **kwargs)`` in a thread of the member's pool (rule 1)."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_pool, call)


__all__ = ["MAX_THREADS", "in_member_thread"]
