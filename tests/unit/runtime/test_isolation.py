"""isolation="process": handlers in child processes, with a forwarding lease, killed
after the grace period."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.runtime import process_handlers
from tests.unit.runtime.test_lease import SLOT, FakeStore, lease
from workgroup.runtime.handlers import HandlerRun, HandlerStats, RestartPolicy
from workgroup.runtime.isolation import ProcessHandler
from workgroup.runtime.lease import Committed, EndReason, Lease
from workgroup.runtime.slots import read_value
from workgroup.testing import capture_logs

pytestmark = pytest.mark.timeout(60)
NOTHING = Committed(-1, "")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def wait_committed(store: FakeStore, what: str) -> str:
    async with asyncio.timeout(30):
        while SLOT not in store.offsets or not read_value(store.offsets[SLOT].metadata):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    value = read_value(store.offsets[SLOT].metadata)
    assert value is not None, what
    return value


async def test_a_child_process_commits_and_reads_through_the_parents_lease() -> None:
    store = FakeStore()
    held = lease(store)
    run = HandlerRun(
        held,
        ProcessHandler(process_handlers.commit_and_wait),
        name="g",
        restart=RestartPolicy(),
        stats=HandlerStats(),
    )
    run.start()
    value = await wait_committed(store, "the child's commit")
    assert value.startswith("None>shard/3@1 pid ")
    child = int(value.rsplit(" ", 1)[1])
    assert child != os.getpid()
    started = time.monotonic()
    await run.stop(EndReason.REVOKED, grace_s=5.0)
    assert time.monotonic() - started < 3.0  # it returned when told, no kill
    assert not pid_alive(child)


async def test_a_runaway_child_is_killed_after_the_grace_period() -> None:
    store = FakeStore()
    run = HandlerRun(
        lease(store),
        ProcessHandler(process_handlers.runaway),
        name="g",
        restart=RestartPolicy(),
        stats=HandlerStats(),
    )
    run.start()
    child = int((await wait_committed(store, "the child's commit")).split()[1])
    with capture_logs() as logs:
        await run.stop(EndReason.REVOKED, grace_s=0.2)
    assert not pid_alive(child)
    assert any(e["event"] == "worker.process_killed" for e in logs)


async def test_a_failing_child_is_restarted() -> None:
    store = FakeStore()
    stats = HandlerStats()
    run = HandlerRun(
        lease(store),
        ProcessHandler(process_handlers.fail_once),
        name="g",
        restart=RestartPolicy(initial_s=0.01, max_s=0.05),
        stats=stats,
    )
    with capture_logs() as logs:
        run.start()
        async with asyncio.timeout(30):
            while read_value(store.offsets.get(SLOT, NOTHING).metadata) != "second run":  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        await run.stop(EndReason.REVOKED, grace_s=5.0)
    assert stats.restarts == 1
    failed = [e for e in logs if e["event"] == "worker.failed"]
    assert failed[0]["error"] == "HandlerFailed: RuntimeError: first run fails"
    # The user's frames in the child, not the parent's plumbing:
    assert failed[0]["exception"].splitlines()[-2:] == [
        f'  File "{process_handlers.__file__}", line 26, in fail_once',
        '    raise RuntimeError("first run fails")',
    ]


def test_a_handler_whose_signature_does_not_match_is_refused_unopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import multiprocessing

    import cloudpickle

    from workgroup.runtime import isolation
    from workgroup.runtime.isolation import HANDLER_KEY_ENV, _child_main, sign

    marker = tmp_path / "ran"
    # In this process, not a child's: no watch of the parent.
    watched: list[int] = []
    monkeypatch.setattr(isolation, "die_with_parent", lambda pid, **_: watched.append(pid))

    def handler(lease: object) -> None:
        marker.write_text("the handler ran")

    payload = cloudpickle.dumps(handler)
    monkeypatch.setenv(HANDLER_KEY_ENV, "the-parents-key")
    fields = {"group_id": "g", "kind": "shard", "key": 3, "attributes": {}, "role": "active",
              "token": 1}  # fmt: skip
    for signature, why in [
        (sign(payload, b"someone-elses-key"), "its signature does not match"),
        (sign(payload + b"tampered", b"the-parents-key"), "its signature does not match"),
    ]:
        parent, child = multiprocessing.Pipe()
        _child_main(child, payload, signature, fields, os.getppid(), False)
        assert parent.recv() == (
            "failed",
            f"refused to run the shipped handler: {why} ({HANDLER_KEY_ENV})",
        )
    monkeypatch.delenv(HANDLER_KEY_ENV)
    parent, child = multiprocessing.Pipe()
    _child_main(child, payload, sign(payload, b""), fields, os.getppid(), False)
    assert "no signing key" in parent.recv()[1]
    assert not marker.exists()
    assert watched == [os.getppid()] * 3  # before anything else


def test_the_parent_signs_with_a_key_its_children_inherit(monkeypatch: pytest.MonkeyPatch) -> None:
    from workgroup.runtime.isolation import HANDLER_KEY_ENV, handler_key

    monkeypatch.delenv(HANDLER_KEY_ENV, raising=False)
    key = handler_key()
    assert len(key) == 64  # 32 random bytes, hex
    assert os.environ[HANDLER_KEY_ENV].encode() == key
    assert handler_key() == key
    monkeypatch.setenv(HANDLER_KEY_ENV, "configured")
    assert handler_key() == b"configured"


async def test_a_child_process_reports_load_through_the_parents_lease() -> None:
    store = FakeStore()
    reported: list[float] = []
    held = Lease("g", "shard", 3, slot=SLOT, store=store, load_sink=reported.append)
    run = HandlerRun(
        held,
        ProcessHandler(process_handlers.report_loads),
        name="g",
        restart=RestartPolicy(),
        stats=HandlerStats(),
    )
    run.start()
    assert await wait_committed(store, "the child's refusal") == "refused: ConfigError"
    assert reported == [42.5]
    await run.stop(EndReason.REVOKED, grace_s=5.0)


#: A child watching the parent named in its argv; prints its pid, then waits.
WATCHED_CHILD = """
import os, sys, time
from workgroup.runtime.isolation import die_with_parent
die_with_parent(int(sys.argv[1]), death_signal=False)
print(os.getpid(), flush=True)
time.sleep(3600)
"""
#: A middle process that starts a child watching it, then waits.
MIDDLE = """
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid())]).wait()
"""


def test_a_child_whose_parent_is_not_the_expected_one_exits_at_once() -> None:
    """The parent died before the child asked for the death signal: the child's
    parent is then another process (init, a subreaper)."""
    from workgroup.runtime.isolation import ORPHANED_EXIT

    done = subprocess.run(
        [sys.executable, "-c", WATCHED_CHILD, str(os.getpid() + 1_000_000)],
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == ORPHANED_EXIT, done.stderr
    assert done.stdout == b""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_without_the_death_signal_a_child_notices_its_parent_is_gone_by_polling() -> None:
    """No pipe here: only the poll of the parent's pid (``PARENT_POLL_S``)."""
    from tests.processes import is_running
    from workgroup.runtime.isolation import PARENT_POLL_S

    middle = subprocess.Popen([sys.executable, "-c", MIDDLE, WATCHED_CHILD], stdout=subprocess.PIPE)
    assert middle.stdout is not None
    child_pid = int(middle.stdout.readline())
    try:
        assert is_running(child_pid)
        middle.kill()
        killed_at = time.monotonic()
        middle.wait()
        while is_running(child_pid):
            assert time.monotonic() - killed_at < PARENT_POLL_S + 2.0, "the child runs on"
            time.sleep(0.02)
    finally:
        middle.stdout.close()
        if is_running(child_pid):
            os.kill(child_pid, signal.SIGKILL)
