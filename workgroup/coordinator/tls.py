"""TLS for the embedded coordinator's listener (Kafka's ``SSL`` listener).

:class:`TlsSettings` names the PEM files; :meth:`TlsSettings.context` builds the
server's :class:`ssl.SSLContext` (TLS 1.2 or later, the system's default
ciphers).  With ``client_cafile`` the coordinator also asks every client for a
certificate signed by that CA (Kafka's ``ssl.client.auth=required``).  Bad or
unreadable files are a :class:`~workgroup.errors.ConfigError` naming the file,
raised before the coordinator listens.  The key's passphrase, if any, is never
logged.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

from workgroup.errors import ConfigError


@dataclass(frozen=True, slots=True)
class TlsSettings:
    #: The server's certificate chain (PEM).
    certfile: Path
    #: Its private key (PEM); ``None``: in ``certfile``.
    keyfile: Path | None = None
    #: Require client certificates signed by this CA (mutual TLS).
    client_cafile: Path | None = None
    keyfile_password: str | None = field(default=None, repr=False)

    def context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        for name, path in (("certificate", self.certfile), ("key", self.keyfile),
                           ("client CA", self.client_cafile)):  # fmt: skip
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"TLS {name} file {str(path)!r} does not exist")
        try:
            context.load_cert_chain(self.certfile, self.keyfile, self.keyfile_password)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(
                f"cannot load the TLS certificate {str(self.certfile)!r}"
                + (f" and key {str(self.keyfile)!r}" if self.keyfile else "")
                + f": {exc}"
            ) from exc
        if self.client_cafile is not None:
            try:
                context.load_verify_locations(cafile=str(self.client_cafile))
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(
                    f"cannot load the client CA {str(self.client_cafile)!r}: {exc}"
                ) from exc
            context.verify_mode = ssl.CERT_REQUIRED
        return context


__all__ = ["TlsSettings"]
