"""A member's advertised endpoint: where other services reach the process that
owns a resource (owner lookup: :mod:`workgroup.directory`).

It travels as one tag of the member metadata (:data:`ENDPOINT_TAG`), so it needs
no new metadata version: a member that sends none is simply not reachable by
lookup, and readers ignore tags they do not know.
"""

from __future__ import annotations

from workgroup.errors import ConfigError

#: The member metadata tag that carries a daemon's ``--advertise`` endpoint.
ENDPOINT_TAG = "workgroup.endpoint"


def check_endpoint(endpoint: str) -> str:
    """``endpoint`` if it is ``HOST:PORT`` (``[v6]:PORT``), else :class:`ConfigError`."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"advertise: {endpoint!r} is not HOST:PORT (the address other services "
            "reach this daemon at, e.g. 10.0.0.5:8080)"
        )
    return endpoint


__all__ = ["ENDPOINT_TAG", "check_endpoint"]
