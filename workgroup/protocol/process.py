"""Which process a member is: ``HOST-PID``, sent as one tag of its metadata.

A static member that replaces another (a restart with the same instance id)
keeps its place, and coordinators (Kafka's too) keep the client id the place
was first joined with: the pid of a process that has exited.  The metadata is
sent anew at every join, so its :data:`PROCESS_TAG` names the process that
holds the place now.  A tag needs no new metadata version: readers ignore tags
they do not know, and a member that sends none shows its client id instead.
"""

from __future__ import annotations

#: The member metadata tag that names the member's process (``HOST-PID``).
PROCESS_TAG = "workgroup.process"


def host_and_pid(process: str) -> tuple[str, int] | None:
    """``(host, pid)`` of a :data:`PROCESS_TAG` value, or ``None`` if it is not one."""
    host, _, pid = process.rpartition("-")
    return (host, int(pid)) if host and pid.isdigit() else None


__all__ = ["PROCESS_TAG", "host_and_pid"]
