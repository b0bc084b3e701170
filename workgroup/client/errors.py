"""Errors of reaching a coordinator from outside a group, shared by every client
(the member, the admin commands, the console, the directory and the fence)."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from workgroup.errors import WorkgroupError


class CoordinatorUnavailableError(WorkgroupError):
    """The coordinator cannot be reached right now (disconnect, timeout, no broker)."""

    retriable = True


class NothingAnswersError(CoordinatorUnavailableError):
    """No bootstrap address accepts a connection: the one error every command and
    the daemon give for a closed port, an address where no coordinator runs yet,
    a wrong host.  ``failures`` holds each address with why it failed."""

    hint = (
        "is a coordinator running at that address? Start one with 'workgroup coordinator' "
        "(it listens on 127.0.0.1:9092), or point --bootstrap at your Kafka cluster."
    )

    def __init__(
        self, failures: Sequence[tuple[str, str]], *, waited_ms: int | None = None
    ) -> None:
        self.failures = tuple(failures)
        if len(self.failures) == 1:
            ((address, reason),) = self.failures
            message = f"nothing answers at {address}: {reason}"
        else:
            addresses = ", ".join(address for address, _ in self.failures)
            reasons = "; ".join(f"{address}: {reason}" for address, reason in self.failures)
            message = f"nothing answers at {addresses} ({reasons})"
        if waited_ms is not None:
            message += f" (waited {waited_ms} ms)"
        super().__init__(message)


def connect_failure_reason(exc: BaseException) -> str:
    """Why a connection attempt failed, in the OS's words (``Connection refused``)."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    code = getattr(exc, "errno", None)
    if isinstance(code, int) and code in errno.errorcode:
        return os.strerror(code)
    return str(exc) or type(exc).__name__


__all__ = ["CoordinatorUnavailableError", "NothingAnswersError", "connect_failure_reason"]
