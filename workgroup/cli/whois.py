"""``workgroup whois GROUP KIND KEY``: which member owns a resource, and its endpoint.

Prints the owner's member id, instance id, advertised endpoint (``--advertise``
of ``workgroup run``) and the resource's token; ``--json`` prints one object
(``{"group", "kind", "key", "owner": {...} | null}``).  For a keyspace's group
(``@app.keyspace``), KIND is the keyspace and KEY any of its keys: the key's
slice (id, hash range), the slice's token and its holder
(:class:`~workgroup.directory.Directory`, rule 4), and under ``--json`` a
``"slice": {"id", "start", "end", "token", "map_owner"}`` (the owner the map
names, even while the slice moves) and the ``"point"`` the key hashes to.
Exit status: 0 owned; 4 owned by nobody now (a move in progress, or a key
nobody is given); 1 the coordinator cannot be reached; 2 a malformed address,
or a keyspace the group does not have.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from workgroup.cli.connection import connect, coordinator_options
from workgroup.cli.reset import parse_key
from workgroup.directory import Directory, Owner
from workgroup.keyspaces.hashing import key_hash
from workgroup.keyspaces.slices import Slice
from workgroup.security import Security
from workgroup.types import Key

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
    owner, piece = asyncio.run(_whois(bootstrap, group, kind, key, security, timeout_s))
    if as_json:
        document = {
            "group": group,
            "kind": kind,
            "key": key,
            "owner": None if owner is None else owner.as_json(),
        }
        if piece is not None:
            document["point"] = key_hash(key)
            document["slice"] = {
                "id": piece.id,
                "start": piece.start,
                "end": piece.end,
                "token": piece.token,
                "map_owner": piece.owner,
            }
        click.echo(json.dumps(document))
    else:
        if piece is not None:
            click.echo(
                f"{kind}/{key!r} in {group}: point {key_hash(key):#018x}, slice {piece.id} "
                f"[{piece.start:#018x}, {piece.end:#018x}), token {piece.token}"
            )
        if owner is None:
            click.echo(f"{kind}/{key!r} in {group}: owned by nobody now")
        else:
            click.echo(
                f"{kind}/{key!r} in {group}: {owner.instance_id or owner.member_id} "
                f"at {owner.endpoint or '(no endpoint advertised)'}, token "
                f"{'?' if owner.token is None else owner.token}, generation {owner.generation}"
            )
    if owner is None:
        sys.exit(NOBODY)


async def _whois(
    bootstrap: str, group: str, kind: str, key: Key, security: Security, timeout_s: float
) -> tuple[Owner | None, Slice | None]:
    """The owner of ``kind``/``key`` and, for a keyspace, the key's slice in the
    newest map (one reading of the group)."""
    directory = Directory(bootstrap, group, security=security, timeout_s=timeout_s)
    try:
        await directory.refresh()
    finally:
        await directory.close()
    owner = directory.owner(kind, key)  # a bad kind or key: a one-line error
    smap = directory.keyspaces().get(kind)
    return owner, None if smap is None else smap.slice_for_key(key)
