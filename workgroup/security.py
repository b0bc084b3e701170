"""TLS and SASL settings for connections to a Kafka cluster.

One :class:`Security` value configures every connection workgroup opens to a
cluster: the member's, the admin client's (lease topics) and the lease
producers'.  It becomes aiokafka's ``security_protocol``, ``ssl_context`` and
``sasl_*`` options (:meth:`Security.client_options`).  SASL mechanisms: PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from workgroup.errors import ConfigError

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@dataclass(frozen=True)
class Security:
    """How to reach a cluster (the default: plain TCP, no authentication)."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    #: CA bundle to verify the brokers (default: the system's).
    ssl_cafile: str | None = None
    #: Client certificate and key, for brokers that authenticate clients by TLS.
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in get_args(SecurityProtocol):
            raise ConfigError(
                f"security protocol must be one of {', '.join(get_args(SecurityProtocol))}, "
                f"got {self.protocol!r}"
            )
        sasl = self.protocol.startswith("SASL_")
        if sasl:
            if self.sasl_mechanism not in get_args(SaslMechanism):
                raise ConfigError(
                    f"{self.protocol} needs sasl_mechanism "
                    f"({', '.join(get_args(SaslMechanism))}), got {self.sasl_mechanism!r}"
                )
            if not self.sasl_username or self.sasl_password is None:
                raise ConfigError(f"{self.protocol} needs sasl_username and sasl_password")
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password:
            raise ConfigError(
                f"SASL settings given with security protocol {self.protocol}: "
                "use SASL_PLAINTEXT or SASL_SSL"
            )
        tls = self.protocol in ("SSL", "SASL_SSL")
        files = {"ssl_cafile": self.ssl_cafile, "ssl_certfile": self.ssl_certfile,
                 "ssl_keyfile": self.ssl_keyfile}  # fmt: skip
        for name, path in files.items():
            if path is None:
                continue
            if not tls:
                raise ConfigError(f"{name} given with security protocol {self.protocol}")
            if not Path(path).is_file():
                raise ConfigError(f"{name}: no such file {path!r}")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ConfigError("ssl_certfile and ssl_keyfile go together")

    def client_options(self) -> dict[str, Any]:
        """aiokafka's connection options (clients, admin client, producers)."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            options["ssl_context"] = create_ssl_context(
                cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile
            )
        if self.protocol.startswith("SASL_"):
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = self.sasl_password
        return options


PLAINTEXT = Security()

__all__ = ["PLAINTEXT", "SaslMechanism", "Security", "SecurityProtocol"]
