"""Per-resource tokens and checkpoints in ``describe``, ``reset`` and ``delete``,
against the embedded coordinator (Tansu keeps no commit metadata: a slot there
names no key, so there is nothing per key to show or reset)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from tests.wire.member.backends import Backend, run_backend
from workgroup.admin import (
    GroupNotEmptyError,
    GroupNotFoundError,
    delete_group,
    read_current_loads,
    read_lease_slots,
    reset_checkpoint,
)
from workgroup.cli import main
from workgroup.kafka.messages import CommitPartition, CommitTopic
from workgroup.member.driver import GroupMember
from workgroup.protocol import Protocol
from workgroup.runtime.legacy import AdminOffsets
from workgroup.runtime.loads import load_group
from workgroup.runtime.slots import slot_header, slot_of

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    with run_backend("embedded") as running:
        yield running


async def cli(args: list[str]) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, main, args)


async def seed(backend: Backend, group: str, key: int | str, token: int, checkpoint: str) -> None:
    """Commit ``key``'s slot from outside the group, as a holder leaves it."""
    offsets = AdminOffsets(backend.bootstrap, group)
    try:
        slot = slot_of(group, key)
        result = await offsets.commit(
            [CommitTopic(slot.topic, (CommitPartition(0, token, slot_header(key) + checkpoint),))]
        )
        assert all(p.error.name == "NONE" for t in result.topics for p in t.partitions)
    finally:
        await offsets.close()


async def test_an_empty_group_shows_its_tokens_and_checkpoints(backend: Backend) -> None:
    group = f"slots-{uuid.uuid4().hex[:8]}"
    await seed(backend, group, 0, 7, "offset=41")
    await seed(backend, group, "beta", 3, "x" * 100)
    slots = await read_lease_slots(backend.bootstrap, group)
    assert [(s.key, s.token, s.checkpoint) for s in slots] == [
        (0, 7, "offset=41"),
        ("beta", 3, "x" * 100),
    ]
    result = await cli(["describe", group, "--bootstrap", backend.bootstrap, "--json"])
    assert result.exit_code == 0, result.output
    shape = json.loads(result.output)
    assert shape["members"] == []
    assert {(r["key"], r["token"], r["owner"]) for r in shape["resources"]} == {
        (0, 7, None),
        ("beta", 3, None),
    }
    table = await cli(["describe", group, "--bootstrap", backend.bootstrap])
    assert table.exit_code == 0, table.output
    assert "offset=41" in table.output
    assert "owned by nobody" in table.output
    assert "generation ?" not in table.output or "offset=41" in table.output


async def test_describe_joins_owners_with_slots_and_reset_waits_for_an_empty_group(
    backend: Backend,
) -> None:
    group = f"slots-{uuid.uuid4().hex[:8]}.shard"
    await seed(backend, group, 1, 5, "at-5")
    await seed(backend, group, 9, 2, "gone")  # a key no member is given any more
    member = GroupMember(
        backend.bootstrap,
        group,
        [Protocol.of("cooperative-sticky")],
        resources={"shard": [0, 1]},
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
    )
    async with member, asyncio.timeout(TIMEOUT_S):
        await member.wait_for(lambda m: m.stable and len(m.assignment) == 2)
        result = await cli(["describe", group, "--bootstrap", backend.bootstrap, "--json"])
        assert result.exit_code == 0, result.output
        rows = {r["key"]: r for r in json.loads(result.output)["resources"]}
        assert rows[1]["owner"] == member.member_id
        assert (rows[1]["kind"], rows[1]["token"], rows[1]["checkpoint"]) == ("shard", 5, "at-5")
        assert rows[0]["owner"] == member.member_id
        assert rows[0]["token"] is None
        assert (rows[9]["owner"], rows[9]["kind"], rows[9]["token"]) == (None, None, 2)
        # A live group: reset and delete are refused with what to do, exit 3.
        refused = await cli(
            ["reset", group, "--kind", "shard", "--key", "1", "--bootstrap", backend.bootstrap]
        )
        assert refused.exit_code == 3, refused.output
        assert "has 1 member(s)" in refused.output
        # --force skips the member check, not the kind check: the members' kinds.
        wrong_kind = await cli(
            ["reset", group, "--kind", "part", "--key", "1", "--force",
             "--bootstrap", backend.bootstrap]
        )  # fmt: skip
        assert wrong_kind.exit_code == 2, wrong_kind.output
        assert "serves no kind 'part' (its kinds: shard)" in wrong_kind.output
        with pytest.raises(GroupNotEmptyError, match="accepts commits only from them"):
            await reset_checkpoint(backend.bootstrap, group, 1, "x", force=True)
        deleting = await cli(["delete", group, "--bootstrap", backend.bootstrap])
        assert deleting.exit_code == 3, deleting.output
        assert "has members" in deleting.output
    # Empty now (a dynamic member leaves as it closes): the reset keeps the token.
    done = await cli(
        ["reset", group, "--kind", "shard", "--key", "1", "--to", "at-0",
         "--bootstrap", backend.bootstrap]
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "token 5 kept" in done.output
    slots = {s.key: s for s in await read_lease_slots(backend.bootstrap, group)}
    assert (slots[1].token, slots[1].checkpoint) == (5, "at-0")
    cleared = await cli(
        ["reset", group, "--kind", "shard", "--key", "1", "--bootstrap", backend.bootstrap]
    )
    assert cleared.exit_code == 0, cleared.output
    slots = {s.key: s for s in await read_lease_slots(backend.bootstrap, group)}
    assert (slots[1].token, slots[1].checkpoint) == (5, None)
    # A checkpoint that cannot be stored: exit 2, nothing sent.
    too_long = await cli(
        ["reset", group, "--kind", "shard", "--key", "1", "--to", "y" * 5000,
         "--bootstrap", backend.bootstrap]
    )  # fmt: skip
    assert too_long.exit_code == 2, too_long.output
    assert "over the limit" in too_long.output
    # Deleting the empty group removes its slots, and the loads its members reported.
    loads = AdminOffsets(backend.bootstrap, load_group(group))
    try:
        slot = slot_of(group, 1)
        await loads.commit([CommitTopic(slot.topic, (CommitPartition(0, 2500, None),))])
    finally:
        await loads.close()
    assert await read_current_loads(backend.bootstrap, group) == {slot.topic: 2.5}
    deleted = await cli(["delete", group, "--bootstrap", backend.bootstrap])
    assert deleted.exit_code == 0, deleted.output
    assert await read_lease_slots(backend.bootstrap, group) == []
    assert await read_current_loads(backend.bootstrap, group) == {}
    with pytest.raises(GroupNotFoundError):
        await delete_group(backend.bootstrap, group)
    gone = await cli(["describe", group, "--bootstrap", backend.bootstrap])
    assert gone.exit_code == 1
    assert "no group" in gone.output


async def test_reset_refuses_a_kind_the_group_does_not_serve_and_a_key_without_a_slot(
    backend: Backend,
) -> None:
    group = f"app-{uuid.uuid4().hex[:8]}.part"
    await seed(backend, group, "k3", 4, "at-4")

    async def reset(*args: str) -> Result:
        return await cli(["reset", group, *args, "--bootstrap", backend.bootstrap])

    async def slots() -> dict[object, tuple[int, str | None]]:
        return {
            s.key: (s.token, s.checkpoint) for s in await read_lease_slots(backend.bootstrap, group)
        }

    wrong_kind = await reset("--kind", "nosuchkind", "--key", "k3", "--to", "Y")
    assert wrong_kind.exit_code == 2, wrong_kind.output
    assert wrong_kind.output.count("\n") == 1
    assert "serves no kind 'nosuchkind' (its kinds: part)" in wrong_kind.output
    no_slot = await reset("--kind", "part", "--key", "k42", "--to", "Z")
    assert no_slot.exit_code == 2, no_slot.output
    assert no_slot.output.count("\n") == 1
    assert "key 'k42' has no slot in group" in no_slot.output
    assert await slots() == {"k3": (4, "at-4")}  # nothing written
    # The right kind, no kind at all, and --create for a new key.
    right = await reset("--kind", "part", "--key", "k3", "--to", "Y")
    assert right.exit_code == 0, right.output
    assert right.output.startswith("part/'k3' in group")
    anyhow = await reset("--key", "k3", "--to", "Y2")
    assert anyhow.exit_code == 0, anyhow.output
    created = await reset("--kind", "part", "--key", "k42", "--to", "Z", "--create")
    assert created.exit_code == 0, created.output
    assert await slots() == {"k3": (4, "Y2"), "k42": (0, "Z")}
