"""TLS and SASL settings: validated up front, turned into aiokafka's options."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from workgroup.errors import ConfigError
from workgroup.runtime.app import Settings
from workgroup.runtime.config import resolve
from workgroup.security import Security


def test_plaintext_is_the_default() -> None:
    assert Security().client_options() == {"security_protocol": "PLAINTEXT"}


def test_sasl_scram_over_tls() -> None:
    options = Security(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="billing",
        sasl_password="s3cret",
    ).client_options()
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("billing", "s3cret")
    assert isinstance(options["ssl_context"], ssl.SSLContext)


def test_the_password_is_not_in_the_repr() -> None:
    security = Security(
        protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="pw"
    )
    assert "pw" not in repr(security)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"protocol": "TLS"}, "must be one of"),
        ({"protocol": "SASL_SSL", "sasl_username": "u", "sasl_password": "p"}, "sasl_mechanism"),
        ({"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}, "needs sasl_username"),
        (
            {
                "protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "GSSAPI",
                "sasl_username": "u",
                "sasl_password": "p",
            },
            "sasl_mechanism",
        ),
        ({"sasl_username": "u"}, "use SASL_PLAINTEXT or SASL_SSL"),
        ({"ssl_cafile": "/nonexistent"}, "ssl_cafile given with security protocol PLAINTEXT"),
        ({"protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"}, "no such file"),
    ],
)
def test_settings_that_cannot_work_are_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Security(**settings)  # type: ignore[arg-type]


def test_a_certificate_needs_its_key(tmp_path: Path) -> None:
    cert = tmp_path / "client.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match="go together"):
        Security(protocol="SSL", ssl_certfile=str(cert))


def test_the_daemon_takes_security_from_the_environment_and_checks_it() -> None:
    settings = resolve(
        Settings(),
        flags={},
        environ={
            "WORKGROUP_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "WORKGROUP_SASL_MECHANISM": "SCRAM-SHA-256",
            "WORKGROUP_SASL_USERNAME": "billing",
            "WORKGROUP_SASL_PASSWORD": "pw",
        },
        config_file=None,
    )
    assert settings.security.sasl_mechanism == "SCRAM-SHA-256"
    with pytest.raises(ConfigError, match="needs sasl_username"):
        resolve(
            Settings(),
            flags={},
            environ={
                "WORKGROUP_SECURITY_PROTOCOL": "SASL_SSL",
                "WORKGROUP_SASL_MECHANISM": "PLAIN",
            },
            config_file=None,
        )
