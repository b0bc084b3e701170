"""What an app declares, as the runner and the daemon read it.

:class:`~workgroup.App` builds these with its decorators; the runner reads an
app through :class:`DeclaredApp`, so that it depends on what an app declares,
not on :mod:`workgroup.runtime.app` (which runs apps with the runner).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from workgroup.keyspaces.settings import PlannerSettings
from workgroup.protocol.catalog import CatalogEntry
from workgroup.runtime.config import Settings
from workgroup.runtime.handlers import ON_FAILURE_CHOICES, Handler, OnFailure, RestartPolicy

#: A resource function: the keys of one kind, plain or async.
ResourceFunction = Callable[[], Sequence[CatalogEntry] | Awaitable[Sequence[CatalogEntry]]]
#: A keyspace's handler: a coroutine function of its
#: :class:`~workgroup.runtime.keyspaces.SliceLease` (which imports this module).
SliceHandler = Callable[[Any], Awaitable[Any]]
#: The resource kind of a leader's group (its one key is the leader's name).
LEADER_KIND = "leader"


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    kind: str
    handler: Handler
    #: Assignor names in preference order (several: a rolling change of assignor).
    assignors: tuple[str, ...]
    grace_ms: int | None
    restart: RestartPolicy
    standbys: int = 0
    reassign_delay_ms: int = 0
    #: ``None``: the app-wide setting (``Settings.on_failure``, ``max_failures``).
    on_failure: OnFailure | None = None
    max_failures: int | None = None
    #: Planned moves warm up first (``lease.role == "warming"``, ``lease.ready()``).
    warm_up: bool = False
    #: A warm-up not ready by then falls back to a plain move.
    warmup_timeout_ms: int = 60_000


@dataclass(frozen=True, slots=True)
class LeaderSpec:
    name: str
    handler: Handler
    grace_ms: int
    on_failure: OnFailure | None = None
    max_failures: int | None = None
    #: Standby candidates warming up to take over (``lease.role == "standby"``).
    standbys: int = 0


@dataclass(frozen=True, slots=True)
class KeyspaceSpec:
    """A keyspace: its slices are the resources of the group ``<app>.<name>``."""

    name: str
    #: Called with a :class:`~workgroup.runtime.keyspaces.SliceLease` per owned slice.
    handler: SliceHandler
    settings: PlannerSettings
    grace_ms: int | None
    restart: RestartPolicy
    on_failure: OnFailure | None = None
    max_failures: int | None = None
    #: The most hot keys a process reports to the leader.
    max_sampled_keys: int = 64
    #: Moved slices are warmed up by their next owner first (planned moves).
    warm_up: bool = False
    #: How long a slice's warm-up may take before its move falls back to a plain one.
    warmup_timeout_ms: int = 60_000
    #: Standby holders per slice, on processes other than its owner.
    standbys: int = 0


def failure_policy(
    restart: RestartPolicy,
    on_failure: OnFailure | None,
    max_failures: int | None,
    settings: Settings,
) -> RestartPolicy:
    """``restart`` with a handler's own failure policy, or the app-wide one."""
    policy = on_failure or settings.on_failure
    assert policy in ON_FAILURE_CHOICES  # checked when declared and when validated
    return replace(
        restart,
        on_failure=policy,
        max_failures=max_failures if max_failures is not None else settings.max_failures,
    )


class DeclaredApp(Protocol):
    """What the runner reads of an app (:class:`~workgroup.App` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def workers(self) -> Mapping[str, WorkerSpec]: ...
    @property
    def leaders(self) -> Mapping[str, LeaderSpec]: ...
    @property
    def sources(self) -> Mapping[str, ResourceFunction]: ...
    @property
    def keyspaces(self) -> Mapping[str, KeyspaceSpec]: ...
    @property
    def collectors(self) -> Sequence[Any]: ...
    @property
    def cleanups(self) -> Sequence[Callable[[], Any]]: ...
    @property
    def startups(self) -> Sequence[Callable[[], Any]]: ...
    def group_id(self, name: str) -> str: ...
    def check(self, settings: Settings | None = None) -> None: ...


__all__ = [
    "LEADER_KIND",
    "DeclaredApp",
    "KeyspaceSpec",
    "LeaderSpec",
    "ResourceFunction",
    "WorkerSpec",
    "failure_policy",
]
