"""The Spark Connect server runner without a JVM: the SPARK_HOME its workers get,
what it runs, and a server that fails to start (a stand-in ``spark-submit``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workgroup_spark import connect_server
from workgroup_spark.connect_server import ConnectServerError, run_connect_server


def fake_package(root: Path, script: str) -> Path:
    package = root / "pyspark"
    (package / "bin").mkdir(parents=True)
    (package / "jars").mkdir()
    (package / "python" / "lib").mkdir(parents=True)
    (package / "python" / "lib" / "pyspark.zip").write_bytes(b"")
    (package / "python" / "lib" / "py4j-0.10.9.9-src.zip").write_bytes(b"")
    (package / "bin" / "spark-submit").write_text(script)
    return package


def test_workers_import_the_installed_pyspark_not_the_zip(tmp_path: Path) -> None:
    package = fake_package(tmp_path, "")
    home = connect_server.worker_spark_home(package, tmp_path / "home")
    assert (home / "jars").resolve() == package / "jars"
    assert (home / "bin" / "spark-submit").exists()
    assert sorted(p.name for p in (home / "python" / "lib").iterdir()) == ["py4j-0.10.9.9-src.zip"]
    assert connect_server.worker_spark_home(package, tmp_path / "home") == home  # again: no error


def test_a_server_that_exits_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = fake_package(tmp_path, 'echo "no java here: $SPARK_HOME" >&2\nexit 3\n')
    monkeypatch.setattr(connect_server, "spark_home", lambda: package)
    with (
        pytest.raises(ConnectServerError, match=r"exited \(3\)") as caught,
        run_connect_server(tmp_path / "logs" / "server.log", start_timeout_s=30),
    ):
        pytest.fail("the server did not start")
    assert "no java here" in str(caught.value)  # the tail of its log


def test_the_server_shares_generated_code_across_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's own server main forces per-session class loaders (each run of a
    query compiles its code again): the server runs the plugin's driver program
    with isolation off, and a parent's Connect-client mark does not reach it."""
    package = fake_package(
        tmp_path, 'echo "argv: $*"; echo "mode: ${SPARK_CONNECT_MODE_ENABLED:-unset}"; exit 3\n'
    )
    monkeypatch.setattr(connect_server, "spark_home", lambda: package)
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")  # this process made a Connect session
    with (
        pytest.raises(ConnectServerError, match=r"exited \(3\)") as caught,
        run_connect_server(tmp_path / "server.log", start_timeout_s=30, warm_workers=False),
    ):
        pytest.fail("the server did not start")
    told = str(caught.value)
    assert "--conf spark.sql.artifact.isolation.enabled=false" in told
    assert "--conf spark.sql.artifact.isolation.alwaysApplyClassloader=false" in told
    argv = told.split("argv: ", 1)[1].splitlines()[0].split()
    assert argv[-1].endswith("workgroup_spark/connect_main.py")
    assert "mode: unset" in told


def test_a_server_that_never_listens_times_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = fake_package(tmp_path, "exec sleep 60\n")
    monkeypatch.setattr(connect_server, "spark_home", lambda: package)
    with (
        pytest.raises(ConnectServerError, match=r"did not listen on 127\.0\.0\.1:\d+ within 1 s"),
        run_connect_server(tmp_path / "server.log", start_timeout_s=1.0),
    ):
        pytest.fail("the server did not start")
