"""``make demo``: a sharded PySpark pipeline that survives a crash and a rolling restart.

1. Starts the embedded coordinator, one Spark Connect server (the pyspark
   package's own) and three thin daemons (``workgroup run
   examples.sharded_etl.app:app`` with ``WORKGROUP_SPARK_REMOTE``: no JVM in the
   daemon), sharing 4 shards and one publisher; a feeder writes events into
   every shard meanwhile.  ``--layout jvm`` gives each daemon a JVM of its own
   instead (slower on one machine: benchmarks/README.md).
2. SIGKILLs one daemon: its shards move after the session timeout and resume
   from their checkpoints (its queries, still on the server, are fenced).
3. Starts a replacement: the cooperative assignor hands it shards.
4. Restarts the three daemons one after the other, each drained first
   (``workgroup drain GROUP --instance-id NAME --wait``: its shards move to the
   others with warm-ups, its queries stop only once theirs run), then SIGTERM,
   start again with the same instance id, ``workgroup undrain``: it takes
   shards back, warmed up again.
5. Stops the feeder, waits until every event is processed and the publisher's
   summary is current, stops the daemons and verifies: every event exactly once,
   the summary equal to the sum of the shards.

Prints a summary table and writes ``demo-output/report.html`` (ownership timeline
and throughput).  Exits 1 if verification fails or a step times out.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from examples.sharded_etl.cluster import ROOT, EtlCluster
from examples.sharded_etl.feed import Feeder
from examples.sharded_etl.report import MOVE_COLUMNS, figures, move_rows, table_rows, write_html
from examples.sharded_etl.verify import verify
from workgroup.testing.signals import interrupt_on_termination

if TYPE_CHECKING:
    from workgroup_spark.connect_server import ConnectServer

console = Console(highlight=False)


def step(started: float, text: str) -> None:
    console.print(f"[dim]{time.time() - started:6.1f} s[/dim]  {text}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("demo-output"))
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--rate", type=int, default=1_000, help="input events a second")
    parser.add_argument(
        "--skew",
        type=float,
        default=1.1,
        help="Zipf exponent of the shards' shares of the input (0: even); the "
        "daemons' leader balances the shards by the rows/s they read",
    )
    parser.add_argument("--steady-s", type=float, default=10.0, help="run between steps")
    parser.add_argument("--step-timeout", type=float, default=120.0)
    parser.add_argument(
        "--layout",
        choices=["connect", "jvm"],
        default="connect",
        help="thin daemons on one Spark Connect server (default), or a JVM in each daemon",
    )
    args = parser.parse_args(argv)

    try:
        from workgroup_spark import check_java

        check_java()
    except Exception as exc:  # JavaMissingError: one line, what to install
        console.print(f"[red]error:[/red] {exc}")
        return 2

    from workgroup.testing import run_coordinator

    output: Path = args.output.resolve()
    data = output / "data"
    shutil.rmtree(output, ignore_errors=True)
    data.mkdir(parents=True)
    started = time.time()
    timeout = args.step_timeout
    with contextlib.ExitStack() as stack:
        coordinator = stack.enter_context(
            run_coordinator(
                "--data-dir", str(output / "coordinator"), log=output / "coordinator.log"
            )
        )
        env = {}
        if args.layout == "jvm":
            step(started, "layout: a JVM in each daemon (--layout jvm)")
        else:
            step(
                started,
                "layout: thin daemons on one Spark Connect server, the machine's one JVM "
                "(faster here than a JVM per daemon: benchmarks/README.md; --layout jvm)",
            )
            server = stack.enter_context(spark_connect_server(output, data))
            env["WORKGROUP_SPARK_REMOTE"] = server.remote
            step(started, f"Spark Connect server on {server.remote}")
        cluster = EtlCluster(data, coordinator.bootstrap, shards=args.shards, extra_env=env)
        status = console.status("")
        cluster.on_poll = lambda what: status.update(progress_line(cluster, started, what))
        status.start()
        feeder = Feeder(data, args.shards, rate=args.rate, skew=args.skew)
        try:
            kind = "thin daemons" if args.layout == "connect" else "daemons, a JVM each"
            step(started, f"coordinator on {coordinator.bootstrap}; starting 3 {kind}")
            for name in ("etl-1", "etl-2", "etl-3"):
                cluster.start(name)
            feeder.start(seconds=3_600)
            step(started, "feeding events; waiting for the Spark sessions and first batches")
            cluster.wait_for(
                "every shard to commit a batch", lambda: cluster.all_committing(0), timeout
            )
            show_owners(cluster, started)
            time.sleep(args.steady_s)

            victim = cluster.busiest()
            moved = [k for k, (m, *_) in cluster.owners().items() if m == victim]
            step(started, f"[red]SIGKILL {victim}[/red] (owns {', '.join(moved) or 'nothing'})")
            killed_at = time.time()
            cluster.kill(victim)
            for shard in moved:
                cluster.wait_for(
                    f"{shard} to commit on its new owner",
                    # A batch of the new owner's token: with Spark Connect the killed
                    # daemon's query goes on writing on the server until it is fenced.
                    lambda s=shard: (
                        cluster.owners()[s][0] != victim  # type: ignore[misc]
                        and cluster.committing(s, killed_at, cluster.owners()[s][1])
                    ),
                    timeout,
                )
            took = time.time() - killed_at
            step(started, f"moved shards commit again {took:.1f} s after the kill")
            show_owners(cluster, started)

            step(started, "[green]starting etl-4[/green] as a replacement")
            replacement_at = time.time()
            cluster.start("etl-4")
            cluster.wait_for(
                "etl-4 to own a shard and commit",
                lambda: any(
                    m == "etl-4" and cluster.committing(k, replacement_at, t)
                    for k, (m, t, _) in cluster.owners().items()
                ),
                timeout,
            )
            show_owners(cluster, started)
            time.sleep(args.steady_s / 2)

            running = sorted(n for n, d in cluster.daemons.items() if d.alive())
            for name in running:
                step(
                    started,
                    f"[yellow]rolling restart:[/yellow] drain {name}, SIGTERM, start it again, "
                    "undrain",
                )
                drain(cluster.bootstrap, name, timeout)  # its shards move with warm-ups
                cluster.stop(name)  # it owns nothing now: nothing stops but the process
                exited_at = time.time()
                cluster.start(name)
                drain(cluster.bootstrap, name, timeout, undrain=True)
                cluster.wait_for(
                    "every shard to commit again",
                    lambda at=exited_at: cluster.all_committing(at, owners_only=True),  # type: ignore[misc]
                    timeout,
                )
            show_owners(cluster, started)

            step(started, "stopping the feeder; waiting until every event is processed")
            feeder.stop()
            cluster.wait_drained(feeder.written, timeout)
            step(started, "stopping the daemons")
            cluster.stop_all()
        except TimeoutError as exc:
            console.print(f"[red]error:[/red] {exc}")
            cluster.kill_all()
            return 1
        finally:
            status.stop()
            feeder.stop()
            cluster.kill_all()
    ended = time.time()

    result = verify(data, args.shards)
    numbers = figures(cluster, started, ended)
    table = Table(title="workgroup demo: sharded ETL on PySpark")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in table_rows(numbers, result):
        table.add_row(name, value)
    console.print(table)
    moves = Table(title="moves: the new owner's first output")
    for column in MOVE_COLUMNS:
        words = column in ("shard", "from", "to", "how")
        moves.add_column(column, justify="left" if words else "right")
    for row in move_rows(numbers.moves, started):
        moves.add_row(*row)
    console.print(moves)
    report = output / "report.html"
    write_html(report, cluster, numbers, result, started, ended)
    console.print(f"report: {report}")
    if not result.ok:
        for problem in result.problems:
            console.print(f"[red]verification failed:[/red] {problem}")
        return 1
    console.print(
        f"[green]verified:[/green] {result.input_events:,} events, each exactly once; "
        "the summary is the sum of the shards"
    )
    return 0


#: The demo app's groups (``App.group_id``): its shards' and its publisher's.
GROUPS = ("etl.shard", "etl.publisher")


def drain(bootstrap: str, name: str, timeout_s: float, *, undrain: bool = False) -> None:
    """``workgroup drain`` (or ``undrain``) instance ``name`` in each of the app's
    groups, waiting until it is done; TimeoutError if it is not."""
    command = "undrain" if undrain else "drain"
    for group in GROUPS:
        argv = [sys.executable, "-m", "workgroup", command, group, "--instance-id", name]
        argv += ["--bootstrap", bootstrap, "--wait", "--wait-timeout-s", str(timeout_s)]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise TimeoutError(
                f"workgroup {command} {group} --instance-id {name} exited "
                f"{done.returncode}: {(done.stderr or done.stdout).strip()}"
            )


@contextlib.contextmanager
def spark_connect_server(output: Path, data: Path) -> Iterator[ConnectServer]:
    """The demo's Connect server: its Python workers run the shards' ``foreachBatch``
    (they import this checkout's ``examples``)."""
    from workgroup_spark.connect_server import run_connect_server

    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # ETL_DATA marks it as the demo's, like the daemons (tests/e2e/spark/test_demo_signals.py).
    env = {"PYTHONPATH": path, "ETL_DATA": str(data)}
    with run_connect_server(output / "spark-connect" / "server.log", env=env) as server:
        yield server


def progress_line(cluster: EtlCluster, started: float, waiting_for: str) -> str:
    processed = cluster.processed()
    alive = ", ".join(sorted(n for n, d in cluster.daemons.items() if d.alive()))
    return (
        f"[dim]{time.time() - started:6.1f} s[/dim]  waiting for {waiting_for}: "
        f"{processed:,} events processed; daemons {alive}"
    )


def show_owners(cluster: EtlCluster, started: float) -> None:
    owners = cluster.owners()
    publisher = cluster.owners("etl.publisher").get("publisher")
    text = ", ".join(f"{k}: {m} (token {t})" for k, (m, t, _) in sorted(owners.items()))
    if publisher:
        text += f"; publisher: {publisher[0]} (token {publisher[1]})"
    processed = cluster.processed()
    step(started, f"owners: {text}; {processed:,} events processed")


if __name__ == "__main__":
    # SIGTERM and SIGHUP (timeout, CI, a closed terminal) clean up as Ctrl-C does.
    with interrupt_on_termination():
        try:
            sys.exit(main())
        except KeyboardInterrupt:  # every process the demo started is stopped on the way out
            print("demo: interrupted; what it started is stopped", file=sys.stderr)
            sys.exit(130)
