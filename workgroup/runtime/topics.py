"""Lease topics on a Kafka broker: one per key, created in batches.

Kafka accepts OffsetCommit only for an existing topic-partition, so the topic of
each key's slot (:func:`~workgroup.runtime.slots.slot_of`) must exist.

Rules:

1. Every topic a catalog needs and that is not known to exist is looked for in
   one Metadata request (the topics that exist), and the rest are created in
   one CreateTopics request per :data:`CREATE_BATCH` topics, compacted with
   one-hour segments, one partition, replication ``min(3, brokers)``.  No
   record is ever produced to them: they cost their partition's metadata only.
2. Topics created or found existing are remembered: re-reading an unchanged
   catalog costs no request.  A topic that another process created first
   (TOPIC_ALREADY_EXISTS) counts as existing.  A batch that failed is asked for
   again at the next call (the next catalog read, or an assignment of its key).
3. The embedded coordinator hosts no topics and accepts commits for any (it has
   no CreateTopics): once it says so, nothing is ever asked again.
4. A removed key's topic is never deleted here (its key may come back within the
   offsets retention and continue from its slot).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError, TopicAlreadyExistsError

from workgroup.log import get_logger
from workgroup.member.driver import map_kafka_error
from workgroup.security import PLAINTEXT, Security

log = get_logger(__name__)

TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.ms": "3600000"}
MAX_REPLICATION = 3
#: Topics per CreateTopics request (a very large catalog is split, so that each
#: request's progress is kept even if a later one times out).
CREATE_BATCH = 2_000
#: How long a broker may take to create one batch.
CREATE_TIMEOUT_MS = 60_000


class LeaseTopics:
    """Makes sure lease topics exist (one admin client per call that needs one)."""

    def __init__(
        self, bootstrap: str | Sequence[str], *, client_id: str, security: Security = PLAINTEXT
    ) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._client_id = client_id
        #: Topics known to exist (rule 2).
        self._existing: set[str] = set()
        #: False once the broker turned out to host no topics (rule 3).
        self._needed = True

    @property
    def needed(self) -> bool:
        """False once the broker turned out to host no topics (the embedded coordinator)."""
        return self._needed

    def known(self, topic: str) -> bool:
        """``topic`` exists, or need not (rule 3)."""
        return not self._needed or topic in self._existing

    async def ensure(self, topics: Iterable[str]) -> None:
        """Create those of ``topics`` that are not known to exist (rule 1)."""
        if isinstance(topics, str):
            raise TypeError("ensure() takes an iterable of topic names, not one name")
        if not self._needed:
            return
        missing = sorted(set(topics) - self._existing)
        if not missing:
            return
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self._bootstrap,
            client_id=self._client_id,
            request_timeout_ms=CREATE_TIMEOUT_MS + 10_000,
            **self._security.client_options(),
        )
        try:
            await admin.start()
            # One Metadata request says which exist (another daemon's, or this
            # process's before a restart): asking CreateTopics for thousands that
            # exist is slow on some brokers (Tansu: 2,000 took 40 s).
            self._existing.update(set(missing) & set(await admin.list_topics()))
            missing = [topic for topic in missing if topic not in self._existing]
            if not missing:
                return
            cluster = await admin.describe_cluster()
            brokers = len(cluster.get("brokers") or ()) or 1
            replication = min(MAX_REPLICATION, brokers)
            for start in range(0, len(missing), CREATE_BATCH):
                await self._create(admin, missing[start : start + CREATE_BATCH], replication)
        except IncompatibleBrokerVersion:
            self._needed = False
            log.info("lease.topics_not_needed", reason="the broker hosts no topics")
        except KafkaError as exc:
            raise map_kafka_error(exc, f"creating {len(missing)} lease topic(s)") from exc
        finally:
            await admin.close()

    async def _create(
        self, admin: AIOKafkaAdminClient, topics: list[str], replication: int
    ) -> None:
        response = await admin.create_topics(
            [NewTopic(name, 1, replication, topic_configs=TOPIC_CONFIGS) for name in topics],
            timeout_ms=CREATE_TIMEOUT_MS,
        )
        created = []
        failed = []
        for error in response.topic_errors:
            name, code = error[0], error[1]
            if code == 0:
                created.append(name)
            elif code == TopicAlreadyExistsError.errno:
                self._existing.add(name)
            else:
                failed.append(f"{name}: error {code} {error[2] if len(error) > 2 else ''}".strip())
        self._existing.update(created)
        if created:
            log.info(
                "lease.topics_created",
                count=len(created),
                first=created[0],
                replication=replication,
            )
        if failed:
            raise KafkaError(f"CreateTopics failed for {len(failed)} topic(s): {failed[0]}")


__all__ = ["LeaseTopics"]
