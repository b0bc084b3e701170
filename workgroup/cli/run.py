"""``workgroup run MODULE:APP``: the worker daemon.

Imports the app (the current directory is on ``sys.path``), resolves its
settings (flags, then ``WORKGROUP_*`` variables, then ``--config`` /
``WORKGROUP_CONFIG`` TOML, then the app's own) and runs it until SIGTERM or
SIGINT: the first stops taking work, revokes everything within the grace
period, leaves the group (a static member keeps its place until its session
expires, unless ``--leave-on-stop``) and exits 0; a second exits at once with
status 130.

Exit status (the README lists them too): 0 stopped by a signal; 1 a fatal error
(no coordinator answers, another process took over the instance id, the
connect or unreachable timeout passed, ...); 2 bad settings, a bad
``MODULE:APP`` or a resource function that raises, before anything runs; 3 a
handler failed ``max_failures`` times in a row under ``on_failure="stop"``;
120 stdout or stderr was closed (a ``| head`` that ended); 130 a second signal.

Logs go to stderr: readable lines on a terminal, JSON lines otherwise
(``--log-format``).
"""

from __future__ import annotations

import os

import click

from workgroup.cli.options import configure_logging, log_options
from workgroup.member.driver import parse_bootstrap
from workgroup.runtime.config import resolve
from workgroup.runtime.daemon import load_app, run_app


@click.command("run")
@click.argument("target", metavar="MODULE:APP")
@click.option(
    "--bootstrap",
    default=None,
    help="Coordinator or Kafka bootstrap, HOST:PORT[,...]. Default: 127.0.0.1:9092, "
    "where a local coordinator is started if nothing answers (see "
    "'workgroup coordinator --status').",
)
@click.option(
    "--instance-id",
    default=None,
    help="Static membership: a stable id per process (also its name in logs, "
    "client ids (workgroup-ID) and the event log; default: HOST-PID).",
)
@click.option(
    "--config",
    "config_file",
    default=None,
    type=click.Path(dir_okay=False),
    help="TOML file with settings (see the README).",
)
@click.option(
    "--event-log",
    default=None,
    type=click.Path(dir_okay=False),
    help="Append ownership events (JSON lines) to this file.",
)
@click.option("--grace-ms", type=int, default=None, help="Grace period of revoked handlers.")
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Serve Prometheus /metrics and /healthz on 127.0.0.1:PORT (0: a free port, logged).",
)
@click.option(
    "--leave-on-stop",
    is_flag=True,
    default=None,
    help="A static member leaves the group when stopped (scale-down): its resources "
    "move at once instead of waiting for its session to expire.",
)
@click.option(
    "--migrate-lease-layout",
    is_flag=True,
    default=None,
    help="Copy lease state of the legacy position-based layout to the key slots "
    "(every daemon of the group stopped first); without it such state is refused.",
)
@click.option(
    "--session-timeout-ms",
    type=int,
    default=None,
    help="How long the coordinator waits for a heartbeat before it moves this "
    "process's resources elsewhere [default: 10000].",
)
@click.option(
    "--heartbeat-interval-ms",
    type=int,
    default=None,
    help="Time between heartbeats [default: a third of the session, at most 500].",
)
@click.option(
    "--connect-timeout-ms",
    type=int,
    default=None,
    help="At start, wait this long for something to answer at the bootstrap address "
    "before exiting 1 [default: exit 1 at once if nothing answers].",
)
@click.option(
    "--unreachable-timeout-ms",
    type=int,
    default=None,
    help="Exit 1 when no coordinator has been reachable for this long while running "
    "[default: never; a line is logged every 30 s].",
)
@click.option(
    "--session-margin-ms",
    type=int,
    default=None,
    help="End leases this long before the session can end on the coordinator "
    "(default: a tenth of the session, at least 500 ms).",
)
@click.option(
    "--request-timeout-ms",
    type=int,
    default=None,
    help="Time limit of a coordinator lookup and of lease commits "
    "(default: the session timeout, at most 30 s).",
)
@click.option(
    "--on-failure",
    type=click.Choice(["retry", "release", "stop"]),
    default=None,
    help="What a handler that failed --max-failures times in a row gets, unless its "
    "decorator says: retry (go on restarting it), release (give the resource to "
    "another process; this one refuses it for 5 minutes) or stop (stop the daemon, "
    "exit 3). /healthz answers 503 while a handler is failing [default: retry].",
)
@click.option(
    "--max-failures",
    type=int,
    default=None,
    help="Failures in a row after which a handler is failing (see --on-failure) [default: 5].",
)
@click.option(
    "--capacity",
    type=float,
    default=None,
    help="This process's share of the load relative to the others' (> 0) [default: 1].",
)
@click.option(
    "--imbalance-tolerance",
    type=float,
    default=None,
    help="Load balancing: how far above the mean load the busiest process may be "
    "before resources move [default: 0.1].",
)
@click.option(
    "--max-moves",
    type=int,
    default=None,
    help="Load balancing: resources moved per rebalance at most (0: off) [default: 16].",
)
@click.option(
    "--balance-interval-ms",
    type=int,
    default=None,
    help="Load balancing: time between probing rebalances while the load is over "
    "the tolerance [default: 60000].",
)
@log_options(level="info", log_format="auto")
def command(
    target: str,
    bootstrap: str | None,
    instance_id: str | None,
    config_file: str | None,
    event_log: str | None,
    grace_ms: int | None,
    metrics_port: int | None,
    leave_on_stop: bool | None,
    migrate_lease_layout: bool | None,
    session_timeout_ms: int | None,
    heartbeat_interval_ms: int | None,
    session_margin_ms: int | None,
    request_timeout_ms: int | None,
    connect_timeout_ms: int | None,
    unreachable_timeout_ms: int | None,
    on_failure: str | None,
    max_failures: int | None,
    capacity: float | None,
    imbalance_tolerance: float | None,
    max_moves: int | None,
    balance_interval_ms: int | None,
    log_level: str,
    log_format: str,
) -> None:
    """Run the workers and leaders of MODULE:APP until SIGTERM/SIGINT."""
    configure_logging(log_level, log_format)
    app = load_app(target)
    settings = resolve(
        app.settings,
        flags={
            "bootstrap": bootstrap,
            "instance_id": instance_id,
            "event_log": event_log,
            "grace_ms": grace_ms,
            "metrics_port": metrics_port,
            "leave_on_stop": leave_on_stop,
            "migrate_lease_layout": migrate_lease_layout,
            "session_timeout_ms": session_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "session_margin_ms": session_margin_ms,
            "request_timeout_ms": request_timeout_ms,
            "connect_timeout_ms": connect_timeout_ms,
            "unreachable_timeout_ms": unreachable_timeout_ms,
            "on_failure": on_failure,
            "max_failures": max_failures,
            "capacity": capacity,
            "imbalance_tolerance": imbalance_tolerance,
            "max_moves": max_moves,
            "balance_interval_ms": balance_interval_ms,
        },
        environ=os.environ,
        config_file=config_file,
    )
    if settings.bootstrap is not None:
        parse_bootstrap(settings.bootstrap)
    app.check(settings)
    run_app(app, settings)
