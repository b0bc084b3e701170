"""Every command names its timeouts the same way: ``--request-timeout-s`` per
request, ``--wait-timeout-s`` for how long ``--wait`` waits; the older spellings
``--timeout-s`` and ``--timeout`` still work, hidden from the help."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from workgroup.cli import main
from workgroup.cli.options import option_with_alias


@click.command()
@option_with_alias(
    "--wait-timeout-s", "--timeout", "wait_timeout_s", default=300.0, help_text="Wait."
)
def probe(wait_timeout_s: float) -> None:
    click.echo(repr(wait_timeout_s))


@pytest.mark.parametrize(
    ("args", "value"),
    [
        ([], 300.0),
        (["--wait-timeout-s", "5"], 5.0),
        (["--timeout", "7"], 7.0),
        (["--timeout", "7", "--wait-timeout-s", "5"], 5.0),
        (["--wait-timeout-s", "5", "--timeout", "7"], 7.0),
    ],
)
def test_the_new_spelling_and_the_old_one_fill_the_same_value(
    args: list[str], value: float
) -> None:
    result = CliRunner().invoke(probe, args)
    assert result.exit_code == 0, result.output
    assert result.output == f"{value!r}\n"


def test_a_bad_value_of_the_old_spelling_is_refused() -> None:
    result = CliRunner().invoke(probe, ["--timeout", "soon"])
    assert result.exit_code == 2
    assert "'soon' is not a valid float" in result.output


@pytest.mark.parametrize(
    "command", ["describe", "list", "delete", "reset", "drain", "undrain", "whois"]
)
def test_every_command_shows_only_the_new_spellings(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "--request-timeout-s" in result.output
    assert "--timeout-s" not in result.output
    assert "--timeout " not in result.output
    if command in ("drain", "undrain"):
        assert "--wait-timeout-s" in result.output
        assert "[default: 300]" in result.output
