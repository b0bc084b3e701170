"""The lease topic on a Kafka broker: created, and grown with the catalog.

Kafka accepts OffsetCommit only for an existing topic-partition, so each group's
lease topic (:func:`~workgroup.runtime.slots.lease_topic`) must exist with at
least as many partitions as its kind has keys.  No record is ever produced to
it: it is compacted with one-hour segments so that it costs nothing but its
partitions' metadata.  Replication: ``min(3, brokers)``.

The embedded coordinator hosts no topics and accepts commits for any (it has no
CreateTopics): there, nothing is created.  A broker that cannot grow a topic
(Tansu has no CreatePartitions) is logged once; Tansu accepts commits for any
partition of an existing topic.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError, TopicAlreadyExistsError

from workgroup.log import get_logger
from workgroup.member.driver import map_kafka_error
from workgroup.security import PLAINTEXT, Security

log = get_logger(__name__)

TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.ms": "3600000"}
MAX_REPLICATION = 3


class LeaseTopics:
    """Makes sure lease topics exist with enough partitions (one admin client)."""

    def __init__(
        self, bootstrap: str | Sequence[str], *, client_id: str, security: Security = PLAINTEXT
    ) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._client_id = client_id
        #: Partitions known to exist per topic.
        self._partitions: dict[str, int] = {}
        #: False once the broker turned out to host no topics (the embedded coordinator).
        self._needed = True
        self._cannot_grow = False

    async def ensure(self, topic: str, partitions: int) -> None:
        """Create ``topic`` or grow it to ``partitions`` (at least 1) if needed."""
        partitions = max(partitions, 1)
        if not self._needed or self._partitions.get(topic, 0) >= partitions:
            return
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self._bootstrap,
            client_id=self._client_id,
            **self._security.client_options(),
        )
        try:
            await admin.start()
            await self._ensure(admin, topic, partitions)
        except IncompatibleBrokerVersion:
            self._needed = False
            log.info("lease.topics_not_needed", reason="the broker hosts no topics")
        except KafkaError as exc:
            raise map_kafka_error(exc, f"creating lease topic {topic!r}") from exc
        finally:
            await admin.close()

    async def _ensure(self, admin: AIOKafkaAdminClient, topic: str, partitions: int) -> None:
        cluster = await admin.describe_cluster()
        brokers = len(cluster.get("brokers") or ()) or 1
        replication = min(MAX_REPLICATION, brokers)
        try:
            response = await admin.create_topics(
                [NewTopic(topic, partitions, replication, topic_configs=TOPIC_CONFIGS)]
            )
            error = next(iter(response.topic_errors), None)
            code = error[1] if error is not None else 0
            if code == TopicAlreadyExistsError.errno:
                raise TopicAlreadyExistsError()
            if code:
                raise KafkaError(f"CreateTopics error {code}: {error[2] if error else ''}")
            log.info(
                "lease.topic_created", topic=topic, partitions=partitions, replication=replication
            )
            self._partitions[topic] = partitions
            return
        except TopicAlreadyExistsError:
            pass
        described = await admin.describe_topics([topic])
        existing = len(described[0]["partitions"]) if described else 0
        if existing >= partitions:
            self._partitions[topic] = existing
            return
        if self._cannot_grow:
            return
        try:
            await admin.create_partitions({topic: NewPartitions(partitions)})
        except IncompatibleBrokerVersion:
            self._cannot_grow = True
            log.warning(
                "lease.topic_cannot_grow",
                topic=topic,
                partitions=existing,
                wanted=partitions,
                reason="the broker has no CreatePartitions",
            )
            return
        log.info("lease.topic_grown", topic=topic, partitions=partitions, was=existing)
        self._partitions[topic] = partitions


__all__ = ["LeaseTopics"]
