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
from workgroup.cli.connection import connect, coordinator_options


@click.command("delete")
@click.argument("group")
@coordinator_options()
def command(
    group: str,
    bootstrap: str,
    config_file: Path | None,
    timeout_s: float,
    log_level: str,
    log_format: str,
) -> None:
    """Delete GROUP (it must have no members) with its tokens and checkpoints."""
    security = connect(bootstrap, config_file, log_level, log_format)
    asyncio.run(delete_group(bootstrap, group, security=security, timeout_s=timeout_s))
    click.echo(f"deleted group {group!r} and its committed tokens and checkpoints")
