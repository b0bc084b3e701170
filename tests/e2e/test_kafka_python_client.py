"""kafka-python 3.x's own clients negotiate versions with the coordinator and use it.

Its consumer asks for ApiVersions v4 first (Kafka 4), gets UNSUPPORTED_VERSION
with our versions, and continues with the versions both sides speak.
"""

from __future__ import annotations

import time
import warnings

from conftest import CoordinatorProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer


def test_consumer_joins_and_admin_sees_it(coordinator_process: CoordinatorProcess) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=coordinator_process.bootstrap,
        group_id="kafka-python-group",
        client_id="kp-consumer",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    admin = KafkaAdminClient(bootstrap_servers=coordinator_process.bootstrap)
    try:
        consumer.subscribe(pattern="^no-such-topic-.*")
        deadline = time.monotonic() + 20
        described: dict[str, object] = {}
        while time.monotonic() < deadline:
            consumer.poll(timeout_ms=100)
            groups = admin.list_groups()
            if any(
                g["group_id"] == "kafka-python-group" and g["group_state"] == "Stable"
                for g in groups
            ):
                described = admin.describe_groups(["kafka-python-group"])["kafka-python-group"]
                break
        assert described, "the consumer never became a stable member"
        assert described["protocol_type"] == "consumer"
        (member,) = described["members"]  # type: ignore[index]
        assert member["client_id"] == "kp-consumer"
        assert member["client_host"] == "/127.0.0.1"
        assert admin.delete_groups(["kafka-python-group"]) == {
            "kafka-python-group": "NonEmptyGroupError"
        }
    finally:
        consumer.close()
        admin.close()
    assert "coordinator.bad_request" not in coordinator_process.log()
