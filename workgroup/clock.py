"""The one clock the asyncio drivers feed to the sans-I/O machines."""

from __future__ import annotations

import time


def monotonic_ms() -> int:
    """Milliseconds of a monotonic clock (the ``now`` every machine event takes).

    ``time.monotonic_ns`` keeps full precision however long the process runs,
    where ``time.monotonic() * 1000`` loses sub-millisecond digits to floats.
    """
    return time.monotonic_ns() // 1_000_000


__all__ = ["monotonic_ms"]
