"""A resource function that raises or returns something unusable: one error
naming the group and the function (the user's frames, never locals)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.runtime.test_slots import GROUP, CatalogSource, make_runner
from workgroup.errors import ConfigError
from workgroup.runtime.errors import ResourceFunctionError


class Returning(CatalogSource):
    def __init__(self, value: Any) -> None:
        super().__init__([])
        self.value = value

    def __call__(self) -> Any:
        return self.value


def raising() -> list[str]:
    password = "hunter2"  # a local: never shown
    raise ConnectionError(f"inventory DB refused the connection ({len(password)})")


async def test_a_raising_function_is_named_with_its_group_and_the_users_frames() -> None:
    runner = await make_runner(raising)  # type: ignore[arg-type]
    with pytest.raises(ResourceFunctionError) as raised:
        await runner._read_catalog()
    error = raised.value
    assert isinstance(error, ConfigError)  # at start: exit 2
    assert error.exit_code == 2
    assert error.summary == (
        f"group {GROUP!r}: the resource function {__name__}.raising failed: "
        "ConnectionError: inventory DB refused the connection (7)"
    )
    lines = str(error).splitlines()
    assert lines[0] == error.summary
    assert lines[1:] == [
        f'  File "{__file__}", line {raising.__code__.co_firstlineno + 2}, in raising',
        '    raise ConnectionError(f"inventory DB refused the connection ({len(password)})")',
    ]
    assert "hunter2" not in str(error)


@pytest.mark.parametrize(
    ("value", "what"),
    [
        (
            None,
            "returned None: expected a list of keys (str or int); a function without a "
            "return statement returns None",
        ),
        ("paris", "returned no list: expected a list of keys (str or int), got str"),
        (
            ["paris", "lyon", "paris"],
            "returned a bad list: resource ('shard', 'paris') is listed twice",
        ),
        ([1.5], "returned a bad list: resource keys are str or int, got 1.5 (kind 'shard')"),
    ],
)
async def test_an_unusable_result_is_one_line_naming_the_function(value: Any, what: str) -> None:
    source = Returning(value)
    runner = await make_runner(source)
    with pytest.raises(ResourceFunctionError) as raised:
        await runner._read_catalog()
    function = f"{__name__}.{Returning.__qualname__}"
    assert str(raised.value) == f"group {GROUP!r}: the resource function {function} {what}"
