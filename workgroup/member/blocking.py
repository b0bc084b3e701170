"""The blocking coordinator connection lives in :mod:`workgroup.client.blocking`.

``Credentials`` is deprecated: :class:`~workgroup.client.security.Security` (with
:meth:`~workgroup.client.security.Security.without_secrets`) carries the same settings.
"""

from __future__ import annotations

import warnings
from typing import Any

from workgroup.client.blocking import BlockingCoordinator


def __getattr__(name: str) -> Any:
    if name == "Credentials":
        warnings.warn(
            "workgroup.member.blocking.Credentials is deprecated: use "
            "workgroup.client.security.Security",
            DeprecationWarning,
            stacklevel=2,
        )
        from workgroup.client.security import Security

        return Security
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BlockingCoordinator"]
