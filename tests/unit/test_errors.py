"""The one table of error-code meanings, and the places that read it."""

from __future__ import annotations

import pytest

from workgroup.errors import (
    COORDINATOR_MOVED_CODES,
    ERROR_MEANINGS,
    LEASE_FENCING_CODES,
    LEASE_REBALANCING_CODES,
    MEMBER_FATAL_CODES,
    RETRIABLE_CODES,
    CoordinatorError,
    ErrorCode,
    LeaseAction,
    MemberAction,
    codes_where,
)
from workgroup.member import errors as member_errors


def test_every_error_code_has_a_meaning() -> None:
    assert set(ERROR_MEANINGS) == set(ErrorCode)


@pytest.mark.parametrize("code", list(ErrorCode))
def test_the_code_the_exception_and_the_table_agree(code: ErrorCode) -> None:
    meaning = ERROR_MEANINGS[code]
    assert code.meaning is meaning
    assert code.retriable is meaning.retriable
    assert CoordinatorError(code).retriable is meaning.retriable


def test_only_success_means_nothing_to_do() -> None:
    assert codes_where(lambda m: m.member is MemberAction.NONE) == {ErrorCode.NONE}
    assert codes_where(lambda m: m.lease is LeaseAction.NONE) == {ErrorCode.NONE}
    assert not ErrorCode.NONE.retriable


def test_a_fatal_code_is_never_retriable_and_a_coordinator_move_always_is() -> None:
    for code, meaning in ERROR_MEANINGS.items():
        if meaning.fatal:
            assert not meaning.retriable, code
        if meaning.member is MemberAction.FIND_COORDINATOR:
            assert meaning.retriable, code


def test_the_member_reads_its_fatal_codes_from_the_table() -> None:
    assert codes_where(lambda m: m.fatal) == MEMBER_FATAL_CODES
    # Every code with an error class of its own is fatal.
    assert set(member_errors._FATAL_CLASSES) <= MEMBER_FATAL_CODES
    assert ErrorCode.FENCED_INSTANCE_ID in MEMBER_FATAL_CODES


def test_the_coordinator_moved_and_retriable_codes_come_from_the_table() -> None:
    assert {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    } == COORDINATOR_MOVED_CODES
    assert COORDINATOR_MOVED_CODES | {ErrorCode.REBALANCE_IN_PROGRESS} <= RETRIABLE_CODES
    assert all(code.retriable for code in RETRIABLE_CODES)


def test_the_lease_reads_fencing_and_rebalancing_codes_from_the_table() -> None:
    assert {
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.GROUP_ID_NOT_FOUND,
    } == LEASE_FENCING_CODES
    assert {
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.REBALANCE_IN_PROGRESS,
    } == LEASE_REBALANCING_CODES
    assert all(ERROR_MEANINGS[code].ends_lease for code in LEASE_FENCING_CODES)


def test_the_member_actions_of_rule_3() -> None:
    """The member machine's rule 3, as the table writes it."""
    member = {code: meaning.member for code, meaning in ERROR_MEANINGS.items()}
    assert member[ErrorCode.UNKNOWN_MEMBER_ID] is MemberAction.RESET_MEMBER
    assert member[ErrorCode.ILLEGAL_GENERATION] is MemberAction.RESET_GENERATION
    assert member[ErrorCode.REBALANCE_IN_PROGRESS] is MemberAction.REJOIN
    assert member[ErrorCode.MEMBER_ID_REQUIRED] is MemberAction.REJOIN
    assert codes_where(lambda m: m.member is MemberAction.FIND_COORDINATOR) == {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }


def test_no_module_but_errors_keeps_a_set_of_codes() -> None:
    """errors.py is the only source of sets of codes: a name bound at module level
    to a display of two or more ``ErrorCode`` members anywhere else is one of
    its own (a check such as ``error in (NONE, GROUP_ID_NOT_FOUND)`` is not)."""
    import ast
    from pathlib import Path

    import workgroup

    root = Path(workgroup.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "errors.py":
            continue
        module = ast.parse(path.read_text(), str(path))
        bound = [n.value for n in module.body if isinstance(n, ast.Assign | ast.AnnAssign)]
        for node in (inner for value in bound if value for inner in ast.walk(value)):
            if isinstance(node, ast.Set | ast.Tuple | ast.List):
                codes = [
                    e
                    for e in node.elts
                    if isinstance(e, ast.Attribute)
                    and isinstance(e.value, ast.Name)
                    and e.value.id in ("ErrorCode", "_C")
                ]
                if len(codes) >= 2:
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not found, found
