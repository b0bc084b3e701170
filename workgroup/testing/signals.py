"""Tools that start processes stop them on SIGTERM and SIGHUP as on Ctrl-C.

A CI runner, ``timeout`` or a closed terminal ends a tool with SIGTERM or
SIGHUP, not SIGINT; Python's default for those ends the tool at once, without
its ``finally`` blocks, and the daemons, coordinators and JVMs it started (in
their own sessions) live on.  :func:`interrupt_on_termination` turns both into
:class:`KeyboardInterrupt`, so the clean-up that Ctrl-C runs runs for them too.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

#: The signals that end a tool besides SIGINT.
TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")


@contextlib.contextmanager
def interrupt_on_termination(
    signals: tuple[signal.Signals, ...] = TERMINATION_SIGNALS,
) -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`KeyboardInterrupt` (main
    thread only); the previous handlers are restored on the way out."""
    previous = {signum: signal.signal(signum, _interrupt) for signum in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


__all__ = ["TERMINATION_SIGNALS", "interrupt_on_termination"]
