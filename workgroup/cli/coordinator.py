"""``workgroup coordinator``: run the embedded, Kafka-wire-compatible group coordinator."""

from __future__ import annotations

import asyncio
import ipaddress
import signal
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import click

from workgroup import log as wlog
from workgroup.cli.options import configure_logging, log_options
from workgroup.coordinator.acl import GroupAcl
from workgroup.coordinator.config import DEFAULT_INITIAL_REBALANCE_DELAY_MS, CoordinatorConfig
from workgroup.coordinator.sasl import (
    DEFAULT_FAILED_AUTHENTICATION_DELAY_MS,
    SASL_MECHANISMS,
    SaslMechanism,
    SaslSettings,
)
from workgroup.coordinator.scram import Credentials
from workgroup.coordinator.server import CoordinatorServer
from workgroup.coordinator.store import Store, data_dir_problem
from workgroup.coordinator.tls import TlsSettings
from workgroup.errors import ConfigError, StoreError
from workgroup.runtime.local import local_status, stop_local_coordinator

_DEFAULTS = CoordinatorConfig()


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6addr]:PORT`` for IPv6); raise ConfigError if malformed."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ConfigError(f"--listen must be HOST:PORT, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ConfigError(f"--listen port must be 0-65535, got {port}")
    if not host:
        raise ConfigError(f"--listen needs a host, got {value!r}")
    return host, port


def is_loopback(host: str) -> bool:
    """``127.0.0.0/8``, ``::1`` or ``localhost``: reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_exposure(host: str, insecure: bool, *, tls: bool = False, sasl: bool = False) -> None:
    """Refuse a non-loopback address unless connections are encrypted (TLS) and
    authenticated (SASL), or ``--insecure`` says to anyway."""
    if is_loopback(host) or (tls and sasl):
        return
    missing = " or ".join(n for n, on in (("TLS", tls), ("SASL", sasl)) if not on)
    consequence = (
        "anyone who reaches the port could join, commit to and describe every group"
        if not sasl
        else "passwords, assignments and checkpoints would cross the network in the clear"
    )
    if not insecure:
        raise ConfigError(
            f"refusing to listen on {host} without {missing}: {consequence}. "
            "Listen on 127.0.0.1 (the default), configure --tls-cert and "
            "--sasl-credentials, or pass --insecure to listen there anyway"
        )
    click.echo(
        f"WARNING: --insecure: listening on {host} without {missing}; {consequence}",
        err=True,
    )
    wlog.get_logger("workgroup.cli.coordinator").warning("coordinator.insecure_listener", host=host)


def _local(stop: bool) -> None:
    """``--status`` / ``--stop`` of the auto-started local coordinator."""
    if stop:
        click.echo(stop_local_coordinator())
        return
    status = local_status()
    for line in status.lines():
        click.echo(line)
    if not status.running:
        sys.exit(1)


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@click.command(name="coordinator")
@click.option(
    "--status",
    "show_status",
    is_flag=True,
    help="Print the state of the local coordinator that 'workgroup run' starts when "
    "nothing answers at 127.0.0.1:9092 (pid, address, log, settings) and exit: 0 "
    "running, 1 not running.",
)
@click.option(
    "--stop",
    "stop_local",
    is_flag=True,
    help="Stop that local coordinator (SIGTERM) and exit.",
)
@click.option(
    "--listen",
    default="127.0.0.1:9092",
    show_default=True,
    help="Address to listen on, HOST:PORT; port 0 picks a free port. "
    "The first line on stdout is 'listening on HOST:PORT' with the real port.",
)
@click.option(
    "--advertised-listener",
    default=None,
    metavar="HOST:PORT",
    help="Address named in Metadata and FindCoordinator answers (Kafka's "
    "advertised.listeners): where clients reach this coordinator through a proxy "
    "or NAT. Default: the listening address.",
)
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Directory for durable state (committed offsets, each group's last stable "
    "state). Without it the coordinator keeps everything in memory.",
)
@click.option(
    "--initial-rebalance-delay-ms",
    type=int,
    default=DEFAULT_INITIAL_REBALANCE_DELAY_MS,
    show_default=True,
    help="How long the first rebalance of an empty group waits for more members "
    "to join. Kafka uses 3000; members of a local job start within a fraction of a "
    "second, so a short delay still gathers them into one first generation.",
)
@click.option(
    "--min-session-timeout-ms",
    type=int,
    default=_DEFAULTS.min_session_timeout_ms,
    show_default=True,
    help="Smallest session timeout a member may ask for (as Kafka's broker setting).",
)
@click.option(
    "--max-session-timeout-ms",
    type=int,
    default=_DEFAULTS.max_session_timeout_ms,
    show_default=True,
    help="Largest session timeout a member may ask for (as Kafka's broker setting).",
)
@click.option(
    "--group-max-size",
    type=int,
    default=_DEFAULTS.group_max_size,
    show_default=True,
    help="Most members one group may have; a JoinGroup beyond it gets "
    "GROUP_MAX_SIZE_REACHED. The default is Kafka's, which sets no practical limit.",
)
@click.option(
    "--offsets-retention-minutes",
    type=int,
    default=_DEFAULTS.offsets_retention_ms // 60_000,
    show_default=True,
    help="Kafka's offsets.retention.minutes: an Empty group's committed offsets (its "
    "leases' checkpoints and tokens) are deleted once it has been Empty this long; "
    "-1 keeps them forever.",
)
@click.option(
    "--offsets-retention-check-interval-ms",
    type=int,
    default=_DEFAULTS.offsets_retention_check_interval_ms,
    show_default=True,
    help="How often expired offsets are looked for (Kafka's setting of the same name).",
)
@click.option(
    "--max-request-bytes",
    type=int,
    default=_DEFAULTS.max_request_bytes,
    show_default=True,
    help="Largest request frame accepted; a larger one closes its connection.",
)
@click.option(
    "--empty-topics/--unknown-topics",
    default=True,
    show_default=True,
    help="How Metadata answers a requested topic: as an existing topic with no partitions "
    "(the default), or with UNKNOWN_TOPIC_OR_PARTITION as Kafka answers a missing topic. "
    "librdkafka (confluent-kafka) consumers join a group only once a subscribed topic "
    "exists, so with --unknown-topics they never form groups here.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=2**31 - 1,
    show_default="2147483647 (Kafka's max.connections default: no practical limit)",
    help="Connections beyond this are closed at once.",
)
@click.option(
    "--connections-max-idle-ms",
    type=click.IntRange(min=1),
    default=600_000,
    show_default=True,
    help="Close a connection silent this long (Kafka's connections.max.idle.ms).",
)
@click.option(
    "--max-requests-per-second",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default="0 (no limit, as Kafka without request quotas)",
    help="Requests a second one connection may send; beyond it, its reading pauses.",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="Allow a non-loopback --listen address without TLS and SASL (said loudly on stderr).",
)
@click.option(
    "--tls-cert",
    type=click.Path(path_type=Path),
    default=None,
    help="Serve TLS (Kafka's SSL listener) with this PEM certificate chain.",
)
@click.option(
    "--tls-key",
    type=click.Path(path_type=Path),
    default=None,
    help="The certificate's PEM private key (default: in --tls-cert).",
)
@click.option(
    "--tls-client-ca",
    type=click.Path(path_type=Path),
    default=None,
    help="Require client certificates signed by this CA (mutual TLS).",
)
@click.option(
    "--sasl-credentials",
    type=click.Path(path_type=Path),
    default=None,
    help="Require SASL authentication of every connection, against the SCRAM "
    "verifiers in this file (made with 'workgroup credentials add').",
)
@click.option(
    "--sasl-mechanism",
    "sasl_mechanisms",
    type=click.Choice(SASL_MECHANISMS),
    multiple=True,
    help="Mechanism to enable (repeatable). Default: SCRAM-SHA-256 and SCRAM-SHA-512, "
    "plus PLAIN when TLS is on (PLAIN sends the password itself).",
)
@click.option(
    "--failed-authentication-delay-ms",
    type=click.IntRange(min=0),
    default=DEFAULT_FAILED_AUTHENTICATION_DELAY_MS,
    show_default=True,
    help="Delay before a failed authentication is answered and its connection "
    "closed (Kafka's connection.failed.authentication.delay.ms).",
)
@click.option(
    "--acl",
    "acl_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Group ACL (TOML): which principals may join, commit to, describe or "
    "delete which groups. Without it every authenticated principal may do everything.",
)
@log_options(level="info", log_format="console")
def command(
    listen: str,
    advertised_listener: str | None,
    data_dir: Path | None,
    initial_rebalance_delay_ms: int,
    min_session_timeout_ms: int,
    max_session_timeout_ms: int,
    group_max_size: int,
    offsets_retention_minutes: int,
    offsets_retention_check_interval_ms: int,
    max_request_bytes: int,
    empty_topics: bool,
    log_level: str,
    max_connections: int,
    connections_max_idle_ms: int,
    max_requests_per_second: float,
    insecure: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_client_ca: Path | None,
    sasl_credentials: Path | None,
    sasl_mechanisms: tuple[SaslMechanism, ...],
    failed_authentication_delay_ms: int,
    acl_file: Path | None,
    log_format: str,
    show_status: bool,
    stop_local: bool,
) -> None:
    """Run the embedded group coordinator (Kafka's classic group protocol).

    With --status or --stop: show or stop the local coordinator that 'workgroup run'
    started ($WORKGROUP_STATE_DIR, default ~/.local/state/workgroup).
    """
    if show_status or stop_local:
        _local(stop_local)
        return
    configure_logging(log_level, log_format)
    host, port = parse_listen(listen)
    if tls_cert is None and (tls_key is not None or tls_client_ca is not None):
        raise ConfigError("--tls-key and --tls-client-ca need --tls-cert")
    tls = TlsSettings(tls_cert, tls_key, tls_client_ca) if tls_cert is not None else None
    if tls is not None:
        tls.context()  # a bad file: exit 2 before anything listens
    sasl = sasl_settings(
        sasl_credentials, sasl_mechanisms, failed_authentication_delay_ms, tls=tls is not None
    )
    acl = GroupAcl.load(acl_file) if acl_file is not None else None
    if acl is not None and sasl is None:
        raise ConfigError(
            "--acl needs --sasl-credentials: without SASL every connection is "
            "User:ANONYMOUS and the ACL could not tell anyone apart"
        )
    check_exposure(host, insecure, tls=tls is not None, sasl=sasl is not None)
    log = wlog.get_logger("workgroup.cli.coordinator")
    if sasl is not None:
        log.info(
            "coordinator.sasl_enabled",
            mechanisms=list(sasl.mechanisms),
            users=len(sasl.credentials.users),
        )
        if "PLAIN" in sasl.mechanisms and tls is None:
            log.warning(
                "coordinator.plain_without_tls",
                detail="SASL PLAIN without TLS sends passwords in the clear",
            )
    if acl is not None:
        log.info("coordinator.acl_loaded", acl=acl.describe())
    config = CoordinatorConfig(
        initial_rebalance_delay_ms=initial_rebalance_delay_ms,
        min_session_timeout_ms=min_session_timeout_ms,
        max_session_timeout_ms=max_session_timeout_ms,
        group_max_size=group_max_size,
        offsets_retention_ms=(
            -1 if offsets_retention_minutes == -1 else offsets_retention_minutes * 60_000
        ),
        offsets_retention_check_interval_ms=offsets_retention_check_interval_ms,
        max_request_bytes=max_request_bytes,
        advertised_listener=advertised_listener,
        max_connections=max_connections,
        connections_max_idle_ms=connections_max_idle_ms,
        max_requests_per_second=max_requests_per_second,
    )
    store = None
    if data_dir is not None:
        problem = data_dir_problem(data_dir)
        if problem is not None:
            raise ConfigError(f"--data-dir: {problem}")
        try:
            store = Store(data_dir)
        except StoreError as exc:
            raise ConfigError(f"--data-dir: {exc}") from exc
    reload = Reload(sasl_credentials, acl_file) if sasl_credentials or acl_file else None
    asyncio.run(
        _serve(
            config,
            host,
            port,
            store,
            empty_topics=empty_topics,
            tls=tls,
            sasl=sasl,
            acl=acl,
            reload=reload,
        )
    )


@dataclass(frozen=True)
class Reload:
    """What SIGHUP reads again: the credentials file and the ACL file."""

    credentials_file: Path | None
    acl_file: Path | None

    def apply(self, server: CoordinatorServer) -> None:
        """Load both files; on any error keep what runs and log why (nothing half-done).

        New connections authenticate against the new credentials and every
        request is authorized by the new ACL; connections already
        authenticated stay so (as Kafka, which does not re-check a session).
        """
        log = wlog.get_logger("workgroup.cli.coordinator")
        try:
            sasl = server.sasl
            if self.credentials_file is not None and sasl is not None:
                sasl = replace(sasl, credentials=load_users(self.credentials_file))
            acl = GroupAcl.load(self.acl_file) if self.acl_file is not None else server.acl
        except ConfigError as exc:
            log.error("coordinator.reload_failed", error=str(exc))
            return
        server.sasl, server.acl = sasl, acl
        log.info(
            "coordinator.reloaded",
            users=len(sasl.credentials.users) if sasl is not None else None,
            acl=acl.describe() if acl is not None else None,
        )


def load_users(credentials_file: Path) -> Credentials:
    """The credentials file, which must name at least one user (else no one could connect)."""
    credentials = Credentials.load(credentials_file)
    if not credentials.users:
        raise ConfigError(
            f"--sasl-credentials: {credentials_file} has no users "
            "(add one with 'workgroup credentials add')"
        )
    return credentials


def sasl_settings(
    credentials_file: Path | None,
    mechanisms: tuple[SaslMechanism, ...],
    failed_authentication_delay_ms: int,
    *,
    tls: bool,
) -> SaslSettings | None:
    if credentials_file is None:
        if mechanisms:
            raise ConfigError("--sasl-mechanism needs --sasl-credentials")
        return None
    credentials = load_users(credentials_file)
    if not mechanisms:
        mechanisms = ("SCRAM-SHA-256", "SCRAM-SHA-512") + (("PLAIN",) if tls else ())
    return SaslSettings(
        credentials, mechanisms, failed_authentication_delay_ms=failed_authentication_delay_ms
    )


async def _serve(
    config: CoordinatorConfig,
    host: str,
    port: int,
    store: Store | None,
    *,
    empty_topics: bool = True,
    tls: TlsSettings | None = None,
    sasl: SaslSettings | None = None,
    acl: GroupAcl | None = None,
    reload: Reload | None = None,
) -> None:
    server = CoordinatorServer(
        config,
        host=host,
        port=port,
        store=store,
        empty_topics=empty_topics,
        tls=tls,
        sasl=sasl,
        acl=acl,
    )
    try:
        await server.start()
    except OSError as exc:
        await server.stop()
        raise ConfigError(f"cannot listen on {format_address(host, port)}: {exc}") from exc
    except BaseException:
        await server.stop()
        raise
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    # Handlers first: whoever reads the listening line may signal right away.
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop_requested.set)
    if reload is not None:
        loop.add_signal_handler(signal.SIGHUP, reload.apply, server)
    bound_host, bound_port = server.address
    sys.stdout.write(f"listening on {format_address(bound_host, bound_port)}\n")
    sys.stdout.flush()
    stopped = loop.create_task(server.wait_stopped())
    requested = loop.create_task(stop_requested.wait())
    try:
        await asyncio.wait({stopped, requested}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        requested.cancel()
        await server.stop()
    await stopped  # raises the failure (e.g. StoreError) that stopped the server
