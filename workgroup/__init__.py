"""workgroup: hand resources to a pool of Python workers over Kafka's group protocol.

This package's own names are the application API, what an app and its callers
use (see ``docs/api.md``):

* an app: :class:`App` (``@app.resources``, ``@app.worker``, ``@app.leader``),
  the :class:`Lease` its handlers hold and the :class:`Fence` that guards their
  writes elsewhere; :data:`Resource` is a ``(kind, key)`` pair, :data:`Key` a
  resource's key;
* routing requests to the process that owns a key: :class:`Directory`
  (``Directory(bootstrap, group).owner(kind, key)`` is an :class:`Owner`);
* the errors a handler or a caller can meet: :class:`WorkgroupError` (the
  root), :class:`ConfigError`, :class:`CoordinatorError`,
  :class:`LeaseLostError`, :class:`CheckpointError`, :class:`FenceTimeoutError`.

Everything else is imported from its subpackage: the group member from
:mod:`workgroup.member`, protocols from :mod:`workgroup.protocol`, assignors
from :mod:`workgroup.assignors`, the embedded coordinator from
:mod:`workgroup.coordinator`, error codes from :mod:`workgroup.errors`, test
helpers from :mod:`workgroup.testing`, logging from :mod:`workgroup.log`.  The
names that used to be importable from here still are until the next release,
each use warning (``DeprecationWarning``) with its new place.

``import workgroup`` imports nothing else: every name loads on first use.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

# The application API for type checkers ("X as X": re-exported); the table loads it.
if TYPE_CHECKING:
    from workgroup.directory import Directory as Directory
    from workgroup.directory import Owner as Owner
    from workgroup.errors import ConfigError as ConfigError
    from workgroup.errors import CoordinatorError as CoordinatorError
    from workgroup.errors import WorkgroupError as WorkgroupError
    from workgroup.fence import Fence as Fence
    from workgroup.fence import FenceTimeoutError as FenceTimeoutError
    from workgroup.runtime.app import App as App
    from workgroup.runtime.errors import CheckpointError as CheckpointError
    from workgroup.runtime.errors import LeaseLostError as LeaseLostError
    from workgroup.runtime.lease import Lease as Lease
    from workgroup.types import Key as Key
    from workgroup.types import Resource as Resource

__version__ = "0.1.0.dev0"

_API = False
_MOVED = True

#: Every name importable from ``workgroup`` -> (the module it is loaded from,
#: whether it moved).  The application API loads from its defining module; a
#: moved name, from its new place, with a ``DeprecationWarning`` naming it.
_NAMES: dict[str, tuple[str, bool]] = {
    "App": ("workgroup.runtime.app", _API),
    "Lease": ("workgroup.runtime.lease", _API),
    "Fence": ("workgroup.fence", _API),
    "Directory": ("workgroup.directory", _API),
    "Owner": ("workgroup.directory", _API),
    "Resource": ("workgroup.types", _API),
    "Key": ("workgroup.types", _API),
    "WorkgroupError": ("workgroup.errors", _API),
    "ConfigError": ("workgroup.errors", _API),
    "CoordinatorError": ("workgroup.errors", _API),
    "LeaseLostError": ("workgroup.runtime.errors", _API),
    "CheckpointError": ("workgroup.runtime.errors", _API),
    "FenceTimeoutError": ("workgroup.fence", _API),
    # Moved until the next release removes them from here.
    "ErrorCode": ("workgroup.errors", _MOVED),
    "ProtocolError": ("workgroup.errors", _MOVED),
    "SlotMismatchError": ("workgroup.runtime", _MOVED),
    "LegacyLayoutError": ("workgroup.runtime", _MOVED),
    "GroupMember": ("workgroup.member", _MOVED),
    "AssignorError": ("workgroup.member", _MOVED),
    "CallbackError": ("workgroup.member", _MOVED),
    "CoordinatorUnavailableError": ("workgroup.member", _MOVED),
    "FencedInstanceError": ("workgroup.member", _MOVED),
    "GroupAuthorizationError": ("workgroup.member", _MOVED),
    "GroupFullError": ("workgroup.member", _MOVED),
    "InconsistentProtocolError": ("workgroup.member", _MOVED),
    "InvalidSessionTimeoutError": ("workgroup.member", _MOVED),
    "MemberClosedError": ("workgroup.member", _MOVED),
    "MemberFatalError": ("workgroup.member", _MOVED),
    "Protocol": ("workgroup.protocol", _MOVED),
    "ResourceSpec": ("workgroup.protocol", _MOVED),
    "Assignment": ("workgroup.assignors", _MOVED),
    "AssignmentInput": ("workgroup.assignors", _MOVED),
    "Assignor": ("workgroup.assignors", _MOVED),
    "MemberInfo": ("workgroup.assignors", _MOVED),
    "get_assignor": ("workgroup.assignors", _MOVED),
    "CoordinatorConfig": ("workgroup.coordinator", _MOVED),
    "CoordinatorServer": ("workgroup.coordinator", _MOVED),
}

__all__ = sorted(["__version__", *(name for name, (_, moved) in _NAMES.items() if not moved)])


def __getattr__(name: str) -> Any:
    entry = _NAMES.get(name)
    if entry is None:
        raise AttributeError(f"module 'workgroup' has no attribute {name!r}")
    module, moved = entry
    value = getattr(importlib.import_module(module), name)
    if moved:  # not kept in globals(): every use warns
        warnings.warn(
            f"workgroup.{name} is deprecated: import it from {module} "
            f"(from {module} import {name}); the next release removes it from workgroup",
            DeprecationWarning,
            stacklevel=2,
        )
    else:
        globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The application API (loaded or not) and the module's own dunder attributes."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
