"""The warm worker pool of a Spark Connect server, without Spark: the launcher (the
server's ``PYSPARK_PYTHON``) runs a probe module as a fork of the pool, which
imported the probe's module before the launcher asked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from workgroup_spark import worker_pool
from workgroup_spark.worker_launcher import POOL_SOCKET_ENV

PLUGIN = Path(worker_pool.__file__).resolve().parents[1]
ROOT = PLUGIN.parents[1]

#: Imported by the pool: records which process imported it.
PRELOADED = """
import os
IMPORTED_BY = os.getpid()
"""

#: The worker: reports on stdout where it runs, then waits or exits as told.
PROBE = """
import json, os, sys, time
import probe_preloaded
report = {
    "pid": os.getpid(),
    "preloaded_by": probe_preloaded.IMPORTED_BY,
    "cwd": os.getcwd(),
    "marker": os.environ.get("PROBE_MARKER"),
    "name": __name__,
}
print(json.dumps(report), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if os.environ.get("PROBE_SLEEP"):
    time.sleep(float(os.environ["PROBE_SLEEP"]))
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


def wait_until(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def modules(tmp_path: Path) -> Path:
    directory = tmp_path / "modules"
    directory.mkdir()
    (directory / "probe_preloaded.py").write_text(PRELOADED)
    (directory / "probe_worker.py").write_text(PROBE)
    (directory / "probe_declined.py").write_text(PROBE)
    return directory


def python_path(modules: Path) -> str:
    return os.pathsep.join([str(modules), str(ROOT), str(PLUGIN)])


@pytest.fixture
def pool(tmp_path: Path, modules: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A pool that preloads ``probe_preloaded`` and runs ``probe_worker`` (only)."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"wg-pool-test-{os.getpid()}.sock"
    log = (tmp_path / "pool.log").open("wb")
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "workgroup_spark.worker_pool", str(path)),
            *("probe_preloaded", "--run", "probe_worker"),
        ],
        env={**os.environ, "PYTHONPATH": python_path(modules)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        assert worker_pool.wait_ready(path, 60.0), (tmp_path / "pool.log").read_text()
        yield path, process
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
        log.close()
        path.unlink(missing_ok=True)


def launch(
    tmp_path: Path, modules: Path, socket_path: Path | None, module: str, **env: str
) -> subprocess.Popen[str]:
    launcher = worker_pool.launcher_script(tmp_path / "bin")
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    environment = {**os.environ, "PYTHONPATH": python_path(modules), "PROBE_MARKER": "m1", **env}
    if socket_path is not None:
        environment[POOL_SOCKET_ENV] = str(socket_path)
    return subprocess.Popen(
        [str(launcher), "-m", module],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def first_report(process: subprocess.Popen[str]) -> dict[str, object]:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, "the worker reported nothing"
    report: dict[str, object] = json.loads(line)
    return report


def test_a_worker_is_a_fork_of_the_warm_pool(
    tmp_path: Path, modules: Path, pool: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    socket_path, pool_process = pool
    worker = launch(tmp_path, modules, socket_path, "probe_worker", PROBE_EXIT="7")
    report = first_report(worker)
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 7  # the fork's exit status is the launcher's
    assert report["preloaded_by"] == pool_process.pid  # imported once, by the pool
    assert report["pid"] not in (pool_process.pid, worker.pid)
    assert report["cwd"] == str(tmp_path / "cwd")  # the launcher's working directory
    assert report["marker"] == "m1"  # and environment
    assert report["name"] == "__main__"
    assert "to stderr" in err  # and standard streams


def test_sigterm_to_the_launcher_ends_its_worker(
    tmp_path: Path, modules: Path, pool: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    worker = launch(tmp_path, modules, pool[0], "probe_worker", PROBE_SLEEP="60")
    fork = int(str(first_report(worker)["pid"]))
    worker.send_signal(signal.SIGTERM)
    worker.communicate(timeout=30)
    assert worker.returncode != 0
    wait_until(lambda: not alive(fork), 10, "the fork to end")


def test_a_worker_whose_launcher_is_killed_exits(
    tmp_path: Path, modules: Path, pool: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    worker = launch(tmp_path, modules, pool[0], "probe_worker", PROBE_SLEEP="60")
    fork = int(str(first_report(worker)["pid"]))
    worker.kill()
    worker.communicate(timeout=30)
    wait_until(lambda: not alive(fork), 10, "the fork to notice its launcher is gone")


def test_a_module_the_pool_does_not_run_runs_in_the_launcher(
    tmp_path: Path, modules: Path, pool: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    worker = launch(tmp_path, modules, pool[0], "probe_declined", PROBE_EXIT="3")
    report = first_report(worker)
    worker.communicate(timeout=30)
    assert worker.returncode == 3
    assert report["pid"] == worker.pid == report["preloaded_by"]  # exec'd python, cold


def test_without_a_pool_the_launcher_is_plain_python(tmp_path: Path, modules: Path) -> None:
    missing = tmp_path / "no-pool.sock"
    for socket_path in (missing, None):
        worker = launch(tmp_path, modules, socket_path, "probe_worker", PROBE_EXIT="5")
        report = first_report(worker)
        worker.communicate(timeout=30)
        assert worker.returncode == 5
        assert report["pid"] == worker.pid == report["preloaded_by"]
    plain = subprocess.run(
        [str(worker_pool.launcher_script(tmp_path / "bin")), "-c", "import sys; print(sys.argv)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert plain.stdout.strip() == "['-c']"


def test_a_module_that_fails_to_preload_is_reported_and_skipped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert worker_pool.preload(["json", "no_such_module_here"]) == ["json"]
    err = capsys.readouterr().err
    assert "no_such_module_here not preloaded (ModuleNotFoundError" in err
    assert len(err.strip().splitlines()) == 1


def test_the_connect_server_runs_its_workers_through_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.spark_plugin.test_connect_server import fake_package
    from workgroup_spark import connect_server

    script = textwrap.dedent(
        f"""\
        echo "python=$PYSPARK_PYTHON pool=${POOL_SOCKET_ENV}" >&2
        exit 3
        """
    )
    package = fake_package(tmp_path, script)
    monkeypatch.setattr(connect_server, "spark_home", lambda: package)
    with (
        pytest.raises(connect_server.ConnectServerError) as caught,
        connect_server.run_connect_server(tmp_path / "logs" / "server.log", start_timeout_s=30),
    ):
        pytest.fail("the server did not start")
    launcher = tmp_path / "logs" / "worker-python" / "python"
    assert f"python={launcher} pool=/" in str(caught.value)
    assert "worker_launcher.py" in launcher.read_text()
