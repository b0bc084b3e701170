"""``workgroup assign``: what would an assignor do with this group?

Reads a JSON description of resources and members (a file, or stdin) and prints
the assignment with its balance and movement::

    {"resources": {"orders": 6, "users": ["eu", {"key": "us", "racks": ["r1"]}]},
     "members": {"m1": {"kinds": ["orders"], "owned": [["orders", 0]],
                        "generation": 3, "rack": "r1", "instance_id": "host-1",
                        "capacity": 2}}}

A kind maps to a key count ``N`` (keys ``0..N-1``) or to a list of keys; a key
is a string, an integer or ``{"key": K, "racks": [...]}``.  Every member field
is optional: ``kinds`` defaults to every kind, ``owned`` to nothing,
``generation`` to -1, ``capacity`` to 1.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from workgroup.assignors._common import NO_GENERATION
from workgroup.assignors.base import AssignmentInput, MemberInfo
from workgroup.assignors.registry import get_assignor
from workgroup.assignors.stats import assignment_stats
from workgroup.errors import ConfigError
from workgroup.types import Key, Resource

_MEMBER_FIELDS = {"kinds", "owned", "generation", "rack", "instance_id", "capacity", "user_data"}


def parse_input(document: Any) -> AssignmentInput:
    """Validate a decoded JSON document and build the assignor input."""
    if not isinstance(document, dict):
        raise ConfigError("input must be a JSON object with 'resources' and 'members'")
    unknown = set(document) - {"resources", "members"}
    if unknown:
        raise ConfigError(f"unknown top-level fields: {', '.join(sorted(unknown))}")
    resources, racks = _parse_resources(document.get("resources", {}))
    members = _parse_members(document.get("members", {}), resources)
    return AssignmentInput(resources=resources, members=members, resource_racks=racks)


def _is_key(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _parse_resources(
    raw: Any,
) -> tuple[dict[str, list[Key] | range], dict[Resource, frozenset[str]]]:
    if not isinstance(raw, dict):
        raise ConfigError("'resources' must be an object: {kind: count or [keys]}")
    resources: dict[str, list[Key] | range] = {}
    racks: dict[Resource, frozenset[str]] = {}
    for kind, spec in raw.items():
        if isinstance(spec, int) and not isinstance(spec, bool):
            if spec < 0:
                raise ConfigError(f"kind {kind!r}: key count must be >= 0, got {spec}")
            resources[kind] = range(spec)
            continue
        if not isinstance(spec, list):
            raise ConfigError(f"kind {kind!r}: expected a key count or a list of keys")
        keys: list[Key] = []
        for item in spec:
            if isinstance(item, dict):
                extra = set(item) - {"key", "racks"}
                if extra or "key" not in item:
                    raise ConfigError(
                        f'kind {kind!r}: a key object is {{"key": K, "racks": [...]}}, '
                        f"got {json.dumps(item)}"
                    )
                key = item["key"]
                item_racks = item.get("racks", [])
                if not isinstance(item_racks, list) or not all(
                    isinstance(r, str) for r in item_racks
                ):
                    raise ConfigError(f"kind {kind!r}, key {key!r}: racks must be strings")
            else:
                key, item_racks = item, None
            if not _is_key(key):
                raise ConfigError(f"kind {kind!r}: keys are strings or integers, got {key!r}")
            keys.append(key)
            if item_racks is not None:
                racks[(kind, key)] = frozenset(item_racks)
        if len(set(keys)) != len(keys):
            raise ConfigError(f"kind {kind!r}: duplicate keys")
        resources[kind] = keys
    return resources, racks


def _parse_members(raw: Any, resources: dict[str, list[Key] | range]) -> dict[str, MemberInfo]:
    if not isinstance(raw, dict):
        raise ConfigError("'members' must be an object: {member id: {...}}")
    members: dict[str, MemberInfo] = {}
    for member_id, spec in raw.items():
        where = f"member {member_id!r}"
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: expected an object")
        unknown = set(spec) - _MEMBER_FIELDS
        if unknown:
            raise ConfigError(f"{where}: unknown fields {', '.join(sorted(unknown))}")
        kinds_raw = spec.get("kinds", list(resources))
        if not isinstance(kinds_raw, list) or not all(isinstance(k, str) for k in kinds_raw):
            raise ConfigError(f"{where}: 'kinds' must be a list of kind names")
        missing = [k for k in kinds_raw if k not in resources]
        if missing:
            raise ConfigError(f"{where}: unknown kinds {', '.join(missing)}")
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
            if pair[0] not in resources:
                raise ConfigError(f"{where}: owns a resource of unknown kind {pair[0]!r}")
            owned.append((pair[0], pair[1]))
        generation = spec.get("generation", NO_GENERATION)
        if not isinstance(generation, int) or isinstance(generation, bool):
            raise ConfigError(f"{where}: 'generation' must be an integer")
        rack = spec.get("rack")
        instance_id = spec.get("instance_id")
        for name, value in (("rack", rack), ("instance_id", instance_id)):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{where}: {name!r} must be a string")
        capacity = spec.get("capacity", 1.0)
        if not isinstance(capacity, int | float) or isinstance(capacity, bool) or not capacity > 0:
            raise ConfigError(f"{where}: 'capacity' must be a positive number")
        user_data = spec.get("user_data", "")
        if not isinstance(user_data, str):
            raise ConfigError(f"{where}: 'user_data' must be a string")
        members[member_id] = MemberInfo(
            member_id=member_id,
            kinds=frozenset(kinds_raw),
            instance_id=instance_id,
            owned=tuple(owned),
            generation=generation,
            rack=rack,
            capacity=float(capacity),
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


def run(assignor_name: str, text: str, options: dict[str, Any]) -> dict[str, Any]:
    """Parse ``text``, run the assignor and return the printable result."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"input is not valid JSON: {exc}") from exc
    data = parse_input(document)
    assignor = get_assignor(assignor_name, **options)
    assignment = assignor.assign(data)
    stats = assignment_stats(data, assignment, exclusive=getattr(assignor, "exclusive", True))
    return {
        "assignment": {mid: [list(r) for r in rs] for mid, rs in sorted(assignment.items())},
        "stats": {"assignor": assignor.name, **stats.as_dict()},
    }


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
@click.option("--indent", type=int, default=2, show_default=True, help="JSON indentation.")
def command(
    assignor_name: str, input_path: str, option_pairs: tuple[str, ...], indent: int
) -> None:
    """Show the assignment an assignor makes for a group described in JSON."""
    if input_path == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(input_path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {input_path}: {exc}") from exc
    result = run(assignor_name, text, parse_options(option_pairs))
    json.dump(result, sys.stdout, indent=indent if indent > 0 else None)
    sys.stdout.write("\n")
