"""``workgroup list``: the groups a coordinator (or every bootstrap broker) knows."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from workgroup.admin import list_groups
from workgroup.cli.connection import config_option, security_from
from workgroup.member.driver import parse_bootstrap

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


@click.command("list")
@click.option("--bootstrap", default=DEFAULT_BOOTSTRAP, show_default=True, help="HOST:PORT[,...]")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
@click.option("--timeout-s", type=float, default=10.0, show_default=True)
def command(bootstrap: str, config_file: Path | None, as_json: bool, timeout_s: float) -> None:
    """List the groups: id, protocol type and state."""
    parse_bootstrap(bootstrap)
    security = security_from(config_file)
    groups = asyncio.run(list_groups(bootstrap, security=security, timeout_s=timeout_s))
    if as_json:
        for group in groups:
            click.echo(json.dumps(group.as_json()))
        return
    table = Table("group", "protocol type", "state")
    for group in groups:
        table.add_row(group.group, group.protocol_type or "-", group.state or "-")
    Console().print(table)
