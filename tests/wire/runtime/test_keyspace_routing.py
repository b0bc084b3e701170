"""Routing a keyspace's keys from outside the group: :class:`Directory`, ``workgroup
whois`` and ``workgroup describe`` against an app with a keyspace on the embedded
coordinator."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from click.testing import CliRunner, Result

from tests.wire.runtime.test_keyspaces import (  # noqa: F401 (the coordinator fixture)
    KEYS,
    TIMEOUT_S,
    Process,
    bootstrap,
    owners_of,
    settle,
)
from workgroup.cli import main
from workgroup.client.keyspaces import UnknownKeyspaceError
from workgroup.directory import Directory
from workgroup.keyspaces import KeyspaceError, PlannerSettings, SliceMap, key_hash

SETTINGS = PlannerSettings(
    imbalance_tolerance=0.5, min_slices_per_member=3, max_slices_per_member=12
)
ENDPOINTS = {"a": "127.0.0.1:7101", "b": "127.0.0.1:7102"}
INT_KEYS = list(range(-20, 100))


async def cli(args: list[str]) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, main, args)


async def directory_sees(directory: Directory, smap: SliceMap) -> None:
    """Wait until the directory answers from a reading of the group made after
    the processes settled on ``smap`` (two refreshes: the first may have been
    under way before they settled)."""
    async with asyncio.timeout(TIMEOUT_S):
        for _ in range(2):
            await directory.wait_changed()
        assert directory.keyspaces().get("users") == smap


async def test_the_directory_whois_and_describe_route_every_key_to_its_slices_holder(
    bootstrap: str,  # noqa: F811
) -> None:
    app_name = f"route-{uuid.uuid4().hex[:8]}"
    group = f"{app_name}.users"
    processes = [Process(name, app_name, SETTINGS) for name in ("a", "b")]
    running = [
        p.start(bootstrap, instance_id=p.name, advertise=ENDPOINTS[p.name]) for p in processes
    ]
    by_member = {}
    try:
        smap = await settle(processes)
        by_member = {p.member().member_id: p for p in processes}
        async with Directory(bootstrap, group, refresh_ms=100) as directory:
            await directory_sees(directory, smap)
            for key in [*KEYS, *INT_KEYS]:
                owner = directory.owner("users", key)
                piece = smap.slice_for_key(key)
                assert owner is not None, key
                assert (owner.slice, owner.token) == (piece, piece.token)
                holder = by_member[owner.member_id]
                assert owners_of(processes, key) == [holder.name]  # the process that owns(key)
                assert (owner.instance_id, owner.endpoint) == (holder.name, ENDPOINTS[holder.name])
            with pytest.raises(KeyspaceError, match="keyspace keys are str or int, not float"):
                directory.owner("users", 1.5)  # type: ignore[arg-type]
            with pytest.raises(UnknownKeyspaceError, match="has no keyspace 'orders'"):
                directory.owner("orders", "user-1")

            # From a shell: the key's slice, range, token and owner.
            key = KEYS[0]
            piece = smap.slice_for_key(key)
            holder = by_member[piece.owner or ""]
            shown = await cli(["whois", group, "users", key, "--bootstrap", bootstrap])
            assert shown.exit_code == 0, shown.output
            assert f"slice {piece.id} [{piece.start:#018x}, {piece.end:#018x})" in shown.output
            assert f"token {piece.token}" in shown.output
            assert f"{holder.name} at {ENDPOINTS[holder.name]}" in shown.output
            as_json = await cli(["whois", group, "users", "42", "--bootstrap", bootstrap, "--json"])
            document = json.loads(as_json.output)
            int_piece = smap.slice_for_key(42)
            assert document["point"] == key_hash(42)
            assert document["slice"]["id"] == document["owner"]["slice"]["id"] == int_piece.id
            assert document["owner"]["token"] == int_piece.token
            assert document["owner"]["member_id"] == int_piece.owner
            unknown = await cli(["whois", group, "orders", "x", "--bootstrap", bootstrap])
            assert unknown.exit_code == 2
            assert unknown.output.strip().splitlines() == [
                f"error: group {group!r} has no keyspace 'orders' (keyspaces: users)"
            ]
            described = await cli(["describe", group, "--bootstrap", bootstrap, "--json"])
            assert described.exit_code == 0, described.output
            keyspace = json.loads(described.output)["keyspaces"]["users"]
            assert (keyspace["epoch"], keyspace["max_token"]) == (smap.epoch, smap.max_token)
            assert [
                (s["id"], s["start"], s["end"], s["token"], s["owner"]) for s in keyspace["slices"]
            ] == [(p.id, p.start, p.end, p.token, p.owner) for p in smap.slices]
            assert sum(s["share"] for s in keyspace["slices"]) == pytest.approx(1.0)
            table = await cli(["describe", group, "--bootstrap", bootstrap])
            assert f"keyspace users: {len(smap)} slices, map epoch {smap.epoch}" in table.output

            # a is drained: its slices go to b, and the directory follows with
            # tokens that never go down.
            drained = await cli(
                ["drain", group, "--instance-id", "a", "--bootstrap", bootstrap,
                 "--wait", "--wait-timeout-s", str(TIMEOUT_S)]
            )  # fmt: skip
            assert drained.exit_code == 0, drained.output
            b = processes[1]
            after = await settle([b])
            await directory_sees(directory, after)
            for key in KEYS:
                owner = directory.owner("users", key)
                assert owner is not None, key
                assert (owner.instance_id, owner.endpoint) == ("b", ENDPOINTS["b"])
                assert owner.token is not None
                assert owner.token >= smap.slice_for_key(key).token
    finally:
        for stop, _ in running:
            stop.set()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)
