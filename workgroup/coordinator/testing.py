"""Moved: the coordinator's test harness is :mod:`workgroup.testing.coordinator`,
its fake clock :class:`workgroup.testing.FakeClock`.

This module keeps the old import path working, with a ``DeprecationWarning``
naming the new one, until the next release removes it.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

#: Old name -> the module to import it from now.
_MOVED: dict[str, str] = {
    "CoordinatorHarness": "workgroup.testing.coordinator",
    "DEFAULT_PROTOCOLS": "workgroup.testing.coordinator",
    "DEFAULT_PROTOCOL_TYPE": "workgroup.testing.coordinator",
    "FormedGroup": "workgroup.testing.coordinator",
    "Token": "workgroup.testing.coordinator",
    "join_request": "workgroup.testing.coordinator",
    "sequential_member_ids": "workgroup.testing.coordinator",
}


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if name == "FakeClock":  # not an alias: the one FakeClock counts seconds
        raise AttributeError(
            f"{__name__}.FakeClock was replaced by workgroup.testing.FakeClock "
            "(seconds: FakeClock(start_s); advance_to_ms(ms) moves it to a millisecond)"
        )
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"{__name__}.{name} is deprecated: import it from {module} (from {module} import {name})",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:  # what the old path still offers
    return sorted(_MOVED)
