"""``workgroup describe GROUP``: a group's state, members and what each owns.

``--json`` prints ``{"group", "state", "protocol_type", "protocol",
"generation", "leader", "members": [{"member_id", "instance_id", "client_id",
"client_host", "assignment": {KIND: [KEYS]}}]}`` (see :mod:`workgroup.admin`).
Exit status: 0; 1 when the group does not exist or the coordinator cannot be
reached; 2 for a malformed address.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
from rich.table import Table

from workgroup.admin import GroupDescription, describe_group
from workgroup.cli.connection import config_option, security_from
from workgroup.cli.options import configure_logging, console, log_options
from workgroup.member.driver import parse_bootstrap

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def render(description: GroupDescription) -> Table:
    """The group as a table (one row per member)."""
    generation = "?" if description.generation is None else str(description.generation)
    table = Table(
        title=(
            f"{description.group}: {description.state}, {description.protocol_type or '-'}"
            f"/{description.protocol or '-'}, generation {generation}"
        ),
        title_justify="left",
    )
    for column in ("member", "instance", "client", "host", "owns"):
        table.add_column(column)
    for m in description.members:
        if m.assignment is None:
            owns = f"[red]{m.assignment_error}[/red]"
        else:
            owns = (
                "; ".join(
                    f"{kind}: {', '.join(map(str, keys))}" for kind, keys in m.assignment.items()
                )
                or "-"
            )
        table.add_row(m.member_id, m.instance_id or "-", m.client_id, m.client_host, owns)
    return table


@click.command("describe")
@click.argument("group")
@click.option("--bootstrap", default=DEFAULT_BOOTSTRAP, show_default=True, help="HOST:PORT[,...]")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@click.option(
    "--timeout-s", type=float, default=10.0, show_default=True, help="Give up after this long."
)
@log_options(level="warning")
def command(
    group: str,
    bootstrap: str,
    config_file: Path | None,
    as_json: bool,
    timeout_s: float,
    log_level: str,
    log_format: str,
) -> None:
    """Describe GROUP: state, protocol, members and their assignments."""
    configure_logging(log_level, log_format)
    parse_bootstrap(bootstrap)
    security = security_from(config_file)
    description = asyncio.run(
        describe_group(bootstrap, group, security=security, timeout_s=timeout_s)
    )
    if as_json:
        click.echo(json.dumps(description.as_json()))
    else:
        console().print(render(description))
