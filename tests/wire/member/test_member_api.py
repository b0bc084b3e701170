"""GroupMember as an application meets it, against the embedded coordinator:
fatal errors, callbacks (threads, full set, failure policy), rejoin, addresses."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from workgroup.errors import ConfigError, ErrorCode
from workgroup.kafka.messages import CommitPartition, CommitTopic, FetchTopic
from workgroup.member.driver import GroupMember, parse_bootstrap
from workgroup.member.errors import (
    CallbackError,
    CoordinatorUnavailableError,
    FencedInstanceError,
    InconsistentProtocolError,
)
from workgroup.protocol import Protocol
from workgroup.testing import capture_logs, run_coordinator
from workgroup.types import Resource

SHARDS = {"shard": list(range(6))}
ALL = frozenset(("shard", k) for k in range(6))
TIMEOUT_S = 20


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with run_coordinator(
        "--min-session-timeout-ms", "500", "--initial-rebalance-delay-ms", "0"
    ) as server:
        yield server.bootstrap


def member(bootstrap: str, group: str, **options: Any) -> GroupMember:
    settings: dict[str, Any] = {
        "session_timeout_ms": 3_000,
        "heartbeat_interval_ms": 300,
        "rebalance_timeout_ms": 10_000,
        "resources": SHARDS,
    }
    settings.update(options)
    protocols = settings.pop("protocols", [Protocol.of("cooperative-sticky")])
    return GroupMember(bootstrap, group, protocols, **settings)


def new_group() -> str:
    return f"api-{uuid.uuid4().hex[:8]}"


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == name]


# --- the machine decides ------------------------------------------------------------


async def test_request_rejoin_produces_a_new_generation(bootstrap: str) -> None:
    async with member(bootstrap, new_group()) as a:
        async with asyncio.timeout(TIMEOUT_S):
            await a.wait_stable()
            generation = a.generation
            a.request_rejoin("test")
            assert not a.stable  # a rejoin is pending: not settled any more
            await a.wait_for(lambda m: m.stable and m.generation > generation)
        assert a.assignment == ALL


async def test_eager_sticky_keeps_resources_in_place_across_a_rebalance(bootstrap: str) -> None:
    """Eager members revoke everything before rejoining but report what they had,
    so ``sticky`` keeps it where it was, as Kafka's eager StickyAssignor does."""
    group = new_group()
    eager = [Protocol.of("sticky")]
    async with (
        member(bootstrap, group, protocols=eager) as a,
        member(bootstrap, group, protocols=eager) as b,
        asyncio.timeout(TIMEOUT_S),
    ):
        await a.wait_for(lambda m: m.stable and len(m.assignment) == 3)
        await b.wait_for(lambda m: m.stable and len(m.assignment) == 3)
        before = {"a": a.assignment, "b": b.assignment}
        async with member(bootstrap, group, protocols=eager) as c:
            await c.wait_for(lambda m: m.stable and len(m.assignment) == 2)
            await a.wait_for(lambda m: m.stable and m.generation == c.generation)
            await b.wait_for(lambda m: m.stable and m.generation == c.generation)
            assert a.assignment < before["a"]
            assert b.assignment < before["b"]
            assert a.assignment | b.assignment | c.assignment == ALL


async def test_request_rejoin_needs_a_started_member(bootstrap: str) -> None:
    with pytest.raises(Exception, match="not started"):
        member(bootstrap, new_group()).request_rejoin()


# --- fatal errors reach the application -----------------------------------------------


async def test_fenced_instance_interrupts_the_async_with_block(bootstrap: str) -> None:
    group = new_group()
    lost: list[tuple[Resource, ...]] = []

    async def on_lost(resources: tuple[Resource, ...], generation: int) -> None:
        lost.append(resources)

    intruder = member(bootstrap, group, instance_id="same")
    first = member(bootstrap, group, instance_id="same", on_lost=on_lost)
    work_cancelled = False

    async def application() -> None:
        nonlocal work_cancelled
        async with first:
            async with asyncio.timeout(TIMEOUT_S):
                await first.wait_stable()
            await intruder.start()  # the same instance id: the coordinator fences first
            try:
                await asyncio.sleep(TIMEOUT_S)  # the application's work
            except asyncio.CancelledError:
                work_cancelled = True
                raise

    with capture_logs() as logs, pytest.raises(FencedInstanceError, match="'same'") as caught:
        await application()
    try:
        assert work_cancelled
        assert caught.value is first.error
        # The cancellation that interrupted the block is not shown as the cause.
        assert caught.value.__suppress_context__
        assert lost == [tuple(sorted(ALL))]  # on_lost ran before the block ended
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        fatal = [e for e in events(logs, "member.fatal") if e["member_id"] == first.member_id]
        assert len(fatal) == 1  # logged once, by the machine
        assert not events(logs, "member.failed")
    finally:
        await intruder.close()


async def test_wait_closed_raises_the_fatal_error(bootstrap: str) -> None:
    group = new_group()
    first = member(bootstrap, group, instance_id="twice")
    second = member(bootstrap, group, instance_id="twice")
    await first.start()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await first.wait_stable()
            await second.start()
            with pytest.raises(FencedInstanceError):
                await first.wait_closed()
            with pytest.raises(FencedInstanceError):
                await first.wait_stable()
    finally:
        await first.close()
        await second.close()


async def test_wait_closed_returns_once_closed(bootstrap: str) -> None:
    a = member(bootstrap, new_group())
    await a.start()
    async with asyncio.timeout(TIMEOUT_S):
        await a.wait_stable()
        waiting = asyncio.create_task(a.wait_closed())
        await asyncio.sleep(0.1)
        assert not waiting.done()
        await a.close()
        await waiting  # returns: closed, no error


async def test_a_cancellation_from_outside_stays_a_cancellation(bootstrap: str) -> None:
    a = member(bootstrap, new_group())

    async def body() -> None:
        async with a:
            await asyncio.sleep(TIMEOUT_S)

    task = asyncio.create_task(body())
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert a.error is None


async def test_inconsistent_protocol_names_the_groups_protocol(bootstrap: str) -> None:
    group = new_group()
    async with member(bootstrap, group) as a:
        async with asyncio.timeout(TIMEOUT_S):
            await a.wait_stable()
        other = member(bootstrap, group, protocols=[Protocol.of("range")])
        with pytest.raises(InconsistentProtocolError) as caught:
            async with other, asyncio.timeout(TIMEOUT_S):
                await other.wait_stable()
        message = str(caught.value)
        assert "INCONSISTENT_GROUP_PROTOCOL" in message
        assert (
            "the group uses protocol type 'workgroup' with protocol 'cooperative-sticky.v1' "
            "and has 1 member"
        ) in message, message
        assert a.stable


# --- addresses and the connect deadline ------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "",
        " ",
        ":9092",
        "host:1:2",
        "127.0.0.1:99999",
        "127.0.0.1:0",
        "host:http",
        "host",
        "host:",
        "a:1,,b:2",
        "[::1]",
        "[nope]:9092",
        "bad host:9092",
    ],
)
def test_malformed_bootstrap_is_a_config_error(address: str) -> None:
    with pytest.raises(ConfigError, match="bootstrap"):
        GroupMember(address, "g", [Protocol.of("range")])


async def test_refused_connection_retries_until_the_connect_timeout() -> None:
    a = GroupMember(
        "127.0.0.1:1",
        new_group(),
        [Protocol.of("range")],
        connect_timeout_ms=1_500,
        retry_backoff_ms=50,
    )
    started = time.monotonic()
    with capture_logs() as logs, pytest.raises(CoordinatorUnavailableError) as caught:
        async with a, asyncio.timeout(TIMEOUT_S):
            await a.wait_stable()
    elapsed = time.monotonic() - started
    assert 1.4 <= elapsed < 5, elapsed
    assert "1500 ms" in str(caught.value)
    assert "127.0.0.1:1" in str(caught.value)
    warnings = events(logs, "member.coordinator_unavailable")
    assert len(warnings) >= 2
    # One lookup per attempt: the attempts count up by one; warnings at 1, 2, 4...
    assert [w["attempt"] for w in warnings] == list(range(1, len(warnings) + 1))
    for w in warnings:
        power_of_two = w["attempt"] & (w["attempt"] - 1) == 0
        assert w["log_level"] == ("warning" if power_of_two else "debug")
    assert len(events(logs, "member.fatal")) == 1


async def test_unresolvable_host_is_retried_until_the_connect_timeout() -> None:
    a = GroupMember(
        "no-such-host.invalid:9092", new_group(), [Protocol.of("range")], connect_timeout_ms=1_000
    )
    with capture_logs() as logs, pytest.raises(CoordinatorUnavailableError, match="1000 ms"):
        async with a, asyncio.timeout(TIMEOUT_S):
            await a.wait_stable()
    assert events(logs, "member.coordinator_unavailable")
    assert "no-such-host.invalid" in events(logs, "member.coordinator_unavailable")[0]["error"]


def test_parse_bootstrap() -> None:
    assert parse_bootstrap(" [::1]:9092, 127.0.0.1:9093,kafka-1.example.com:1") == [
        ("::1", 9092),
        ("127.0.0.1", 9093),
        ("kafka-1.example.com", 1),
    ]
    assert parse_bootstrap(["a:1", "b:65535"]) == [("a", 1), ("b", 65535)]


def test_ipv6_bootstrap_is_accepted() -> None:
    GroupMember("[::1]:9092, 127.0.0.1:9093", "g", [Protocol.of("range")])
    GroupMember(["localhost:9092", "kafka-1.example.com:9093"], "g", [Protocol.of("range")])


# --- callbacks ---------------------------------------------------------------------------


async def test_callbacks_get_the_change_and_see_the_full_set(bootstrap: str) -> None:
    group = new_group()
    seen: list[tuple[str, frozenset[Resource], frozenset[Resource]]] = []
    a: GroupMember

    def recorder(kind: str) -> Any:
        async def record(resources: tuple[Resource, ...], generation: int) -> None:
            seen.append((kind, frozenset(resources), a.assignment))

        return record

    a = member(
        bootstrap,
        group,
        on_assigned=recorder("assigned"),
        on_revoked=recorder("revoked"),
        on_lost=recorder("lost"),
    )
    async with a:
        async with asyncio.timeout(TIMEOUT_S):
            await a.wait_stable()
        assert seen == [("assigned", ALL, ALL)]
        async with member(bootstrap, group) as b, asyncio.timeout(TIMEOUT_S):
            await a.wait_for(lambda m: m.stable and len(m.assignment) == 3)
            await b.wait_for(lambda m: m.stable and len(m.assignment) == 3)
    kinds = [kind for kind, _, _ in seen]
    assert kinds[:2] == ["assigned", "revoked"]
    _, revoked, after_revoke = seen[1]
    assert len(revoked) == 3
    assert after_revoke == ALL - revoked  # the full set right after the change
    assert all(resources for _, resources, _ in seen)  # no empty calls


async def test_a_blocking_plain_callback_does_not_cost_the_session(bootstrap: str) -> None:
    """A plain callback runs in a worker thread: sleeping longer than the session
    timeout in on_revoked must not stop the heartbeats."""
    group = new_group()
    calls: list[tuple[str, str, float, float]] = []

    def slow_revoke(resources: tuple[Resource, ...], generation: int) -> None:
        started = time.monotonic()
        time.sleep(3)  # longer than the 2 s session
        calls.append(("revoked", threading.current_thread().name, started, time.monotonic()))

    def assigned(resources: tuple[Resource, ...], generation: int) -> None:
        started = time.monotonic()
        calls.append(("assigned", threading.current_thread().name, started, time.monotonic()))

    lost: list[tuple[Resource, ...]] = []
    a = member(
        bootstrap,
        group,
        session_timeout_ms=2_000,
        heartbeat_interval_ms=300,
        on_assigned=assigned,
        on_revoked=slow_revoke,
        on_lost=lambda resources, generation: lost.append(resources),
    )
    async with a:
        async with asyncio.timeout(TIMEOUT_S):
            await a.wait_stable()
        generation = a.generation
        async with member(bootstrap, group, session_timeout_ms=2_000) as b:
            async with asyncio.timeout(TIMEOUT_S):
                await a.wait_for(lambda m: m.stable and len(m.assignment) == 3)
                await b.wait_for(lambda m: m.stable and len(m.assignment) == 3)
            assert a.member_id
            assert a.error is None
    assert not lost
    assert a.generation > generation
    names = {name for _, name, _, _ in calls}
    assert threading.main_thread().name not in names
    kinds = [kind for kind, _, _, _ in calls]
    assert kinds[:2] == ["assigned", "revoked"]
    # One at a time, in order.
    for earlier, later in itertools.pairwise(calls):
        assert earlier[3] <= later[2]


async def test_rounds_and_callbacks_go_on_while_the_apps_threads_are_all_busy(
    bootstrap: str,
) -> None:
    """The application keeps every thread of the loop's default executor busy
    (handlers awaiting ``asyncio.to_thread`` until revoked): the leader still
    computes its rounds and plain callbacks still run, in the member's own threads."""
    from concurrent.futures import ThreadPoolExecutor

    loop = asyncio.get_running_loop()
    busy = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(busy)
    release = threading.Event()
    blocked = asyncio.ensure_future(asyncio.to_thread(release.wait))  # the only thread
    callback_threads: list[str] = []

    def assigned(resources: tuple[Resource, ...], generation: int) -> None:
        callback_threads.append(threading.current_thread().name)

    group = new_group()
    try:
        async with (
            member(bootstrap, group, on_assigned=assigned) as a,
            asyncio.timeout(TIMEOUT_S),
        ):
            await a.wait_for(lambda m: m.stable and m.assignment == ALL)
            async with member(bootstrap, group) as b:
                await a.wait_for(lambda m: m.stable and len(m.assignment) == 3)
                await b.wait_for(lambda m: m.stable and len(m.assignment) == 3)
        assert not blocked.done()  # the default executor's thread was busy all along
        assert callback_threads
        assert all(name.startswith("workgroup-member") for name in callback_threads)
    finally:
        release.set()
        await blocked
        busy.shutdown()


async def test_callback_error_log_keeps_the_change_and_logs_one_line(bootstrap: str) -> None:
    def broken(resources: tuple[Resource, ...], generation: int) -> None:
        raise ValueError("boom")

    a = member(bootstrap, new_group(), on_assigned=broken)
    with capture_logs() as logs:
        async with a, asyncio.timeout(TIMEOUT_S):
            await a.wait_stable()
            assert a.assignment == ALL
    (failed,) = events(logs, "member.callback_failed")
    assert failed["log_level"] == "error"
    assert failed["callback"] == "on_assigned"
    assert failed["generation"] == a.generation
    assert (failed["error_type"], failed["error"]) == ("ValueError", "boom")
    assert "traceback" not in failed
    assert "exc_info" not in failed


async def test_callback_error_log_with_tracebacks(bootstrap: str) -> None:
    async def broken(resources: tuple[Resource, ...], generation: int) -> None:
        raise ValueError("boom")

    a = member(bootstrap, new_group(), on_assigned=broken, log_tracebacks=True)
    with capture_logs() as logs:
        async with a, asyncio.timeout(TIMEOUT_S):
            await a.wait_stable()
    (failed,) = events(logs, "member.callback_failed")
    assert failed["traceback"].startswith("Traceback")
    assert failed["traceback"].endswith("ValueError: boom")


async def test_callback_error_release_gives_the_resources_back(bootstrap: str) -> None:
    calls: list[tuple[frozenset[Resource], int]] = []

    def flaky(resources: tuple[Resource, ...], generation: int) -> None:
        calls.append((frozenset(resources), generation))
        if len(calls) == 1:
            raise RuntimeError("not ready yet")

    a = member(bootstrap, new_group(), on_assigned=flaky, on_callback_error="release")
    with capture_logs() as logs:
        async with a, asyncio.timeout(TIMEOUT_S):
            await a.wait_for(lambda m: m.stable and len(calls) == 2)
            assert a.assignment == ALL
    # Released, rejoined, and assigned again in a new generation.
    assert [resources for resources, _ in calls] == [ALL, ALL]
    assert calls[1][1] > calls[0][1]
    assert len(events(logs, "member.callback_failed")) == 1
    (released,) = events(logs, "member.resources_released")
    assert released["count"] == len(ALL)


async def test_callback_error_fail_fails_the_member(bootstrap: str) -> None:
    lost: list[tuple[Resource, ...]] = []

    def broken(resources: tuple[Resource, ...], generation: int) -> None:
        raise ValueError("boom")

    def on_lost(resources: tuple[Resource, ...], generation: int) -> None:
        lost.append(resources)

    a = member(
        bootstrap, new_group(), on_assigned=broken, on_lost=on_lost, on_callback_error="fail"
    )
    with capture_logs() as logs, pytest.raises(CallbackError) as caught:
        async with a, asyncio.timeout(TIMEOUT_S):
            await a.wait_stable()
    assert isinstance(caught.value.__cause__, ValueError)
    assert "on_assigned" in str(caught.value)
    assert "ValueError: boom" in str(caught.value)
    assert lost == [tuple(sorted(ALL))]
    assert len(events(logs, "member.fatal")) == 1
    assert not events(logs, "member.callback_failed")


def test_unknown_callback_error_policy_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="on_callback_error"):
        GroupMember("127.0.0.1:9092", "g", [Protocol.of("range")], on_callback_error="retry")  # type: ignore[arg-type]


async def test_a_departed_members_resources_wait_for_the_reassignment_delay(
    bootstrap: str,
) -> None:
    group = new_group()
    delay_ms = 1_500
    members = [member(bootstrap, group, reassign_delay_ms=delay_ms) for _ in range(3)]
    for m in members:
        await m.start()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await members[0].wait_for(lambda _: all(len(m.assignment) == 2 for m in members))
        # The leader remembers the assignment: one of the others leaves.
        leaving = next(m for m in members if not m.is_leader)
        staying = [m for m in members if m is not leaving]
        left = leaving.assignment
        await leaving.close()
        closed = time.monotonic()
        async with asyncio.timeout(TIMEOUT_S):
            await staying[0].wait_for(
                lambda _: (staying[0].assignment | staying[1].assignment) >= left
            )
        waited = time.monotonic() - closed
        assert waited >= delay_ms / 1000 - 0.2, f"reassigned after {waited:.2f} s"
        assert staying[0].assignment | staying[1].assignment == ALL
    finally:
        for m in members:
            await m.close()


async def test_a_newcomer_gets_delayed_resources_at_once(bootstrap: str) -> None:
    group = new_group()
    delay_ms = 20_000
    a = member(bootstrap, group, reassign_delay_ms=delay_ms)
    b = member(bootstrap, group, reassign_delay_ms=delay_ms)
    async with a, b:
        async with asyncio.timeout(TIMEOUT_S):
            await a.wait_for(lambda _: len(a.assignment) == 3 and len(b.assignment) == 3)
        await b.close()
        await asyncio.sleep(1.0)
        assert len(a.assignment) == 3  # b's resources wait
        async with member(bootstrap, group, reassign_delay_ms=delay_ms) as c:
            async with asyncio.timeout(TIMEOUT_S):
                await c.wait_for(lambda _: a.assignment | c.assignment == ALL)
            assert len(c.assignment) == 3


async def test_commit_offsets_goes_under_the_generation_the_machine_chooses(
    bootstrap: str,
) -> None:
    """Owned: accepted under the current generation; never owned: refused by the
    member itself (nothing sent); after close: refused as not a member."""
    group = new_group()
    a = member(bootstrap, group, resources={"shard": [0, 1]})
    topic = CommitTopic("leases", (CommitPartition(0, 7, "a"), CommitPartition(1, 8, "b")))
    resources = {("leases", 0): ("shard", 0), ("leases", 1): ("shard", 9)}
    async with a, asyncio.timeout(TIMEOUT_S):
        await a.wait_stable()
        result = await a.commit_offsets([topic], resources=resources)
        codes = {p.partition: p.error for t in result.topics for p in t.partitions}
        assert codes == {0: ErrorCode.NONE, 1: ErrorCode.ILLEGAL_GENERATION}
        fetched = await a.fetch_offsets([FetchTopic("leases", (0, 1))])
        offsets = {p.partition: p.offset for t in fetched.topics for p in t.partitions}
        assert offsets == {0: 7, 1: -1}
    after = await a.commit_offsets([topic], resources=resources)
    assert {p.error for t in after.topics for p in t.partitions} == {ErrorCode.UNKNOWN_MEMBER_ID}
