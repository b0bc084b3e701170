"""What a user of ``workgroup run`` sees when their own code fails: a handler
that raises (its frames once, then a count; ``--on-failure`` retry, release to
another daemon, stop with exit 3; /healthz and the metrics), a resource
function that raises (at start: exit 2 naming the group and the function;
while running: once, then counts), and a coroutine handler that blocks the
event loop (the handler and the line named, with the fix)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_daemon_diagnostics import env, events, wait_for
from workgroup.testing import free_port, run_coordinator

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.e2e.apps.failing_app:app"
SECRETS = ("hunter2-handler", "hunter2-source")

pytestmark = pytest.mark.slow


@pytest.fixture
def bootstrap() -> Iterator[str]:
    with run_coordinator("--min-session-timeout-ms", "1000") as server:
        yield server.bootstrap


def daemon(bootstrap: str, *args: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "workgroup", "run", APP, "--bootstrap", bootstrap,
         "--log-format", "json", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env(**extra),
    )  # fmt: skip


class Lines:
    """A daemon's JSON log, read from the file its stderr goes to."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> list[dict[str, Any]]:
        text = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        # Whole lines only: the daemon may be writing the last one as we read.
        whole = text.split("\n")[:-1]
        return [json.loads(line) for line in whole if line.startswith("{")]

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["event"] == name]


def daemon_to_file(bootstrap: str, path: Path, *args: str, **extra: str) -> subprocess.Popen[bytes]:
    with path.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "workgroup", "run", APP, "--bootstrap", bootstrap,
             "--log-format", "json", *args],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out,
            env=env(**extra),
        )  # fmt: skip


def end(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    return process.wait(timeout=60)


def no_secrets(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_a_raising_resource_function_at_start_is_one_short_error_and_exit_2(
    bootstrap: str, tmp_path: Path
) -> None:
    flag = tmp_path / "fails"
    flag.touch()
    process = daemon(bootstrap, SOURCE_FAILS=str(flag))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    error = stderr[stderr.index("error: ") :].splitlines()
    assert error == [
        "error: group 'failing.shard': the resource function "
        "tests.e2e.apps.failing_app.shards failed: "
        "RuntimeError: cannot list shards (connecting with 14 chars)",
        f'  File "{ROOT}/tests/e2e/apps/failing_app.py", line 32, in shards',
        '    raise RuntimeError(f"cannot list shards (connecting with {len(password)} chars)")',
    ]
    assert "Traceback" not in stderr
    no_secrets(stderr)


def test_a_resource_function_failing_while_running_is_said_once_then_counted(
    bootstrap: str, tmp_path: Path
) -> None:
    flag = tmp_path / "fails"
    lines = Lines(tmp_path / "stderr")
    process = daemon_to_file(bootstrap, lines.path, SOURCE_FAILS=str(flag), FAIL_POLL_MS="100")
    try:
        wait_for(lambda: len(lines.named("lease.acquired")) == 2, "both shards acquired")
        flag.touch()
        wait_for(lambda: lines.named("member.resource_source_failing")[-1:] != []
                 and lines.named("member.resource_source_failing")[-1]["failures"] >= 8,
                 "eight failures")  # fmt: skip
        flag.unlink()
        wait_for(lambda: lines.named("member.resource_source_recovered") != [], "recovered")
    finally:
        assert end(process) == 0
    [first] = lines.named("member.resource_source_failed")
    assert first["group"] == "failing.shard"
    assert first["error"].startswith(
        "group 'failing.shard': the resource function tests.e2e.apps.failing_app.shards "
        "failed: RuntimeError"
    )
    assert first["exception"].splitlines()[0].endswith('failing_app.py", line 32, in shards')
    counts = [e["failures"] for e in lines.named("member.resource_source_failing")]
    assert counts[:3] == [2, 4, 8]  # not one line per poll
    assert all("exception" not in e for e in lines.named("member.resource_source_failing"))
    no_secrets(lines.path.read_text(encoding="utf-8"))


def test_a_raising_handler_with_on_failure_stop_ends_the_daemon_with_exit_3(
    bootstrap: str,
) -> None:
    process = daemon(bootstrap, "--on-failure", "stop", "--max-failures", "3", FAIL_KEYS="beta")
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 3
    assert stderr.strip().splitlines()[-1] == (
        "error: the handler of failing.shard shard/beta failed 3 times in a row "
        "(ValueError: bad record in beta (15)); on_failure='stop' stops the daemon"
    )
    failed = [e for e in events(stderr) if e["event"] == "worker.failed"]
    assert [e["failures"] for e in failed] == [1, 2, 3]
    assert failed[0]["exception"].splitlines() == [
        f'  File "{ROOT}/tests/e2e/apps/failing_app.py", line 40, in work',
        '    raise ValueError(f"bad record in {lease.key} ({len(secret)})")',
    ]
    assert all("exception" not in e for e in failed[1:])
    no_secrets(stderr)


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_failing_handler_turns_healthz_503_and_shows_in_the_metrics(
    bootstrap: str, tmp_path: Path
) -> None:
    port = free_port()
    lines = Lines(tmp_path / "stderr")
    process = daemon_to_file(
        bootstrap, lines.path, "--max-failures", "3", "--metrics-port", str(port),
        FAIL_KEYS="beta",
    )  # fmt: skip
    try:
        wait_for(lambda: lines.named("worker.failing") != [], "the handler is failing")
        status, body = get(port, "/healthz")
        assert status == 503
        assert body == (
            "failing.shard: handler of shard/beta failed 3 times in a row: "
            "ValueError: bad record in beta (15)\n"
        )
        _, metrics = get(port, "/metrics")
        assert 'workgroup_failing_handlers{group="failing.shard"} 1.0' in metrics
        assert process.poll() is None  # "retry": it goes on
    finally:
        assert end(process) == 0


def test_on_failure_release_moves_the_resource_to_another_daemon(
    bootstrap: str, tmp_path: Path
) -> None:
    work = tmp_path / "work.log"
    failing = Lines(tmp_path / "a.stderr")
    healthy = Lines(tmp_path / "b.stderr")
    args = ("--on-failure", "release", "--max-failures", "3")
    a = daemon_to_file(bootstrap, failing.path, *args, FAIL_KEYS="beta", WORK_LOG=str(work))
    b: subprocess.Popen[bytes] | None = None
    try:
        # Alone, A gets beta back after releasing it (nobody else can run it).
        wait_for(lambda: len(failing.named("worker.released")) >= 1, "A releases beta")
        b = daemon_to_file(bootstrap, healthy.path, *args, WORK_LOG=str(work))

        def b_runs_beta() -> bool:
            return work.exists() and f"beta {b.pid}" in work.read_text(encoding="utf-8")

        wait_for(b_runs_beta, "B runs beta", timeout_s=60)
        released = len(failing.named("worker.released"))
        failures = len(failing.named("worker.failed"))
        time.sleep(2.0)  # several rebalance-free seconds: beta stays away from A
        assert len(failing.named("worker.released")) == released
        assert len(failing.named("worker.failed")) == failures
    finally:
        assert end(a) == 0
        if b is not None:
            assert end(b) == 0
    line = failing.named("worker.released")[0]
    assert (line["key"], line["failures"], line["error"]) == (
        "beta",
        3,
        "ValueError: bad record in beta (15)",
    )
    assert not healthy.named("worker.failed")


def test_a_coroutine_handler_that_blocks_the_loop_is_named_with_the_fix(
    bootstrap: str, tmp_path: Path
) -> None:
    lines = Lines(tmp_path / "stderr")
    process = daemon_to_file(bootstrap, lines.path, BLOCK_KEYS="alpha", BLOCK_S="2.5")
    try:
        wait_for(lambda: lines.named("app.event_loop_unblocked") != [], "the loop runs again")
    finally:
        assert end(process) == 0
    [blocked] = lines.named("app.event_loop_blocked")
    assert blocked["handler"] == "shard/alpha"
    assert blocked["task"] == "workgroup-handler-shard/alpha"
    assert blocked["where"].endswith(
        'failing_app.py:43 in work: time.sleep(float(os.environ.get("BLOCK_S", "3")))  '
        "# noqa: ASYNC251 (the mistake)"
    )
    assert "asyncio.to_thread" in blocked["hint"]
    assert blocked["blocked_ms"] >= 1000
    [unblocked] = lines.named("app.event_loop_unblocked")
    assert 2000 <= unblocked["blocked_ms"] < 10_000
