"""The one owner rule (:mod:`workgroup.client.owners`), without a coordinator."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workgroup.client.describe import GroupDescription, MemberDescription
from workgroup.client.owners import (
    ResourceOwner,
    _in_order,
    _order,
    join_and_remember,
    join_owners,
    memory_of,
)
from workgroup.client.slots import LeaseSlot


def member(name: str, keys: list[int | str], generation: int | None) -> MemberDescription:
    return MemberDescription(
        f"{name}-id", name, name, "127.0.0.1", {"shard": keys}, None, generation
    )


def group(*members: MemberDescription) -> GroupDescription:
    return GroupDescription("g", "Stable", "workgroup", "sticky.v1", 7, None, list(members))


def slot(key: int | str, token: int) -> LeaseSlot:
    return LeaseSlot(f"workgroup-leases.g.{key}", key, token, f"at-{token}")


def owners(rows: list[ResourceOwner], key: int | str) -> list[ResourceOwner]:
    return [r for r in rows if r.key == key and type(r.key) is type(key)]


def test_one_row_per_resource_the_newer_assignment_owns_it_the_other_releases() -> None:
    rows = join_owners(group(member("a", [1, 2], 7), member("b", [2, 3], 6)), [slot(2, 4)])
    [two] = owners(rows, 2)
    assert two.owner is not None
    assert two.owner.member_id == "a-id"
    assert [m.member_id for m in two.releasing] == ["b-id"]
    assert (two.token, two.checkpoint, two.token_pending) == (4, "at-4", False)  # first reading
    assert [r.key for r in rows] == [1, 2, 3]


def test_two_assignments_of_one_generation_leave_it_to_nobody() -> None:
    [two] = owners(join_owners(group(member("a", [2], 7), member("b", [2], 7)), []), 2)
    assert two.owner is None
    assert [m.member_id for m in two.releasing] == ["a-id", "b-id"]


def test_keys_keep_their_type_and_unclaimed_slots_show_last() -> None:
    rows = join_owners(group(member("a", [1, "1"], 7)), [slot(1, 3), slot("1", 5), slot(9, 2)])
    assert [(r.key, r.token) for r in rows] == [(1, 3), ("1", 5), (9, 2)]
    assert (rows[-1].kind, rows[-1].owner) == (None, None)


def test_a_new_owner_is_never_shown_with_the_old_owners_token() -> None:
    first = join_owners(group(member("a", [1], 7)), [slot(1, 4)])
    memory = memory_of(first)
    # Failover: b is assigned key 1; the slot still holds a's token.
    moved = join_owners(group(member("b", [1], 8)), [slot(1, 4)], before=memory)
    [one] = moved
    assert (one.owner.member_id if one.owner else None, one.token, one.token_pending) == (
        "b-id", None, True,
    )  # fmt: skip
    # Still not committed on the next reading: the baseline is kept, not a's token re-learnt.
    memory = memory_of(moved, memory)
    [again] = join_owners(group(member("b", [1], 8)), [slot(1, 4)], before=memory)
    assert (again.token, again.token_pending) == (None, True)
    # b takes token 5: now it is b's.
    memory = memory_of([again], memory)
    [taken] = join_owners(group(member("b", [1], 8)), [slot(1, 5)], before=memory)
    assert (taken.token, taken.token_pending) == (5, False)


def test_a_resource_that_was_nobodys_shows_a_new_token_only() -> None:
    before = memory_of(join_owners(group(), [slot(1, 4)]))  # unowned, a's old token 4
    [row] = join_owners(group(member("b", [1], 8)), [slot(1, 4)], before=before)
    assert (row.token, row.token_pending) == (None, True)
    [row] = join_owners(group(member("b", [1], 8)), [slot(1, 6)], before=before)
    assert (row.token, row.token_pending) == (6, False)


@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.none() | st.sampled_from(["a", "b", ""]),
            st.integers(-5, 5) | st.text(max_size=2),
        ),
        max_size=40,
    )
)
def test_resources_come_owned_first_then_by_kind_and_key(
    rows: list[tuple[bool, str | None, int | str]],
) -> None:
    someone = MemberDescription("m", None, "c", "/h", {})
    resources = [ResourceOwner(kind, key, someone if owned else None) for owned, kind, key in rows]
    assert _in_order(resources) == sorted(resources, key=_order)


claim = st.tuples(
    st.sampled_from(["a-id", "b-id", "c-id"]),
    st.sampled_from(["shard", "shard.standby"]),
    st.integers(0, 4) | st.sampled_from(["0", "x"]),
)
readings = st.lists(
    st.tuples(
        st.lists(claim, max_size=12),
        st.dictionaries(st.integers(0, 5) | st.sampled_from(["0", "x"]), st.integers(0, 6)),
        st.dictionaries(st.sampled_from(["a-id", "b-id", "c-id"]), st.none() | st.integers(6, 8)),
    ),
    min_size=1,
    max_size=4,
)


@given(readings)
def test_joined_and_remembered_in_one_pass_as_memory_of_the_join_says(
    steps: list[
        tuple[list[tuple[str, str, int | str]], dict[int | str, int], dict[str, int | None]]
    ],
) -> None:
    """A reader's readings one after another: the memory and pending keys made with
    the join are what :func:`memory_of` and the resources say."""
    before = None
    for claims, tokens, generations in steps:
        by_member: dict[str, dict[str, list[int | str]]] = {}
        for member_id, kind, key in claims:
            by_member.setdefault(member_id, {}).setdefault(kind, []).append(key)
        members = [
            MemberDescription(m, None, "c", "h", assignment, None, generations.get(m, 7))
            for m, assignment in sorted(by_member.items())
        ]
        description = GroupDescription("g", "Stable", "workgroup", "p", 7, None, members)
        slots = [slot(key, token) for key, token in tokens.items()]
        joined = join_and_remember(description, slots, before=before)
        assert joined.resources == join_owners(description, slots, before=before)
        expected = memory_of(joined.resources, before)
        assert {k: dict(v) for k, v in joined.memory.items() if v} == {
            k: dict(v) for k, v in expected.items() if v
        }
        assert joined.pending == {r.key for r in joined.resources if r.token_pending}
        before = joined.memory
