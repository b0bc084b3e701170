"""Where a member reads its catalog: a fixed one, or a (sync or async) function
polled for the current one (asyncio).

Rules:

1. A fixed catalog is read as it is; a function is called and, if it returns
   an awaitable, awaited.  Nothing is validated here: the machine freezes (and
   validates) every catalog it is given, so a bad source is still a
   :class:`~workgroup.errors.ConfigError` at start.
2. Polling re-reads the source every interval.  A failure is logged once in
   full (the user's frames, never local variables), then as one line with the
   count at the 2nd, 4th, 8th... failure in a row, again in full when the
   error changes, and ``member.resource_source_recovered`` once it reads
   again; the member keeps its last catalog meanwhile.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from workgroup.log import describe_error, get_logger, user_frames
from workgroup.protocol.catalog import Catalog

log = get_logger(__name__)

#: A fixed catalog, or a (possibly async) function returning the current one.
ResourceSource = Catalog | Callable[[], Catalog | Awaitable[Catalog]]


async def read_source(source: ResourceSource | None) -> Catalog:
    """The catalog ``source`` gives now (rule 1)."""
    if source is None:
        return {}
    if callable(source):
        value = source()
        if inspect.isawaitable(value):
            value = await value
        catalog: Catalog = value
    else:
        catalog = source
    return catalog


async def poll_source(
    interval_s: float, refresh: Callable[[], Awaitable[None]], *, group_id: str
) -> None:
    """Call ``refresh`` every ``interval_s`` until cancelled (rule 2)."""
    failures = 0
    last_error: str | None = None
    while True:
        await asyncio.sleep(interval_s)
        try:
            await refresh()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures += 1
            error = getattr(exc, "summary", None) or describe_error(exc)
            if error != last_error:
                last_error = error
                frames = getattr(exc, "frames", None) or user_frames(exc)
                log.error(
                    "member.resource_source_failed",
                    group=group_id,
                    error=error,
                    failures=failures,
                    hint="the member keeps its last list of resources",
                    **({"exception": frames} if frames else {}),
                )
            elif failures & (failures - 1) == 0:  # 2, 4, 8, ...
                log.error(
                    "member.resource_source_failing",
                    group=group_id,
                    error=error,
                    failures=failures,
                )
        else:
            if failures:
                log.info("member.resource_source_recovered", group=group_id, failures=failures)
            failures = 0
            last_error = None


__all__ = ["ResourceSource", "poll_source", "read_source"]
