"""Capture workgroup's log events in tests."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

from structlog.testing import LogCapture

from workgroup.log import PROCESSORS

__all__ = ["capture_logs"]


@contextmanager
def capture_logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Collect every event workgroup logs inside the block, whatever the level.

    Each entry is the event's dict: ``event`` (its name), ``log_level`` and its
    fields.  While capturing, events do not reach ``logging``.  workgroup's
    loggers run their own processors, so ``structlog.testing.capture_logs``
    (which swaps structlog's global ones) does not see them; this does::

        with capture_logs() as logs:
            ...
        assert any(e["event"] == "group.join_rejected" for e in logs)
    """
    capture = LogCapture()
    saved = list(PROCESSORS)
    # Mutated in place: every logger holds this very list.
    PROCESSORS[:] = [capture]
    try:
        yield capture.entries
    finally:
        PROCESSORS[:] = saved
