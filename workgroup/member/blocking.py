"""The blocking coordinator connection lives in :mod:`workgroup.client.blocking`.

``Credentials`` is deprecated: :class:`~workgroup.client.security.Security` (with
:meth:`~workgroup.client.security.Security.without_secrets`) carries the same settings.
"""

from __future__ import annotations

from typing import Any

from workgroup.client.blocking import BlockingCoordinator
from workgroup.client.security import deprecated_security_name


def __getattr__(name: str) -> Any:
    return deprecated_security_name(__name__, "Credentials", name)


__all__ = ["BlockingCoordinator"]
