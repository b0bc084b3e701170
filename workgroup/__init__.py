"""workgroup: hand resources to a pool of Python workers over Kafka's group protocol.

The public names below are imported lazily, so that importing a sans-I/O module
(``workgroup.member.state``, ``workgroup.coordinator.coordinator``) loads no
network library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from workgroup.errors import ErrorCode, WorkgroupError

if TYPE_CHECKING:
    from workgroup.member.driver import GroupMember
    from workgroup.protocol.catalog import ResourceSpec
    from workgroup.protocol.protocol import Protocol

__version__ = "0.1.0.dev0"

_LAZY = {
    "GroupMember": "workgroup.member.driver",
    "Protocol": "workgroup.protocol.protocol",
    "ResourceSpec": "workgroup.protocol.catalog",
}

__all__ = ["ErrorCode", "GroupMember", "Protocol", "ResourceSpec", "WorkgroupError", "__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workgroup' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
