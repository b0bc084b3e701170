"""``workgroup list``: the groups a coordinator (or every bootstrap broker) knows.

``--json`` prints one JSON document, a list of ``{"group", "protocol_type",
"state"}`` (as ``describe --json`` prints one document).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
from rich.table import Table

from workgroup.admin import list_groups
from workgroup.cli.connection import connect, coordinator_options
from workgroup.cli.options import console


@click.command("list")
@coordinator_options()
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document (a list) instead of a table."
)
def command(
    bootstrap: str,
    config_file: Path | None,
    as_json: bool,
    timeout_s: float,
    log_level: str,
    log_format: str,
) -> None:
    """List the groups: id, protocol type and state."""
    security = connect(bootstrap, config_file, log_level, log_format)
    groups = asyncio.run(list_groups(bootstrap, security=security, timeout_s=timeout_s))
    if as_json:
        click.echo(json.dumps([group.as_json() for group in groups]))
        return
    if not groups:
        click.echo(f"no groups at {bootstrap}")
        return
    table = Table("group", "protocol type", "state")
    for group in groups:
        table.add_row(group.group, group.protocol_type or "-", group.state or "-")
    console().print(table)
