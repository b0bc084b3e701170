"""The plugin object ``app.use("spark", ...)`` returns: sessions, shard queries, warm-ups.

:class:`SparkQueries` is what :func:`attach` (the ``workgroup.plugins`` entry
point) makes; :mod:`workgroup_spark` re-exports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from workgroup.errors import ConfigError
from workgroup.log import get_logger
from workgroup.runtime.app import App
from workgroup_spark.java import check_java
from workgroup_spark.progress import SparkMetrics
from workgroup_spark.query import Build, ShardQuery
from workgroup_spark.session import URI_SCHEME, SessionHolder, SessionOptions

B = TypeVar("B", bound=Build)

log = get_logger("workgroup.spark")  # under workgroup's root logger

#: The checkpoint root when none is given: this directory under the daemon's
#: working directory, resolved once when the plugin is attached.
DEFAULT_CHECKPOINT_ROOT = "spark-checkpoints"

#: A warm-up may start a JVM (11-20 s on two cores, over a minute when several
#: start at once): past this the move falls back to a plain one.
DEFAULT_WARMUP_TIMEOUT_MS = 180_000


def parse_switch(name: str, value: str | None, default: bool = True) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off`` (any case); ``None`` or empty: ``default``."""
    if value is None or not value.strip():
        return default
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r}: say 1 or 0 (true/false, yes/no, on/off)")


def resolve_checkpoint_root(root: str, *, remote: str | None) -> str:
    """An absolute checkpoint root: a URI (``s3a://``, ``file:/``) or an absolute
    path as given; a relative path resolved against this process's working
    directory, except with Spark Connect, where the server, not the daemon, would
    resolve it (:class:`ConfigError`)."""
    if URI_SCHEME.match(root) or os.path.isabs(root):
        return root
    if remote:
        raise ConfigError(
            f"checkpoint_root {root!r} is relative: with remote={remote} the Spark Connect "
            "server would resolve it against its own working directory; give an absolute "
            "path or a URI (checkpoint_root= or WORKGROUP_SPARK_CHECKPOINT_ROOT)"
        )
    return os.path.abspath(root)


class SparkQueries:
    """The Spark plugin attached to an app (``app.use("spark", ...)``).

    Args:
        app: The app whose workers run the queries.
        checkpoint_root: Where each shard's checkpoint lives
            (``<root>/<kind>/<key>``): a local path on one machine, any
            Hadoop-compatible URI (``hdfs://``, ``s3a://``) when daemons run on
            several.  ``WORKGROUP_SPARK_CHECKPOINT_ROOT`` overrides it.  A
            relative path is resolved once, here, against the working directory
            (logged with ``spark.session_starting``); with ``remote=`` it is refused.
        master: Spark master URL (default ``local[*]``); ``WORKGROUP_SPARK_MASTER``
            overrides it.
        remote: Spark Connect URL (``sc://host:15002``) instead of a JVM in the
            daemon; ``WORKGROUP_SPARK_REMOTE`` overrides it.
        conf: Extra Spark settings for the session.
        start_before_join: Start the session before the daemon joins the group
            (default), so that it is ready before it takes any shard; a session
            that fails to start is logged (``spark.session_failed``) and each
            shard tries again, as without.  ``False``: the first shard starts it.

    ``WORKGROUP_SPARK_WARM_UP=0`` turns both the warm-ups and the early session
    off (plain moves, the session started by the first shard): to compare, or
    to keep a daemon's start short where nothing runs yet.
    """

    def __init__(
        self,
        app: App,
        *,
        checkpoint_root: str | None = None,
        master: str | None = None,
        remote: str | None = None,
        conf: Mapping[str, str] | None = None,
        poll_interval_s: float = 1.0,
        start_before_join: bool = True,
    ) -> None:
        self.app = app
        options = SessionOptions.from_environment(f"workgroup-{app.name}", master, remote, conf)
        given = os.environ.get("WORKGROUP_SPARK_CHECKPOINT_ROOT") or checkpoint_root
        #: Resolved once: a daemon that changes directory later keeps the same root.
        self.checkpoint_root = resolve_checkpoint_root(
            given or DEFAULT_CHECKPOINT_ROOT, remote=options.remote
        )
        if not options.remote:
            # Fail before joining the group (one line, exit 2 from `workgroup run`),
            # not with every shard the daemon is given.
            check_java()
        # Said where it is once Spark starts (`spark.session_starting`), not here:
        # attaching happens at import, before the daemon's logging is set up.
        self.session = SessionHolder(options, checkpoint_root=self.checkpoint_root)
        self.metrics = SparkMetrics()
        self.poll_interval_s = poll_interval_s
        #: Shards warm up before they move (unless a query says otherwise).
        self.warm_up = parse_switch(
            "WORKGROUP_SPARK_WARM_UP", os.environ.get("WORKGROUP_SPARK_WARM_UP")
        )
        start_before_join = start_before_join and self.warm_up
        for collector in self.metrics.collectors():
            app.add_collector(collector)
        if start_before_join:
            app.add_startup(self._start_session)
        app.add_cleanup(self.session.stop)

    def _start_session(self) -> None:
        """Start the session and warm it up before joining (in a thread): a daemon
        that joins a running group is ready before it takes anything."""
        try:
            self.session.warm_up()
        except Exception as exc:  # each shard tries again, with back-off
            log.warning(
                "spark.session_failed",
                app=self.app.name,
                error=f"{type(exc).__name__}: {exc}".splitlines()[0],
                then="the daemon joins; each shard it takes starts the session again",
            )

    def query(
        self,
        kind: str,
        *,
        assignor: str = "cooperative-sticky",
        grace_ms: int | None = None,
        restart_backoff_ms: int = 1_000,
        max_restart_backoff_ms: int = 30_000,
        reassign_delay_ms: int = 0,
        warm_up: bool | None = None,
        warmup_timeout_ms: int = DEFAULT_WARMUP_TIMEOUT_MS,
        dry_run: bool = False,
    ) -> Callable[[B], B]:
        """Run ``build(spark, lease)``'s streaming query for each owned resource of
        ``kind`` (options as for :meth:`workgroup.App.worker`).  A shard moved for
        a planned reason warms up first (``warm_up``, default on unless
        ``WORKGROUP_SPARK_WARM_UP=0``: its new owner's session and checkpoint
        are ready before the old owner stops; :mod:`workgroup_spark.query` rule 2).
        ``dry_run``: the warm-up also runs one batch of the query's own plan,
        dry, so that its first batch after the cut-over is not the first of its
        kind (:mod:`workgroup_spark.dry_run`), where the plan is new: in the
        daemon's own JVM before any batch of it ran there (a daemon that
        joins), never on Spark Connect, whose server runs the plan already.
        Only for a ``build`` whose sink is a :func:`~workgroup_spark.fenced`
        write that calls :func:`~workgroup_spark.check_fence` before
        publishing, as :func:`~workgroup_spark.write_batch_parquet` does."""

        def register(build: B) -> B:
            handler = ShardQuery(
                app_name=self.app.name,
                build=build,
                session=self.session,
                checkpoint_root=lambda: self.checkpoint_root,
                metrics=self.metrics,
                poll_interval_s=self.poll_interval_s,
                dry_run=dry_run,
            )
            self.app.worker(
                kind,
                assignor=assignor,
                grace_ms=grace_ms,
                restart_backoff_ms=restart_backoff_ms,
                max_restart_backoff_ms=max_restart_backoff_ms,
                isolation=None,  # the query runs in the daemon's one SparkSession
                reassign_delay_ms=reassign_delay_ms,
                warm_up=self.warm_up if warm_up is None else warm_up,
                warmup_timeout_ms=warmup_timeout_ms,
            )(handler)
            return build

        return register


def attach(app: App, **options: Any) -> SparkQueries:
    """The ``workgroup.plugins`` entry point: ``app.use("spark", **options)``."""
    return SparkQueries(app, **options)
