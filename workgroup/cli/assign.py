"""``workgroup assign``: what would the group's leader do with this group?

Reads a JSON description of resources and members (a file, or stdin)::

    {"resources": {"orders": 6, "users": ["eu", {"key": "us", "racks": ["r1"]}]},
     "members": {"m1": {"kinds": ["orders"], "owned": [["orders", 0]],
                        "generation": 3, "rack": "r1", "instance_id": "host-1",
                        "capacity": 2}}}

A kind maps to a key count ``N`` (keys ``0..N-1``) or to a list of keys; a key
is a string, an integer or ``{"key": K, "racks": [...], "attributes": {...},
"load": X}``.
Every member field is optional: ``kinds`` defaults to every kind (an empty list
too, as for a live member), ``owned`` to nothing, ``generation`` to -1,
``capacity`` to 1.

Each member is turned into the metadata a live member would send, encoded and
decoded with the protocol's codec, and handed to the same functions the live
leader uses (:mod:`workgroup.member.round_plan`): the output's ``assignment`` is
what the leader hands out this round, ``target`` what the group owns once the
follow-up rounds are done.  Kinds and owned resources the catalog does not have
are ignored, as the leader ignores them, and listed under ``stats.ignored``.

Loads (``"load"``: records/s, bytes/s, any number >= 0) turn on the load
balancing stage the live leader runs after its assignor, reassignment delay and
refusals (:mod:`workgroup.assignors.balance`; ``--imbalance-tolerance``, ``--max-moves``):
owners report the loads of what they own in their metadata, and the leader's
view holds the rest.  The output's ``load`` shows each member's load before
(what it owns) and after (its target), the largest over the mean, and the
stage's moves.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import click

from workgroup.assignors.balance import DEFAULT_MAX_MOVES, DEFAULT_TOLERANCE
from workgroup.assignors.registry import get_assignor
from workgroup.assignors.stats import assignment_stats
from workgroup.errors import ConfigError
from workgroup.kafka.messages import JoinedMember
from workgroup.member.load_balancing import BalanceSettings, check_load
from workgroup.member.pipeline import Rebalance, simulate_rebalance
from workgroup.member.round_plan import read_members
from workgroup.protocol.catalog import Catalog, CatalogEntry, catalog_hash, freeze_catalog
from workgroup.protocol.metadata import MemberMetadata
from workgroup.protocol.protocol import Protocol, RebalanceMode
from workgroup.types import NO_GENERATION_ID, Key, Resource, sorted_resources

_MEMBER_FIELDS = {"kinds", "owned", "generation", "rack", "instance_id", "capacity", "user_data"}


@dataclass(frozen=True)
class Group:
    """A group described in JSON: the catalog and what each member would send."""

    catalog: Catalog
    #: ``member id -> metadata`` in the input's order (the JoinGroup order).
    members: dict[str, MemberMetadata]
    #: ``resource -> load``, for the resources the input gives one.
    loads: dict[Resource, float] = field(default_factory=dict)


def parse_input(document: Any) -> Group:
    """Validate a decoded JSON document and build the catalog and member metadata."""
    if not isinstance(document, dict):
        raise ConfigError("input must be a JSON object with 'resources' and 'members'")
    unknown = set(document) - {"resources", "members"}
    if unknown:
        raise ConfigError(f"unknown top-level fields: {', '.join(sorted(unknown))}")
    loads: dict[Resource, float] = {}
    catalog = _parse_resources(document.get("resources", {}), loads)
    members = _parse_members(document.get("members", {}))
    members = {
        mid: replace(meta, loads=tuple(loads.get(r, math.nan) for r in meta.owned))
        if any(r in loads for r in meta.owned)
        else meta
        for mid, meta in members.items()
    }
    return Group(catalog, members, loads)


def _is_key(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _parse_resources(raw: Any, loads: dict[Resource, float]) -> dict[str, Sequence[CatalogEntry]]:
    if not isinstance(raw, dict):
        raise ConfigError("'resources' must be an object: {kind: count or [keys]}")
    catalog: dict[str, Sequence[CatalogEntry]] = {}
    for kind, spec in raw.items():
        if isinstance(spec, int) and not isinstance(spec, bool):
            if spec < 0:
                raise ConfigError(f"kind {kind!r}: key count must be >= 0, got {spec}")
            catalog[kind] = range(spec)
            continue
        if not isinstance(spec, list):
            raise ConfigError(f"kind {kind!r}: expected a key count or a list of keys")
        entries: list[CatalogEntry] = []
        keys: list[Key] = []
        for item in spec:
            entry: CatalogEntry
            if isinstance(item, dict):
                extra = set(item) - {"key", "racks", "attributes", "load"}
                if extra or "key" not in item:
                    raise ConfigError(
                        f'kind {kind!r}: a key object is {{"key": K, "racks": [...], '
                        f'"attributes": {{...}}, "load": X}}, got {json.dumps(item)}'
                    )
                key = item["key"]
                if "load" in item:
                    try:
                        loads[(kind, key)] = check_load(item["load"])
                    except ConfigError as exc:
                        raise ConfigError(f"kind {kind!r}, key {key!r}: {exc}") from None
                racks = item.get("racks", [])
                if not isinstance(racks, list) or not all(isinstance(r, str) for r in racks):
                    raise ConfigError(f"kind {kind!r}, key {key!r}: racks must be strings")
                attributes = item.get("attributes", {})
                if not isinstance(attributes, dict) or not all(
                    isinstance(v, str) for v in attributes.values()
                ):
                    raise ConfigError(
                        f"kind {kind!r}, key {key!r}: attributes must be an object of strings"
                    )
                entry = {"key": key, "racks": racks, "attributes": attributes}
            else:
                key = entry = item
            if not _is_key(key):
                raise ConfigError(f"kind {kind!r}: keys are strings or integers, got {key!r}")
            keys.append(key)
            entries.append(entry)
        if len(set(keys)) != len(keys):
            raise ConfigError(f"kind {kind!r}: duplicate keys")
        catalog[kind] = entries
    return catalog


def _parse_members(raw: Any) -> dict[str, MemberMetadata]:
    if not isinstance(raw, dict):
        raise ConfigError("'members' must be an object: {member id: {...}}")
    members: dict[str, MemberMetadata] = {}
    for member_id, spec in raw.items():
        where = f"member {member_id!r}"
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: expected an object")
        unknown = set(spec) - _MEMBER_FIELDS
        if unknown:
            raise ConfigError(f"{where}: unknown fields {', '.join(sorted(unknown))}")
        kinds = spec.get("kinds", [])
        if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
            raise ConfigError(f"{where}: 'kinds' must be a list of kind names")
        owned: list[Resource] = []
        owned_raw = spec.get("owned", [])
        if not isinstance(owned_raw, list):
            raise ConfigError(f"{where}: 'owned' must be a list of [kind, key] pairs")
        for pair in owned_raw:
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not isinstance(pair[0], str)
                or not _is_key(pair[1])
            ):
                raise ConfigError(f"{where}: owned entries are [kind, key], got {json.dumps(pair)}")
            owned.append((pair[0], pair[1]))
        generation = spec.get("generation", NO_GENERATION_ID)
        if not isinstance(generation, int) or isinstance(generation, bool):
            raise ConfigError(f"{where}: 'generation' must be an integer")
        rack = spec.get("rack")
        instance_id = spec.get("instance_id")
        for name, value in (("rack", rack), ("instance_id", instance_id)):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{where}: {name!r} must be a string")
        if instance_id == "":
            raise ConfigError(f"{where}: 'instance_id' must not be empty")
        capacity = spec.get("capacity", 1.0)
        if not isinstance(capacity, int | float) or isinstance(capacity, bool) or not capacity > 0:
            raise ConfigError(f"{where}: 'capacity' must be a positive number")
        user_data = spec.get("user_data", "")
        if not isinstance(user_data, str):
            raise ConfigError(f"{where}: 'user_data' must be a string")
        # What a live member sends: sorted kinds, owned resources in resource order.
        members[member_id] = MemberMetadata(
            kinds=tuple(sorted(set(kinds))),
            owned=tuple(dict.fromkeys(owned)),
            owned_generation=generation,
            rack=rack,
            capacity=float(capacity),
            instance_id=instance_id,
            user_data=user_data.encode(),
        )
    return members


def parse_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``k=v`` pairs; values are JSON when they parse as JSON, else strings."""
    options: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"--option takes name=value, got {pair!r}")
        try:
            options[name] = json.loads(value)
        except json.JSONDecodeError:
            options[name] = value
    return options


def run(
    assignor_name: str,
    text: str,
    options: dict[str, Any],
    mode: RebalanceMode | None = None,
    balance: BalanceSettings | None = None,
) -> dict[str, Any]:
    """Parse ``text``, play the rebalance as the leader would and return the
    printable result (``mode`` overrides the protocol's rebalance mode;
    ``balance``: the load balancing settings, used when the input has loads)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"input is not valid JSON: {exc}") from exc
    group = parse_input(document)
    assignor = get_assignor(assignor_name, **options)
    protocol = Protocol(name=assignor.name, assignor=assignor, rebalance=mode)
    frozen = freeze_catalog(group.catalog)
    digest = catalog_hash(frozen)
    joined = tuple(
        JoinedMember(
            member_id,
            meta.instance_id,
            protocol.codec.encode_metadata(_as_sent(meta, digest)),
        )
        for member_id, meta in group.members.items()
    )
    read = read_members(protocol.codec, joined, digest)
    if read.unreadable:  # the codec wrote it: only a bug gets here
        member_id, error = next(iter(read.unreadable.items()))
        raise ConfigError(f"member {member_id!r}: metadata does not decode: {error}")
    balancing = (balance or BalanceSettings()) if group.loads else None
    rebalance = simulate_rebalance(
        assignor,
        joined,
        read.metadata,
        frozen,
        protocol.mode,
        balance=balancing,
        loads=group.loads,
    )
    target = {mid: list(rs) for mid, rs in rebalance.target.items()}
    stats = assignment_stats(
        rebalance.input, target, exclusive=getattr(assignor, "exclusive", True)
    )
    first = rebalance.first
    load_report = _load_report(group, rebalance) if balancing is not None else None
    return {
        "assignment": _listing(first.assigned),
        "revoked": _listing(first.revoked),
        "target": _listing(rebalance.target),
        "stats": {
            "assignor": assignor.name,
            "mode": protocol.mode,
            **stats.as_dict(),
            "withheld": first.withheld_count,
            "rounds": len(rebalance.rounds),
            "converged": rebalance.converged,
            "ignored": {mid: found.as_dict() for mid, found in sorted(rebalance.ignored.items())},
        },
        **({"load": load_report} if load_report is not None else {}),
    }


def _load_report(group: Group, rebalance: Rebalance) -> dict[str, Any]:
    """Each member's load before (what it owns) and after (its target), and the
    stage's moves in each round."""
    known = list(group.loads.values())
    average = sum(known) / len(known) if known else 0.0
    capacity = {mid: meta.capacity for mid, meta in group.members.items()}

    def load_of(resources: Sequence[Resource]) -> float:
        return round(sum(group.loads.get(r, average) for r in resources), 6)

    def max_over_mean(loads: Mapping[str, float]) -> float | None:
        total_capacity = sum(capacity.values())
        mean = sum(loads.values()) / total_capacity if total_capacity else 0.0
        if not mean:
            return None
        return round(max(loads[mid] / capacity[mid] for mid in loads) / mean, 4)

    owned = {mid: rebalance.input.members[mid].owned for mid in rebalance.input.members}
    before = {mid: load_of(owned.get(mid, ())) for mid in sorted(group.members)}
    after = {mid: load_of(rebalance.target.get(mid, ())) for mid in sorted(group.members)}
    moves = [
        [move.resource[0], move.resource[1], move.giver, move.taker, round(move.load, 6)]
        for balanced in rebalance.balanced
        if balanced is not None
        for move in balanced.moves
    ]
    return {
        "before": before,
        "after": after,
        "max_over_mean_before": max_over_mean(before),
        "max_over_mean_after": max_over_mean(after),
        "moves": moves,
    }


def _as_sent(meta: MemberMetadata, digest: bytes) -> MemberMetadata:
    """The metadata as a live member sends it: it saw the same catalog."""
    owned = sorted_resources(meta.owned)
    measured = dict(zip(meta.owned, meta.loads, strict=True)) if meta.loads else {}
    return MemberMetadata(
        kinds=meta.kinds,
        owned=owned,
        loads=tuple(measured[r] for r in owned) if measured else (),
        owned_generation=meta.owned_generation if meta.owned else NO_GENERATION_ID,
        rack=meta.rack,
        capacity=meta.capacity,
        instance_id=meta.instance_id,
        user_data=meta.user_data,
        catalog_hash=digest,
    )


def _listing(assignment: Mapping[str, Sequence[Resource]]) -> dict[str, list[list[Key]]]:
    return {mid: [list(r) for r in rs] for mid, rs in sorted(assignment.items())}


def format_json(value: Any, indent: int, depth: int = 0) -> str:
    """``value`` as indented JSON, with lists of plain values (a resource's
    ``[kind, key]``) kept on one line so an assignment reads one resource per line."""
    if indent <= 0:
        return json.dumps(value)
    if isinstance(value, list) and all(not isinstance(v, (list, dict)) for v in value):
        return json.dumps(value)
    if not value or not isinstance(value, (list, dict)):
        return json.dumps(value)
    inner = " " * (indent * (depth + 1))
    if isinstance(value, dict):
        items = [
            f"{json.dumps(str(k))}: {format_json(v, indent, depth + 1)}" for k, v in value.items()
        ]
        opening, closing = "{", "}"
    else:
        items = [format_json(v, indent, depth + 1) for v in value]
        opening, closing = "[", "]"
    body = (",\n" + inner).join(items)
    return f"{opening}\n{inner}{body}\n{' ' * (indent * depth)}{closing}"


@click.command(name="assign")
@click.option("--assignor", "assignor_name", required=True, help="Assignor name, e.g. range.")
@click.option(
    "--input",
    "input_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    show_default=True,
    help="JSON file to read; '-' reads stdin.",
)
@click.option("--option", "option_pairs", multiple=True, help="Assignor option name=value.")
@click.option(
    "--mode",
    type=click.Choice(["eager", "cooperative"]),
    default=None,
    help="Rebalance protocol [default: cooperative if the assignor supports it, else eager].",
)
@click.option(
    "--imbalance-tolerance",
    type=float,
    default=DEFAULT_TOLERANCE,
    show_default=True,
    help="With loads: how far above the mean load the busiest member may be.",
)
@click.option(
    "--max-moves",
    type=int,
    default=DEFAULT_MAX_MOVES,
    show_default=True,
    help="With loads: resources the balancing stage moves per round at most (0: off).",
)
@click.option(
    "--indent",
    type=int,
    default=2,
    show_default=True,
    help="JSON indentation; 0 prints one line. Lists of plain values stay on one line.",
)
def command(
    assignor_name: str,
    input_path: str,
    option_pairs: tuple[str, ...],
    mode: RebalanceMode | None,
    imbalance_tolerance: float,
    max_moves: int,
    indent: int,
) -> None:
    """Show what the group's leader hands out for a group described in JSON."""
    if input_path == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(input_path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {input_path}: {exc}") from exc
    balance = BalanceSettings(imbalance_tolerance=imbalance_tolerance, max_moves=max_moves)
    result = run(assignor_name, text, parse_options(option_pairs), mode, balance)
    sys.stdout.write(format_json(result, indent) + "\n")
    sys.stdout.flush()  # before the warnings on stderr
    stats = result["stats"]
    if not stats["converged"]:
        click.echo(
            f"warning: the rebalance still withholds resources after {stats['rounds']} rounds",
            err=True,
        )
    if stats["ignored"]:
        click.echo(
            f"warning: ignored what the catalog does not have, for members "
            f"{', '.join(stats['ignored'])} (see stats.ignored)",
            err=True,
        )
