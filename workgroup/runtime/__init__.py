"""The worker runtime: ``App`` with ``@app.resources``, ``@app.worker`` and
``@app.leader``, leases with fencing tokens and checkpoints, and the daemon.

The names below load on first use: importing one module of the runtime (its
errors, its settings) does not load the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workgroup.lazy import lazy_attributes

if TYPE_CHECKING:
    from workgroup.runtime.app import App
    from workgroup.runtime.errors import (
        CheckpointError,
        LeaseLostError,
        LegacyLayoutError,
        SlotMismatchError,
    )
    from workgroup.runtime.lease import Lease

#: Public name -> the module that defines it, imported on first access.
_LAZY: dict[str, str] = {
    "App": "workgroup.runtime.app",
    "CheckpointError": "workgroup.runtime.errors",
    "Lease": "workgroup.runtime.lease",
    "LeaseLostError": "workgroup.runtime.errors",
    "LegacyLayoutError": "workgroup.runtime.errors",
    "SlotMismatchError": "workgroup.runtime.errors",
}

__all__ = [
    "App",
    "CheckpointError",
    "Lease",
    "LeaseLostError",
    "LegacyLayoutError",
    "SlotMismatchError",
]


__getattr__ = lazy_attributes(__name__, _LAZY, globals())
