"""``workgroup reset GROUP --key KEY [--kind K] [--to VALUE]``: set or clear one checkpoint.

The resource's token is kept (its next holder takes the next one).  Refused while
the group has members, unless ``--force`` (for members it still lists but that
are gone; a coordinator still refuses a commit from outside a group that has
members).  A key that looks like an integer is the int key (``--str-key`` for
the string).  A slot is named by the group and the key alone (the runtime runs
one kind per group): ``--kind``, when given, is checked against the kinds the
group's members declare (or, without members, its ``APP.KIND`` name).  A key
that has no slot is refused unless ``--create``.

In a keyspace's group (``@app.keyspace``) ``--key`` is a slice id, and
``--slice-of KEY`` names the slice holding a key of the keyspace (as ``whois``
finds it); either resets the slice's slot in the keyspace's pool, found through
the newest map the members carry or the group's slots keep.

Exit status: 0 reset; 3 the group has members; 1 the coordinator cannot be
reached; 2 a bad value (too long a checkpoint, an empty one, a kind the group
does not serve, a key without a slot, a keyspace the group does not have, a
slice not in its map).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import click

from workgroup.admin import reset_checkpoint
from workgroup.cli.connection import connect, coordinator_options
from workgroup.runtime.errors import CheckpointError
from workgroup.runtime.slots import check_value
from workgroup.types import Key

_INT = re.compile(r"-?[0-9]+")


def parse_key(text: str, *, as_str: bool = False) -> Key:
    """``text`` as a resource key: an int if it is one (unless ``as_str``)."""
    return int(text) if not as_str and _INT.fullmatch(text) else text


@click.command("reset")
@click.argument("group")
@click.option(
    "--kind",
    default=None,
    help="The resource's kind (as the daemons name it): checked against the group's kinds.",
)
@click.option(
    "--key", "key_text", default=None, help="The resource's key (a keyspace's: a slice id)."
)
@click.option(
    "--slice-of",
    "slice_of_text",
    default=None,
    help="A key of the keyspace KIND: reset the slice that holds it.",
)
@click.option(
    "--str-key", is_flag=True, help="Take a numeric KEY (or --slice-of) as a string, not an int."
)
@click.option("--to", "value", default=None, help="The new checkpoint (default: clear it).")
@click.option("--force", is_flag=True, help="Skip the check that the group has no members.")
@click.option("--create", is_flag=True, help="Make the key's slot if no holder ever took it.")
@coordinator_options()
def command(
    group: str,
    kind: str | None,
    key_text: str | None,
    slice_of_text: str | None,
    str_key: bool,
    value: str | None,
    force: bool,
    create: bool,
    bootstrap: str,
    config_file: Path | None,
    timeout_s: float,
    log_level: str,
    log_format: str,
) -> None:
    """Set (--to VALUE) or clear the checkpoint of one resource of GROUP."""
    if (key_text is None) == (slice_of_text is None):
        raise click.UsageError("name the resource with one of --key and --slice-of")
    security = connect(bootstrap, config_file, log_level, log_format)
    key = None if key_text is None else parse_key(key_text, as_str=str_key)
    slice_of = None if slice_of_text is None else parse_key(slice_of_text, as_str=str_key)
    if value is not None:
        try:
            check_value(value, key)
        except CheckpointError as exc:
            raise click.BadParameter(str(exc), param_hint="--to") from None
    was = asyncio.run(
        reset_checkpoint(
            bootstrap,
            group,
            key,
            value,
            kind=kind,
            force=force,
            create=create,
            slice_of=slice_of,
            security=security,
            timeout_s=timeout_s,
        )
    )
    now = "cleared" if value is None else f"set to {value!r}"
    key = was.key
    resource = f"{kind}/{key!r}" if kind else repr(key)
    if slice_of is not None:
        resource += f" (the slice holding {slice_of!r})"
    click.echo(
        f"{resource} in group {group!r}: checkpoint {now} (was {was.checkpoint!r}, "
        f"token {was.token} kept: its next holder takes {was.token + 1})"
    )
