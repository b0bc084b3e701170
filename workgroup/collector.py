"""Pausing the cyclic garbage collector around bulk work that makes no cycles.

Building or decoding a big group's state (a leader's assignment, an outside
reader's 100,000 resources, a coordinator's answer of 100,000 slots) allocates
hundreds of thousands of objects.  Each batch of allocations triggers a
collection, and every few of them a full one that walks every object already
alive, although none of the new ones is in a reference cycle: pausing the
collector for that work halves its time.  The objects are still collected as
usual once it is over.  A collector the process disabled stays disabled.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for the block (see the module)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


__all__ = ["collector_paused"]
