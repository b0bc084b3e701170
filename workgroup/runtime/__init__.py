"""The worker runtime: ``App`` with ``@app.resources``, ``@app.worker`` and
``@app.leader``, leases with fencing tokens and checkpoints, and the daemon."""

from workgroup.runtime.app import App
from workgroup.runtime.errors import CheckpointError, LeaseLostError
from workgroup.runtime.lease import Lease

__all__ = ["App", "CheckpointError", "Lease", "LeaseLostError"]
