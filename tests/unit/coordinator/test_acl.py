"""The group ACL of ``acl.py``: its decision rules, its file format and its errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workgroup.coordinator.acl import (
    ANONYMOUS,
    DRAIN_GROUP_PREFIX,
    OPERATIONS,
    AclRule,
    GroupAcl,
    Operation,
    drained_group_of,
    principal_of,
)
from workgroup.errors import ConfigError

EXAMPLE = """
# principals that may do anything in every group
super_users = ["admin"]

[[allow]]
principals = ["alice", "bob"]
groups = ["orders", "etl-*"]
operations = ["join", "commit", "describe"]

[[deny]]
principals = ["bob"]
groups = ["etl-secret"]
operations = ["all"]
"""

ALICE = "User:alice"
BOB = "User:bob"


def rule(
    principals: tuple[str, ...] = (ALICE,),
    groups: tuple[str, ...] = ("orders",),
    operations: tuple[Operation, ...] = OPERATIONS,
) -> AclRule:
    return AclRule(frozenset(principals), groups, frozenset(operations))


def toml_rule(table: str = "allow", **keys: str) -> str:
    """One ``[[table]]`` whose keys default to a valid rule; ``keys`` replace TOML values."""
    values = {"principals": '["alice"]', "groups": '["orders"]', "operations": '["join"]'} | keys
    lines = [f"{key} = {value}" for key, value in values.items() if value]
    return f"[[{table}]]\n" + "\n".join(lines) + "\n"


def test_principal_of_adds_the_user_type_once() -> None:
    assert principal_of("alice") == "User:alice"
    assert principal_of("User:alice") == "User:alice"
    assert principal_of("ANONYMOUS") == ANONYMOUS


def test_operations_are_the_five_group_operations() -> None:
    assert OPERATIONS == ("join", "commit", "describe", "delete", "drain")


def test_the_example_file() -> None:
    acl = GroupAcl.parse(EXAMPLE)

    allowed: tuple[Operation, ...] = ("join", "commit", "describe")
    for operation in allowed:
        assert acl.allows(ALICE, operation, "orders")
        assert acl.allows(ALICE, operation, "etl-daily")
        assert acl.allows(BOB, operation, "etl-daily")
        assert acl.allows(ALICE, operation, "etl-secret")
    # Bob is denied everything in etl-secret although etl-* allows him.
    for operation in OPERATIONS:
        assert not acl.allows(BOB, operation, "etl-secret")
    assert not acl.allows(ALICE, "delete", "orders")
    assert not acl.allows(ALICE, "join", "payments")
    assert not acl.allows("User:carol", "join", "orders")
    assert not acl.allows(ANONYMOUS, "describe", "orders")
    for operation in OPERATIONS:
        assert acl.allows("User:admin", operation, "etl-secret")
        assert acl.allows("User:admin", operation, "anything")
    assert acl.describe() == "group ACL: 1 allow rule, 1 deny rule, 1 super user"


def test_parse_normalises_principals_and_expands_all() -> None:
    acl = GroupAcl.parse(toml_rule(principals='["alice", "User:bob", "*"]', operations='["all"]'))

    assert acl.allow == (rule((ALICE, BOB, "User:*"), ("orders",), OPERATIONS),)
    assert acl.deny == ()
    assert acl.super_users == frozenset()


def test_a_super_user_is_allowed_even_what_a_deny_rule_forbids() -> None:
    acl = GroupAcl(allow=(), deny=(rule(("User:*",), ("*",)),), super_users=frozenset({ALICE}))

    assert acl.allows(ALICE, "delete", "orders")
    assert not acl.allows(BOB, "delete", "orders")


def test_a_wildcard_super_user_makes_everyone_a_super_user() -> None:
    acl = GroupAcl.parse('super_users = ["*"]')

    assert acl.allows(ANONYMOUS, "delete", "orders")


def test_a_matching_deny_rule_wins_over_an_allow_rule() -> None:
    acl = GroupAcl(allow=(rule(),), deny=(rule(operations=("commit",)),))

    assert acl.allows(ALICE, "join", "orders")
    assert not acl.allows(ALICE, "commit", "orders")


@pytest.mark.parametrize("operation", ["join", "commit", "delete"])
def test_join_commit_and_delete_imply_describe_as_in_kafka(operation: Operation) -> None:
    acl = GroupAcl(allow=(rule(operations=(operation,)),))

    assert acl.allows(ALICE, "describe", "orders")
    assert not acl.allows(ALICE, "describe", "payments")
    others = {"join", "commit", "delete"} - {operation}
    assert not any(acl.allows(ALICE, other, "orders") for other in others)  # type: ignore[arg-type]
    denied = GroupAcl(allow=acl.allow, deny=(rule(operations=("describe",)),))
    assert not denied.allows(ALICE, "describe", "orders")


def test_describe_implies_nothing_else() -> None:
    acl = GroupAcl(allow=(rule(operations=("describe",)),))

    assert not any(acl.allows(ALICE, op, "orders") for op in ("join", "commit", "delete"))


def test_a_deny_rule_for_someone_else_does_not_deny() -> None:
    acl = GroupAcl(allow=(rule(),), deny=(rule((BOB,)),))

    assert acl.allows(ALICE, "commit", "orders")


def test_without_a_matching_rule_everything_is_denied() -> None:
    acl = GroupAcl.parse("")

    assert acl == GroupAcl(allow=())
    assert not acl.allows(ANONYMOUS, "join", "orders")
    assert acl.describe() == "group ACL: 0 allow rules, 0 deny rules, 0 super users"


@pytest.mark.parametrize("written", ["*", "User:*"])
def test_a_wildcard_principal_matches_every_principal(written: str) -> None:
    acl = GroupAcl.parse(toml_rule(principals=f'["{written}"]'))

    assert acl.allows(ANONYMOUS, "join", "orders")
    assert acl.allows(ALICE, "join", "orders")


def test_a_rule_matches_only_when_principal_operation_and_group_all_match() -> None:
    join_orders = rule(operations=("join",))

    assert join_orders.matches(ALICE, "join", "orders")
    assert not join_orders.matches(BOB, "join", "orders")
    assert not join_orders.matches(ALICE, "commit", "orders")
    assert not join_orders.matches(ALICE, "join", "payments")


def test_principals_are_case_sensitive() -> None:
    acl = GroupAcl.parse(toml_rule(principals='["anonymous"]'))

    assert not acl.allows(ANONYMOUS, "join", "orders")


@pytest.mark.parametrize(
    ("pattern", "group", "matches"),
    [
        ("etl-*", "etl-a", True),
        ("etl-*", "etl-a-b", True),
        ("etl-*", "etl-", True),
        ("etl-*", "etl", False),
        ("etl-*", "ETL-a", False),
        ("etl-*", "x-etl-a", False),
        ("*", "", True),
        ("*", "anything", True),
        ("orders", "orders", True),
        ("orders", "orders-1", False),
        ("orders", "order", False),
        ("orders", "Orders", False),
    ],
)
def test_group_patterns(pattern: str, group: str, matches: bool) -> None:
    assert rule(groups=(pattern,)).matches(ALICE, "join", group) is matches


def test_one_of_several_group_patterns_is_enough() -> None:
    assert rule(groups=("orders", "etl-*")).matches(ALICE, "join", "etl-x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("super_users = [", "acl.toml: not valid TOML: "),
        ('alow = "x"', "acl.toml: unknown key 'alow' (super_users, allow, deny)"),
        ("a = 1\nb = 2", "acl.toml: unknown keys 'a', 'b' (super_users, allow, deny)"),
        ('super_users = "admin"', "acl.toml: super_users must be a list of strings, got 'admin'"),
        (
            "super_users = ['admin', 1]",
            "acl.toml: super_users must be a list of strings, but item 2 is 1",
        ),
        ("super_users = ['Group:ops']", "acl.toml: super_users: principal 'Group:ops' is not"),
        (
            "[allow]\nprincipals = ['a']",
            "acl.toml: allow must be an array of tables, written [[allow]]",
        ),
        ('deny = ["bob"]', "acl.toml: deny must be an array of tables, written [[deny]]"),
        (
            toml_rule(operations='["joinn"]'),
            "acl.toml: allow rule 1: unknown operation 'joinn' "
            "(join, commit, describe, delete, drain, all)",
        ),
        (
            toml_rule(operations='["JOIN"]'),
            "acl.toml: allow rule 1: unknown operation 'JOIN' "
            "(join, commit, describe, delete, drain, all)",
        ),
        (
            toml_rule(principles='["x"]'),
            "acl.toml: allow rule 1: unknown key 'principles' (principals, groups, operations)",
        ),
        (toml_rule(groups=""), "acl.toml: allow rule 1: missing key 'groups'"),
        (
            toml_rule(groups="", operations=""),
            "acl.toml: allow rule 1: missing keys 'groups', 'operations'",
        ),
        (
            toml_rule(principals="[]"),
            "acl.toml: allow rule 1: principals must not be empty (the rule would match nothing)",
        ),
        (toml_rule(groups="[]"), "acl.toml: allow rule 1: groups must not be empty"),
        (toml_rule(operations="[]"), "acl.toml: allow rule 1: operations must not be empty"),
        (
            toml_rule(principals='"alice"'),
            "acl.toml: allow rule 1: principals must be a list of strings, got 'alice'",
        ),
        (
            toml_rule(groups='["orders", 7]'),
            "acl.toml: allow rule 1: groups must be a list of strings, but item 2 is 7",
        ),
        (
            toml_rule(operations="true"),
            "acl.toml: allow rule 1: operations must be a list of strings, got True",
        ),
        (
            toml_rule(principals='["user:alice"]'),
            "acl.toml: allow rule 1: principal 'user:alice' is not a User principal "
            "(write 'User:user:alice' if ':' is part of the user name)",
        ),
        (toml_rule(principals='[""]'), "acl.toml: allow rule 1: empty principal name"),
        (toml_rule(principals='["User:"]'), "acl.toml: allow rule 1: empty principal name"),
        (
            toml_rule(groups='[""]'),
            "acl.toml: allow rule 1: empty group pattern (write '*' for every group)",
        ),
        (
            toml_rule(groups='["etl-*-x"]'),
            "acl.toml: allow rule 1: group pattern 'etl-*-x': '*' may only end a prefix, "
            "as in 'etl-*'",
        ),
        (toml_rule(groups='["*etl"]'), "acl.toml: allow rule 1: group pattern '*etl': '*' may"),
        (toml_rule(groups='["etl-**"]'), "acl.toml: allow rule 1: group pattern 'etl-**': '*'"),
        (
            toml_rule() + toml_rule("deny") + toml_rule("deny", operations='["joinn"]'),
            "acl.toml: deny rule 2: unknown operation 'joinn'",
        ),
    ],
)
def test_bad_input_is_a_config_error_naming_file_rule_and_fault(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        GroupAcl.parse(text, source="acl.toml")

    assert str(caught.value).startswith(message)
    assert caught.value.exit_code == 2


def test_parse_names_an_unnamed_source() -> None:
    with pytest.raises(ConfigError, match=r"^<acl>: unknown key 'x'"):
        GroupAcl.parse("x = 1")


def test_load_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "acl.toml"
    path.write_text(EXAMPLE, encoding="utf-8")

    assert GroupAcl.load(path) == GroupAcl.parse(EXAMPLE)


def test_load_names_the_file_in_a_content_error(tmp_path: Path) -> None:
    path = tmp_path / "acl.toml"
    path.write_text(toml_rule(operations='["joinn"]'), encoding="utf-8")

    with pytest.raises(ConfigError) as caught:
        GroupAcl.load(path)

    assert str(caught.value).startswith(f"{path}: allow rule 1: unknown operation 'joinn'")


def test_load_of_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "missing.toml"

    with pytest.raises(ConfigError) as caught:
        GroupAcl.load(path)

    assert str(caught.value) == f"{path}: cannot read the ACL file: No such file or directory"


def test_load_of_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "acl.toml"
    path.write_bytes(b"super_users = ['\xff']")

    with pytest.raises(ConfigError, match="the ACL file is not UTF-8 text"):
        GroupAcl.load(path)


names = st.text(alphabet="abcxyz-_.", min_size=1, max_size=6)
principals = names.map(principal_of) | st.just(ANONYMOUS)
group_patterns = names | names.map(lambda name: name + "*") | st.just("*")
rules = st.builds(
    AclRule,
    principals=st.frozensets(principals | st.just("User:*"), min_size=1, max_size=3),
    groups=st.lists(group_patterns, min_size=1, max_size=3).map(tuple),
    operations=st.frozensets(st.sampled_from(OPERATIONS), min_size=1),
)


@given(
    denied=names,
    allow=st.lists(rules, max_size=4).map(tuple),
    other_super_users=st.frozensets(principals, max_size=2),
    is_super_user=st.booleans(),
    operation=st.sampled_from(OPERATIONS),
    group=st.text(max_size=8),
)
def test_a_deny_all_rule_on_every_group_denies_all_but_a_super_user(
    denied: str,
    allow: tuple[AclRule, ...],
    other_super_users: frozenset[str],
    is_super_user: bool,
    operation: Operation,
    group: str,
) -> None:
    principal = principal_of(denied)
    deny_all = GroupAcl.parse(
        f'[[deny]]\nprincipals = ["{denied}"]\ngroups = ["*"]\noperations = ["all"]\n'
    )
    super_users = other_super_users | {principal} if is_super_user else other_super_users
    acl = dataclasses.replace(deny_all, allow=allow, super_users=super_users)

    assert acl.allows(principal, operation, group) is (principal in super_users)


def test_drain_requests_are_decided_on_the_group_they_drain() -> None:
    acl = GroupAcl.parse(
        """
        [[allow]]
        principals = ["alice"]
        groups = ["orders"]
        operations = ["join", "commit"]

        [[allow]]
        principals = ["ops"]
        groups = ["orders"]
        operations = ["drain"]
        """
    )
    companion = DRAIN_GROUP_PREFIX + "orders"
    assert drained_group_of(companion) == "orders"
    assert drained_group_of("orders") is None
    assert drained_group_of(DRAIN_GROUP_PREFIX) is None
    # alice's members read their requests, but alice may not drain.
    assert acl.allows(ALICE, "describe", companion)
    assert not acl.allows(ALICE, "commit", companion)
    assert not acl.allows(ALICE, "drain", "orders")
    # ops may write them (a commit to the companion group), and see the group.
    assert acl.allows("User:ops", "commit", companion)
    assert acl.allows("User:ops", "delete", companion)
    assert acl.allows("User:ops", "describe", "orders")
    assert not acl.allows("User:ops", "join", "orders")
    assert not acl.allows("User:ops", "commit", "orders")
    # The rule names the group, not the companion: another group's requests stay closed.
    assert not acl.allows("User:ops", "commit", DRAIN_GROUP_PREFIX + "payments")
