"""``workgroup delete GROUP``: delete a group and its lease slots (tokens, checkpoints).

A coordinator deletes only a group without members (DeleteGroups).  Exit status:
0 deleted; 3 the group has members; 1 no such group or the coordinator cannot be
reached; 2 a malformed address or configuration.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from workgroup.admin import delete_group
from workgroup.cli.connection import config_option, security_from
from workgroup.cli.options import configure_logging, log_options
from workgroup.member.driver import parse_bootstrap

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


@click.command("delete")
@click.argument("group")
@click.option("--bootstrap", default=DEFAULT_BOOTSTRAP, show_default=True, help="HOST:PORT[,...]")
@config_option
@click.option(
    "--timeout-s", type=float, default=10.0, show_default=True, help="Give up after this long."
)
@log_options(level="warning")
def command(
    group: str,
    bootstrap: str,
    config_file: Path | None,
    timeout_s: float,
    log_level: str,
    log_format: str,
) -> None:
    """Delete GROUP (it must have no members) with its tokens and checkpoints."""
    configure_logging(log_level, log_format)
    parse_bootstrap(bootstrap)
    security = security_from(config_file)
    asyncio.run(delete_group(bootstrap, group, security=security, timeout_s=timeout_s))
    click.echo(f"deleted group {group!r} and its committed tokens and checkpoints")
