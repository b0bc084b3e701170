"""TLS and SASL settings for connections to a Kafka cluster.

One :class:`Security` value configures every connection workgroup opens to a
cluster: the member's, the admin client's (lease topics) and the lease
producers'.  It becomes aiokafka's ``security_protocol``, ``ssl_context`` and
``sasl_*`` options (:meth:`Security.client_options`).  SASL mechanisms: PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512.

The portable fence carries one too, without its password
(:meth:`Security.without_secrets`); the process that uses it finds the password
in its environment (:meth:`Security.with_password_from_environment`).
"""

from __future__ import annotations

import copy
import os
import warnings
from dataclasses import dataclass
from typing import Any, Literal, get_args

from workgroup.errors import ConfigError
from workgroup.setting import setting

#: Where a process that holds a :class:`Security` without its password finds it.
PASSWORD_ENV = "WORKGROUP_SASL_PASSWORD"
PASSWORD_FILE_ENV = "WORKGROUP_SASL_PASSWORD_FILE"

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@dataclass(frozen=True)
class Security:
    """How to reach a cluster (the default: plain TCP, no authentication)."""

    # Each field is a setting of the daemon too (``WORKGROUP_SSL_CAFILE``, ...).
    protocol: str = setting(
        "PLAINTEXT",
        "How connections to the cluster are made: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.",
        choices=get_args(SecurityProtocol),
        flag=False,
        name="security_protocol",
    )
    sasl_mechanism: str | None = setting(
        None,
        "The SASL mechanism (with SASL_*): PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.",
        choices=get_args(SaslMechanism),
        flag=False,
    )
    sasl_username: str | None = setting(None, "The SASL user (with SASL_*).", flag=False)
    sasl_password: str | None = setting(
        None, "The SASL password (with SASL_*).", flag=False, repr=False
    )
    ssl_cafile: str | None = setting(
        None,
        "CA bundle to verify the brokers (with SSL or SASL_SSL).",
        default_text="the system's CAs",
        flag=False,
    )
    ssl_certfile: str | None = setting(
        None,
        "Client certificate, for brokers that authenticate clients by TLS (with ssl_keyfile).",
        default_text="no client certificate",
        flag=False,
    )
    ssl_keyfile: str | None = setting(
        None, "The client certificate's key (with ssl_certfile).", flag=False
    )

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
            if not os.path.isfile(path):  # os.path: pathlib costs the fence's import 6 ms
                raise ConfigError(f"{name}: no such file {path!r}")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ConfigError("ssl_certfile and ssl_keyfile go together")

    def without_secrets(self) -> Security:
        """This value without the SASL password (what a fence carries unless asked
        otherwise): pickling it writes no secret.  It is not validated again:
        :meth:`with_password_from_environment` supplies the password where it is used."""
        withheld = copy.copy(self)  # a copy is not checked again: the password may be absent
        object.__setattr__(withheld, "sasl_password", None)
        return withheld

    def with_password_from_environment(self) -> Security:
        """This value with its SASL password, taken from ``$WORKGROUP_SASL_PASSWORD``
        or the file named by ``$WORKGROUP_SASL_PASSWORD_FILE`` when it has none
        (see :meth:`without_secrets`); unchanged when no password is needed or found."""
        if self.sasl_password is not None or not self.protocol.startswith("SASL_"):
            return self
        password = os.environ.get(PASSWORD_ENV)
        path = os.environ.get(PASSWORD_FILE_ENV)
        if password is None and path:
            try:
                with open(path, encoding="utf-8") as file:
                    password = file.read().rstrip("\r\n")
            except OSError as exc:
                raise ConfigError(
                    f"${PASSWORD_FILE_ENV}: cannot read {path!r}: {exc.strerror}"
                ) from None
        if password is None:
            return self
        found = copy.copy(self)
        object.__setattr__(found, "sasl_password", password)
        return found

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


def deprecated_security_name(module: str, name: str, attribute: str) -> type[Security]:
    """A module's ``__getattr__`` for a settings class that :class:`Security`
    replaced (``FenceSecurity``, ``Credentials``): :class:`Security`, with a
    :class:`DeprecationWarning`; :class:`AttributeError` for any other name."""
    if attribute != name:
        raise AttributeError(f"module {module!r} has no attribute {attribute!r}")
    warnings.warn(
        f"{module}.{name} is deprecated: use workgroup.client.security.Security "
        "(Security.without_secrets() leaves the password out)",
        DeprecationWarning,
        stacklevel=3,
    )
    return Security


__all__ = [
    "PASSWORD_ENV",
    "PASSWORD_FILE_ENV",
    "PLAINTEXT",
    "SaslMechanism",
    "Security",
    "SecurityProtocol",
    "deprecated_security_name",
]
