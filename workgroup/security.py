"""TLS and SASL settings: :class:`~workgroup.client.security.Security`, named here too."""

from workgroup.client.security import (
    PLAINTEXT,
    SaslMechanism,
    Security,
    SecurityProtocol,
)

__all__ = ["PLAINTEXT", "SaslMechanism", "Security", "SecurityProtocol"]
