"""One SparkSession per daemon, shared by all the shards the process owns: a JVM in
the daemon, or a thin client of a Spark Connect server.

Where Spark runs, in order of precedence:

* ``WORKGROUP_SPARK_REMOTE`` / ``remote=``: a Spark Connect server (``sc://host:port``);
* ``WORKGROUP_SPARK_MASTER`` / ``master=``: a cluster manager URL (``spark://host:7077``,
  ``yarn``, ``k8s://...``);
* otherwise ``local[*]``: every core of this machine.

Starting the JVM takes seconds (10-20 s on two cores), so the session is made
once, by the plugin before the daemon joins its group (or by the first shard
that needs it), and stopped when the app stops.

A JVM's first streaming query pays more again: its start (the streaming engine,
the Python callback server for ``foreachBatch``) and its first micro-batch (code
generation, the first shuffle) took 10-20 s each on a loaded 2-core machine,
against 0.3 s and 1-2 s once a query has run.  :meth:`SessionHolder.warm_up`
runs one tiny query (Spark's ``rate-micro-batch`` source, one batch, a small
aggregation collected in ``foreachBatch``, a scratch checkpoint) once per session, before the daemon
joins and before a warming shard says it is ready, so that a shard's query
does not pay it after its cut-over.  A Connect session needs none: the server
runs queries already.

A Spark Connect server closes a client's session after its idle timeout
(``spark.connect.session.manager.defaultSessionTimeout``, 60 min: a daemon that
owned no shard that long) or when it restarts.  Every call then fails with
``INVALID_HANDLE.SESSION_CLOSED`` / ``SESSION_NOT_FOUND``;
:meth:`SessionHolder.forget_if_gone` drops such a session, so the shard's next
attempt (the runtime restarts it with back-off) opens a new one.

A daemon's own JVM ignores SIGTERM, as pyspark makes it ignore SIGINT: the
daemon stops gracefully on either, hands its shards over (each query finishes
its batch), then stops the session and ends the JVM (:func:`_end_jvm`).  A
SIGTERM to the daemon's whole process group (``kill -TERM -- -PGID``) would
otherwise end the JVM at once, and with it the queries the daemon is handing
over.  A daemon killed outright still takes its JVM along: the JVM exits at the
end of its standard input, a pipe from the daemon.

Checkpoints on this machine's file system (a path, or a ``file:`` URI) are
written through Spark's FileSystem-based checkpoint file manager
(:func:`local_checkpoint_manager`), unless ``conf`` names one.  Spark's default
renames each checkpoint file through Hadoop's ``FileContext``, which starts a
``readlink`` process twice per rename where Hadoop's native library is missing,
as in pyspark's wheel: 68 a second in a JVM running four shards' 1 s
micro-batches on two cores, whose batches took 0.56 s instead of 0.37 s.  Its
rename checks the target before it moves the file instead of in one step; a
shard's lease keeps a second query off its checkpoint, and its fence off its
output.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from workgroup.errors import ConfigError
from workgroup.log import get_logger

log = get_logger("workgroup.spark.session")  # under workgroup's root logger

#: Error classes of a Spark Connect call whose session the server no longer has.
_SESSION_GONE = ("INVALID_HANDLE.SESSION_CLOSED", "INVALID_HANDLE.SESSION_NOT_FOUND")

#: Settings that suit many small per-shard queries in one JVM: few shuffle
#: partitions (the default 200 costs a task each per micro-batch), no web UI.
DEFAULT_CONF: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "WARN",
    "spark.sql.session.timeZone": "UTC",
}


#: The Spark setting that names the checkpoint file manager (see the module's docstring).
CHECKPOINT_MANAGER_SETTING = "spark.sql.streaming.checkpointFileManagerClass"

#: A URI's scheme (``s3a:``, ``file:``) at the start of a path.
URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def local_checkpoint_manager(spark_version: str) -> str:
    """Spark's FileSystem-based checkpoint file manager, in the package this
    version keeps it in (Spark 4.1 moved it to ``checkpointing``)."""
    major, minor = (int(part) for part in re.findall(r"\d+", spark_version)[:2])
    package = "checkpointing." if (major, minor) >= (4, 1) else ""
    return f"org.apache.spark.sql.execution.streaming.{package}FileSystemBasedCheckpointFileManager"


def is_local_path(root: str | None) -> bool:
    """``root`` is on this machine's file system: a path, or a ``file:`` URI."""
    if not root:
        return False
    scheme = URI_SCHEME.match(root)
    return scheme is None or scheme.group(1).lower() == "file"


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """How to make the daemon's SparkSession."""

    app_name: str
    master: str | None = None
    remote: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_environment(
        cls,
        app_name: str,
        master: str | None,
        remote: str | None,
        conf: Mapping[str, str] | None,
    ) -> SessionOptions:
        """Options with ``WORKGROUP_SPARK_MASTER`` / ``_REMOTE`` / ``_CONF`` applied
        (they win; ``_CONF`` is ``key=value,key=value``)."""
        env_remote = os.environ.get("WORKGROUP_SPARK_REMOTE") or None
        env_master = os.environ.get("WORKGROUP_SPARK_MASTER") or None
        if env_remote or env_master:
            remote, master = env_remote, env_master
        merged = dict(DEFAULT_CONF)
        merged.update(conf or {})
        merged.update(parse_conf(os.environ.get("WORKGROUP_SPARK_CONF", "")))
        return cls(app_name, master, remote, merged)

    def describe(self) -> str:
        return f"remote {self.remote}" if self.remote else f"master {self.master or 'local[*]'}"


def parse_conf(text: str) -> dict[str, str]:
    """``"a=1,b=2"`` -> ``{"a": "1", "b": "2"}`` (:class:`ConfigError` if malformed)."""
    conf: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"WORKGROUP_SPARK_CONF: {item!r} is not key=value (e.g. spark.cores.max=1)"
            )
        conf[key.strip()] = value.strip()
    return conf


#: How long the warm-up query may take before it is given up (logged, not fatal).
WARM_UP_TIMEOUT_S = 180.0
#: How long stopping waits for a session still being made (``SessionHolder.stop``).
STOP_WAIT_S = 1.0
#: How long a stopped session's JVM may take to exit before it is killed.
JVM_EXIT_WAIT_S = 10.0


class SessionHolder:
    """Makes the SparkSession once (thread-safe) and stops it at the end."""

    def __init__(self, options: SessionOptions, *, checkpoint_root: str | None = None) -> None:
        self.options = options
        self.checkpoint_root = checkpoint_root  # logged with the session's start
        self._lock = threading.Lock()
        self._session: Any = None
        self._warm_lock = threading.Lock()
        self._warmed: Any = None  # the session the warm-up query ran in

    def warm_up(self) -> None:
        """Make the session, then run the warm-up query in it once (see the module's
        docstring; blocking: call it from a thread).  A warm-up that fails or takes
        over ``WARM_UP_TIMEOUT_S`` is logged (``spark.warm_up_failed``): the shard's
        own query pays the rest."""
        session = self.get()
        if self.options.remote:
            return
        with self._warm_lock:
            if self._warmed is session:
                return
            began = time.monotonic()
            try:
                _run_warm_up_query(session, WARM_UP_TIMEOUT_S)
            except Exception as exc:
                log.warning(
                    "spark.warm_up_failed",
                    app=self.options.app_name,
                    error=_first_line(exc),
                    then="the first shard's query starts cold",
                )
            else:
                log.info(
                    "spark.session_warmed",
                    app=self.options.app_name,
                    seconds=round(time.monotonic() - began, 1),
                )
            self._warmed = session

    @property
    def started(self) -> bool:
        return self._session is not None

    @property
    def remote(self) -> bool:
        """The session is a Spark Connect server's, not a JVM of this daemon's own."""
        return bool(self.options.remote)

    def get(self) -> Any:
        """The session, made on first use (blocking: call it from a thread)."""
        with self._lock:
            if self._session is None:
                self._session = self._make()
            return self._session

    def forget_if_gone(self, error: BaseException) -> bool:
        """Drop the session if ``error`` says the Connect server no longer knows it
        (the next :meth:`get` makes a new one).  True if it was dropped."""
        text = str(error)
        if not self.options.remote or not any(mark in text for mark in _SESSION_GONE):
            return False
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):  # the server no longer has it
                session.stop()  # also clears pyspark's default session: no reuse
            log.warning(
                "spark.session_gone",
                app=self.options.app_name,
                where=self.options.describe(),
                error=_first_line(error),
            )
        return True

    def _make(self) -> Any:
        from pyspark.sql import SparkSession

        options = self.options
        # The JVM binds where SPARK_LOCAL_IP says; without it, to the host name's
        # address, which need not be where the driver is reachable (loopback tests).
        if options.master in (None, "") or str(options.master).startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = SparkSession.builder.appName(options.app_name)
        if options.remote:
            builder = builder.remote(options.remote)
        else:  # Java was checked when the plugin was attached
            # pyspark marks a process that made a Connect session with this
            # variable, and its children inherit it: a JVM session would then
            # be refused (CONNECT_URL_NOT_SET).  This session is not one.
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
            builder = builder.master(options.master or "local[*]")
        for key, value in options.conf.items():
            if options.remote and not key.startswith("spark.sql."):
                continue  # a Connect client sets only session (SQL) settings
            builder = builder.config(key, value)
        log.info(
            "spark.session_starting",
            app=options.app_name,
            where=options.describe(),
            checkpoint_root=self.checkpoint_root,
        )
        session = builder.getOrCreate()
        if not options.remote:
            _ignore_sigterm_in_jvm(session)
        self._choose_checkpoint_manager(session)
        log.info(
            "spark.session_started",
            app=options.app_name,
            where=options.describe(),
            version=session.version,
        )
        return session

    def _choose_checkpoint_manager(self, session: Any) -> None:
        """Spark's FileSystem-based checkpoint file manager for checkpoints on a
        local file system, unless ``conf`` names one (see the module's docstring).
        A session that refuses the setting keeps Spark's default (logged)."""
        if CHECKPOINT_MANAGER_SETTING in self.options.conf:
            return
        if not is_local_path(self.checkpoint_root):
            return
        try:
            session.conf.set(CHECKPOINT_MANAGER_SETTING, local_checkpoint_manager(session.version))
        except Exception as exc:
            log.warning(
                "spark.checkpoint_manager_refused",
                app=self.options.app_name,
                error=_first_line(exc),
                then="Spark's default checkpoint file manager",
            )

    def stop(self) -> None:
        """Stop the session's queries and the session; a JVM of the daemon's own
        exits too (:func:`_end_jvm`).  A session still being made (its server
        does not answer) is left to end with the process: waiting for it would
        keep a stopped daemon alive."""
        if not self._lock.acquire(timeout=STOP_WAIT_S):
            log.info("spark.session_still_starting", app=self.options.app_name,
                     then="it ends with the process")  # fmt: skip
            return
        try:
            session, self._session = self._session, None
        finally:
            self._lock.release()
        if session is None:
            return
        try:
            self._stop_session(session)
        finally:
            if not self.options.remote:
                _end_jvm(JVM_EXIT_WAIT_S)

    def _stop_session(self, session: Any) -> None:
        try:
            queries = list(session.streams.active)
        except Exception as exc:  # the JVM is gone already (killed, or its pipe closed)
            log.info("spark.session_gone", app=self.options.app_name, error=_first_line(exc))
            return
        for query in queries:
            try:
                query.stop()
            except Exception as exc:  # stopping everything: one failure must not block the rest
                log.warning("spark.query_stop_failed", name=query.name, error=_first_line(exc))
        session.stop()
        log.info("spark.session_stopped", app=self.options.app_name)


def _end_jvm(wait_s: float) -> None:
    """End this process's JVM, which pyspark keeps after its session stops: it
    ignores SIGTERM, so a daemon that left it would leave a process behind until
    the JVM reads the end of its standard input.  Closing that pipe ends it (its
    shutdown hooks run); one that has not exited after ``wait_s`` is killed.  A
    later session starts a new JVM."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    process = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        gateway.shutdown()
    SparkContext._gateway = SparkContext._jvm = None
    if process is None:
        return
    began = time.monotonic()
    with contextlib.suppress(OSError):
        process.stdin.close()  # the JVM exits at the end of its standard input
    try:
        process.wait(wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.info("spark.jvm_exited", seconds=round(time.monotonic() - began, 2))


def _ignore_sigterm_in_jvm(session: Any) -> None:
    """The daemon's JVM ignores SIGTERM from now on (see the module's docstring);
    a JVM that refuses is logged: a signal to the process group then ends it."""
    try:
        jvm = session.sparkContext._jvm
        jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("TERM"), jvm.sun.misc.SignalHandler.SIG_IGN)
    except Exception as exc:
        log.warning(
            "spark.jvm_signals_kept",
            error=_first_line(exc),
            then="a SIGTERM to the daemon's process group ends its JVM at once",
        )


def _touch_batch(batch: Any, batch_id: int) -> None:
    """The warm-up query's sink: a small aggregation, collected (a shuffle, code
    generation and rows back in Python, as a shard's ``foreachBatch`` does)."""
    batch.groupBy((batch["value"] % 4).alias("k")).count().collect()


def _run_warm_up_query(session: Any, timeout_s: float) -> None:
    """One streaming query of one batch of rows (Spark's ``rate-micro-batch``
    source, ``availableNow``) through ``foreachBatch``, on a scratch checkpoint."""
    with tempfile.TemporaryDirectory(prefix="workgroup-spark-warm-up-") as scratch:
        query = (
            session.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", 100)
            .load()
            .writeStream.foreachBatch(_touch_batch)
            .queryName(f"workgroup-warm-up-{uuid.uuid4().hex[:8]}")
            .option("checkpointLocation", os.path.join(scratch, "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            if not query.awaitTermination(timeout_s):
                raise TimeoutError(f"the warm-up query did not end in {timeout_s:g} s")
            failure = query.exception()
            if failure is not None:
                raise RuntimeError(f"the warm-up query failed: {failure}")
        finally:
            with contextlib.suppress(Exception):
                query.stop()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
