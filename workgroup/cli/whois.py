"""``workgroup whois GROUP KIND KEY``: which member owns a resource, and its endpoint.

Prints the owner's member id, instance id, advertised endpoint (``--advertise``
of ``workgroup run``) and the resource's token; ``--json`` prints one object
(``{"group", "kind", "key", "owner": {...} | null}``).  Exit status: 0 owned;
4 owned by nobody now (a move in progress, or a key nobody is given); 1 the
coordinator cannot be reached; 2 a malformed address.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from workgroup.cli.connection import connect, coordinator_options
from workgroup.cli.reset import parse_key
from workgroup.directory import lookup_owner

#: Exit status when nobody owns the resource.
NOBODY = 4


@click.command("whois")
@click.argument("group")
@click.argument("kind")
@click.argument("key_text", metavar="KEY")
@click.option("--str-key", is_flag=True, help="Take a numeric KEY as a string, not an int.")
@coordinator_options()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(
    group: str,
    kind: str,
    key_text: str,
    str_key: bool,
    bootstrap: str,
    config_file: Path | None,
    as_json: bool,
    timeout_s: float,
    log_level: str,
    log_format: str,
) -> None:
    """Who owns KIND/KEY in GROUP, and where to reach it."""
    security = connect(bootstrap, config_file, log_level, log_format)
    key = parse_key(key_text, as_str=str_key)
    owner = asyncio.run(
        lookup_owner(bootstrap, group, kind, key, security=security, timeout_s=timeout_s)
    )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "group": group,
                    "kind": kind,
                    "key": key,
                    "owner": None if owner is None else owner.as_json(),
                }
            )
        )
    elif owner is None:
        click.echo(f"{kind}/{key!r} in {group}: owned by nobody now")
    else:
        click.echo(
            f"{kind}/{key!r} in {group}: {owner.instance_id or owner.member_id} "
            f"at {owner.endpoint or '(no endpoint advertised)'}, token "
            f"{'?' if owner.token is None else owner.token}, generation {owner.generation}"
        )
    if owner is None:
        sys.exit(NOBODY)
