"""``/metrics`` and ``/healthz`` on ``prometheus-client``'s own HTTP server.

``GET /metrics``: the Prometheus exposition (``prometheus_client.make_wsgi_app``:
the text format, OpenMetrics or gzip as the scraper asks).  ``GET /healthz``:
200 ``ok`` while every member of the app is settled and no handler is failing,
else 503 with one line per group that is not settled and per failing handler
(``billing.shards: handler of shards/beta failed 5 times in a row: ValueError:
bad record in beta``), for Kubernetes probes.

Rules:

1. The server is ``prometheus_client``'s threaded WSGI server: it answers from
   its own threads, so a scrape never waits for the event loop.  ``/healthz``
   reads the app's state on the event loop (the state belongs to it); a loop
   that does not answer within ``HEALTH_TIMEOUT_S`` is itself unhealthy (503).
2. Other paths: 404.  Methods other than GET and HEAD: 405.  A request that is
   not HTTP/1.x: 400.  A HEAD request gets the headers of the GET, no body.
3. A client that sends nothing is dropped after ``READ_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from workgroup.log import get_logger
from workgroup.runtime.metrics import RuntimeMetrics

log = get_logger(__name__)

#: A connection that has not sent its request within this long is closed.
READ_TIMEOUT_S = 5.0
#: How long ``/healthz`` waits for the event loop before answering 503.
HEALTH_TIMEOUT_S = 2.0
#: How often the serving thread looks for a shutdown (bounds ``close``).
SHUTDOWN_POLL_S = 0.1

_TEXT = [("Content-Type", "text/plain; charset=utf-8")]


class _Handler(WSGIRequestHandler):
    """The standard library's request handler, silent, with a read timeout, and
    strict: a request line without a version (HTTP/0.9) is a 400."""

    timeout = READ_TIMEOUT_S
    #: The answer to a request too broken to say its version still has a status line.
    default_request_version = "HTTP/1.0"

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if len(self.requestline.split()) != 3:
            self.send_error(400, "Bad request syntax: no HTTP version")
            return False
        return True

    def log_message(self, format: str, *args: object) -> None:
        """Requests are not logged (a probe every few seconds would flood the log)."""


class MetricsServer:
    """Serves ``metrics`` on ``host:port`` (port 0: a free one, in ``port`` once started)."""

    def __init__(self, metrics: RuntimeMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self._exposition = make_wsgi_app(metrics.registry)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: ThreadingWSGIServer | None = None

    async def start(self) -> None:
        """Listen (``OSError`` if the port is taken) and serve from a thread."""
        self._loop = asyncio.get_running_loop()
        # Binding resolves names (the host, the server's own name): not on the loop.
        server = await asyncio.to_thread(self._bind)
        self._server = server
        self.port = server.server_address[1]
        threading.Thread(
            target=server.serve_forever,
            args=(SHUTDOWN_POLL_S,),
            name=f"metrics-http-{self.port}",
            daemon=True,
        ).start()
        log.info("app.metrics_listening", host=self.host, port=self.port)

    def _bind(self) -> ThreadingWSGIServer:
        family = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0][0]
        server_class = _ServerV6 if family == socket.AF_INET6 else ThreadingWSGIServer
        return make_server(self.host, self.port, self._app, server_class, _Handler)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(server.shutdown)  # waits for serve_forever to return
            server.server_close()

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
        if path not in ("/metrics", "/healthz"):
            status, headers, body = "404 Not Found", _TEXT, b"not found\n"
        elif method not in ("GET", "HEAD"):
            status, body = "405 Method Not Allowed", b"method not allowed\n"
            headers = [*_TEXT, ("Allow", "GET, HEAD")]
        elif path == "/healthz":
            status, body = self._health()
            headers = _TEXT
        else:
            status, headers, body = _answer(self._exposition, {**environ, "REQUEST_METHOD": "GET"})
        # HEAD: the GET's headers, its length included, and no body.
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [] if method == "HEAD" else [body]

    def _health(self) -> tuple[str, bytes]:
        """Runs in a server thread; the app's state is read on the event loop."""
        loop = self._loop
        assert loop is not None
        answer: concurrent.futures.Future[list[str]] = concurrent.futures.Future()

        def read() -> None:
            if answer.set_running_or_notify_cancel():
                try:
                    answer.set_result(self.metrics.unhealthy())
                except Exception as exc:
                    answer.set_exception(exc)

        try:
            loop.call_soon_threadsafe(read)
        except RuntimeError:  # the loop is closed: the app has stopped
            return "503 Service Unavailable", b"the event loop is closed\n"
        try:
            problems = answer.result(HEALTH_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            answer.cancel()
            problems = [f"the event loop did not answer within {HEALTH_TIMEOUT_S:g} s"]
        if problems:
            return "503 Service Unavailable", ("\n".join(problems) + "\n").encode()
        return "200 OK", b"ok\n"


class _ServerV6(ThreadingWSGIServer):
    address_family = socket.AF_INET6


def _answer(
    app: WSGIApplication, environ: WSGIEnvironment
) -> tuple[str, list[tuple[str, str]], bytes]:
    """``app``'s status, headers and whole body."""
    answer: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: object = None
    ) -> Callable[[bytes], object]:
        answer.append((status, headers))
        return lambda _data: None

    body = b"".join(app(environ, start_response))
    [(status, headers)] = answer
    return status, headers, body


__all__ = ["HEALTH_TIMEOUT_S", "READ_TIMEOUT_S", "MetricsServer"]
