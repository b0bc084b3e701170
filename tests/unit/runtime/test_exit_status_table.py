"""docs/runtime.md's table of the exit statuses of ``workgroup run`` says what
the code does: a row per status the daemon can exit with, and each error class
a row names exits with that row's status."""

from __future__ import annotations

import re
from pathlib import Path

import workgroup.errors
import workgroup.member.errors
import workgroup.runtime.errors
import workgroup.runtime.watch
from workgroup.errors import ConfigError, WorkgroupError
from workgroup.runtime.daemon import FORCED_EXIT
from workgroup.runtime.watch import OUTPUT_CLOSED_EXIT

RUNTIME_DOC = Path(__file__).parents[3] / "docs" / "runtime.md"


def exit_status_rows() -> dict[int, str]:
    text = RUNTIME_DOC.read_text()
    section = text.split("## Exit status of `workgroup run`", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", section, flags=re.MULTILINE)
    return {int(status): why for status, why in rows}


def error_classes() -> dict[str, type[WorkgroupError]]:
    modules = (workgroup.errors, workgroup.member.errors, workgroup.runtime.errors)
    modules += (workgroup.runtime.watch,)
    return {
        name: value
        for module in modules
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, WorkgroupError)
    }


def test_a_row_for_each_status_the_daemon_exits_with() -> None:
    raised = {c.exit_code for c in error_classes().values()}
    assert set(exit_status_rows()) == {0, FORCED_EXIT, OUTPUT_CLOSED_EXIT} | raised


def test_each_error_named_in_a_row_exits_with_its_status() -> None:
    classes = error_classes()
    named = 0
    for status, why in exit_status_rows().items():
        for name in re.findall(r"`(\w+Error)`", why):
            assert classes[name].exit_code == status, (name, status)
            named += 1
    assert named >= 6


def test_status_2_lists_every_way_the_app_cannot_start() -> None:
    why = exit_status_rows()[ConfigError.exit_code]
    for way in ("settings", "MODULE:APP", "import", "signature", "resource function that raises"):
        assert way in why, way
    assert "ResourceFunctionError" in why
    assert "LegacyLayoutError" in why
