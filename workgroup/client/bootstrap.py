"""Bootstrap addresses: ``HOST:PORT[,HOST:PORT...]`` parsed once, for every client.

No heavy imports: the fence and the CLI check an address without loading asyncio
or aiokafka.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from workgroup.errors import ConfigError

_PORT = re.compile(r"[0-9]{1,5}")
_HOST_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` (or a sequence of them) as ``(host, port)`` pairs.

    An IPv6 address goes in brackets (``[::1]:9092``).  Anything else — an empty
    list or entry, a missing host or port, a port outside 1..65535, a host that
    cannot be a host name — is a :class:`ConfigError`: such an address can never
    work, unlike a host that does not resolve (yet) or refuses connections.
    """
    text = bootstrap if isinstance(bootstrap, str) else ",".join(bootstrap)
    if not text.strip():
        raise ConfigError("no bootstrap servers given (expected HOST:PORT[,HOST:PORT...])")
    return [_parse_address(entry.strip(), text) for entry in text.split(",")]


def _parse_address(entry: str, text: str) -> tuple[str, int]:
    def bad(why: str) -> ConfigError:
        return ConfigError(f"bad bootstrap address {entry!r} in {text!r}: {why}")

    if not entry:
        raise bad("empty entry (expected HOST:PORT)")
    if entry.startswith("["):
        address, sep, port_text = entry[1:].partition("]:")
        if not sep:
            raise bad("expected [IPV6]:PORT")
        import ipaddress  # only for [IPV6]:PORT: the fence's import stays small

        try:
            host = str(ipaddress.IPv6Address(address))
        except ValueError as exc:
            raise bad(f"not an IPv6 address: {exc}") from None
    else:
        host, sep, port_text = entry.rpartition(":")
        if not sep:
            raise bad("no port (expected HOST:PORT)")
        if not host:
            raise bad("no host (expected HOST:PORT)")
        if ":" in host:
            raise bad("too many ':' (an IPv6 address goes in brackets: [::1]:9092)")
        if len(host) > 253 or not all(_HOST_LABEL.fullmatch(p) for p in host.split(".")):
            raise bad(f"{host!r} is not a host name or IPv4 address")
    if not _PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
        raise bad(f"port {port_text!r} is not a number in 1..65535")
    return host, int(port_text)


def format_address(host: str, port: int) -> str:
    """``HOST:PORT`` as :func:`parse_bootstrap` reads it back (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


__all__ = ["format_address", "parse_bootstrap"]
