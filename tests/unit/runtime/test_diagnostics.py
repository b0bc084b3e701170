"""What the daemon and the CLI tell a user: a misspelt variable, complete help,
one log-format option, an empty resource list, a long outage, a closed pipe."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from rich.console import Console

from tests.unit.runtime.test_slots import CatalogSource, make_runner
from workgroup.cli import main
from workgroup.cli import options as cli_options
from workgroup.cli.top import Watch
from workgroup.member.errors import CoordinatorUnavailableError
from workgroup.runtime.app import Settings
from workgroup.runtime.config import resolve, unknown_variables
from workgroup.runtime.watch import (
    REPORT_EVERY_MS,
    Unreachable,
    closed_output,
    process_identity,
    release_identity,
    wait_for_bootstrap,
    watch,
)
from workgroup.testing import FakeClock, capture_logs, free_port

ROOT = Path(__file__).resolve().parents[3]


# --- a misspelt WORKGROUP_* variable -------------------------------------------------


def test_a_misspelt_variable_is_named_with_the_closest_valid_one() -> None:
    environ = {
        "WORKGROUP_INSTANCEID": "x",
        "WORKGROUP_BOOTSTRAP": "127.0.0.1:9092",  # valid: not reported
        "WORKGROUP_CONFIG": "",  # read elsewhere: not reported
        "WORKGROUP_SPARK_MASTER": "local[2]",  # a plugin's: not reported
        "WORKGROUP_ZZZZ": "1",
        "PATH": "/bin",
    }
    assert unknown_variables(environ) == [
        ("WORKGROUP_INSTANCEID", "WORKGROUP_INSTANCE_ID"),
        ("WORKGROUP_ZZZZ", None),
    ]
    with capture_logs() as logs:
        settings = resolve(Settings(), flags={}, environ=environ, config_file=None)
    assert settings.instance_id is None  # ignored, but not silently:
    warnings = [e for e in logs if e["event"] == "config.unknown_variable"]
    assert [(e["log_level"], e["variable"], e["hint"]) for e in warnings] == [
        ("warning", "WORKGROUP_INSTANCEID", "did you mean WORKGROUP_INSTANCE_ID?"),
        ("warning", "WORKGROUP_ZZZZ", "not a workgroup setting; ignored"),
    ]


def test_the_daemon_warns_about_a_misspelt_variable_on_stderr() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKGROUP_")}
    done = subprocess.run(
        [sys.executable, "-m", "workgroup", "run", "tests.e2e.apps.diag_app:app",
         "--bootstrap", f"127.0.0.1:{free_port()}", "--log-format", "console"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**env, "WORKGROUP_INSTANCEID": "x"},
    )  # fmt: skip
    assert done.returncode == 1
    (line,) = [x for x in done.stderr.splitlines() if "config.unknown_variable" in x]
    assert "variable=WORKGROUP_INSTANCEID" in line
    assert "did you mean WORKGROUP_INSTANCE_ID?" in line


# --- help, -h and the log-format option -----------------------------------------------


def commands() -> list[str]:
    return sorted(main.commands)


@pytest.mark.parametrize("name", commands())
def test_every_command_takes_h_and_documents_every_option(name: str) -> None:
    result = CliRunner().invoke(main, [name, "-h"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: ")
    command = main.commands[name]
    undocumented = [
        p.name
        for p in command.params
        if isinstance(p, click.Option) and not p.hidden and not p.help and p.name != "help"
    ]
    assert undocumented == []


def test_run_help_names_the_default_bootstrap_and_the_auto_started_coordinator() -> None:
    result = CliRunner().invoke(main, ["run", "--help"], terminal_width=200)
    bootstrap = next(x for x in result.output.splitlines() if "--bootstrap" in x)
    assert "Default: 127.0.0.1:9092" in bootstrap
    assert "a local coordinator is started if nothing answers" in bootstrap
    for option in ("--connect-timeout-ms", "--unreachable-timeout-ms", "--log-format"):
        assert option in result.output


@pytest.mark.parametrize("name", ["run", "member", "coordinator", "list", "describe", "top"])
def test_one_log_format_option_on_every_command_that_logs(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"], terminal_width=200)
    assert "--log-format [auto|console|json]" in result.output
    assert "--log-json" not in result.output  # the hidden older spelling


def test_log_json_is_still_accepted_as_log_format_json(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, bool]] = []
    monkeypatch.setattr(
        cli_options.wlog, "configure", lambda level, json: seen.append((level, json))
    )

    @click.command()
    @cli_options.log_options(level="info", log_format="console")
    def tool(log_level: str, log_format: str) -> None:
        cli_options.configure_logging(log_level, log_format)

    assert CliRunner().invoke(tool, ["--log-json"]).exit_code == 0
    assert CliRunner().invoke(tool, []).exit_code == 0
    assert CliRunner().invoke(tool, ["--log-format", "json", "--log-level", "debug"]).exit_code == 0
    assert seen == [("info", True), ("info", False), ("debug", True)]


# --- top: no empty tables --------------------------------------------------------------


def rendered(watch: Watch, **kwargs: Any) -> str:
    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(watch.view(**kwargs))
    console.file.close()
    return console.export_text()


def test_top_says_no_rebalances_yet_instead_of_an_empty_table() -> None:
    watch = Watch()
    assert "no rebalances yet" in rendered(watch)
    assert "recent rebalances" not in rendered(watch)
    assert rendered(watch, history=False).strip() == ""


# --- an empty resource list ------------------------------------------------------------


async def test_an_empty_resource_list_is_said_once_per_change_to_empty() -> None:
    source = CatalogSource([])
    runner = await make_runner(source)
    with capture_logs() as logs:
        for _ in range(3):
            await runner._read_catalog()  # polls: one line, not three
        source.keys = ["a"]
        await runner._read_catalog()
        source.keys = []
        await runner._read_catalog()
        await runner._read_catalog()
    said = [e for e in logs if e["event"] == "group.no_resources"]
    assert len(said) == 2
    assert said[0]["log_level"] == "info"
    assert said[0]["why"] == (
        "the resource function returned an empty list: the group has nothing to hand out"
    )


# --- a long outage: one line per 30 s, then give up ------------------------------------


def test_an_outage_is_reported_every_30_s_not_per_attempt() -> None:
    tracker = Unreachable(give_up_after_ms=None)
    verdicts = [tracker.observe(now, ["g"]) for now in range(0, 95_000, 1_000)]
    reported = [i * 1_000 for i, v in enumerate(verdicts) if v == "report"]
    assert reported == [REPORT_EVERY_MS, 2 * REPORT_EVERY_MS, 3 * REPORT_EVERY_MS]
    assert tracker.observe(95_000, []) is None  # found again: the count restarts
    assert tracker.observe(96_000, ["g"]) is None
    assert tracker.waited_ms(97_000) == 1_000


def test_an_outage_longer_than_the_unreachable_timeout_gives_up() -> None:
    tracker = Unreachable(give_up_after_ms=5_000)
    assert [tracker.observe(now, ["g"]) for now in (0, 4_999)] == [None, None]
    assert tracker.observe(5_000, ["g"]) == "give_up"


async def test_the_daemon_reports_an_outage_then_gives_up_on_its_clock() -> None:
    """Two minutes of outage on the fake clock, in no time."""
    clock = FakeClock(autojump_threshold_s=0)
    looking = ["billing.shards"]
    with capture_logs() as logs:
        error = await watch(
            lambda: looking, "127.0.0.1:1", 120_000, outputs=lambda: None, clock=clock
        )
    assert "no coordinator reachable for 120000 ms" in str(error)
    reports = [e["waited_ms"] for e in logs if e["event"] == "app.coordinator_unreachable"]
    assert reports == [30_000, 60_000, 90_000]
    # The groups are looked at every second (POLL_S times GROUPS_EVERY).
    assert 121.0 <= clock.monotonic() < 122.0


async def test_waiting_for_the_bootstrap_gives_up_after_the_connect_timeout_on_its_clock() -> None:
    clock = FakeClock(autojump_threshold_s=0)
    port = free_port()  # nothing listens there
    with (
        capture_logs() as logs,
        pytest.raises(CoordinatorUnavailableError, match=r"\(waited 60000 ms\)"),
    ):
        await wait_for_bootstrap(f"127.0.0.1:{port}", 60_000, probe_timeout_s=0.1, clock=clock)
    assert clock.monotonic() == 60.0
    reports = [e["waited_ms"] for e in logs if e["event"] == "app.coordinator_unreachable"]
    assert reports == [0, 30_000]


# --- a closed pipe ---------------------------------------------------------------------


def test_a_pipe_whose_reader_is_gone_is_noticed() -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as stream:
        assert closed_output([("stdout", stream)]) is None
        os.close(read_end)
        assert closed_output([("stdout", stream)]) == "stdout"
        # Files and terminals never count as closed.
        with open(os.devnull, "w") as devnull:
            assert closed_output([("stderr", devnull)]) is None
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())  # let close() succeed


# --- one identity ----------------------------------------------------------------------


def test_a_runner_is_host_pid_or_its_instance_id() -> None:
    base = f"{socket.gethostname()}-{os.getpid()}"
    first = process_identity(None)
    second = process_identity(None)
    try:
        assert (first, second) == (base, f"{base}-2")
        assert process_identity("etl-1") == "etl-1"
    finally:
        for name in (first, second, "etl-1"):
            release_identity(name)
    again = process_identity(None)
    release_identity(again)
    assert again == base
