"""What a user sees when a handler raises: the user's frames once, then a count;
``on_failure`` after ``max_failures`` in a row; failing handlers on /healthz and
in the metrics."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from tests.unit.runtime.test_lease import FakeStore, lease
from workgroup.errors import ConfigError
from workgroup.runtime.app import App, Settings
from workgroup.runtime.config import read_environment, resolve
from workgroup.runtime.handlers import HandlerRun, HandlerStats, OnFailure, RestartPolicy
from workgroup.runtime.http import MetricsServer
from workgroup.runtime.lease import EndReason, Lease
from workgroup.runtime.metrics import RuntimeMetrics
from workgroup.testing import FakeClock, capture_logs

FAST = RestartPolicy(initial_s=0.01, max_s=0.02, max_failures=3)


class Failing:
    """A handler that raises ``ValueError`` on its first ``fail_times`` calls
    (all of them by default), then waits for its revocation."""

    def __init__(self, fail_times: int = 1_000_000, errors: tuple[str, ...] = ()) -> None:
        self.calls = 0
        self.fail_times = fail_times
        self.errors = errors

    async def __call__(self, lease: Lease) -> None:
        self.calls += 1
        secret_token = "s3cr3t-value"  # a local: never printed
        if self.calls <= self.fail_times:
            why = self.errors[self.calls - 1] if self.calls <= len(self.errors) else "beta"
            raise ValueError(f"bad record in {why} ({len(secret_token)})")
        await lease.wait_revoked()


def run_of(
    handler: Failing,
    policy: RestartPolicy = FAST,
    *,
    failing: list[bool] | None = None,
    gave_up: list[HandlerRun] | None = None,
    clock: FakeClock | None = None,
) -> HandlerRun:
    return HandlerRun(
        lease(FakeStore()) if clock is None else lease(FakeStore(), clock=clock),
        handler,
        name="g",
        restart=policy,
        stats=HandlerStats(),
        on_failing=None if failing is None else (lambda run: failing.append(run.failing)),
        on_gave_up=None if gave_up is None else gave_up.append,
    )


async def until(predicate: object, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():  # type: ignore[operator]  # noqa: ASYNC110 (polls state)
            await asyncio.sleep(0.01)


async def test_the_first_failure_shows_the_users_frames_later_ones_one_line_with_a_count() -> None:
    handler = Failing()
    with capture_logs() as logs:
        run = run_of(handler, dataclasses.replace(FAST, max_failures=100))
        run.start()
        await until(lambda: handler.calls >= 4)
        await run.stop(EndReason.REVOKED, grace_s=1.0)
    failed = [e for e in logs if e["event"] == "worker.failed"][:3]
    assert [e["failures"] for e in failed] == [1, 2, 3]
    assert all(e["error"] == "ValueError: bad record in beta (12)" for e in failed)
    frames = failed[0]["exception"]
    assert "test_handler_failures.py" in frames
    assert 'raise ValueError(f"bad record in {why} ({len(secret_token)})")' in frames
    assert "workgroup/runtime/handlers.py" not in frames  # the user's frames only
    assert "tenacity" not in frames
    assert all("exception" not in e for e in failed[1:])
    assert "s3cr3t-value" not in repr(logs)


async def test_another_error_shows_its_frames_again() -> None:
    handler = Failing(fail_times=3, errors=("beta", "beta", "gamma"))
    with capture_logs() as logs:
        run = run_of(handler, dataclasses.replace(FAST, max_failures=100))
        run.start()
        await until(lambda: handler.calls >= 4)
        await run.stop(EndReason.REVOKED, grace_s=1.0)
    failed = [e for e in logs if e["event"] == "worker.failed"]
    assert [("exception" in e, e["failures"]) for e in failed] == [
        (True, 1),
        (False, 2),
        (True, 3),
    ]


@pytest.mark.parametrize("policy", ["release", "stop"])
async def test_release_and_stop_give_up_after_max_failures(policy: OnFailure) -> None:
    handler = Failing()
    gave_up: list[HandlerRun] = []
    failing: list[bool] = []
    with capture_logs() as logs:
        run = run_of(
            handler, dataclasses.replace(FAST, on_failure=policy), failing=failing, gave_up=gave_up
        )
        run.start()
        await until(lambda: gave_up)
        await asyncio.sleep(0.1)  # no restart after giving up
        await run.stop(EndReason.RELEASED, grace_s=1.0)
    assert handler.calls == 3
    assert gave_up == [run]
    assert failing == [True]
    assert run.gave_up
    assert run.failing
    [line] = [e for e in logs if e["event"] == "worker.gave_up"]
    assert (line["failures"], line["on_failure"]) == (3, policy)
    assert line["error"] == "ValueError: bad record in beta (12)"
    assert "restart_in_s" not in [e for e in logs if e["event"] == "worker.failed"][-1]


async def test_retry_says_once_that_the_handler_is_failing_and_goes_on() -> None:
    handler = Failing()
    gave_up: list[HandlerRun] = []
    failing: list[bool] = []
    with capture_logs() as logs:
        run = run_of(handler, failing=failing, gave_up=gave_up)
        run.start()
        await until(lambda: handler.calls >= 6)
        await run.stop(EndReason.REVOKED, grace_s=1.0)
    assert gave_up == []
    assert failing == [True]
    [line] = [e for e in logs if e["event"] == "worker.failing"]
    assert line["failures"] == 3
    assert "on_failure='retry'" in line["what"]


async def test_an_attempt_that_runs_long_enough_ends_the_row_of_failures() -> None:
    handler = Failing(fail_times=3)
    failing: list[bool] = []
    clock = FakeClock()
    policy = dataclasses.replace(FAST, initial_s=1.0, max_s=10.0, healthy_after_s=60.0)
    with capture_logs() as logs:
        run = run_of(handler, policy, failing=failing, clock=clock)
        run.start()
        await clock.wait_for_sleepers()  # the back-off after the first failure
        await clock.run_for(1.0 + 2.0)  # the back-offs after the first two failures
        await until(lambda: failing == [True])  # the third: failing, 4 s of back-off
        await clock.run_for(4.0)
        assert handler.calls == 4  # runs on: healthy once it ran 60 s
        await clock.run_for(59.9)
        assert failing == [True]  # not yet healthy_after_s
        await clock.run_for(0.1)
        await until(lambda: failing == [True, False])
        await run.stop(EndReason.REVOKED, grace_s=1.0)
    assert run.failures_in_row == 0
    assert not run.failing
    [line] = [e for e in logs if e["event"] == "worker.recovered"]
    assert line["after_failures"] == 3


async def test_healthz_names_failing_handlers_and_the_gauge_counts_them() -> None:
    metrics = RuntimeMetrics()
    server = MetricsServer(metrics, "127.0.0.1", 0)
    await server.start()
    try:
        metrics.handler_failing("billing.shards", ("shards", "beta"), 5, "ValueError: bad")
        status, body = await get(server.port, "/healthz")
        assert status == 503
        assert (
            body
            == "billing.shards: handler of shards/beta failed 5 times in a row: ValueError: bad\n"
        )
        _, exposition = await get(server.port, "/metrics")
        assert 'workgroup_failing_handlers{group="billing.shards"} 1.0' in exposition
        metrics.handler_recovered("billing.shards", ("shards", "beta"))
        metrics.handler_recovered("billing.shards", ("shards", "beta"))  # once only
        _, exposition = await get(server.port, "/metrics")
        assert 'workgroup_failing_handlers{group="billing.shards"} 0.0' in exposition
        assert metrics.unhealthy() == []
    finally:
        await server.close()


async def get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    answer = (await reader.read()).decode()
    writer.close()
    await writer.wait_closed()
    head, _, body = answer.partition("\r\n\r\n")
    return int(head.split(" ")[1]), body


# --- declaring the policy --------------------------------------------------------------


def test_the_policy_is_declared_per_worker_and_leader_with_an_app_wide_default() -> None:
    app = App("billing")

    @app.resources("shards")
    def shards() -> list[str]:
        return ["a"]

    @app.worker("shards", on_failure="release", max_failures=2)
    async def work(lease: Lease) -> None: ...

    @app.leader("planner", on_failure="stop")
    async def plan(lease: Lease) -> None: ...

    assert (app.workers["shards"].on_failure, app.workers["shards"].max_failures) == ("release", 2)
    assert (app.leaders["planner"].on_failure, app.leaders["planner"].max_failures) == (
        "stop",
        None,
    )
    settings = resolve(
        Settings(),
        flags={"max_failures": 7},
        environ={"WORKGROUP_ON_FAILURE": "release"},
        config_file=None,
    )
    assert (settings.on_failure, settings.max_failures) == ("release", 7)


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (
            {"on_failure": "explode"},
            "worker 'shards': on_failure must be one of 'retry', 'release', 'stop', got 'explode'",
        ),
        ({"max_failures": 0}, "worker 'shards': max_failures must be an integer >= 1, got 0"),
    ],
)
def test_a_bad_policy_is_one_clear_line(declare: dict[str, object], message: str) -> None:
    app = App("billing")
    with pytest.raises(ConfigError) as raised:
        app.worker("shards", **declare)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_a_bad_policy_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="on_failure must be one of"):
        resolve(Settings(), flags={}, environ={"WORKGROUP_ON_FAILURE": "never"}, config_file=None)
    with pytest.raises(ConfigError, match="WORKGROUP_MAX_FAILURES must be an integer"):
        read_environment({"WORKGROUP_MAX_FAILURES": "five"})


async def test_a_handler_failing_after_its_lease_ended_is_logged_and_its_task_ends_clean() -> None:
    """Nothing restarts it (its lease ended); its error is logged once, and the
    task ends cleanly (nothing for asyncio to print as never retrieved)."""

    async def fails_once_revoked(lease: Lease) -> None:
        await lease.wait_revoked()
        raise ValueError("the last step failed")

    run = HandlerRun(
        lease(FakeStore()), fails_once_revoked, name="g", restart=FAST, stats=HandlerStats()
    )
    with capture_logs() as logs:
        run.start()
        await until(lambda: run.started)
        await run.stop(EndReason.REVOKED, grace_s=1.0)
        await run.wait_finished()
    task = run._task
    assert task is not None
    assert task.done()
    assert task.exception() is None
    failed = [e for e in logs if e["event"] == "worker.failed"]
    assert len(failed) == 1, failed
    assert failed[0]["error"] == "ValueError: the last step failed"
    assert failed[0]["lease"] == run.lease.end_reason
    assert "restart_in_s" not in failed[0]
    assert 'raise ValueError("the last step failed")' in failed[0]["exception"]
    assert not [e for e in logs if e["event"] == "worker.task_failed"]
