"""``workgroup describe GROUP``: a group's state, members and what each owns.

``--json`` prints ``{"group", "state", "protocol_type", "protocol",
"generation", "leader", "members": [{"member_id", "instance_id", "client_id",
"client_host", "process", "assignment": {KIND: [KEYS]}, "warming": {KIND: [KEYS]},
"ready": {KIND: [KEYS]}, "draining", "leaving", "load"}], "resources": [{"kind", "key",
"owner", "instance_id", "releasing", "token", "checkpoint"}], "keyspaces": {NAME:
{"epoch", "max_token", "slices": [...]}}, "slots_error"}`` (see
:mod:`workgroup.admin`).  ``resources`` joins the assignments with the lease
slots the group committed (its tokens and checkpoints, which outlive its
members) by the client layer's rule (:mod:`workgroup.client.owners`, the same
as the console's and ``whois``'s): one row per resource; ``owner`` is ``null``
for a resource nobody owns now, ``releasing`` names members whose older
assignment still names it mid-hand-over, ``kind`` is ``null`` for a slot whose
key no member is assigned (a slot names only its key).
A member's ``warming`` lists what it warms up for a planned move while another
member still owns it, ``ready`` those of them it reported ready (the next round
cuts them over); ``draining`` and ``leaving`` members take nothing and hand
their resources over.  The table shows them in its ``warming`` and ``status``
columns (a ready warm-up is marked ``✓``).
A keyspace's group (``@app.keyspace``) also shows each keyspace's newest map
(:mod:`workgroup.client.keyspaces`): one row per slice in hash order, with its
hash range and share of the space, its holder (``nobody`` while it moves), its
token (the one that fences its keys) and its load; ``--json`` adds
``"keyspaces": {NAME: {"epoch", "max_token", "slices": [{"id", "start", "end",
"share", "token", "owner", "instance_id", "endpoint", "map_owner", "load"}]}}``.
Exit status: 0; 1 when the group does not exist or the coordinator cannot be
reached; 2 for a malformed address.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from workgroup.admin import (
    GroupDescription,
    GroupNotFoundError,
    MemberDescription,
    read_current_loads,
)
from workgroup.cli.connection import connect, coordinator_options
from workgroup.cli.options import console
from workgroup.client.connection import ClientConnection
from workgroup.client.keyspaces import SliceHolder, newest_maps
from workgroup.client.owners import ResourceOwner
from workgroup.client.reader import GroupReader, GroupSnapshot
from workgroup.errors import WorkgroupError
from workgroup.keyspaces.slices import SliceMap
from workgroup.runtime.loads import current_load
from workgroup.security import Security
from workgroup.types import Key


def render(
    description: GroupDescription,
    loads: Mapping[str, float] | None = None,
    keyspaces: Mapping[str, SliceMap] | None = None,
) -> Table:
    """The group as a table (one row per member); with ``loads`` (the current
    loads, :func:`~workgroup.admin.read_current_loads`) a ``load`` column.
    ``keyspaces``: the group's newest maps (a slice's load is in its pool
    slot); read from the members when not given."""
    generation = "?" if description.generation is None else str(description.generation)
    table = Table(
        title=(
            f"{description.group}: {description.state}, {description.protocol_type or '-'}"
            f"/{description.protocol or '-'}, generation {generation}"
        ),
        title_justify="left",
    )
    planned = any(m.warming or m.status != "member" for m in description.members)
    columns = ["member", "instance", "process", "host", "owns"]
    if loads is not None:
        columns.append("load")
    if planned:
        columns += ["warming", "status"]
    for column in columns:
        table.add_column(column)
    if loads and keyspaces is None:
        keyspaces, _ = newest_maps(description)
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
        row = [m.member_id, m.instance_id or "-", m.process, m.client_host, owns]
        if loads is not None:
            row.append(load_cell(description.group, m, loads, keyspaces))
        if planned:
            row += [warming_cell(m), STATUS_STYLE[m.status].format(m.status)]
        table.add_row(*row)
    return table


def load_cell(
    group: str,
    member: MemberDescription,
    loads: Mapping[str, float],
    keyspaces: Mapping[str, SliceMap] | None = None,
) -> str:
    """The member's load now (:func:`~workgroup.runtime.loads.current_load`), or ``-``."""
    load = current_load(group, member.assignment, member.workgroup_metadata(), loads, keyspaces)
    return "-" if load is None else f"{load:g}"


#: How the ``status`` column shows each :attr:`MemberDescription.status`.
STATUS_STYLE = {
    "member": "-",
    "warming": "[cyan]{}[/cyan]",
    "draining": "[yellow]{}[/yellow]",
    "leaving": "[yellow]{}[/yellow]",
}


def warming_cell(member: MemberDescription) -> str:
    """``kind: key, key ✓`` (``✓``: reported ready, cut over next round), or ``-``."""
    ready = member.ready
    return (
        "; ".join(
            f"{kind}: "
            + ", ".join(f"{key} ✓" if key in ready.get(kind, ()) else str(key) for key in keys)
            for kind, keys in member.warming.items()
        )
        or "-"
    )


#: Longest checkpoint shown in the table (``--json`` has them whole).
CHECKPOINT_CHARS = 40


@dataclass(frozen=True)
class ResourceRow:
    """One resource: who owns it (``None``: nobody) and its lease slot."""

    kind: str | None
    key: Key
    owner: str | None
    instance_id: str | None
    token: int | None
    checkpoint: str | None
    #: Member ids whose older assignment still names it (mid-hand-over).
    releasing: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "owner": self.owner,
            "instance_id": self.instance_id,
            "releasing": list(self.releasing),
            "token": self.token,
            "checkpoint": self.checkpoint,
        }


def resource_rows(resources: list[ResourceOwner]) -> list[ResourceRow]:
    """One row per resource, as :mod:`workgroup.client.owners` joined them."""
    return [
        ResourceRow(
            r.kind,
            r.key,
            None if r.owner is None else r.owner.member_id,
            None if r.owner is None else r.owner.instance_id,
            r.token,
            r.checkpoint,
            tuple(m.member_id for m in r.releasing),
        )
        for r in resources
    ]


def render_resources(rows: list[ResourceRow]) -> Table:
    """The resources as a table: owner, token, checkpoint; unowned ones last."""
    table = Table(
        title="resources (tokens and checkpoints from the lease slots)", title_justify="left"
    )
    for column in ("kind", "key", "owner", "token", "checkpoint"):
        table.add_column(column)
    for r in rows:
        checkpoint = r.checkpoint or "-"
        if len(checkpoint) > CHECKPOINT_CHARS:
            checkpoint = checkpoint[: CHECKPOINT_CHARS - 1] + "…"
        owner = r.instance_id or r.owner if r.owner is not None else "[yellow]nobody[/yellow]"
        table.add_row(
            r.kind or "?", str(r.key), owner, "-" if r.token is None else str(r.token), checkpoint
        )
    return table


def keyspace_json(smap: SliceMap, holders: list[SliceHolder]) -> dict[str, Any]:
    """A keyspace's newest map and its slices' holders, as ``--json`` shows it."""
    return {
        "epoch": smap.epoch,
        "max_token": smap.max_token,
        "slices": [h.as_json() for h in holders],
    }


def render_slices(smap: SliceMap, holders: list[SliceHolder]) -> Table:
    """A keyspace's slices in hash order: range, share, holder, token, load."""
    table = Table(
        title=(
            f"keyspace {smap.keyspace}: {len(smap)} slices, map epoch {smap.epoch}, "
            f"highest token {smap.max_token} (slice tokens fence the keys)"
        ),
        title_justify="left",
    )
    for column in ("slice", "range", "share", "owner", "token", "load"):
        table.add_column(column)
    for h in holders:
        piece, holder = h.slice, h.holder
        if holder is not None:
            owner = holder.instance_id or holder.member_id
        elif piece.owner is not None:
            owner = f"[yellow]nobody[/yellow] (moving to {piece.owner})"
        else:
            owner = "[yellow]nobody[/yellow]"
        table.add_row(
            str(piece.id),
            f"[{piece.start:#018x}, {piece.end:#018x})",
            f"{h.as_json()['share']:.2%}",
            owner,
            str(piece.token),
            "-" if h.load is None else f"{h.load:g}",
        )
    return table


@click.command("describe")
@click.argument("group")
@coordinator_options()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
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
    security = connect(bootstrap, config_file, log_level, log_format)
    snapshot = asyncio.run(_describe(bootstrap, group, security, timeout_s))
    description, slots_error, loads = snapshot.description, snapshot.slots_error, snapshot.loads
    rows = resource_rows(snapshot.resources)
    if as_json:
        if description is None:
            document: dict[str, Any] = {"group": group, "state": "Empty", "members": []}
        else:
            document = description.as_json()
            for member, shown in zip(description.members, document["members"], strict=True):
                shown["load"] = current_load(
                    group,
                    member.assignment,
                    member.workgroup_metadata(),
                    loads,
                    snapshot.keyspaces,
                )
        document["resources"] = [r.as_json() for r in rows]
        document["keyspaces"] = {
            name: keyspace_json(smap, snapshot.slices(name))
            for name, smap in snapshot.keyspaces.items()
        }
        document["slots_error"] = slots_error
        click.echo(json.dumps(document))
        return
    out = console()
    if description is None:
        out.print(f"{group}: no members (its lease slots persist)")
    else:
        out.print(render(description, loads, snapshot.keyspaces))
    for name, smap in snapshot.keyspaces.items():
        out.print(render_slices(smap, snapshot.slices(name)))
    if rows:
        out.print(render_resources(rows))
    unowned = sum(1 for r in rows if r.owner is None)
    if unowned:
        out.print(f"{unowned} resource(s) with a lease slot are owned by nobody now")
    if slots_error is not None:
        out.print(f"[yellow]lease slots not read: {slots_error}[/yellow]")


async def _describe(
    bootstrap: str, group: str, security: Security, timeout_s: float
) -> GroupSnapshot:
    """The group as the client layer reads it (its description, lease slots,
    owners and members' current loads); a group whose slots alone remain is
    still described, one neither described nor with slots is not found."""
    async with ClientConnection(bootstrap, security=security, timeout_s=timeout_s) as connection:
        snapshot = await GroupReader(connection, group, loads=True).read()
    if snapshot.description is None and not snapshot.slots:
        raise GroupNotFoundError(f"no group {group!r} on this coordinator")
    return snapshot


async def loads_of(
    bootstrap: str, description: GroupDescription | None, security: Security, timeout_s: float
) -> dict[str, float]:
    """The current loads of the group's members; none when it has no members or
    they cannot be read (the table then shows the loads of the last join)."""
    if description is None or not description.members:
        return {}
    try:
        return await read_current_loads(
            bootstrap, description.group, security=security, timeout_s=timeout_s
        )
    except WorkgroupError:
        return {}
