"""The portable fence's value, without a coordinator: what it holds, what it
pickles, where its password comes from, bad construction."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import cloudpickle
import pytest

from workgroup.errors import ConfigError, WorkgroupError
from workgroup.fence import PASSWORD_ENV, PASSWORD_FILE_ENV, Fence, FenceSecurity, make_fence
from workgroup.runtime.errors import CheckpointError, LeaseLostError
from workgroup.security import PLAINTEXT, Security

SECRET = "unit-Secret-9"


def fence(**overrides: object) -> Fence:
    options: dict[str, object] = {
        "bootstrap": "127.0.0.1:1,[::1]:2",
        "security": PLAINTEXT,
        "group_id": "g",
        "member_id": "m-1",
        "instance_id": "i-1",
        "generation": 3,
        "topic": "workgroup-leases.g.0123",
        "partition": 0,
        "kind": "shard",
        "key": 7,
        "token": 4,
    }
    options.update(overrides)
    return make_fence(**options)  # type: ignore[arg-type]


def test_a_fence_holds_what_another_process_needs_and_pickles() -> None:
    made = fence()
    assert made.bootstrap == ("127.0.0.1:1", "[::1]:2")
    assert (made.group_id, made.member_id, made.instance_id, made.generation) == (
        "g",
        "m-1",
        "i-1",
        3,
    )
    assert (made.topic, made.partition, made.kind, made.key, made.token) == (
        "workgroup-leases.g.0123",
        0,
        "shard",
        7,
        4,
    )
    assert made.expires_at is None
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        copy = loads(dumps(made))
        assert copy == made
        assert type(copy.key) is int
    assert len(pickle.dumps(made)) < 1024
    assert "token=4" in repr(made)


def test_the_password_stays_out_unless_asked_for() -> None:
    security = Security("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", SECRET)
    plain = fence(security=security)
    assert plain.security.sasl_password is None
    assert SECRET.encode() not in pickle.dumps(plain)
    assert SECRET not in repr(plain)
    with_secret = fence(security=security, include_secrets=True)
    assert with_secret.security.sasl_password == SECRET
    assert SECRET not in repr(with_secret)


def test_the_password_comes_from_the_fence_the_environment_or_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    monkeypatch.delenv(PASSWORD_FILE_ENV, raising=False)
    security = FenceSecurity("SASL_SSL", "PLAIN", "alice", ssl_cafile="/ca.pem")
    assert security.credentials().sasl_password is None
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    monkeypatch.setenv(PASSWORD_FILE_ENV, str(secret))
    assert security.credentials().sasl_password == SECRET
    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    assert security.credentials().sasl_password == "from-env"  # the variable first
    given = FenceSecurity("SASL_SSL", "PLAIN", "alice", sasl_password="given")
    assert given.credentials().sasl_password == "given"  # the fence's own first
    assert security.credentials().ssl_cafile == "/ca.pem"
    # Without SASL nothing is looked up.
    assert FenceSecurity().credentials().sasl_password is None
    monkeypatch.delenv(PASSWORD_ENV)
    monkeypatch.setenv(PASSWORD_FILE_ENV, str(tmp_path / "missing"))
    with pytest.raises(WorkgroupError, match="cannot read"):
        security.credentials()


def test_bad_construction_is_refused() -> None:
    with pytest.raises(ConfigError, match="bootstrap"):
        fence(bootstrap="no-port")
    with pytest.raises(WorkgroupError, match="ttl_s must be > 0"):
        fence(ttl_s=0)


def test_a_ttl_sets_the_expiry_and_an_expired_fence_sends_nothing() -> None:
    before = time.time()
    made = fence(ttl_s=30)
    assert made.expires_at is not None
    assert before + 30 <= made.expires_at <= time.time() + 30
    expired = fence(ttl_s=30, bootstrap="127.0.0.1:1")
    object.__setattr__(expired, "expires_at", time.time() - 5)
    started = time.monotonic()
    with pytest.raises(LeaseLostError, match="expired"):
        expired.commit("late")  # nothing listens at port 1: no request was tried
    with pytest.raises(LeaseLostError, match="expired"):
        expired.check()
    assert time.monotonic() - started < 1.0


def test_a_value_that_cannot_be_stored_is_refused_before_sending() -> None:
    made = fence(bootstrap="127.0.0.1:1")
    with pytest.raises(CheckpointError, match="empty"):
        made.commit("")
    with pytest.raises(CheckpointError, match="over the limit"):
        made.commit("x" * 5000)
