"""workgroup: hand resources to a pool of Python workers over Kafka's group protocol.

What applications build with, importable from here:

* a member of a group: :class:`GroupMember`, its :class:`Protocol` and the
  resources it shares out (:class:`ResourceSpec`; :data:`Resource` is a
  ``(kind, key)`` pair, :data:`Key` a resource's key);
* custom assignors: :class:`Assignor`, :class:`AssignmentInput`,
  :class:`MemberInfo`, :data:`Assignment`; :func:`get_assignor` finds one by
  name (assignors are registered as entry points, see ``docs/assignors.md``);
* the embedded coordinator, e.g. for tests on the test's own event loop::

      async with CoordinatorServer(CoordinatorConfig(initial_rebalance_delay_ms=0)) as server:
          async with GroupMember(server.bootstrap, "g", protocols) as member: ...

* the errors (all :class:`WorkgroupError`) and :class:`ErrorCode`.

Logging: :mod:`workgroup.log` (silent unless configured).  Test helpers:
:mod:`workgroup.testing`.

Only ``workgroup.errors`` is imported with the package; every other name is
loaded on first use, so ``import workgroup`` loads neither asyncio nor aiokafka.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from workgroup.errors import (
    ConfigError,
    CoordinatorError,
    ErrorCode,
    ProtocolError,
    WorkgroupError,
)

if TYPE_CHECKING:
    from workgroup.assignors.base import Assignment, AssignmentInput, Assignor, MemberInfo
    from workgroup.assignors.registry import get_assignor
    from workgroup.coordinator.config import CoordinatorConfig
    from workgroup.coordinator.server import CoordinatorServer
    from workgroup.fence import Fence, FenceTimeoutError
    from workgroup.member.driver import GroupMember
    from workgroup.member.errors import (
        AssignorError,
        CallbackError,
        CoordinatorUnavailableError,
        FencedInstanceError,
        GroupAuthorizationError,
        GroupFullError,
        InconsistentProtocolError,
        InvalidSessionTimeoutError,
        MemberClosedError,
        MemberFatalError,
    )
    from workgroup.protocol.catalog import ResourceSpec
    from workgroup.protocol.protocol import Protocol
    from workgroup.types import Key, Resource

__version__ = "0.1.0.dev0"

#: Public name -> the module that defines it, imported on first access.
_LAZY: dict[str, str] = {
    "App": "workgroup.runtime.app",
    "Lease": "workgroup.runtime.lease",
    "Fence": "workgroup.fence",
    "FenceTimeoutError": "workgroup.fence",
    "LeaseLostError": "workgroup.runtime.errors",
    "CheckpointError": "workgroup.runtime.errors",
    "SlotMismatchError": "workgroup.runtime.errors",
    "LegacyLayoutError": "workgroup.runtime.errors",
    "GroupMember": "workgroup.member.driver",
    "Protocol": "workgroup.protocol.protocol",
    "ResourceSpec": "workgroup.protocol.catalog",
    "Key": "workgroup.types",
    "Resource": "workgroup.types",
    "Assignment": "workgroup.assignors.base",
    "AssignmentInput": "workgroup.assignors.base",
    "Assignor": "workgroup.assignors.base",
    "MemberInfo": "workgroup.assignors.base",
    "get_assignor": "workgroup.assignors.registry",
    "CoordinatorConfig": "workgroup.coordinator.config",
    "CoordinatorServer": "workgroup.coordinator.server",
    "AssignorError": "workgroup.member.errors",
    "CallbackError": "workgroup.member.errors",
    "CoordinatorUnavailableError": "workgroup.member.errors",
    "FencedInstanceError": "workgroup.member.errors",
    "GroupAuthorizationError": "workgroup.member.errors",
    "GroupFullError": "workgroup.member.errors",
    "InconsistentProtocolError": "workgroup.member.errors",
    "InvalidSessionTimeoutError": "workgroup.member.errors",
    "MemberClosedError": "workgroup.member.errors",
    "MemberFatalError": "workgroup.member.errors",
}

#: Names bound when the package is imported.
_EAGER = (
    "ConfigError",
    "CoordinatorError",
    "ErrorCode",
    "ProtocolError",
    "WorkgroupError",
    "__version__",
)

__all__ = [
    "App",
    "Assignment",
    "AssignmentInput",
    "Assignor",
    "AssignorError",
    "CallbackError",
    "CheckpointError",
    "ConfigError",
    "CoordinatorConfig",
    "CoordinatorError",
    "CoordinatorServer",
    "CoordinatorUnavailableError",
    "ErrorCode",
    "Fence",
    "FenceTimeoutError",
    "FencedInstanceError",
    "GroupAuthorizationError",
    "GroupFullError",
    "GroupMember",
    "InconsistentProtocolError",
    "InvalidSessionTimeoutError",
    "Key",
    "Lease",
    "LeaseLostError",
    "LegacyLayoutError",
    "MemberClosedError",
    "MemberFatalError",
    "MemberInfo",
    "Protocol",
    "ProtocolError",
    "Resource",
    "ResourceSpec",
    "SlotMismatchError",
    "WorkgroupError",
    "__version__",
    "get_assignor",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workgroup' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The public names (loaded or not) and the module's own dunder attributes."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
