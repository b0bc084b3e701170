"""``workgroup.App``: resources, workers and leaders declared with decorators.

An app is a name and its declarations; :mod:`workgroup.runtime.runner` runs
them.  Each worker kind and each leader is a group of its own, so that each can
use its own assignor: ``<app>.<kind>`` for workers, ``<app>.<name>`` for
leaders (a leader is a group with one resource).

This module is the top of the runtime: it uses the runner, the daemon and the
plugins (``serve``, ``run``, ``use``), and none of them imports it.  They read
an app through :class:`~workgroup.runtime.spec.DeclaredApp` and its settings
from :mod:`workgroup.runtime.config`.  The runner and the daemon (and with them
the member and aiokafka) are imported when an app is served or run, not with
this module: a process-isolated handler's child imports the app's module to
unpickle the handler, and would pay for them at every start.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from workgroup.assignors.registry import get_assignor
from workgroup.errors import ConfigError
from workgroup.keyspaces.settings import PlannerSettings
from workgroup.plugins import load as load_plugin
from workgroup.runtime.config import Settings, check_failure_policy, check_grace
from workgroup.runtime.handlers import Handler, OnFailure, RestartPolicy
from workgroup.runtime.spec import (
    LEADER_KIND,
    KeyspaceSpec,
    LeaderSpec,
    ResourceFunction,
    WorkerSpec,
)

F = TypeVar("F", bound=Callable[..., Any])

_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
#: Where handlers run: ``None`` (coroutine functions as tasks, plain functions in
#: threads) or ``"process"`` (a child process each, killed after the grace period).
Isolation = Literal["process"] | None


class App:
    """A workgroup application: ``app = workgroup.App("billing")``, then decorate.

    Args:
        name: The app's name; its groups are ``<name>.<kind>`` and ``<name>.<leader>``.
        bootstrap: ``HOST:PORT[,...]`` of the embedded coordinator or Kafka brokers
            (``None``: the local default, ``127.0.0.1:9092``).
        session_timeout_ms, heartbeat_interval_ms, rebalance_timeout_ms: The
            members' timing (heartbeat default: a third of the session).
        session_margin_ms: Members end their leases this long before their
            session can end on the coordinator, so that a cut-off process stops
            its handlers before another process starts them (default: a tenth
            of the session, at least 500 ms, leaving two heartbeat intervals).
        request_timeout_ms: Time limit of a coordinator lookup and of lease
            commits and fetches; a connection that lost a request is replaced
            after it (default: the session timeout, at most 30 s).
        grace_ms: Default time a revoked handler gets to finish its step.
        instance_id: Static membership: a stable id per process (the daemon's
            ``--instance-id``).
    """

    def __init__(
        self,
        name: str,
        *,
        bootstrap: str | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int | None = None,
        rebalance_timeout_ms: int = 60_000,
        grace_ms: int = 10_000,
        instance_id: str | None = None,
        resource_poll_interval_ms: int = 5_000,
        event_log: str | None = None,
        session_margin_ms: int | None = None,
        request_timeout_ms: int | None = None,
    ) -> None:
        _check_name(name, "app name")
        self.name = name
        self.settings = Settings(
            bootstrap=bootstrap,
            instance_id=instance_id,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_margin_ms=session_margin_ms,
            request_timeout_ms=request_timeout_ms,
            grace_ms=grace_ms,
            resource_poll_interval_ms=resource_poll_interval_ms,
            event_log=event_log,
        ).validated()
        self.workers: dict[str, WorkerSpec] = {}
        self.leaders: dict[str, LeaderSpec] = {}
        self.keyspaces: dict[str, KeyspaceSpec] = {}
        self.sources: dict[str, ResourceFunction] = {}
        #: Extra Prometheus collectors served with the app's metrics (plugins).
        self.collectors: list[Any] = []
        #: Called once the app has stopped, plain or async (plugins release here).
        self.cleanups: list[Callable[[], Any]] = []
        #: Called before the app joins its groups, plain or async (plugins get ready here).
        self.startups: list[Callable[[], Any]] = []

    # --- decorators ---------------------------------------------------------------

    def resources(self, kind: str) -> Callable[[F], F]:
        """Declare the function that lists the keys of ``kind`` (re-read periodically).

        Keys keep their positions: a key's checkpoint slot is its index in the
        list, so add new keys at the end (as Kafka adds partitions).
        """
        _check_called(kind, "resources", "shard")
        _check_name(kind, "kind")

        def register(function: F) -> F:
            _check_signature(function, 0, f"resources of kind {kind!r}")
            if kind in self.sources:
                raise ConfigError(f"resources of kind {kind!r} are declared twice")
            self.sources[kind] = function
            return function

        return register

    def worker(
        self,
        kind: str,
        *,
        assignor: str | Sequence[str] = "cooperative-sticky",
        grace_ms: int | None = None,
        restart_backoff_ms: int = 100,
        max_restart_backoff_ms: int = 30_000,
        standbys: int = 0,
        isolation: Isolation = None,
        reassign_delay_ms: int = 0,
        on_failure: OnFailure | None = None,
        max_failures: int | None = None,
        warm_up: bool = False,
        warmup_timeout_ms: int = 60_000,
    ) -> Callable[[F], F]:
        """Run the decorated function once per owned resource of ``kind``, with its
        :class:`~workgroup.Lease`; see :mod:`workgroup.runtime.handlers` for
        revocation, restarts and threads.

        ``standbys=N`` also gives each resource N standby holders on other members
        (``lease.role == "standby"``: warm up, read checkpoints, commit nothing);
        when the active holder goes, a standby holder is preferred as the next
        one (:mod:`workgroup.assignors.standby`).

        ``isolation="process"`` runs each handler in a child process (shipped with
        cloudpickle) that is killed when its grace period is over
        (:mod:`workgroup.runtime.isolation`).

        ``reassign_delay_ms``: the resources of a process that left wait that
        long before they move, so that a restarted process gets them back
        without churn (:mod:`workgroup.member.delay`).

        ``on_failure`` and ``max_failures``: once the handler failed
        ``max_failures`` times in a row on a resource, ``"retry"`` goes on
        restarting it, ``"release"`` gives the resource to another process
        (this one refuses it for ``RELEASE_REFUSE_MS``), ``"stop"`` stops the
        daemon (exit 3); ``None``: the app-wide settings of the same names
        (default ``"retry"`` after 5).  Either way the failing handler is on
        ``/healthz`` (503) and ``workgroup_failing_handlers``.

        ``warm_up=True``: a resource moved for a planned reason (a new process,
        balancing, a drain, a hand-over before leaving) is first handed to its
        next holder with ``lease.role == "warming"`` while the current holder
        keeps working; the handler prepares (loads state, opens connections),
        then ``await lease.ready()``, which returns once the cut-over made it the
        active holder (``True``) or the move was called off (``False``).  A
        warm-up that fails or is not ready within ``warmup_timeout_ms`` falls
        back to a plain move (:mod:`workgroup.member.warmup`).

        ``assignor`` may list several names in preference order, to change the
        assignor in a rolling restart: deploy ``["new", "old"]`` everywhere (the
        group keeps ``"old"`` until every member offers ``"new"``), then
        ``"new"`` alone.
        """
        _check_called(kind, "worker", "shard")
        _check_name(kind, "kind")
        assignors = (assignor,) if isinstance(assignor, str) else tuple(assignor)
        if not assignors or len(set(assignors)) != len(assignors):
            raise ConfigError(f"worker {kind!r}: assignor names must be distinct, got {assignor!r}")
        for name in assignors:
            try:
                get_assignor(name)
            except Exception as exc:
                raise ConfigError(f"worker {kind!r}: {exc}") from exc
        if grace_ms is not None and grace_ms < 0:
            raise ConfigError(f"grace_ms must be >= 0, got {grace_ms}")
        if restart_backoff_ms <= 0 or max_restart_backoff_ms < restart_backoff_ms:
            raise ConfigError("restart back-off must be > 0 and max >= initial")
        if isinstance(standbys, bool) or not isinstance(standbys, int) or standbys < 0:
            raise ConfigError(f"standbys must be an integer >= 0, got {standbys!r}")
        if reassign_delay_ms < 0:
            raise ConfigError(f"reassign_delay_ms must be >= 0, got {reassign_delay_ms}")
        _check_own_failure_policy(f"worker {kind!r}", on_failure, max_failures)
        if not isinstance(warm_up, bool):
            raise ConfigError(f"warm_up must be True or False, got {warm_up!r}")
        if isinstance(warmup_timeout_ms, bool) or warmup_timeout_ms <= 0:
            raise ConfigError(f"warmup_timeout_ms must be > 0, got {warmup_timeout_ms!r}")

        _check_isolation(isolation)

        def register(function: F) -> F:
            _check_signature(function, 1, f"worker {kind!r}")
            self._check_free(kind)
            self.workers[kind] = WorkerSpec(
                kind,
                _isolated(function, isolation),
                assignors,
                grace_ms,
                RestartPolicy(restart_backoff_ms / 1000, max_restart_backoff_ms / 1000),
                standbys,
                reassign_delay_ms,
                on_failure,
                max_failures,
                warm_up,
                warmup_timeout_ms,
            )
            return function

        return register

    def leader(
        self,
        name: str,
        *,
        grace_ms: int = 0,
        isolation: Isolation = None,
        on_failure: OnFailure | None = None,
        max_failures: int | None = None,
        standbys: int = 0,
    ) -> Callable[[F], F]:
        """Run the decorated function in one process of the group at a time
        (``isolation``, ``on_failure`` and ``max_failures`` as for :meth:`worker`:
        ``"release"`` hands the leadership to another process).

        ``standbys=N``: N other processes run the function as standby candidates
        (``lease.role == "standby"``): they warm up (replay state, build caches),
        then ``await lease.ready()``, which tells the group and returns ``True``
        once this candidate leads (the same call goes on as the leader, its
        token taken) or ``False`` once it is no longer a candidate.  Leadership
        goes only to a ready candidate when one exists: after a crash, to a
        ready standby; on a planned handover (the leader drains), it stays put
        until a candidate is ready, then cuts over at once.  A process handed
        the leadership on a planned move without being a candidate warms up
        first (``lease.role == "warming"``, as ``worker(warm_up=True)``), so
        handlers test ``lease.role != "active"``.
        """
        _check_called(name, "leader", "publisher")
        _check_name(name, "leader name")
        if grace_ms < 0:
            raise ConfigError(f"grace_ms must be >= 0, got {grace_ms}")
        if isinstance(standbys, bool) or not isinstance(standbys, int) or standbys < 0:
            raise ConfigError(
                f"leader {name!r}: standbys must be an integer >= 0, got {standbys!r}"
            )
        _check_own_failure_policy(f"leader {name!r}", on_failure, max_failures)
        _check_isolation(isolation)

        def register(function: F) -> F:
            _check_signature(function, 1, f"leader {name!r}")
            self._check_free(name)
            self.leaders[name] = LeaderSpec(
                name, _isolated(function, isolation), grace_ms, on_failure, max_failures, standbys
            )
            return function

        return register

    def keyspace(
        self,
        name: str,
        *,
        settings: PlannerSettings | None = None,
        grace_ms: int | None = None,
        restart_backoff_ms: int = 100,
        max_restart_backoff_ms: int = 30_000,
        on_failure: OnFailure | None = None,
        max_failures: int | None = None,
        max_sampled_keys: int = 64,
        warm_up: bool = False,
        warmup_timeout_ms: int = 60_000,
        standbys: int = 0,
    ) -> Callable[[F], F]:
        """Shard the keys of keyspace ``name`` (any ``str`` or ``int``) over the
        group's processes: the keys are hashed into slices (``docs/keyspaces.md``),
        and the decorated coroutine function runs once per owned slice with its
        :class:`~workgroup.runtime.keyspaces.SliceLease`.

        ``lease.owns(key)`` says whether this slice, with the token it was handed
        with, is the key's slice now; ``lease.report_load(x)`` reports the
        slice's load and ``lease.report_key_load(key, x)`` a hot key's (the
        ``max_sampled_keys`` heaviest per process reach the leader).  The
        group's leader splits hot slices, merges cold ones and moves slices
        between processes with the planner's ``settings``
        (:class:`~workgroup.keyspaces.PlannerSettings`); the group is
        ``<app>.<name>``.  ``grace_ms``, ``on_failure`` and ``max_failures`` as
        for :meth:`worker`: under ``"release"`` a slice whose handler kept
        failing goes to another process, which the planner then never hands
        it (nor a slice split from it) while the refusal lasts.

        ``warm_up=True``: a slice the planner moves from one process to another
        (a new process, balancing, a drain, a hand-over before leaving) is first
        handed to its next owner with ``lease.role == "warming"`` while its
        current owner keeps it, and keeps its keys and its token: the handler
        prepares the slice (loads its keys' state), then ``await lease.ready()``,
        which returns ``True`` once the cut-over made this process the owner,
        with the slice's new token, or ``False`` once the move was called off.
        ``warmup_timeout_ms`` as for :meth:`worker`.  Slices born from a split
        or a merge are handed out at once.

        ``standbys=N``: each slice also has N standby holders on other processes
        (``lease.role == "standby"``: the lease owns no key, ``token_for``
        refuses every key; warm up, then ``await lease.ready()``).  A slice whose
        owner is gone (crashed, leaving, draining) goes to a standby holder of
        it, one that reported ready first; slices born from a split or a merge
        get standby holders of their own.
        """
        _check_called(name, "keyspace", "users")
        _check_name(name, "keyspace name")
        if settings is not None and not isinstance(settings, PlannerSettings):
            raise ConfigError(
                f"keyspace {name!r}: settings must be a PlannerSettings, "
                f"not {type(settings).__name__}"
            )
        if grace_ms is not None and grace_ms < 0:
            raise ConfigError(f"grace_ms must be >= 0, got {grace_ms}")
        if restart_backoff_ms <= 0 or max_restart_backoff_ms < restart_backoff_ms:
            raise ConfigError("restart back-off must be > 0 and max >= initial")
        if isinstance(max_sampled_keys, bool) or not isinstance(max_sampled_keys, int):
            raise ConfigError(f"max_sampled_keys must be an integer, got {max_sampled_keys!r}")
        if max_sampled_keys < 0:
            raise ConfigError(f"max_sampled_keys must be >= 0, got {max_sampled_keys}")
        _check_own_failure_policy(f"keyspace {name!r}", on_failure, max_failures)
        if not isinstance(warm_up, bool):
            raise ConfigError(f"warm_up must be True or False, got {warm_up!r}")
        if isinstance(warmup_timeout_ms, bool) or warmup_timeout_ms <= 0:
            raise ConfigError(f"warmup_timeout_ms must be > 0, got {warmup_timeout_ms!r}")
        if isinstance(standbys, bool) or not isinstance(standbys, int) or standbys < 0:
            raise ConfigError(
                f"keyspace {name!r}: standbys must be an integer >= 0, got {standbys!r}"
            )

        def register(function: F) -> F:
            _check_signature(function, 1, f"keyspace {name!r}")
            if not inspect.iscoroutinefunction(function):
                raise ConfigError(
                    f"keyspace {name!r}: the handler must be a coroutine function "
                    "(async def handler(lease): ...)"
                )
            self._check_free(name)
            self.keyspaces[name] = KeyspaceSpec(
                name,
                function,
                settings or PlannerSettings(),
                grace_ms,
                RestartPolicy(restart_backoff_ms / 1000, max_restart_backoff_ms / 1000),
                on_failure,
                max_failures,
                max_sampled_keys,
                warm_up,
                warmup_timeout_ms,
                standbys,
            )
            return function

        return register

    # --- plugins --------------------------------------------------------------------

    def use(self, plugin: str, **options: Any) -> Any:
        """Attach an installed plugin (``workgroup.plugins`` entry point), e.g.
        ``spark = app.use("spark", checkpoint_root="/data/ckpt")``: calls the
        plugin's factory with the app and ``options``, returns what it returns."""
        return load_plugin(plugin)(self, **options)

    def add_collector(self, collector: Any) -> None:
        """Serve a ``prometheus_client`` collector with the app's metrics."""
        self.collectors.append(collector)

    def add_cleanup(self, function: Callable[[], Any]) -> None:
        """Call ``function`` (plain or async) once the app has stopped."""
        self.cleanups.append(function)

    def add_startup(self, function: Callable[[], Any]) -> None:
        """Call ``function`` (plain: in a thread; or async) before the app joins its
        groups, so that the process is ready before it takes anything (a plugin
        starting its engine).  An error it raises stops the app."""
        self.startups.append(function)

    # --- running --------------------------------------------------------------------

    def group_id(self, name: str) -> str:
        return f"{self.name}.{name}"

    def check(self, settings: Settings | None = None) -> None:
        """Raise :class:`ConfigError` if the app cannot run as declared (with
        ``settings``, default the app's own: every grace period fits in the
        rebalance timeout)."""
        limit_ms = (settings or self.settings).rebalance_timeout_ms
        for worker in self.workers.values():
            if worker.grace_ms is not None:
                check_grace(worker.grace_ms, limit_ms, f"worker {worker.kind!r} grace_ms")
        for leader in self.leaders.values():
            check_grace(leader.grace_ms, limit_ms, f"leader {leader.name!r} grace_ms")
        for keyspace in self.keyspaces.values():
            if keyspace.grace_ms is not None:
                check_grace(keyspace.grace_ms, limit_ms, f"keyspace {keyspace.name!r} grace_ms")
        if not self.workers and not self.leaders and not self.keyspaces:
            raise ConfigError(
                f"app {self.name!r} declares no @app.worker, @app.leader or @app.keyspace"
            )
        missing = sorted(set(self.workers) - set(self.sources))
        if missing:
            raise ConfigError(
                f"no @app.resources for worker kind(s) {', '.join(map(repr, missing))}"
            )

    async def serve(self, stop: asyncio.Event | None = None, **overrides: Any) -> None:
        """Run until ``stop`` is set (or the task is cancelled); then revoke and leave."""
        from workgroup.runtime.runner import AppRunner  # on use: see the module docstring

        runner = AppRunner(self, self.settings.with_overrides(**overrides))
        await runner.run(stop or asyncio.Event())

    def run(self, **overrides: Any) -> None:
        """Run in this process until SIGINT or SIGTERM (what ``workgroup run`` does)."""
        from workgroup.runtime.daemon import run_app  # on use: see the module docstring

        run_app(self, self.settings.with_overrides(**overrides))

    def _check_free(self, name: str) -> None:
        if name in self.workers or name in self.leaders or name in self.keyspaces:
            raise ConfigError(
                f"{name!r} is declared twice (worker kinds, leaders and keyspaces share names)"
            )


def _check_own_failure_policy(what: str, on_failure: object, max_failures: object) -> None:
    try:
        check_failure_policy(
            "retry" if on_failure is None else on_failure,
            1 if max_failures is None else max_failures,
        )
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def _check_called(name: object, decorator: str, example: str) -> None:
    """``@app.worker`` without its kind hands the function over as the kind."""
    if callable(name):
        raise ConfigError(
            f"@app.{decorator} needs a name: @app.{decorator}({example!r}), "
            f"not @app.{decorator} alone (on {getattr(name, '__qualname__', name)!r})"
        )


def _check_signature(function: object, arguments: int, what: str) -> None:
    """A handler takes the lease; a resource function takes nothing: said at
    declaration, not at every call."""
    if not callable(function):
        raise ConfigError(f"{what}: {function!r} is not a function")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return
    try:
        signature.bind(*([None] * arguments))
    except TypeError:
        name = getattr(function, "__qualname__", repr(function))
        short = getattr(function, "__name__", "handler")
        shown = signature.replace(return_annotation=inspect.Signature.empty)
        wanted = "one argument, the lease" if arguments else "no arguments"
        raise ConfigError(
            f"{what}: {name}{shown} must take {wanted}"
            + (f" (def {short}(lease): ...)" if arguments else "")
        ) from None


def _check_isolation(isolation: object) -> None:
    if isolation not in (None, "process"):
        raise ConfigError(f"isolation must be None or 'process', got {isolation!r}")


def _isolated(function: Handler, isolation: Isolation) -> Handler:
    if isolation == "process":
        from workgroup.runtime.isolation import ProcessHandler

        return ProcessHandler(function)
    return function


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > 100:
        raise ConfigError(
            f"{what} {name!r}: use letters, digits, '_', '-' and '.' (at most 100 characters)"
        )


__all__ = ["LEADER_KIND", "App", "LeaderSpec", "ResourceFunction", "Settings", "WorkerSpec"]
