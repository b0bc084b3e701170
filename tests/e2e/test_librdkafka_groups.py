"""librdkafka (confluent-kafka) consumer groups on the embedded coordinator.

librdkafka sends JoinGroup only once a subscribed topic exists in Metadata.
The embedded coordinator has no topics; by default it reports requested topics
as existing with no partitions, and librdkafka consumers form groups with empty
assignments.  Started with ``--unknown-topics`` (Kafka's answer for a missing
topic) they never join (documented in docs/compatibility.md).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import confluent_kafka
import pytest
from conftest import CoordinatorProcess, start_coordinator
from wire.raw_client import DescribeGroupsRequest, RawClient

GROUP = "librdkafka-group"


class Consumer(threading.Thread):
    """One confluent-kafka consumer polling in its own thread until stopped."""

    def __init__(self, bootstrap: str, name: str, strategy: str, **extra: Any) -> None:
        super().__init__(name=name, daemon=True)
        self.events: list[tuple[str, int]] = []
        self.errors: list[Any] = []
        self._stop_polling = threading.Event()
        self._consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "client.id": name,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "partition.assignment.strategy": strategy,
                "error_cb": self.errors.append,
                **extra,
            }
        )

    def run(self) -> None:
        self._consumer.subscribe(
            ["work"],
            on_assign=lambda _c, parts: self.events.append(("assign", len(parts))),
            on_revoke=lambda _c, parts: self.events.append(("revoke", len(parts))),
        )
        try:
            while not self._stop_polling.is_set():
                self._consumer.poll(0.1)
        finally:
            self._consumer.close()  # leaves the group

    def stop(self) -> None:
        self._stop_polling.set()
        self.join(20)


async def describe(coordinator: CoordinatorProcess) -> Any:
    client = await RawClient.connect(coordinator.host, coordinator.port)
    try:
        response = await client.call(DescribeGroupsRequest[5](groups=[GROUP]), 5)
        return response.groups[0]
    finally:
        await client.close()


async def wait_for_members(coordinator: CoordinatorProcess, count: int) -> Any:
    deadline = time.monotonic() + 30
    group = None
    while time.monotonic() < deadline:
        group = await describe(coordinator)
        if group.group_state == "Stable" and len(group.members) == count:
            return group
        await asyncio.sleep(0.2)
    raise AssertionError(f"no stable group of {count}; last: {group}")


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
async def test_librdkafka_consumers_form_a_group(strategy: str) -> None:
    with start_coordinator("--initial-rebalance-delay-ms", "0") as coordinator:
        consumers = [Consumer(coordinator.bootstrap, f"rd-{i}", strategy) for i in range(2)]
        try:
            consumers[0].start()
            first = await wait_for_members(coordinator, 1)
            consumers[1].start()
            both = await wait_for_members(coordinator, 2)
            assert both.protocol_type == "consumer"
            assert both.protocol_data == strategy
            assert {m.client_id for m in both.members} == {"rd-0", "rd-1"}
            assert first.members[0].member_id in {m.member_id for m in both.members}
            consumers[1].stop()
            alone = await wait_for_members(coordinator, 1)
            assert alone.members[0].client_id == "rd-0"
        finally:
            for consumer in consumers:
                if consumer.is_alive():
                    consumer.stop()
        # Every assignment is empty: there are no partitions.
        assert all(count == 0 for c in consumers for _, count in c.events)
        assert ("assign", 0) in consumers[0].events


async def test_with_unknown_topics_librdkafka_does_not_join() -> None:
    with start_coordinator("--unknown-topics") as coordinator:
        consumer = Consumer(coordinator.bootstrap, "rd-alone", "range")
        consumer.start()
        try:
            await asyncio.sleep(3)
            group = await describe(coordinator)
            assert group.members == []
        finally:
            consumer.stop()


async def test_librdkafka_static_member_restart_causes_no_rebalance() -> None:
    with start_coordinator("--initial-rebalance-delay-ms", "0") as coordinator:

        def static(name: str) -> Consumer:
            return Consumer(
                coordinator.bootstrap,
                name,
                "range",
                **{"group.instance.id": f"instance-{name}", "session.timeout.ms": 30000},
            )

        a, b = static("a"), static("b")
        a.start()
        b.start()
        restarted = None
        try:
            before = await wait_for_members(coordinator, 2)
            old_ids = {m.group_instance_id: m.member_id for m in before.members}
            assert set(old_ids) == {"instance-a", "instance-b"}
            b.stop()  # a static member's close does not leave the group
            await asyncio.sleep(1)
            still = await describe(coordinator)
            assert (still.group_state, len(still.members)) == ("Stable", 2)
            events_of_a = list(a.events)
            restarted = static("b")
            restarted.start()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                after = await describe(coordinator)
                new_ids = {m.group_instance_id: m.member_id for m in after.members}
                if new_ids.get("instance-b") not in (None, old_ids["instance-b"]):
                    break
                await asyncio.sleep(0.2)
            # KIP-345: a new member id for the restarted instance, no rebalance for the other.
            assert new_ids["instance-a"] == old_ids["instance-a"]
            assert new_ids["instance-b"] != old_ids["instance-b"]
            assert after.group_state == "Stable"
            await asyncio.sleep(1)
            assert a.events == events_of_a
        finally:
            for consumer in (a, b, restarted):
                if consumer is not None and consumer.is_alive():
                    consumer.stop()
