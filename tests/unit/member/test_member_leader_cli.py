"""``workgroup assign`` and a live leader hand out the same thing for the same group."""

from __future__ import annotations

import json
from typing import Any

import pytest

from workgroup.cli.assign import run
from workgroup.errors import ConfigError, ErrorCode
from workgroup.kafka.messages import JoinedMember, JoinGroup, JoinGroupResult, SyncGroup
from workgroup.member.actions import RunAssignor, SendRequest
from workgroup.member.config import MemberConfig
from workgroup.member.state import MemberMachine
from workgroup.protocol import AssignmentData, BinaryCodec, MemberMetadata, Protocol
from workgroup.protocol.catalog import catalog_hash
from workgroup.testing import capture_logs
from workgroup.types import Resource

CATALOG = {"orders": list(range(6)), "users": ["eu", "us"]}
CODEC = BinaryCodec()

#: The other members, as the CLI's JSON describes them (the leader, "me", owns nothing).
OTHERS: dict[str, dict[str, Any]] = {
    "a": {
        "owned": [["orders", 0], ["orders", 1], ["orders", 2], ["users", "eu"], ["orders", "5"]],
        "generation": 4,
        "kinds": ["orders", "users", "payments"],
    },
    "b": {
        "owned": [["orders", 3], ["orders", 4], ["orders", 5], ["gone", 0]],
        "generation": 4,
        "instance_id": "host-b",
        "rack": "r1",
    },
    "c": {"kinds": ["users"], "capacity": 2},
}


def metadata_of(spec: dict[str, Any]) -> MemberMetadata:
    """What a live member described by ``spec`` sends: cooperative members what
    they own, eager members what the rebalance made them revoke (the same)."""
    owned = tuple((kind, key) for kind, key in spec.get("owned", []))
    return MemberMetadata(
        kinds=tuple(sorted(spec.get("kinds", []))),
        owned=owned,
        owned_generation=spec.get("generation", -1) if owned else -1,
        rack=spec.get("rack"),
        capacity=float(spec.get("capacity", 1.0)),
        instance_id=spec.get("instance_id"),
        catalog_hash=catalog_hash(CATALOG),
    )


def live_round(
    protocol: Protocol,
    members: dict[str, MemberMetadata],
    generation: int = 5,
    leader_metadata: MemberMetadata | None = None,
) -> dict[str, AssignmentData]:
    """One round of a live leader ("me") for the others' ``members``: what its
    SyncGroup hands each member.  The leader joins with its own metadata unless
    ``leader_metadata`` replaces it."""
    leader = MemberMachine(MemberConfig(group_id="g", protocols=[protocol]), CATALOG)
    started = leader.start(0) + leader.coordinator_found(1)
    (join,) = [a for a in started if isinstance(a, SendRequest)]
    assert isinstance(join.request, JoinGroup)
    mine = join.request.protocols[0][1]
    if leader_metadata is not None:
        mine = CODEC.encode_metadata(leader_metadata)
    joined = [JoinedMember("me", None, mine)]
    joined += [
        JoinedMember(mid, meta.instance_id, CODEC.encode_metadata(meta))
        for mid, meta in members.items()
    ]
    result = JoinGroupResult(
        ErrorCode.NONE, generation, "workgroup", protocol.wire_name, "me", "me", tuple(joined)
    )
    joined_actions = leader.response(2, join.request_id, result)
    (assign,) = [a for a in joined_actions if isinstance(a, RunAssignor)]
    target = assign.assignor.assign(assign.input)
    synced = leader.assignment_done(3, assign.run_id, target)
    (sync,) = [a for a in synced if isinstance(a, SendRequest)]
    assert isinstance(sync.request, SyncGroup)
    return {mid: CODEC.decode_assignment(blob).value for mid, blob in sync.request.assignments}


def as_lists(resources: tuple[Resource, ...]) -> list[list[object]]:
    return [list(r) for r in resources]


@pytest.mark.parametrize("mode", ["cooperative", "eager"])
def test_the_cli_shows_what_the_live_leader_hands_out(mode: str) -> None:
    protocol = Protocol.of("cooperative-sticky", rebalance=mode)  # type: ignore[arg-type]
    with capture_logs() as logs:
        live = live_round(protocol, {mid: metadata_of(spec) for mid, spec in OTHERS.items()})
    document = {"resources": CATALOG, "members": {"me": {}, **OTHERS}}
    shown = run("cooperative-sticky", json.dumps(document), {}, mode)  # type: ignore[arg-type]

    handed = {mid: as_lists(data.assigned) for mid, data in sorted(live.items())}
    assert shown["assignment"] == handed
    withheld = shown["stats"]["withheld"]
    assert {data.pending for data in live.values()} == {withheld > 0}
    if mode == "cooperative":
        assert withheld > 0
        revoked = {mid: as_lists(data.revoked) for mid, data in sorted(live.items())}
        assert shown["revoked"] == revoked
    else:
        assert withheld == 0
        assert all(data.revoked == () for data in live.values())

    # The leader logged once what the CLI lists as ignored.
    ignored = [e for e in logs if e["event"] == "member.ignored"]
    assert len(ignored) == 1
    assert ignored[0]["log_level"] == "warning"
    assert ignored[0]["ignored"] == shown["stats"]["ignored"]
    assert "payments" in json.dumps(shown["stats"]["ignored"])


def test_the_cli_target_is_what_the_live_follow_up_round_hands_out() -> None:
    protocol = Protocol.of("cooperative-sticky")
    members = {mid: metadata_of(spec) for mid, spec in OTHERS.items()}
    first = live_round(protocol, members)
    assert any(data.pending for data in first.values())
    # The members revoke, then rejoin owning what they were handed in generation 5.
    follow_up = {
        mid: MemberMetadata(
            kinds=meta.kinds,
            owned=first[mid].assigned,
            owned_generation=5 if first[mid].assigned else -1,
            rack=meta.rack,
            capacity=meta.capacity,
            instance_id=meta.instance_id,
            catalog_hash=meta.catalog_hash,
        )
        for mid, meta in members.items()
    }
    leader = MemberMetadata(
        owned=first["me"].assigned,
        owned_generation=5 if first["me"].assigned else -1,
        catalog_hash=catalog_hash(CATALOG),
    )
    second = live_round(protocol, follow_up, generation=6, leader_metadata=leader)
    assert not any(data.pending for data in second.values())

    document = {"resources": CATALOG, "members": {"me": {}, **OTHERS}}
    shown = run("cooperative-sticky", json.dumps(document), {})
    assert shown["stats"]["rounds"] == 2
    assert shown["target"] == {mid: as_lists(data.assigned) for mid, data in sorted(second.items())}


#: A skewed group: "a" owns the three busiest shards.
SKEWED = {"shard": [{"key": k, "load": 1000.0 / (k + 1)} for k in range(9)]}
SKEWED_OWNERS = {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7, 8]}


def test_with_loads_the_cli_balances_as_the_live_leader_does() -> None:
    members = {
        mid: {"owned": [["shard", k] for k in keys], "generation": 4}
        for mid, keys in SKEWED_OWNERS.items()
    }
    document = {"resources": SKEWED, "members": {"me": {}, **members}}
    shown = run("cooperative-sticky", json.dumps(document), {}, "cooperative")
    load = shown["load"]
    assert load["max_over_mean_after"] < load["max_over_mean_before"]
    assert load["moves"]
    assert sum(load["after"].values()) == pytest.approx(sum(load["before"].values()))
    assert shown["stats"]["converged"]

    # A live leader whose members report the same loads hands out the same.
    catalog = {"shard": list(range(9))}
    live_members = {
        mid: MemberMetadata(
            kinds=(),
            owned=tuple(("shard", k) for k in keys),
            owned_generation=4,
            catalog_hash=catalog_hash(catalog),
            loads=tuple(1000.0 / (k + 1) for k in keys),
        )
        for mid, keys in SKEWED_OWNERS.items()
    }
    leader = MemberMachine(
        MemberConfig(group_id="g", protocols=[Protocol.of("cooperative-sticky")]), catalog
    )
    started = leader.start(0) + leader.coordinator_found(1)
    (join,) = [a for a in started if isinstance(a, SendRequest)]
    assert isinstance(join.request, JoinGroup)
    joined = [JoinedMember("me", None, join.request.protocols[0][1])]
    joined += [JoinedMember(mid, None, CODEC.encode_metadata(m)) for mid, m in live_members.items()]
    result = JoinGroupResult(
        ErrorCode.NONE, 5, "workgroup", "cooperative-sticky.v1", "me", "me", tuple(joined)
    )
    (assign,) = [
        a for a in leader.response(2, join.request_id, result) if isinstance(a, RunAssignor)
    ]
    synced = leader.assignment_done(3, assign.run_id, assign.assignor.assign(assign.input))
    (sync,) = [a for a in synced if isinstance(a, SendRequest)]
    assert isinstance(sync.request, SyncGroup)
    live = {mid: CODEC.decode_assignment(blob).value for mid, blob in sync.request.assignments}
    assert shown["assignment"] == {mid: as_lists(d.assigned) for mid, d in sorted(live.items())}


def test_bad_loads_in_the_cli_input_are_refused() -> None:
    document = {"resources": {"shard": [{"key": 0, "load": -3}]}, "members": {"a": {}}}
    with pytest.raises(ConfigError, match="load"):
        run("cooperative-sticky", json.dumps(document), {})
