"""``/metrics`` and ``/healthz`` over HTTP/1.1, on asyncio (no web framework).

``GET /metrics``: the Prometheus text format.  ``GET /healthz``: 200 ``ok``
while every member of the app is settled and no handler is failing, else 503
with one line per group that is not settled and per failing handler
(``billing.shards: handler of shards/beta failed 5 times in a row: ValueError:
bad record in beta``), for Kubernetes probes.  Other paths: 404; other methods: 405; a request
that is not HTTP: 400.  Each connection serves one request and closes.
"""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from workgroup.log import get_logger
from workgroup.runtime.metrics import RuntimeMetrics

log = get_logger(__name__)

#: Longest request head read before answering 400.
MAX_HEAD_BYTES = 8192
READ_TIMEOUT_S = 5.0


class MetricsServer:
    def __init__(self, metrics: RuntimeMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("app.metrics_listening", host=self.host, port=self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                head = b""
            status, content_type, body = self._answer(head)
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("ascii")
                + body
            )
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def _answer(self, head: bytes) -> tuple[str, str, bytes]:
        text = "text/plain; charset=utf-8"
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(head) > MAX_HEAD_BYTES or len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return "400 Bad Request", text, b"bad request\n"
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if target not in (b"/metrics", b"/healthz"):
            return "404 Not Found", text, b"not found\n"
        if method not in (b"GET", b"HEAD"):
            return "405 Method Not Allowed", text, b"method not allowed\n"
        if target == b"/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, self.metrics.exposition()
        problems = self.metrics.unhealthy()
        if problems:
            return "503 Service Unavailable", text, ("\n".join(problems) + "\n").encode()
        return "200 OK", text, b"ok\n"


__all__ = ["MetricsServer"]
