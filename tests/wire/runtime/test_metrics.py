"""Metrics and /healthz of a running app, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import workgroup
from workgroup.runtime import http as metrics_http
from workgroup.runtime.app import Settings
from workgroup.runtime.http import MetricsServer
from workgroup.runtime.metrics import RuntimeMetrics
from workgroup.runtime.runner import AppRunner
from workgroup.testing import run_coordinator

TIMEOUT_S = 20


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with run_coordinator(
        "--min-session-timeout-ms", "500", "--initial-rebalance-delay-ms", "0"
    ) as server:
        yield server.bootstrap


async def raw(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one request on its own connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (h.partition(":") for h in lines)}
    return int(status_line.split(" ")[1]), headers, body


async def http(port: int, request: bytes) -> tuple[int, str]:
    status, _, body = await raw(port, request)
    return status, body.decode()


async def get(port: int, path: str) -> tuple[int, str]:
    return await http(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} {labels} in:\n{text}")


async def test_metrics_and_health_of_a_running_app(bootstrap: str) -> None:
    app = workgroup.App(f"m-{uuid.uuid4().hex[:8]}", grace_ms=100)
    failed_once: list[str] = []

    @app.resources("shard")
    def shards() -> list[str]:
        return ["a", "b", "c"]

    @app.worker("shard", restart_backoff_ms=10)
    async def work(lease: workgroup.Lease) -> None:
        if lease.key == "a" and not failed_once:
            failed_once.append("a")
            raise RuntimeError("first run fails")
        await lease.wait_revoked()

    settings = Settings(
        bootstrap=bootstrap,
        session_timeout_ms=3_000,
        heartbeat_interval_ms=200,
        metrics_port=0,
        grace_ms=100,
    )
    runner = AppRunner(app, settings)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while runner.metrics.unhealthy() or not runner.metrics._members:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
        assert runner.metrics_server is not None
        server_port = runner.metrics_server.port
        status, body = await get(server_port, "/healthz")
        assert (status, body) == (200, "ok\n")
        status, text = await get(server_port, "/metrics")
        assert status == 200
        group = f"{app.name}.shard"
        assert metric(text, "workgroup_owned_resources", group=group, role="active") == 3
        assert metric(text, "workgroup_rebalances_total", group=group) >= 1
        assert metric(text, "workgroup_member_stable", group=group) == 1
        assert metric(text, "workgroup_handler_failures_total", group=group) == 1
        assert metric(text, "workgroup_handler_restarts_total", group=group) == 1
        assert 0 <= metric(text, "workgroup_heartbeat_age_seconds", group=group) < 3
        assert metric(text, "workgroup_lease_acquire_seconds_count", group=group) == 3
        assert metric(text, "workgroup_rebalance_seconds_count", group=group) >= 1
        # The leader (this process, alone) handed the three new shards out.
        assert (
            metric(text, "workgroup_moves_total", group=group, reason="catalog", how="plain") == 3
        )
        assert metric(text, "workgroup_moves_total", group=group, reason="drain") == 0
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT_S)


async def test_health_says_which_group_is_not_settled_and_bad_requests_are_answered() -> None:
    metrics = RuntimeMetrics()

    class Unsettled:
        stable = False
        rebalances = 0
        heartbeat_age_s = None
        moves_total: dict[tuple[str, str], int] = {}

        class state:
            value = "joining"

        def add_listener(self, listener: object) -> None: ...

    metrics.watch("app.shard", Unsettled())  # type: ignore[arg-type]
    server = MetricsServer(metrics, "127.0.0.1", 0)
    await server.start()
    try:
        assert await get(server.port, "/healthz") == (503, "app.shard: joining\n")
        assert (await get(server.port, "/nope"))[0] == 404
        assert (await http(server.port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await http(server.port, b"\x00\x01garbage\r\n\r\n"))[0] == 400
        assert (await http(server.port, b"GET /metrics\r\n\r\n"))[0] == 400
        # A client that sends nothing and hangs up does not disturb the server.
        _, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.close()
        assert (await get(server.port, "/metrics"))[0] == 200
    finally:
        await server.close()


async def test_every_series_exists_from_the_start_and_per_resource_series_follow_leases(
    bootstrap: str,
) -> None:
    """Series at 0 before anything happens (alerts see a value, not an absent
    series); ended leases by reason; the loop's lag; with ``resource_metrics``,
    each held key's token and checkpoint age, gone once it is handed over."""
    app = workgroup.App(f"m-{uuid.uuid4().hex[:8]}", grace_ms=100)
    keys = ["a", "b"]

    @app.resources("shard")
    def shards() -> list[str]:
        return list(keys)

    @app.worker("shard")
    async def work(lease: workgroup.Lease) -> None:
        await lease.commit("at-1")
        await lease.wait_revoked()

    settings = Settings(
        bootstrap=bootstrap,
        session_timeout_ms=3_000,
        heartbeat_interval_ms=200,
        metrics_port=0,
        grace_ms=100,
        resource_metrics=True,
        resource_poll_interval_ms=100,
    )
    runner = AppRunner(app, settings)
    group = f"{app.name}.shard"
    text = runner.metrics.exposition().decode()
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while not runner.metrics._members:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            text = runner.metrics.exposition().decode()
            # Watched, nothing held yet: every series of the group is there at 0.
            assert metric(text, "workgroup_owned_resources", group=group, role="active") >= 0
            assert metric(text, "workgroup_handler_failures_total", group=group) == 0
            assert metric(text, "workgroup_failing_handlers", group=group) == 0
            for reason in ("revoked", "lost", "fenced"):
                assert metric(text, "workgroup_leases_ended_total", group=group, reason=reason) == 0
            while (  # noqa: ASYNC110
                runner.metrics.unhealthy()
                or metric(
                    runner.metrics.exposition().decode(), "workgroup_owned_resources", group=group
                )
                < 2
            ):
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            assert runner.metrics_server is not None
            status, text = await get(runner.metrics_server.port, "/metrics")
            assert status == 200
            assert metric(text, "workgroup_lease_token", group=group, key="a") >= 1
            assert 0 <= metric(text, "workgroup_checkpoint_age_seconds", group=group, key="b") < 5
            assert 0 <= metric(text, "workgroup_event_loop_lag_seconds") < 5
            # A key leaves the list: its lease ends revoked, its series go.
            keys.remove("a")
            while 'key="a"' in runner.metrics.exposition().decode():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            text = runner.metrics.exposition().decode()
            assert metric(text, "workgroup_leases_ended_total", group=group, reason="revoked") == 1
            assert metric(text, "workgroup_lease_token", group=group, key="b") >= 1
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT_S)


class Settled:
    stable = True
    rebalances = 1
    heartbeat_age_s = 0.1
    moves_total: dict[tuple[str, str], int] = {}

    class state:
        value = "stable"

    def add_listener(self, listener: object) -> None: ...


async def test_a_head_request_gets_the_headers_of_the_get_and_no_body() -> None:
    metrics = RuntimeMetrics()
    metrics.watch("app.shard", Settled())  # type: ignore[arg-type]
    server = MetricsServer(metrics, "127.0.0.1", 0)
    await server.start()
    try:
        for path in ("/healthz", "/metrics"):
            get_status, get_headers, get_body = await raw(
                server.port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            )
            status, headers, body = await raw(
                server.port, f"HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            )
            assert (status, body) == (get_status, b""), path
            assert headers["content-type"] == get_headers["content-type"]
            assert int(get_headers["content-length"]) == len(get_body) > 0
            if path == "/healthz":  # the metrics' text may change between two scrapes
                assert headers["content-length"] == get_headers["content-length"]
        assert b"workgroup_member_stable" in get_body
        # Prometheus asks for OpenMetrics; prometheus_client's app answers it.
        status, headers, body = await raw(
            server.port,
            b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n",
        )
        assert status == 200
        assert headers["content-type"].startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n")
    finally:
        await server.close()


async def test_a_blocked_event_loop_is_unhealthy_and_metrics_are_still_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics_http, "HEALTH_TIMEOUT_S", 0.2)
    metrics = RuntimeMetrics()
    metrics.watch("app.shard", Settled())  # type: ignore[arg-type]
    server = MetricsServer(metrics, "127.0.0.1", 0)
    await server.start()
    answers: dict[str, tuple[int, bytes]] = {}

    def fetch(path: str) -> None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as r:
                answers[path] = (r.status, r.read())
        except urllib.error.HTTPError as error:
            with error:
                answers[path] = (error.code, error.read())

    try:
        assert await get(server.port, "/healthz") == (200, "ok\n")
        clients = [threading.Thread(target=fetch, args=(p,)) for p in ("/healthz", "/metrics")]
        for client in clients:
            client.start()
        # The loop is blocked until both answers are in (or 10 s have passed).
        deadline = time.monotonic() + 10
        while len(answers) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # noqa: ASYNC251  (blocking the loop is the point)
        for client in clients:
            client.join(10)
        assert answers["/healthz"] == (503, b"the event loop did not answer within 0.2 s\n")
        status, body = answers["/metrics"]
        assert status == 200
        assert b"workgroup_member_stable" in body
        assert await get(server.port, "/healthz") == (200, "ok\n")  # the loop is back
    finally:
        await server.close()


async def test_a_closed_server_frees_its_port_and_a_taken_port_is_an_os_error() -> None:
    metrics = RuntimeMetrics()
    server = MetricsServer(metrics, "127.0.0.1", 0)
    await server.start()
    taken = MetricsServer(metrics, "127.0.0.1", server.port)
    with pytest.raises(OSError):  # noqa: PT011  (errno differs across systems)
        await taken.start()
    await server.close()
    with pytest.raises(OSError):  # noqa: PT011
        await asyncio.open_connection("127.0.0.1", server.port)
    again = MetricsServer(metrics, "127.0.0.1", server.port)
    await again.start()
    try:
        assert (await get(again.port, "/metrics"))[0] == 200
    finally:
        await again.close()


def test_health_after_the_event_loop_closed_is_503() -> None:
    """The server outlives the loop it was started on (until closed): it says so."""
    server = MetricsServer(RuntimeMetrics(), "127.0.0.1", 0)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(server.start())
    loop.close()
    try:
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10)
        with answer.value as error:
            assert error.code == 503
            assert error.read() == b"the event loop is closed\n"
    finally:
        asyncio.run(server.close())


def test_moves_follow_the_members_totals_and_a_fresh_machine_counts_from_zero() -> None:
    listeners: list[Any] = []

    class Leading(Settled):
        moves_total: dict[tuple[str, str], int] = {}

        def add_listener(self, listener: object) -> None:
            listeners.append(listener)

    member = Leading()
    metrics = RuntimeMetrics()
    metrics.watch("app.shard", member)  # type: ignore[arg-type]

    def moves(reason: str, how: str) -> float | None:
        return metrics.registry.get_sample_value(
            "workgroup_moves_total", {"group": "app.shard", "reason": reason, "how": how}
        )

    assert moves("join", "warmup") == 0  # every series from the start
    member.moves_total = {("join", "warmup"): 3, ("catalog", "plain"): 6}
    listeners[0](member)
    member.moves_total = {("join", "warmup"): 4, ("catalog", "plain"): 6}
    listeners[0](member)
    assert (moves("join", "warmup"), moves("catalog", "plain")) == (4, 6)
    member.moves_total = {("join", "warmup"): 1}  # the machine started afresh
    listeners[0](member)
    assert moves("join", "warmup") == 5
