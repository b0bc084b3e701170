"""Spark end-to-end tests: skipped with one clear reason where Java is missing."""

from __future__ import annotations

import pytest

from workgroup_spark import JavaMissingError, check_java

try:
    check_java()
    JAVA_MISSING: str | None = None
except JavaMissingError as exc:
    JAVA_MISSING = str(exc)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if JAVA_MISSING:
        for item in items:
            if "tests/e2e/spark" in str(item.path):
                item.add_marker(pytest.mark.skip(reason=JAVA_MISSING))
