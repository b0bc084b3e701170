"""One asyncio connection per coordinator, reused by every request of a client.

Rules:

1. A :class:`ClientConnection` keeps one
   :class:`~workgroup.member.transport.CoordinatorConnection` per coordinator
   (by node id) and remembers which coordinator each group has: a reader that
   polls a group every 500 ms opens no connection after the first.  A group
   seen for the first time is looked up (FindCoordinator) on a connection
   already open; a new connection is opened only for a coordinator not yet
   connected.
2. A request that fails on the way (disconnect, timeout) closes that
   connection and forgets the groups it carried: the next request looks them up
   again.  So does an answer saying the coordinator moved (``NOT_COORDINATOR``,
   ``COORDINATOR_NOT_AVAILABLE``, ``COORDINATOR_LOAD_IN_PROGRESS``): the
   request is tried once more on the coordinator named then.
3. Every failure is a :class:`~workgroup.errors.WorkgroupError` saying what was
   asked (:func:`~workgroup.member.transport.map_kafka_error`), within
   ``timeout_s`` per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka.client import CoordinationType
from aiokafka.errors import KafkaError, NoError, for_code
from aiokafka.protocol.coordination import FindCoordinatorRequest

from workgroup.client.bootstrap import format_address, parse_bootstrap
from workgroup.client.security import PLAINTEXT, Security
from workgroup.errors import COORDINATOR_MOVED_CODES, WorkgroupError
from workgroup.kafka.adapter import KafkaRequest, to_result
from workgroup.kafka.messages import GroupRequest, GroupResult
from workgroup.member.transport import CoordinatorConnection, map_kafka_error


class ClientConnection:
    """Requests to groups' coordinators over reused connections (see the rules)."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        security: Security = PLAINTEXT,
        timeout_s: float = 10.0,
        client_id: str = "workgroup-admin",
    ) -> None:
        self.bootstrap = bootstrap
        self._hosts = parse_bootstrap(bootstrap)
        self._security = security
        self._timeout_s = timeout_s
        self._client_id = client_id
        self._by_node: dict[int, CoordinatorConnection] = {}
        self._node_of: dict[str, int] = {}
        #: Connections opened (what rule 1 keeps low).
        self.opened = 0

    async def __aenter__(self) -> ClientConnection:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        connections = list(self._by_node.values())
        self._by_node.clear()
        self._node_of.clear()
        for connection in connections:
            await connection.close()

    async def request(self, group: str, request: GroupRequest, *, what: str) -> GroupResult:
        """``request`` to ``group``'s coordinator; its result (rules 2 and 3)."""
        for attempt in (1, 2):
            connection = None
            try:
                async with asyncio.timeout(self._timeout_s):
                    connection = await self._coordinator(group)
                    result = to_result(request, await connection.send(KafkaRequest(request)))
            except (KafkaError, OSError, TimeoutError, WorkgroupError) as exc:
                if connection is not None:
                    await self._drop(connection)
                raise map_kafka_error(exc, what) from exc
            if attempt == 1 and _moved(result):
                self._node_of.pop(group, None)
                continue
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    async def request_bootstrap(self, host: str, port: int, request: Any, *, what: str) -> Any:
        """``request`` (any broker answers it) to the bootstrap broker ``host:port``."""
        connection = CoordinatorConnection(
            format_address(host, port),
            client_id=self._client_id,
            request_timeout_ms=int(self._timeout_s * 1000),
            security=self._security,
        )
        self.opened += 1
        try:
            async with asyncio.timeout(self._timeout_s):
                return to_result(request, await connection.send_to_bootstrap(KafkaRequest(request)))
        except (KafkaError, OSError, TimeoutError, WorkgroupError) as exc:
            raise map_kafka_error(exc, what) from exc
        finally:
            await connection.close()

    def hosts(self) -> list[tuple[str, int]]:
        return list(self._hosts)

    async def _coordinator(self, group: str) -> CoordinatorConnection:
        node = self._node_of.get(group)
        if node is not None and node in self._by_node:
            return self._by_node[node]
        # Rule 1: ask a connection already open where the group is.
        for known in list(self._by_node.values()):
            response = await known.send_to_bootstrap(
                FindCoordinatorRequest(group, CoordinationType.GROUP)
            )
            error = for_code(response.error_code)
            if error is not NoError:
                raise error()
            node = int(response.coordinator_id)
            if node in self._by_node:
                self._node_of[group] = node
                return self._by_node[node]
            break
        connection = CoordinatorConnection(
            self.bootstrap,
            client_id=self._client_id,
            request_timeout_ms=int(self._timeout_s * 1000),
            security=self._security,
        )
        self.opened += 1
        try:
            node = await connection.find(group)
        except BaseException:
            await connection.close()
            raise
        if node in self._by_node:  # raced with another lookup: keep one
            await connection.close()
        else:
            self._by_node[node] = connection
        self._node_of[group] = node
        return self._by_node[node]

    async def _drop(self, connection: CoordinatorConnection) -> None:
        for node, known in list(self._by_node.items()):
            if known is connection:
                del self._by_node[node]
                for group in [g for g, n in self._node_of.items() if n == node]:
                    del self._node_of[group]
        await connection.close()


def _moved(result: GroupResult) -> bool:
    """Whether an answer says the group's coordinator is elsewhere now."""
    if getattr(result, "error", None) in COORDINATOR_MOVED_CODES:
        return True
    groups = getattr(result, "groups", None) or ()
    if any(getattr(g, "error", None) in COORDINATOR_MOVED_CODES for g in groups):
        return True
    topics = getattr(result, "topics", None) or ()  # OffsetCommit: per partition
    return any(
        p.error in COORDINATOR_MOVED_CODES for t in topics for p in getattr(t, "partitions", ())
    )


__all__ = ["ClientConnection"]
