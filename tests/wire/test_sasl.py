"""SASL (PLAIN, SCRAM-SHA-256/512) and the group ACL on the embedded coordinator,
with aiokafka (the member), kafka-python and confluent-kafka (librdkafka)
clients; over plain TCP and over TLS; wrong passwords, unauthenticated
requests, the command line."""

from __future__ import annotations

import asyncio
import signal
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from workgroup.admin import describe_group
from workgroup.cli import main
from workgroup.coordinator.acl import GroupAcl
from workgroup.coordinator.sasl import SaslMechanism, SaslSettings
from workgroup.coordinator.scram import Credentials, verifiers
from workgroup.coordinator.server import CoordinatorServer
from workgroup.coordinator.tls import TlsSettings
from workgroup.errors import AuthenticationError, ErrorCode, WorkgroupError
from workgroup.kafka.messages import CommitPartition, CommitTopic, FetchTopic
from workgroup.member.driver import GroupMember
from workgroup.member.errors import GroupAuthorizationError
from workgroup.security import Security
from workgroup.testing import capture_logs
from workgroup.testing.servers import ServerProcess, run_coordinator

from .conftest import Pki, kafka_python_groups, librdkafka_joins, member
from .raw_client import ApiVersionsRequest, RawClient

pytestmark = pytest.mark.timeout(60)

PASSWORDS = {"alice": "alice-Secret-1", "bob": "bob-Secret-2", "admin": "admin-Secret-3"}

ACL = """
super_users = ["admin"]

[[allow]]
principals = ["alice"]
groups = ["orders*"]
operations = ["join", "commit", "describe"]

[[allow]]
principals = ["bob"]
groups = ["orders"]
operations = ["describe"]

[[allow]]
principals = ["bob"]
groups = ["bob-*"]
operations = ["all"]
"""


@pytest.fixture(scope="module")
def credentials() -> Credentials:
    return Credentials(
        {user: verifiers(password, iterations=4096) for user, password in PASSWORDS.items()}
    )


@pytest.fixture
async def server(credentials: Credentials) -> AsyncIterator[CoordinatorServer]:
    sasl = SaslSettings(credentials)
    async with CoordinatorServer(sasl=sasl, acl=GroupAcl.parse(ACL)) as server:
        yield server


def sasl(mechanism: SaslMechanism, user: str, password: str | None = None) -> Security:
    return Security(
        "SASL_PLAINTEXT", mechanism, user, PASSWORDS[user] if password is None else password
    )


async def commit(m: GroupMember, offset: int) -> ErrorCode:
    """Commit ``offset`` for shard 0; the partition's error."""
    topic = CommitTopic("shard", (CommitPartition(0, offset),))
    result = await m.commit_offsets([topic])
    return result.topics[0].partitions[0].error


async def fetch(m: GroupMember) -> int:
    """Shard 0's committed offset (-1: none)."""
    fetched = await m.fetch_offsets([FetchTopic("shard", (0,))])
    return fetched.topics[0].partitions[0].offset


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_an_aiokafka_member_authenticates_and_joins(
    server: CoordinatorServer, mechanism: SaslMechanism
) -> None:
    async with member(server, sasl(mechanism, "alice"), f"orders-{mechanism}") as m:
        await asyncio.wait_for(m.wait_stable(), 20)
        assert len(m.assignment) == 3
        assert await commit(m, 41) is ErrorCode.NONE
        assert await fetch(m) == 41
    assert server.authentications >= 1
    assert server.failed_authentications == 0


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_a_wrong_password_is_an_authentication_error_after_the_delay(
    server: CoordinatorServer, mechanism: SaslMechanism
) -> None:
    began = time.monotonic()
    with capture_logs() as logs, pytest.raises(AuthenticationError) as raised:
        async with member(server, sasl(mechanism, "alice", "not-the-password"), "orders") as m:
            await asyncio.wait_for(m.wait_stable(), 20)
    assert not raised.value.retriable
    assert time.monotonic() - began >= 0.1  # failed_authentication_delay_ms
    assert server.failed_authentications == 1
    failures = [e for e in logs if e["event"] == "coordinator.authentication_failed"]
    assert failures[0]["reason"] == "wrong password for user 'alice'"
    # No secret in any log line: neither the password tried nor the real one.
    for entry in logs:
        assert "not-the-password" not in repr(entry)
        assert PASSWORDS["alice"] not in repr(entry)


async def test_an_unknown_user_fails_like_a_wrong_password(server: CoordinatorServer) -> None:
    with pytest.raises(AuthenticationError, match=r"refused the credentials"):
        async with member(server, sasl("SCRAM-SHA-512", "alice", "x"), "orders") as m:
            await asyncio.wait_for(m.wait_stable(), 20)
    unknown = Security("SASL_PLAINTEXT", "SCRAM-SHA-512", "mallory", "x")
    with pytest.raises(AuthenticationError):
        async with member(server, unknown, "orders") as m:
            await asyncio.wait_for(m.wait_stable(), 20)
    assert server.failed_authentications == 2


async def test_requests_before_authentication_close_the_connection(
    server: CoordinatorServer,
) -> None:
    host, port = server.address
    raw = await RawClient.connect(host, port)
    try:
        answer = await raw.call(ApiVersionsRequest[0](), 0)  # allowed before SASL
        assert 17 in {k.api_key for k in answer.api_keys}  # SaslHandshake advertised
        # A JoinGroup header (api key 11) before any SaslHandshake: closed, body unread.
        body = b"\x00" * 20
        header = struct.pack(">hhih", 11, 5, 7, 3) + b"raw"
        await raw.write_raw(struct.pack(">i", len(header) + len(body)) + header + body)
        assert await raw.closed_by_peer()
    finally:
        await raw.close()


async def test_a_disabled_mechanism_is_refused(credentials: Credentials) -> None:
    settings = SaslSettings(credentials, ("SCRAM-SHA-512",))
    async with CoordinatorServer(sasl=settings) as server:
        with pytest.raises(AuthenticationError, match=r"(?i)mechanism"):
            async with member(server, sasl("PLAIN", "alice"), "orders") as m:
                await asyncio.wait_for(m.wait_stable(), 20)
        async with member(server, sasl("SCRAM-SHA-512", "alice"), "orders") as m:
            await asyncio.wait_for(m.wait_stable(), 20)


async def test_the_acl_decides_who_joins_commits_and_describes(
    server: CoordinatorServer,
) -> None:
    admin = sasl("SCRAM-SHA-256", "admin")
    bob = sasl("SCRAM-SHA-256", "bob")
    async with member(server, sasl("SCRAM-SHA-256", "alice"), "orders") as alice:
        await asyncio.wait_for(alice.wait_stable(), 20)
        # bob may describe "orders" but not join it.
        with pytest.raises(GroupAuthorizationError):
            async with member(server, bob, "orders") as intruder:
                await asyncio.wait_for(intruder.wait_stable(), 20)
        described = await describe_group(server.bootstrap, "orders", security=bob)
        assert described.state == "Stable"
        # alice may not describe bob's groups; the super user may describe anything.
        async with member(server, bob, "bob-jobs") as bobs:
            await asyncio.wait_for(bobs.wait_stable(), 20)
            with pytest.raises(WorkgroupError, match=r"(?i)authoriz"):
                await describe_group(server.bootstrap, "bob-jobs", security=sasl("PLAIN", "alice"))
            assert (await describe_group(server.bootstrap, "bob-jobs", security=admin)).members
    assert server.denied_requests >= 1  # bob's JoinGroup


async def test_a_denied_commit_stores_nothing(credentials: Credentials) -> None:
    acl = GroupAcl.parse(
        """
        [[allow]]
        principals = ["alice"]
        groups = ["reader"]
        operations = ["join", "describe"]
        """
    )
    server = CoordinatorServer(sasl=SaslSettings(credentials), acl=acl)
    async with server, member(server, sasl("PLAIN", "alice"), "reader") as m:
        await asyncio.wait_for(m.wait_stable(), 20)
        assert await commit(m, 7) is ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert await fetch(m) == -1


async def test_kafka_python_and_librdkafka_authenticate_with_scram(
    server: CoordinatorServer,
) -> None:
    async with member(server, sasl("SCRAM-SHA-256", "alice"), "orders") as m:
        await asyncio.wait_for(m.wait_stable(), 20)

        def kafka_python_lists(user: str) -> list[str]:
            return kafka_python_groups(
                server.bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user,
                sasl_plain_password=PASSWORDS[user],
            )  # fmt: skip

        # ListGroups shows each principal the groups it may describe.
        assert "orders" in await asyncio.to_thread(kafka_python_lists, "bob")
        assert "orders" in await asyncio.to_thread(kafka_python_lists, "admin")
        rdkafka = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                   "sasl.username": "alice", "sasl.password": PASSWORDS["alice"]}  # fmt: skip
        admin = sasl("SCRAM-SHA-512", "admin")
        described = await librdkafka_joins(server.bootstrap, "orders-librdkafka", rdkafka, admin)
        assert described.state == "Stable"
        assert described.protocol_type == "consumer"
        listed_by_bob = await asyncio.to_thread(kafka_python_lists, "bob")
        assert "orders-librdkafka" not in listed_by_bob  # bob may not describe it


async def test_sasl_over_tls(credentials: Credentials, pki: Pki) -> None:
    tls = TlsSettings(pki.cert, pki.key)
    async with CoordinatorServer(tls=tls, sasl=SaslSettings(credentials)) as server:
        security = Security(
            "SASL_SSL", "PLAIN", "alice", PASSWORDS["alice"], ssl_cafile=str(pki.ca)
        )
        async with member(server, security, "orders-tls") as m:
            await asyncio.wait_for(m.wait_stable(), 20)
        assert server.authentications >= 1


# --- the command line ----------------------------------------------------------------


def test_credentials_add_list_remove(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    runner = CliRunner()
    result = runner.invoke(
        main, ["credentials", "add", str(users), "alice", "--password-stdin"], input="pw-1\n"
    )
    assert result.exit_code == 0, result.output
    assert "added alice" in result.output
    result = runner.invoke(
        main,
        ["credentials", "add", str(users), "bob", "--password-stdin",
         "--mechanism", "SCRAM-SHA-512", "--iterations", "5000"],
        input="pw-2\n",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "pw-1" not in users.read_text()
    listed = runner.invoke(main, ["credentials", "list", str(users)]).output
    assert "alice: SCRAM-SHA-256 (8192 iterations), SCRAM-SHA-512 (8192 iterations)" in listed
    assert "bob: SCRAM-SHA-512 (5000 iterations)" in listed
    loaded = Credentials.load(users)
    bob = loaded.lookup("bob", "SCRAM-SHA-512")
    assert bob is not None
    assert bob.matches_password("SCRAM-SHA-512", "pw-2")
    assert runner.invoke(main, ["credentials", "remove", str(users), "bob"]).exit_code == 0
    assert set(Credentials.load(users).users) == {"alice"}
    missing = runner.invoke(main, ["credentials", "remove", str(users), "carol"])
    assert missing.exit_code == 2
    assert "has no user 'carol'" in missing.output
    weak = runner.invoke(
        main,
        ["credentials", "add", str(users), "x", "--password-stdin", "--iterations", "10"],
        input="pw\n",
    )
    assert weak.exit_code == 2
    assert "iterations must be between 4096" in weak.output


def test_the_coordinator_command_checks_its_security_options(tmp_path: Path, pki: Pki) -> None:
    from workgroup.cli.coordinator import check_exposure

    users = tmp_path / "users.toml"
    runner = CliRunner()
    runner.invoke(main, ["credentials", "add", str(users), "a", "--password-stdin"], input="p\n")
    acl = tmp_path / "acl.toml"
    acl.write_text('[[allow]]\nprincipals = ["a"]\ngroups = ["*"]\noperations = ["all"]\n')
    cases = [
        (["--acl", str(acl)], "--acl needs --sasl-credentials"),
        (["--sasl-mechanism", "PLAIN"], "--sasl-mechanism needs --sasl-credentials"),
        (["--sasl-credentials", str(tmp_path / "nope.toml")], "cannot read credentials file"),
        (["--listen", "0.0.0.0:0", "--sasl-credentials", str(users)], "without TLS"),
        (
            ["--listen", "0.0.0.0:0", "--tls-cert", str(pki.cert), "--tls-key", str(pki.key)],
            "without SASL",
        ),
    ]
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    cases.append((["--sasl-credentials", str(empty)], "has no users"))
    bad_acl = tmp_path / "bad-acl.toml"
    bad_acl.write_text('[[allow]]\nprincipals = ["a"]\ngroups = ["*"]\noperations = ["fly"]\n')
    cases.append((["--sasl-credentials", str(users), "--acl", str(bad_acl)], "unknown operation"))
    for args, message in cases:
        result = runner.invoke(main, ["coordinator", *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
    check_exposure("0.0.0.0", insecure=False, tls=True, sasl=True)  # both: allowed


async def test_the_inspection_commands_read_credentials_from_config(
    server: CoordinatorServer, tmp_path: Path
) -> None:
    config = tmp_path / "workgroup.toml"
    config.write_text(
        'security_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "SCRAM-SHA-256"\n'
        f'sasl_username = "alice"\nsasl_password = "{PASSWORDS["alice"]}"\n'
    )
    runner = CliRunner()

    def run(*args: str) -> Result:
        # The commands run their own event loop: in a thread, beside this one.
        return runner.invoke(main, [*args, "--bootstrap", server.bootstrap])

    async with member(server, sasl("PLAIN", "alice"), "orders") as m:
        await asyncio.wait_for(m.wait_stable(), 20)
        listed = await asyncio.to_thread(run, "list", "--json", "--config", str(config))
        assert listed.exit_code == 0, listed.output
        assert '"orders"' in listed.output
        described = await asyncio.to_thread(
            run, "describe", "orders", "--json", "--config", str(config)
        )
        assert described.exit_code == 0, described.output
        assert '"Stable"' in described.output
        anonymous = await asyncio.to_thread(run, "list", "--json")
        assert anonymous.exit_code != 0
        assert "orders" not in anonymous.output


async def test_sighup_reloads_the_credentials_and_the_acl(tmp_path: Path) -> None:
    from aiokafka.conn import CloseReason, create_conn

    users = tmp_path / "users.toml"
    Credentials().with_user("alice", verifiers("pw-a", iterations=4096)).save(users)
    acl = tmp_path / "acl.toml"
    acl.write_text('super_users = ["alice"]\n')
    log = tmp_path / "coordinator.log"

    async def logs_in(server: ServerProcess, user: str, password: str) -> bool:
        try:
            conn = await create_conn(
                server.host, server.port, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                sasl_plain_password=password,
            )  # fmt: skip
        except Exception:  # aiokafka's SASL failures
            return False
        await conn.close(reason=CloseReason.SHUTDOWN)
        return True

    async def reloaded(times: int) -> None:
        for _ in range(100):
            if log.read_text().count("coordinator.reload") >= times:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(log.read_text()[-2000:])

    args = ["--sasl-credentials", str(users), "--acl", str(acl)]
    with run_coordinator(*args, log=log) as server:
        assert await logs_in(server, "alice", "pw-a")
        assert not await logs_in(server, "bob", "pw-b")
        bob = verifiers("pw-b", iterations=4096)
        Credentials.load(users).with_user("bob", bob).save(users)
        server.process.send_signal(signal.SIGHUP)
        await reloaded(1)
        assert await logs_in(server, "bob", "pw-b")
        # A broken file: nothing changes, and the log says why.
        acl.write_text("[[allow]]\nprincipals = 3\n")
        server.process.send_signal(signal.SIGHUP)
        await reloaded(2)
        assert "coordinator.reload_failed" in log.read_text()
        assert await logs_in(server, "alice", "pw-a")
        assert await logs_in(server, "bob", "pw-b")
        assert "pw-" not in log.read_text()


async def test_lease_topics_are_looked_for_with_the_credentials(
    server: CoordinatorServer,
) -> None:
    from workgroup.runtime.topics import LeaseTopics

    topics = LeaseTopics(server.bootstrap, client_id="t", security=sasl("SCRAM-SHA-256", "alice"))
    with capture_logs() as logs:
        await topics.ensure(["workgroup-leases.orders.0"])  # the admin client authenticates
    assert [e["event"] for e in logs if e["event"].startswith("lease.")] == [
        "lease.topics_not_needed"
    ]
    assert server.failed_authentications == 0
