"""``workgroup member`` as a process: event lines, clean close, static members, fatal errors."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from members import (
    Members,
    embedded_coordinator,
    resources_of,
    shards,
    stable_events,
    wait_converged,
)

from workgroup.cli import main
from workgroup.cli.member import build_protocols, parse_protocol, parse_resources
from workgroup.errors import ConfigError
from workgroup.testing.ownership import check_ownership

FIELDS = {
    "event",
    "member_id",
    "instance_id",
    "generation",
    "protocol",
    "metadata_version",
    "resources",
    "assignment",
    "leader",
    "t",
}
SESSION_MS = 3000


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with embedded_coordinator() as address:
        yield address


def group_name(request: pytest.FixtureRequest) -> str:
    return re.sub(r"\W", "-", request.node.name)


@pytest.fixture
def members(bootstrap: str, request: pytest.FixtureRequest) -> Iterator[Members]:
    with Members(
        bootstrap, group_name(request), resources=("shard=12",), session_timeout_ms=SESSION_MS
    ) as running:
        yield running


def test_two_members_share_then_one_leaves(members: Members) -> None:
    a = members.start("a")
    wait_converged([a], shards(12), 20)
    b = members.start("b")
    converged = wait_converged([a, b], shards(12), 20)
    assert {len(e["assignment"]) for e in converged.values()} == {6}
    assert {e["protocol"] for e in converged.values()} == {"cooperative-sticky.v1"}
    assert sorted(e["leader"] for e in converged.values()) == [False, True]
    for event in a.snapshot() + b.snapshot():
        assert set(event) == FIELDS
        assert isinstance(event["t"], float)
    # Cooperative: a kept its six resources throughout and only revoked the others.
    a_events = a.snapshot()
    assert [e["event"] for e in a_events if e["event"] != "stable"] == ["assigned", "revoked"]
    assert resources_of(a_events[-1]) <= resources_of(a_events[0])

    left_at = time.time()
    assert b.terminate() == 0
    b_events = b.snapshot()
    assert [e["event"] for e in b_events[-2:]] == ["revoked", "closed"]
    assert b_events[-1]["assignment"] == []
    wait_converged([a], shards(12), 10)
    # A dynamic member leaves the group: no wait for its session to expire.
    takeover = a.last_stable()
    assert takeover is not None
    assert takeover["t"] - left_at < SESSION_MS / 1000
    check_ownership(members.logs(), shards(12)).raise_for_violations()


def test_static_member_keeps_its_place_when_closed(members: Members) -> None:
    a = members.start("a")
    b = members.start("b", instance_id="b-1")
    wait_converged([a, b], shards(12), 20)
    generation = a.last_stable()["generation"]  # type: ignore[index]
    closed_at = time.time()
    assert b.terminate() == 0
    assert b.snapshot()[-1]["event"] == "closed"
    assert b.snapshot()[-1]["instance_id"] == "b-1"
    # No LeaveGroup: the group only rebalances once b's session has expired.
    wait_converged([a], shards(12), 15)
    takeover = a.last_stable()
    assert takeover is not None
    assert takeover["generation"] > generation
    assert takeover["t"] - closed_at >= SESSION_MS / 1000 * 0.8
    check_ownership(members.logs(), shards(12)).raise_for_violations()


def test_restarted_static_member_gets_its_resources_back(members: Members) -> None:
    # The restart must come within b's session, whatever the machine's load: a new
    # Python process can take seconds to start on a loaded 2-core machine.
    restart_within_ms = 15_000
    a = members.start("a")
    b = members.start("b", instance_id="b-1", session_timeout_ms=restart_within_ms)
    converged = wait_converged([a, b], shards(12), 20)
    before = resources_of(converged["b"])
    b.kill()
    b2 = members.start("b", instance_id="b-1", session_timeout_ms=restart_within_ms)
    converged = wait_converged([a, b2], shards(12), 20)
    assert time.time() - b.killed_at < restart_within_ms / 1000  # it came back in time
    assert resources_of(converged["b#2"]) == before
    check_ownership(members.logs(), shards(12)).raise_for_violations()


def test_text_events(members: Members) -> None:
    a = members.start("a", "--events", "text")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not a.snapshot():
        time.sleep(0.05)
    a.terminate()
    lines = [e["line"] for e in a.snapshot()]  # text lines do not parse as JSON
    assert any(
        re.match(r"\d\d:\d\d:\d\d\.\d{3} stable +gen=\d+ protocol=cooperative-sticky\.v1 ", line)
        for line in lines
    ), lines
    assert lines[-1].split()[1] == "closed"


def test_invalid_session_timeout_is_fatal(members: Members) -> None:
    a = members.start("a", session_timeout_ms=500, heartbeat_interval_ms=100)
    assert a.process.wait(20) == 1
    a.terminate()
    events = a.snapshot()
    assert [e["event"] for e in events] == ["fatal", "closed"]
    assert events[0]["code"] == 26
    assert "INVALID_SESSION_TIMEOUT" in events[0]["error"]
    assert events[0]["error_type"] == "InvalidSessionTimeoutError"
    assert "error:" in a.stderr_tail()


def test_no_common_protocol_is_fatal(members: Members) -> None:
    a = members.start("a", "--protocol", "range:1")
    wait_converged([a], shards(12), 20)
    b = members.start("b", "--protocol", "round-robin:1")
    assert b.process.wait(20) == 1
    b.terminate()
    events = b.snapshot()
    assert [e["event"] for e in events] == ["fatal", "closed"]
    assert events[0]["code"] == 23
    # The group carries on undisturbed.
    assert a.alive
    assert len(stable_events(a.snapshot())) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--resources", "shard"], "--resources must be KIND=N"),
        (["--resources", "shard=1", "--resources", "shard=2"], "names kind 'shard' twice"),
        (["--resources", "shard=a,a"], "repeats a key"),
        (["--protocol", "range:x"], "--protocol must be NAME:VERSION"),
        (["--assignor", "no-such-assignor"], "no-such-assignor"),
        (["--rebalance", "cooperative", "--assignor", "range"], "not sticky enough"),
        (["--heartbeat-interval-ms", "5000", "--session-timeout-ms", "3000"], "heartbeat"),
        (["--session-margin-ms", "4001"], "must leave two heartbeat intervals"),
        (["--request-timeout-ms", "0"], "request timeout must be > 0"),
    ],
)
def test_bad_options_exit_2_without_events(args: list[str], message: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "workgroup",
            "member",
            "--bootstrap",
            "127.0.0.1:1",
            "--group",
            "g",
            *args,
        ],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == b""
    assert message in result.stderr.decode()


def test_metadata_version_out_of_range() -> None:
    result = CliRunner().invoke(
        main, ["member", "--bootstrap", "x:1", "--group", "g", "--metadata-version", "9"]
    )
    assert result.exit_code == 2
    assert "--metadata-version" in result.output


# --- option parsing ---------------------------------------------------------------


def test_parse_resources() -> None:
    assert parse_resources(["shard=3", "task=a,b"]) == {"shard": [0, 1, 2], "task": ["a", "b"]}
    assert parse_resources([]) == {}
    with pytest.raises(ConfigError):
        parse_resources(["=3"])


def test_parse_protocol() -> None:
    assert parse_protocol("range:0") == parse_protocol("range:0")
    spec = parse_protocol("my:proto:2")
    assert (spec.name, spec.version) == ("my:proto", 2)
    assert parse_protocol("sticky").version == 1
    with pytest.raises(ConfigError):
        parse_protocol(":1")


def test_build_protocols() -> None:
    specs = [parse_protocol(p) for p in ("cooperative-sticky:2", "range:2", "custom:0")]
    protocols = build_protocols(specs, "consistent-hash", None, 1)
    assert [p.wire_name for p in protocols] == ["cooperative-sticky.v2", "range.v2", "custom.v0"]
    assert [p.assignor.name for p in protocols] == [
        "cooperative-sticky",
        "range",
        "consistent-hash",
    ]
    assert [p.mode for p in protocols] == ["cooperative", "eager", "cooperative"]
    assert {p.codec.latest_version for p in protocols} == {1}
    eager = build_protocols(specs, "sticky", "eager", 2)
    assert {p.mode for p in eager} == {"eager"}
    with pytest.raises(ConfigError, match="not sticky enough"):
        build_protocols(specs, "sticky", "cooperative", 2)
    (default,) = build_protocols([], "round-robin", None, 2)
    assert default.wire_name == "round-robin.v1"


def test_member_waits_for_a_coordinator_that_starts_later() -> None:
    from conftest import start_coordinator
    from members import MIN_SESSION_TIMEOUT_MS, free_port

    port = free_port()
    address = f"127.0.0.1:{port}"
    with Members(address, "late-coordinator", resources=("shard=4",)) as members:
        a = members.start("a")
        time.sleep(2.0)
        assert a.alive
        assert a.snapshot() == []
        with start_coordinator(
            "--initial-rebalance-delay-ms",
            "0",
            "--min-session-timeout-ms",
            str(MIN_SESSION_TIMEOUT_MS),
            listen=address,
        ):
            wait_converged([a], shards(4), 20)
            assert a.terminate() == 0


def test_sigint_closes_cleanly_too(members: Members) -> None:
    a = members.start("a")
    wait_converged([a], shards(12), 20)
    a.process.send_signal(signal.SIGINT)
    assert a.process.wait(15) == 0
    a.terminate()
    assert [e["event"] for e in a.snapshot()[-2:]] == ["revoked", "closed"]
    assert "Traceback" not in a.stderr_tail(200)


# --- addresses, the connect deadline, fatal errors after stable -----------------------


def run_member(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "workgroup", "member", "--group", "g", *args],
        capture_output=True,
        timeout=timeout,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "address", ["", ":9092", "host:1:2", "127.0.0.1:99999", "127.0.0.1:abc", "[::1]9092"]
)
def test_malformed_bootstrap_exits_2_with_one_line(address: str) -> None:
    result = run_member("--bootstrap", address)
    assert result.returncode == 2, result.stderr
    assert result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    assert "bootstrap" in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("address", ["127.0.0.1:1", "no-such-host.invalid:9092"])
def test_connect_timeout_exits_1(address: str) -> None:
    started = time.monotonic()
    result = run_member("--bootstrap", address, "--connect-timeout-ms", "1000")
    assert time.monotonic() - started < 15
    assert result.returncode == 1, result.stderr
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr
    assert "member.coordinator_unavailable" in stderr  # attempts 1, 2, 4...: a warning
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    assert "no coordinator reached within 1000 ms" in errors[0]
    assert stderr.count("member.fatal") == 1
    events = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert [e["event"] for e in events] == ["fatal", "closed"]
    assert events[0]["error_type"] == "CoordinatorUnavailableError"


@pytest.mark.slow
def test_fenced_after_stable_exits_1_and_says_so_once(members: Members) -> None:
    a = members.start("a", instance_id="same")
    wait_converged([a], shards(12), 20)
    b = members.start("b", instance_id="same")
    assert a.process.wait(20) == 1
    wait_converged([b], shards(12), 20)
    b.terminate()
    events = a.snapshot()
    assert [e["event"] for e in events[-2:]] == ["fatal", "closed"]
    assert "lost" in [e["event"] for e in events]  # on_lost ran before the member closed
    assert events[-2]["error_type"] == "FencedInstanceError"
    stderr = a.stderr_tail(200)
    assert "Traceback" not in stderr
    assert stderr.count("member.fatal") == 1
    assert "member.failed" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    assert "FENCED_INSTANCE_ID" in errors[0]
