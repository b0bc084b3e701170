"""``workgroup console --bootstrap HOST:PORT [--listen 127.0.0.1:8080]``: the web console.

A live page of every group the coordinator knows: members, who owns what
(kind, key, role, token, checkpoint age), resources owned by nobody, and a
timeline of rebalances (with ``--event-log FILE``, of the daemons' ownership
events too).  Loopback only unless ``--tls-cert``/``--tls-key`` are given.
Exit status: 0 after Ctrl-C; 2 a bad address or TLS files.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import click

from workgroup.cli.connection import DEFAULT_BOOTSTRAP, config_option, security_from
from workgroup.cli.options import configure_logging, log_options
from workgroup.console.server import DEFAULT_REFRESH_MS, ConsoleServer, check_listen
from workgroup.errors import ConfigError
from workgroup.member.driver import parse_bootstrap


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"--listen: {text!r} is not HOST:PORT (e.g. 127.0.0.1:8080)")
    return host.strip("[]") or "127.0.0.1", int(port)


@click.command("console")
@click.option("--bootstrap", default=DEFAULT_BOOTSTRAP, show_default=True, help="HOST:PORT[,...]")
@click.option(
    "--listen", default="127.0.0.1:8080", show_default=True, help="HOST:PORT to serve the page on."
)
@config_option
@click.option(
    "--refresh-ms",
    type=int,
    default=DEFAULT_REFRESH_MS,
    show_default=True,
    help="How often the coordinator is read.",
)
@click.option(
    "--event-log",
    "event_logs",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="A daemon's ownership event log (--event-log of workgroup run); repeatable.",
)
@click.option(
    "--tls-cert",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Serve the page over TLS with this PEM certificate (needed to listen beyond loopback).",
)
@click.option(
    "--tls-key",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="The certificate's PEM private key.",
)
@log_options(level="info")
def command(
    bootstrap: str,
    listen: str,
    config_file: Path | None,
    refresh_ms: int,
    event_logs: tuple[Path, ...],
    tls_cert: Path | None,
    tls_key: Path | None,
    log_level: str,
    log_format: str,
) -> None:
    """Serve a live web page of the coordinator's groups."""
    configure_logging(log_level, log_format)
    parse_bootstrap(bootstrap)
    host, port = parse_listen(listen)
    check_listen(host, tls=tls_cert is not None)
    security = security_from(config_file)
    server = ConsoleServer(
        bootstrap,
        security=security,
        host=host,
        port=port,
        refresh_ms=refresh_ms,
        event_logs=event_logs,
        tls_cert=tls_cert,
        tls_key=tls_key,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(server))


async def _serve(server: ConsoleServer) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    click.echo(f"console at {server.url} (coordinator {server.bootstrap})", err=True)
    try:
        await stop.wait()
    finally:
        await server.close()
