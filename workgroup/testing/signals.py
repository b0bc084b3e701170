"""Tools that start processes stop them on SIGTERM and SIGHUP as on Ctrl-C.

A CI runner, ``timeout`` or a closed terminal ends a tool with SIGTERM or
SIGHUP, not SIGINT; Python's default for those ends the tool at once, without
its ``finally`` blocks, and the daemons, coordinators and JVMs it started (in
their own sessions) live on.  :func:`interrupt_on_termination` turns both into
:class:`KeyboardInterrupt`, so the clean-up that Ctrl-C runs runs for them too.

That clean-up stops the processes the tool knows of.  One started, but not yet
recorded where the clean-up looks, when the interrupt came would live on:
:func:`interrupts_deferred` holds SIGINT, SIGTERM and SIGHUP back while a
process is started and recorded, and delivers them right after.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

#: The signals that end a tool besides SIGINT.
TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: The signals :func:`interrupts_deferred` holds back.
INTERRUPTING_SIGNALS = (signal.SIGINT, *TERMINATION_SIGNALS)


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


@contextlib.contextmanager
def interrupts_deferred(
    signals: tuple[signal.Signals, ...] = INTERRUPTING_SIGNALS,
) -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP are held back; each that came
    is raised again on the way out, to the handler in place before (Ctrl-C's
    :class:`KeyboardInterrupt`, :func:`interrupt_on_termination`'s, or the
    default).  For starting a process and recording it for the clean-up: an
    interrupt between the two would leave the process running, unknown.  Off the
    main thread (where Python runs no signal handler) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        arrived.append(signum)

    previous = {signum: signal.signal(signum, hold) for signum in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            # None: a handler not set from Python; the default is the nearest.
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        for held in dict.fromkeys(arrived):
            signal.raise_signal(held)


__all__ = [
    "INTERRUPTING_SIGNALS",
    "TERMINATION_SIGNALS",
    "interrupt_on_termination",
    "interrupts_deferred",
]
