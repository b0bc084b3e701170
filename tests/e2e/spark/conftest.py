"""Spark end-to-end tests: skipped with one clear reason where Java is missing; the
Spark Connect server they share."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from workgroup_spark import JavaMissingError, check_java
from workgroup_spark.connect_server import ConnectServer

ROOT = Path(__file__).resolve().parents[3]

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


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """One Spark Connect server on a free loopback port for the whole run (its start
    costs 10-20 s and a JVM): thin daemons reach it with ``remote=``."""
    if JAVA_MISSING:
        pytest.skip(JAVA_MISSING)
    from workgroup_spark.connect_server import run_connect_server

    log = tmp_path_factory.mktemp("spark-connect") / "server.log"
    # Its Python workers run the daemons' foreachBatch functions: they import this
    # checkout's examples, workgroup and workgroup_spark.
    path = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "plugins" / "spark"),
                                         os.environ.get("PYTHONPATH")]))  # fmt: skip
    # At INFO (the server's default is WARN): test_warmup counts the code the
    # server generates, which Spark logs at INFO.
    with run_connect_server(
        log, env={"PYTHONPATH": path}, conf={"spark.log.level": "INFO"}
    ) as server:
        yield server


#: What pyspark leaves in the test process's environment after a Connect session
#: (children inherit it: JVM daemons started later would take it for theirs).
CONNECT_MARKS = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


@pytest.fixture(autouse=True)
def _no_connect_marks_left_behind() -> Iterator[None]:
    before = {name: os.environ.get(name) for name in CONNECT_MARKS}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
