"""The driver's background tasks, and how they stop (asyncio).

Rules:

1. Every task the driver starts is kept here until it ends; a *service* (the
   callback runner, the resource polling) runs until cancelled.
2. Stopping gives the other tasks (requests under way: a LeaveGroup sent on a
   fatal error) up to a grace period to end by themselves, without waiting for
   the services, then cancels every task and waits for them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class BackgroundTasks:
    """The tasks one driver started, services among them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._services: set[asyncio.Task[None]] = set()

    def spawn(
        self, coro: Coroutine[Any, Any, None], name: str, *, service: bool = False
    ) -> asyncio.Task[None]:
        """Start ``coro`` as the task ``workgroup-<name>`` (rule 1)."""
        task = asyncio.create_task(coro, name=f"workgroup-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if service:
            self._services.add(task)
        return task

    async def stop(self, grace_s: float) -> None:
        """Rule 2."""
        # The service loops never end by themselves: waiting for them would take
        # the whole grace period.
        pending = [t for t in self._tasks if not t.done() and t not in self._services]
        if pending:
            await asyncio.wait(pending, timeout=grace_s)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


__all__ = ["BackgroundTasks"]
