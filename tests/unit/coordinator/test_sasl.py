"""The coordinator's SASL exchange (sasl.py) and SCRAM verifiers (scram.py), sans I/O."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.coordinator.sasl import Authenticator, AuthState, SaslSettings
from workgroup.coordinator.scram import Credentials, ScramCredential, ScramMechanism, verifiers
from workgroup.errors import ConfigError, ErrorCode

# RFC 7677 section 3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_PROOF = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
RFC_SERVER_SIGNATURE = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

FAILED = ErrorCode.SASL_AUTHENTICATION_FAILED


def credentials(**passwords: str) -> Credentials:
    return Credentials(
        {user: verifiers(password, iterations=4096) for user, password in passwords.items()}
    )


def authenticator(creds: Credentials, mechanism: str, **kwargs: object) -> Authenticator:
    auth = Authenticator(SaslSettings(creds), **kwargs)  # type: ignore[arg-type]
    assert auth.handshake(mechanism).error is ErrorCode.NONE
    return auth


class ScramClient:
    """RFC 5802's client side, written from the RFC (not from sasl.py)."""

    def __init__(self, mechanism: ScramMechanism, user: str, password: str, nonce: str) -> None:
        self.hash = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}[mechanism]
        self.user, self.password, self.nonce = user, password, nonce
        self.bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={nonce}"

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
        salted = hashlib.pbkdf2_hmac(
            self.hash().name, self.password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
        )
        client_key = hmac.digest(salted, b"Client Key", self.hash)
        stored_key = self.hash(client_key).digest()
        without_proof = f"c=biws,r={attrs['r']}"
        self.auth_message = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.digest(stored_key, self.auth_message, self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self.server_key = hmac.digest(salted, b"Server Key", self.hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def server_signature_ok(self, server_final: bytes) -> bool:
        expected = hmac.digest(self.server_key, self.auth_message, self.hash)
        return server_final == b"v=" + base64.b64encode(expected)


# --- SCRAM -------------------------------------------------------------------------


def test_the_rfc_7677_example_exchange() -> None:
    creds = Credentials(
        {"user": {"SCRAM-SHA-256": ScramCredential.from_password(
            "SCRAM-SHA-256", "pencil", salt=RFC_SALT, iterations=4096)}}
    )  # fmt: skip
    auth = authenticator(creds, "SCRAM-SHA-256", nonce=lambda: RFC_SERVER_NONCE)
    first = auth.authenticate(f"n,,n=user,r={RFC_CLIENT_NONCE}".encode())
    assert first.error is ErrorCode.NONE
    assert first.token == (
        f"r={RFC_CLIENT_NONCE}{RFC_SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
    )
    assert auth.state is AuthState.AWAITING_FINAL
    final = auth.authenticate(
        f"c=biws,r={RFC_CLIENT_NONCE}{RFC_SERVER_NONCE},p={RFC_PROOF}".encode()
    )
    assert final.error is ErrorCode.NONE
    assert final.token == f"v={RFC_SERVER_SIGNATURE}".encode()
    assert auth.authenticated
    assert auth.principal == "User:user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "we,ird=name", "Zoë"])
def test_scram_round_trip(mechanism: ScramMechanism, user: str) -> None:
    auth = authenticator(credentials(**{user: "s3cret"}), mechanism)
    client = ScramClient(mechanism, user, "s3cret", "clientnonce123")
    server_first = auth.authenticate(client.first())
    final = auth.authenticate(client.final(server_first.token))
    assert final.error is ErrorCode.NONE
    assert client.server_signature_ok(final.token)
    assert auth.principal == f"User:{user}"


def test_a_wrong_scram_password_fails_without_saying_why() -> None:
    auth = authenticator(credentials(alice="right"), "SCRAM-SHA-256")
    client = ScramClient("SCRAM-SHA-256", "alice", "wrong", "n1")
    answer = auth.authenticate(client.final(auth.authenticate(client.first()).token))
    assert answer.error is FAILED
    assert answer.close
    assert auth.state is AuthState.FAILED
    assert answer.message is not None
    assert "password" not in answer.message
    assert "alice" not in answer.message
    assert answer.reason == "wrong password for user 'alice'"


def test_an_unknown_user_looks_like_a_known_one_until_the_end() -> None:
    creds = credentials(alice="pw")
    settings_ = SaslSettings(creds)
    answers = []
    for _ in range(2):
        auth = Authenticator(settings_)
        auth.handshake("SCRAM-SHA-256")
        answers.append(auth.authenticate(b"n,,n=mallory,r=abc"))
    first = answers[0]
    assert first.error is ErrorCode.NONE
    salt = dict(a.split("=", 1) for a in first.token.decode().split(","))["s"]
    # The same fake salt every time: asking twice does not reveal the user is unknown.
    assert salt in answers[1].token.decode()
    client = ScramClient("SCRAM-SHA-256", "mallory", "pw", "abc")
    client.first()
    final = auth.authenticate(client.final(answers[1].token))
    known = authenticator(creds, "SCRAM-SHA-256")
    wrong = ScramClient("SCRAM-SHA-256", "alice", "nope", "abc")
    known_final = known.authenticate(wrong.final(known.authenticate(wrong.first()).token))
    assert final.error is known_final.error is FAILED
    assert final.message == known_final.message


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (b"p=tls-unique,,n=alice,r=x", "channel binding"),
        (b"n,,m=ext,n=alice,r=x", "malformed"),
        (b"n,,n=alice", "without user or nonce"),
        (b"n,,r=x", "without user or nonce"),
        (b"garbage", "malformed"),
        (b"n,,n=al=ZZice,r=x", "without user or nonce"),
        (b"n,a=bob,n=alice,r=x", "authorization id"),
        (b"n,,n=alice,r=x,tokenauth=true", "delegation tokens"),
        (b"\xff\xfe", "not UTF-8"),
        (b"n,,n=alice,r=" + b"x" * 20_000, "bytes"),
    ],
)
def test_bad_client_first_messages_fail(token: bytes, reason: str) -> None:
    auth = authenticator(credentials(alice="pw"), "SCRAM-SHA-256")
    answer = auth.authenticate(token)
    assert answer.error is FAILED
    assert answer.reason is not None
    assert reason in answer.reason


def test_a_final_message_with_another_nonce_or_binding_fails() -> None:
    for tamper in (
        lambda final: final.replace(b"r=n1", b"r=n2", 1),
        lambda final: final.replace(b"c=biws", b"c=eSws", 1),
        lambda final: final.rsplit(b",p=", 1)[0] + b",p=!!notbase64",
        lambda final: final.rsplit(b",p=", 1)[0],
    ):
        auth = authenticator(credentials(alice="pw"), "SCRAM-SHA-256")
        client = ScramClient("SCRAM-SHA-256", "alice", "pw", "n1")
        final = client.final(auth.authenticate(client.first()).token)
        assert auth.authenticate(tamper(final)).error is FAILED


# --- PLAIN -------------------------------------------------------------------------


def test_plain_is_checked_against_the_scram_verifier() -> None:
    creds = credentials(alice="pw")
    auth = authenticator(creds, "PLAIN")
    assert auth.authenticate(b"\x00alice\x00pw").error is ErrorCode.NONE
    assert auth.principal == "User:alice"
    auth = authenticator(creds, "PLAIN")
    assert auth.authenticate(b"alice\x00alice\x00pw").error is ErrorCode.NONE


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (b"\x00alice\x00wrong", "wrong password"),
        (b"\x00bob\x00pw", "unknown user"),
        (b"bob\x00alice\x00pw", "authorization id"),
        (b"alice\x00pw", "NUL"),
        (b"\x00\x00pw", "without user"),
    ],
)
def test_bad_plain_tokens_fail(token: bytes, reason: str) -> None:
    auth = authenticator(credentials(alice="pw"), "PLAIN")
    answer = auth.authenticate(token)
    assert answer.error is FAILED
    assert answer.reason is not None
    assert reason in answer.reason
    assert b"pw".decode() not in (answer.message or "")


# --- the handshake and the order of things ----------------------------------------


def test_an_unknown_or_disabled_mechanism_is_refused_with_the_enabled_list() -> None:
    auth = Authenticator(SaslSettings(credentials(alice="pw"), ("SCRAM-SHA-512",)))
    answer = auth.handshake("PLAIN")
    assert answer.error is ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer.mechanisms == ("SCRAM-SHA-512",)
    assert answer.close


def test_out_of_order_requests_are_illegal() -> None:
    auth = Authenticator(SaslSettings(credentials(alice="pw")))
    assert auth.authenticate(b"x").error is ErrorCode.ILLEGAL_SASL_STATE
    auth = authenticator(credentials(alice="pw"), "PLAIN")
    assert auth.handshake("PLAIN").error is ErrorCode.ILLEGAL_SASL_STATE
    auth = authenticator(credentials(alice="pw"), "PLAIN")
    auth.authenticate(b"\x00alice\x00pw")
    again = auth.authenticate(b"\x00alice\x00pw")
    assert again.error is ErrorCode.ILLEGAL_SASL_STATE
    assert again.close


@settings(max_examples=300, deadline=None)
@given(
    mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
    tokens=st.lists(st.binary(max_size=200), min_size=1, max_size=3),
)
def test_arbitrary_tokens_get_an_answer_never_an_exception(
    mechanism: str, tokens: list[bytes]
) -> None:
    auth = authenticator(CREDS, mechanism)
    for token in tokens:
        answer = auth.authenticate(token)
        assert answer.error in (ErrorCode.NONE, FAILED, ErrorCode.ILLEGAL_SASL_STATE)
        if answer.close:
            assert not auth.authenticated
            break
    if auth.authenticated:  # only a real password gets here
        pytest.fail(f"authenticated with {tokens!r}")


CREDS = credentials(alice="pw")


def test_sasl_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="unknown SASL mechanism"):
        SaslSettings(CREDS, ("GSSAPI",))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at least one mechanism"):
        SaslSettings(CREDS, ())
    with pytest.raises(ConfigError, match=">= 0"):
        SaslSettings(CREDS, failed_authentication_delay_ms=-1)


# --- the credentials file ---------------------------------------------------------


def test_the_credentials_file_round_trips_and_holds_no_password(tmp_path: Path) -> None:
    creds = credentials(alice="correct horse", **{'we"ird\\name': "battery"})
    path = tmp_path / "users.toml"
    creds.save(path)
    text = path.read_text()
    assert "correct horse" not in text
    assert "battery" not in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    loaded = Credentials.load(path)
    assert loaded.users == creds.users
    alice = loaded.lookup("alice", "SCRAM-SHA-512")
    assert alice is not None
    assert alice.matches_password("SCRAM-SHA-512", "correct horse")
    assert not alice.matches_password("SCRAM-SHA-512", "correct horsE")
    assert repr(alice) == "ScramCredential(iterations=4096)"  # no secrets in reprs


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not toml [", "not valid TOML"),
        ("[groups]\n", "unknown key"),
        ('[users.alice."SCRAM-SHA-1"]\n', "unknown mechanism 'SCRAM-SHA-1'"),
        ('[users.alice."SCRAM-SHA-256"]\nsalt = "AA=="\n', "missing"),
        (
            '[users.alice."SCRAM-SHA-256"]\nsalt = "A"\niterations = 4096\n'
            'stored_key = "AA=="\nserver_key = "AA=="\n',
            "salt is not valid base64",
        ),
        (
            '[users.alice."SCRAM-SHA-256"]\nsalt = "AA=="\niterations = 10\n'
            'stored_key = "AA=="\nserver_key = "AA=="\n',
            "iterations must be between 4096",
        ),
        (
            '[users.alice."SCRAM-SHA-256"]\nsalt = "AA=="\niterations = "many"\n'
            'stored_key = "AA=="\nserver_key = "AA=="\n',
            "iterations must be an integer",
        ),
        ("[users]\nalice = 3\n", "needs one table per SCRAM mechanism"),
        ('[users."a\\u0001"]\n', "printable"),
    ],
)
def test_a_bad_credentials_file_is_a_config_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Credentials.parse(text, source="users.toml")


def test_an_unreadable_credentials_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read credentials file"):
        Credentials.load(tmp_path / "missing.toml")
