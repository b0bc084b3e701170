"""The leader's part of a rebalance (member/round_plan.py): input, round, what-if."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.assignors.base import Assignment
from workgroup.assignors.registry import get_assignor
from workgroup.kafka.messages import JoinedMember
from workgroup.member.errors import AssignorError
from workgroup.member.pipeline import simulate_rebalance
from workgroup.member.round_plan import (
    MAX_ROUNDS,
    Ignored,
    build_input,
    encode_assignments,
    plan_round,
    read_members,
    withholding_claims,
)
from workgroup.protocol import LATEST_VERSION, BinaryCodec, MemberMetadata
from workgroup.protocol.catalog import catalog_hash, freeze_catalog
from workgroup.testing.assignors import RotatingAssignor
from workgroup.types import Key, Resource

CATALOG = freeze_catalog({"orders": range(4), "users": ["eu", "us"]})
CODEC = BinaryCodec()


def joined(*member_ids: str) -> tuple[JoinedMember, ...]:
    return tuple(JoinedMember(mid, None, b"") for mid in member_ids)


def shards(*keys: Key, kind: str = "orders") -> tuple[Resource, ...]:
    return tuple((kind, key) for key in keys)


# --- reading members -------------------------------------------------------------------


def test_read_members_reports_unreadable_metadata_and_catalog_mismatches() -> None:
    mine = catalog_hash(CATALOG)
    members = (
        JoinedMember("a", None, CODEC.encode_metadata(MemberMetadata(catalog_hash=mine))),
        JoinedMember("b", None, b"\x00junk"),
        JoinedMember("c", None, BinaryCodec(latest_version=1).encode_metadata(MemberMetadata())),
        JoinedMember("d", None, CODEC.encode_metadata(MemberMetadata(catalog_hash=b"other"))),
    )
    read = read_members(CODEC, members, mine)
    assert set(read.metadata) == {"a", "c", "d"}
    assert set(read.unreadable) == {"b"}
    assert "not in workgroup's format" in read.unreadable["b"]
    assert read.catalog_mismatches == {"d": b"other"}
    assert read.used_versions == {"a": LATEST_VERSION, "c": 1, "d": LATEST_VERSION}
    assert read.common_version == 1


# --- the assignor's input ------------------------------------------------------------------


def test_unknown_kinds_and_resources_are_ignored_and_reported() -> None:
    metadata = {
        "a": MemberMetadata(
            kinds=("orders", "payments", "zzz"),
            owned=(("orders", 1), ("payments", 0), ("orders", 9), ("orders", "2"), ("users", "eu")),
            owned_generation=3,
        ),
        "b": MemberMetadata(owned=(("users", "us"),), owned_generation=3, capacity=0),
        "c": MemberMetadata(kinds=("nope",)),
    }
    prepared = build_input(joined("a", "b", "c", "gone"), metadata, CATALOG)
    infos = prepared.input.members
    assert set(infos) == {"a", "b", "c"}  # no metadata, no member
    assert infos["a"].kinds == frozenset({"orders"})
    assert infos["a"].owned == (("orders", 1), ("users", "eu"))
    assert infos["b"].kinds == frozenset({"orders", "users"})  # none given: every kind
    assert infos["b"].capacity == 1.0
    assert infos["c"].kinds == frozenset()  # subscribes to nothing that exists
    assert prepared.ignored == {
        "a": Ignored(
            kinds=("payments", "zzz"),
            owned=(("payments", 0), ("orders", 9)),
            key_type_mismatches=(("orders", "2"),),
        ),
        "c": Ignored(kinds=("nope",)),
    }
    assert prepared.ignored["a"].as_dict() == {
        "unknown_kinds": ["payments", "zzz"],
        "unknown_owned": [["payments", 0], ["orders", 9]],
        "key_type_mismatches": [["orders", "2"]],
    }
    assert not Ignored()


def test_integer_key_for_a_string_key_is_a_type_mismatch() -> None:
    catalog = freeze_catalog({"k": ["0", "1", "x"]})
    metadata = {"a": MemberMetadata(owned=(("k", 0), ("k", "1"), ("k", 7)))}
    prepared = build_input(joined("a"), metadata, catalog)
    assert prepared.input.members["a"].owned == (("k", "1"),)
    assert prepared.ignored["a"] == Ignored(owned=(("k", 7),), key_type_mismatches=(("k", 0),))


def test_input_carries_instance_ids_racks_and_attributes() -> None:
    catalog = freeze_catalog({"k": [0, {"key": 1, "racks": ["r1"], "attributes": {"tier": "hot"}}]})
    metadata = {
        "a": MemberMetadata(instance_id="from-metadata", rack="r1", user_data=b"u"),
        "b": MemberMetadata(instance_id="from-metadata"),
    }
    members = (JoinedMember("a", None, b""), JoinedMember("b", "from-join", b""))
    prepared = build_input(members, metadata, catalog)
    assert prepared.input.members["a"].instance_id == "from-metadata"
    assert prepared.input.members["b"].instance_id == "from-join"
    assert prepared.input.members["a"].rack == "r1"
    assert prepared.input.members["a"].user_data == b"u"
    assert prepared.input.resource_racks == {("k", 1): frozenset({"r1"})}
    assert prepared.input.resource_attributes == {("k", 1): {"tier": "hot"}}
    assert prepared.ignored == {}


# --- the round ----------------------------------------------------------------------------


def test_a_resource_another_member_still_owns_is_withheld() -> None:
    target: Assignment = {"a": list(shards(0, 1)), "b": list(shards(2, 3))}
    claims = {"a": shards(0, 1, 2, 3), "b": ()}
    plan = plan_round(["a", "b"], target, claims)
    assert plan.assigned == {"a": shards(0, 1), "b": ()}
    assert plan.withheld == {"a": (), "b": shards(2, 3)}
    assert plan.revoked == {"a": shards(2, 3), "b": ()}
    assert plan.withheld_count == 2
    assert plan.pending
    assert plan.target == {"a": shards(0, 1), "b": shards(2, 3)}


def test_every_claim_counts_and_a_member_left_out_of_the_target_gets_nothing() -> None:
    # c's claim is stale (another generation) but it may still hold the resource.
    target: Assignment = {"a": list(shards(0, 1, 2, 3))}
    claims = {"a": shards(0), "b": (), "c": shards(3, 9)}
    plan = plan_round(["a", "b", "c"], target, claims)
    assert plan.assigned == {"a": shards(0, 1, 2), "b": (), "c": ()}
    assert plan.withheld == {"a": shards(3), "b": (), "c": ()}
    assert plan.revoked == {"a": (), "b": (), "c": shards(3, 9)}


def test_without_claims_nothing_is_withheld() -> None:
    target: Assignment = {"a": list(shards(0, 1)), "b": list(shards(2, 3))}
    plan = plan_round(["a", "b"], target, {"a": (), "b": ()})
    assert plan.assigned == {"a": shards(0, 1), "b": shards(2, 3)}
    assert not plan.pending
    assert plan.withheld_count == 0


def test_a_resource_its_owner_keeps_too_is_not_withheld() -> None:
    """Assignors with several owners per resource (replicated): a new replica does
    not wait for an owner that keeps its own, only for one that drops it."""
    target: Assignment = {"a": list(shards(0)), "b": list(shards(0, 1)), "c": []}
    claims = {"a": shards(0), "b": (), "c": shards(1)}
    plan = plan_round(["a", "b", "c"], target, claims)
    assert plan.assigned == {"a": shards(0), "b": shards(0), "c": ()}
    assert plan.withheld == {"a": (), "b": shards(1), "c": ()}
    assert plan.revoked == {"a": (), "b": (), "c": shards(1)}


def test_assigning_to_a_member_outside_the_group_is_an_assignor_error() -> None:
    with pytest.raises(AssignorError, match=r"unknown members \['z'\]"):
        plan_round(["a"], {"a": [], "z": list(shards(0))}, {})


def test_every_member_learns_that_a_follow_up_round_is_pending() -> None:
    members = (
        JoinedMember("a", None, BinaryCodec(latest_version=1).encode_metadata(MemberMetadata())),
        JoinedMember("b", None, CODEC.encode_metadata(MemberMetadata(owned=shards(0, 1)))),
    )
    read = read_members(CODEC, members, b"")
    plan = plan_round(["a", "b"], {"a": list(shards(1)), "b": list(shards(0))}, {"b": shards(0, 1)})
    blobs = dict(encode_assignments(plan, CODEC, read, generation=8, catalog_hash=b"h"))
    decoded = {mid: CODEC.decode_assignment(blob) for mid, blob in blobs.items()}
    assert decoded["a"].value.assigned == ()
    assert decoded["b"].value.revoked == shards(1)
    for mid in "ab":
        assert decoded[mid].header.used_version == 1
        assert decoded[mid].value.pending
        assert decoded[mid].value.generation == 8
        assert decoded[mid].value.catalog_hash == b"h"
    assert not decoded["a"].value.rejoin
    assert decoded["b"].value.rejoin  # it wrote version 2; the group reads 1


# --- the what-if -------------------------------------------------------------------------


def metadata_of(
    owned: Mapping[str, Sequence[Resource]], generation: int = 3
) -> dict[str, MemberMetadata]:
    return {
        mid: MemberMetadata(owned=tuple(rs), owned_generation=generation if rs else -1)
        for mid, rs in owned.items()
    }


def test_cooperative_join_takes_two_rounds() -> None:
    catalog = freeze_catalog({"orders": range(6)})
    metadata = metadata_of({"a": shards(0, 1, 2), "b": shards(3, 4, 5), "c": ()})
    result = simulate_rebalance(
        get_assignor("cooperative-sticky"), joined("a", "b", "c"), metadata, catalog, "cooperative"
    )
    assert result.converged
    assert len(result.rounds) == 2
    first, second = result.rounds
    assert first.assigned["c"] == ()
    assert first.withheld_count == 2
    assert {len(rs) for rs in first.assigned.values() if rs} == {2}
    assert sum(len(rs) for rs in first.revoked.values()) == 2
    assert not second.pending
    assert second.assigned == second.target == result.target
    assert {len(rs) for rs in result.target.values()} == {2}
    # Nothing moved that did not have to.
    for mid in "ab":
        assert set(result.target[mid]) <= set(metadata[mid].owned)


def test_eager_hands_everything_out_at_once_and_revokes_everything_first() -> None:
    catalog = freeze_catalog({"orders": range(6)})
    metadata = metadata_of({"a": shards(0, 1, 2), "b": shards(3, 4, 5), "c": ()})
    result = simulate_rebalance(
        get_assignor("cooperative-sticky"), joined("a", "b", "c"), metadata, catalog, "eager"
    )
    assert result.converged
    assert len(result.rounds) == 1
    assert result.first.withheld_count == 0
    assert result.first.assigned == result.target
    assert result.first.revoked == {"a": shards(0, 1, 2), "b": shards(3, 4, 5), "c": ()}
    # Eager members report what they revoked: sticky keeps most of it in place.
    assert result.input.members["a"].owned == shards(0, 1, 2)
    assert sorted(len(r) for r in result.target.values()) == [2, 2, 2]
    assert set(result.target["a"]) < set(shards(0, 1, 2))
    assert set(result.target["b"]) < set(shards(3, 4, 5))


def test_eager_reports_withhold_nothing() -> None:
    metadata = metadata_of({"a": shards(0, 1, 2), "b": ()})
    assert withholding_claims("eager", metadata) == {}
    assert withholding_claims("cooperative", metadata) == {"a": shards(0, 1, 2), "b": ()}


def test_ignored_inputs_are_those_of_the_first_round() -> None:
    metadata = {
        "a": MemberMetadata(kinds=("orders", "typo"), owned=(("orders", "1"),), owned_generation=2)
    }
    result = simulate_rebalance(
        get_assignor("round-robin"), joined("a"), metadata, CATALOG, "eager"
    )
    assert result.ignored == {"a": Ignored(kinds=("typo",), key_type_mismatches=(("orders", "1"),))}
    assert result.target == {"a": shards(0, 1, 2, 3)}


def test_a_rebalance_that_never_settles_is_reported_after_the_bound() -> None:
    catalog = freeze_catalog({"k": range(2)})
    metadata = metadata_of({"a": (("k", 0),), "b": ()})
    result = simulate_rebalance(
        RotatingAssignor(), joined("a", "b"), metadata, catalog, "cooperative"
    )
    assert not result.converged
    assert len(result.rounds) == MAX_ROUNDS
    assert all(plan.pending for plan in result.rounds)
    short = simulate_rebalance(
        RotatingAssignor(), joined("a", "b"), metadata, catalog, "cooperative", max_rounds=3
    )
    assert len(short.rounds) == 3
    with pytest.raises(ValueError, match="max_rounds"):
        simulate_rebalance(
            RotatingAssignor(), joined("a"), {}, catalog, "cooperative", max_rounds=0
        )


# --- property: cooperative-sticky on random small groups ------------------------------------


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict[str, list[Key]], dict[str, MemberMetadata]]:
    kinds = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
    catalog: dict[str, list[Key]] = {k: list(range(draw(st.integers(0, 8)))) for k in kinds}
    every = [(k, key) for k in kinds for key in catalog[k]] + [("a", 99), ("zz", 0)]
    ids = draw(st.lists(st.sampled_from("mnopqr"), min_size=1, max_size=5, unique=True))
    uniform = draw(st.booleans())
    metadata: dict[str, MemberMetadata] = {}
    for mid in ids:
        subscribed = () if uniform else tuple(draw(st.lists(st.sampled_from(kinds), unique=True)))
        owned = tuple(draw(st.lists(st.sampled_from(every), max_size=6, unique=True)))
        metadata[mid] = MemberMetadata(
            kinds=subscribed,
            owned=owned,
            owned_generation=draw(st.integers(1, 3)) if owned else -1,
        )
    return catalog, metadata


@settings(max_examples=150, deadline=None)
@given(groups())
def test_cooperative_sticky_never_hands_out_a_claimed_resource_and_settles(
    group: tuple[dict[str, list[Key]], dict[str, MemberMetadata]],
) -> None:
    catalog, metadata = group
    assignor = get_assignor("cooperative-sticky")
    result = simulate_rebalance(
        assignor, joined(*metadata), metadata, freeze_catalog(catalog), "cooperative"
    )
    claims: dict[str, tuple[Resource, ...]] = {mid: m.owned for mid, m in metadata.items()}
    for plan in result.rounds:
        for mid, given_now in plan.assigned.items():
            for resource in given_now:
                others = [o for o, rs in claims.items() if o != mid and resource in rs]
                assert not others, f"{resource} handed to {mid} while {others} claim it"
        claims = dict(plan.assigned)
    assert result.converged
    assert len(result.rounds) <= 3
    assert result.rounds[-1].assigned == result.target
    handed = [r for rs in result.target.values() for r in rs]
    assert len(handed) == len(set(handed))
