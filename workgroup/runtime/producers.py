"""Transactional producers for leases (``lease.producer()``), on aiokafka."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.conn import create_conn
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError, UnsupportedVersionError

from workgroup.errors import WorkgroupError
from workgroup.member.driver import map_kafka_error, parse_bootstrap
from workgroup.security import PLAINTEXT, Security

#: Kafka's InitProducerId API key.
INIT_PRODUCER_ID = 22


class ProducerFactory:
    """Starts aiokafka transactional producers against one cluster."""

    def __init__(
        self, bootstrap: str | Sequence[str], *, security: Security = PLAINTEXT, **options: Any
    ) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._options = {**security.client_options(), **options}
        self._checked = False

    async def __call__(self, transactional_id: str) -> AIOKafkaProducer:
        await self._check_transactions()
        producer = AIOKafkaProducer(
            bootstrap_servers=self._bootstrap,
            transactional_id=transactional_id,
            enable_idempotence=True,
            **self._options,
        )
        try:
            await producer.start()
        except (IncompatibleBrokerVersion, UnsupportedVersionError) as exc:
            await producer.stop()
            raise WorkgroupError(
                "lease.producer() needs transactions (InitProducerId): use a Kafka "
                f"cluster, the embedded coordinator has none ({exc})"
            ) from exc
        except KafkaError as exc:
            await producer.stop()
            raise map_kafka_error(exc, f"starting the producer {transactional_id!r}") from exc
        return producer

    async def _check_transactions(self) -> None:
        """Fail fast where InitProducerId is missing (aiokafka would retry forever)."""
        if self._checked:
            return
        host, port = parse_bootstrap(self._bootstrap)[0]
        try:
            conn = await create_conn(
                host,
                port,
                client_id="workgroup-producer-check",
                **self._security.client_options(),
            )
        except (KafkaError, OSError) as exc:
            raise map_kafka_error(exc, "checking the broker for transactions") from exc
        try:
            supported = INIT_PRODUCER_ID in conn._versions
        finally:
            conn.close()
        if not supported:
            raise WorkgroupError(
                "lease.producer() needs transactions (InitProducerId): use a Kafka "
                "cluster, the embedded coordinator has none"
            )
        self._checked = True


__all__ = ["ProducerFactory"]
