"""Every command says the same thing, with the same hint and exit status, when
nothing listens at --bootstrap."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workgroup.cli import main
from workgroup.member.errors import NothingAnswersError

HINT = (
    "hint: is a coordinator running at that address? Start one with 'workgroup coordinator' "
    "(it listens on 127.0.0.1:9092), or point --bootstrap at your Kafka cluster."
)

#: Every command that asks a coordinator once and exits.
COMMANDS = [
    ["list"],
    ["describe", "g"],
    ["top", "g", "--once"],
    ["drain", "g", "--instance-id", "i"],
    ["undrain", "g", "--instance-id", "i"],
    ["reset", "g", "--kind", "k", "--key", "x"],
    ["delete", "g"],
    ["whois", "g", "k", "x"],
]


def closed_port() -> int:
    """A port nothing listens on: bound once to get a free one, then closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def bootstrap_at(port: int) -> list[str]:
    return ["--bootstrap", f"127.0.0.1:{port}", "--log-format", "json"]


def said_when_nothing_answers(port: int) -> list[str]:
    return [f"error: nothing answers at 127.0.0.1:{port}: Connection refused", HINT]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: args[0] + " ".join(args[2:3]))
def test_every_command_says_the_same_when_nothing_listens(args: list[str]) -> None:
    port = closed_port()
    result = CliRunner().invoke(main, [*args, "--bootstrap", f"127.0.0.1:{port}"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == said_when_nothing_answers(port)


def test_run_says_the_same_when_nothing_listens(tmp_path: Path) -> None:
    (tmp_path / "closedapp.py").write_text(
        "import workgroup\n"
        "app = workgroup.App('closed')\n"
        "@app.resources('shard')\n"
        "def shards() -> list[str]:\n"
        "    return ['a']\n"
        "@app.worker('shard')\n"
        "def work(lease: workgroup.Lease) -> None:\n"
        "    pass\n"
    )
    port = closed_port()
    done = subprocess.run(
        [sys.executable, "-m", "workgroup", "run", "closedapp:app", *bootstrap_at(port)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-2:] == said_when_nothing_answers(port)
    assert not (tmp_path / ".hypothesis").exists()


def test_the_message_names_each_address_with_its_reason() -> None:
    one = NothingAnswersError([("a:1", "Connection refused")])
    assert str(one) == "nothing answers at a:1: Connection refused"
    two = NothingAnswersError([("a:1", "Connection refused"), ("b:2", "timed out")], waited_ms=500)
    assert str(two) == (
        "nothing answers at a:1, b:2 (a:1: Connection refused; b:2: timed out) (waited 500 ms)"
    )
    assert two.retriable
    assert two.exit_code == 1
    assert two.hint == HINT.removeprefix("hint: ")
