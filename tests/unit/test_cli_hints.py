"""The inspection commands say what to try when nothing listens at --bootstrap."""

from __future__ import annotations

import socket

from click.testing import CliRunner

from workgroup.cli import main


def test_a_command_with_no_coordinator_there_says_how_to_start_one() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    result = CliRunner().invoke(
        main, ["describe", "g", "--bootstrap", f"127.0.0.1:{closed_port}", "--timeout-s", "2"]
    )
    assert result.exit_code != 0
    assert f"127.0.0.1:{closed_port}" in result.output
    assert "hint: is a coordinator running at that address?" in result.output
    assert "workgroup coordinator" in result.output
