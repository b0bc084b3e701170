"""``workgroup coordinator`` as a process: its listening line, signals, bad configuration."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import CoordinatorProcess, spawn_coordinator, start_coordinator

from workgroup.cli import main
from workgroup.cli.coordinator import parse_listen
from workgroup.coordinator.config import DEFAULT_INITIAL_REBALANCE_DELAY_MS
from workgroup.errors import ConfigError


def test_listening_line_names_the_real_port(coordinator_process: CoordinatorProcess) -> None:
    assert coordinator_process.host == "127.0.0.1"
    assert coordinator_process.port > 0
    with socket.create_connection((coordinator_process.host, coordinator_process.port), 5):
        pass


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_cleanly(signum: int, tmp_path: Path) -> None:
    with start_coordinator(data_dir=tmp_path) as coordinator:
        coordinator.process.send_signal(signum)
        assert coordinator.process.wait(10) == 0
        log = coordinator.log()
        assert "coordinator.stopped" in log
        assert "Traceback" not in log


def run_failing(*args: str, listen: str = "127.0.0.1:0") -> tuple[int, str]:
    process = spawn_coordinator(*args, listen=listen)
    try:
        stdout, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert stdout == b""  # never claimed to be listening
    return process.returncode, stderr.decode()


@pytest.mark.parametrize(
    ("args", "listen", "message"),
    [
        ((), "no-port", "--listen must be HOST:PORT"),
        ((), "127.0.0.1:99999", "port must be 0-65535"),
        ((), ":9092", "needs a host"),
        (("--min-session-timeout-ms", "0"), "127.0.0.1:0", "session timeouts"),
        (
            ("--min-session-timeout-ms", "7000", "--max-session-timeout-ms", "6000"),
            "127.0.0.1:0",
            "session timeouts",
        ),
        (("--group-max-size", "0"), "127.0.0.1:0", "group max size"),
        (("--max-request-bytes", "10"), "127.0.0.1:0", "max request bytes"),
        (("--initial-rebalance-delay-ms", "-1"), "127.0.0.1:0", "initial rebalance delay"),
        (("--data-dir", "/dev/null/data"), "127.0.0.1:0", "/dev/null is not a directory"),
    ],
)
def test_bad_configuration_exits_2(args: tuple[str, ...], listen: str, message: str) -> None:
    code, stderr = run_failing(*args, listen=listen)
    assert code == 2
    assert message in stderr
    assert "Traceback" not in stderr


def test_address_in_use_exits_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, stderr = run_failing(listen=f"127.0.0.1:{port}")
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in stderr


def test_data_dir_used_by_another_coordinator_exits_2(tmp_path: Path) -> None:
    with start_coordinator(data_dir=tmp_path):
        code, stderr = run_failing("--data-dir", str(tmp_path))
    assert code == 2
    assert "in use by another coordinator" in stderr


def test_unreadable_data_dir_exits_2(tmp_path: Path) -> None:
    (tmp_path / "coordinator.sqlite3").write_bytes(b"garbage" * 1000)
    code, stderr = run_failing("--data-dir", str(tmp_path))
    assert code == 2
    assert "cannot open the database" in stderr


def test_help_documents_the_defaults() -> None:
    result = CliRunner().invoke(main, ["coordinator", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert f"[default: {DEFAULT_INITIAL_REBALANCE_DELAY_MS}]" in text
    assert "Kafka uses 3000" in text
    for option in (
        "--listen",
        "--data-dir",
        "--min-session-timeout-ms",
        "--max-session-timeout-ms",
        "--group-max-size",
        "--max-request-bytes",
        "--log-level",
        "--log-format",
    ):
        assert option in text
    assert "[default: 6000]" in text
    assert "[default: 1800000]" in text
    assert "no practical limit. [default: 2147483647]" in text
    assert "[default: 104857600]" in text
    assert "[default: 127.0.0.1:9092]" in text
    assert "[default: empty-topics]" in text
    assert "[default: info]" in text


def test_console_script_and_module_agree() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "workgroup", "coordinator", "--help"],
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout.decode()
    assert re.search(r"Usage: .* coordinator \[OPTIONS\]", out)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:9092", ("::1", 9092)),
        ("0.0.0.0:1", ("0.0.0.0", 1)),
    ],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["", "9092", "host:", "host:port", "host:-1", "[::1]"])
def test_parse_listen_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_listen(text)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_ipv6_listen_address() -> None:
    with start_coordinator(listen="[::1]:0") as coordinator:
        assert coordinator.host == "::1"
        with socket.create_connection(("::1", coordinator.port), 5):
            pass
