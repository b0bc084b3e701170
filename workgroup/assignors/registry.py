"""Find assignors by name: the built-ins and plugins.

Assignors are registered under the entry-point group ``workgroup.assignors``::

    [project.entry-points."workgroup.assignors"]
    my-assignor = "my_package.assignors:MyAssignor"

The object an entry point names may be

* a class implementing :class:`~workgroup.assignors.base.Assignor`; it is
  instantiated with the options (``get_assignor("replicated", replicas=3)``);
* an assignor instance;
* a plain function ``(AssignmentInput) -> Assignment`` (options are passed as
  keyword arguments); it is wrapped so that it has a ``name`` and
  ``supports_cooperative`` (False unless the function has a truthy
  ``supports_cooperative`` attribute).

The built-in assignors are registered the same way in workgroup's own
``pyproject.toml``; :data:`BUILTIN` also makes them available when the package
metadata is missing (running from a source tree).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from workgroup.assignors.base import Assignment, AssignmentInput, Assignor
from workgroup.errors import ConfigError

GROUP = "workgroup.assignors"

#: ``name -> "module:attribute"`` of the assignors that ship with workgroup.
BUILTIN: dict[str, str] = {
    "range": "workgroup.assignors.range:RangeAssignor",
    "round-robin": "workgroup.assignors.round_robin:RoundRobinAssignor",
    "sticky": "workgroup.assignors.sticky:StickyAssignor",
    "cooperative-sticky": "workgroup.assignors.sticky:CooperativeStickyAssignor",
    "consistent-hash": "workgroup.assignors.consistent_hash:ConsistentHashAssignor",
    "rack-aware": "workgroup.assignors.rack_aware:RackAwareAssignor",
    "replicated": "workgroup.assignors.replicated:ReplicatedAssignor",
    "weighted": "workgroup.assignors.weighted:WeightedAssignor",
    "leader": "workgroup.assignors.leader:LeaderAssignor",
}


class FunctionAssignor:
    """An assignor made from a plain function."""

    def __init__(
        self,
        name: str,
        function: Callable[..., Assignment],
        options: dict[str, Any] | None = None,
        supports_cooperative: bool | None = None,
    ) -> None:
        self.name = name
        self.function = function
        self.options = dict(options or {})
        if supports_cooperative is None:
            supports_cooperative = bool(getattr(function, "supports_cooperative", False))
        self.supports_cooperative = supports_cooperative

    def assign(self, data: AssignmentInput) -> Assignment:
        return self.function(data, **self.options)

    def __repr__(self) -> str:
        return f"FunctionAssignor({self.name!r}, {self.function!r})"


#: ``name -> entry point``, read once: scanning the installed packages takes
#: milliseconds, too long for a member that builds its protocols on every start.
_registered_cache: dict[str, EntryPoint] | None = None


def _registered() -> dict[str, EntryPoint]:
    global _registered_cache
    if _registered_cache is None:
        found: dict[str, EntryPoint] = {}
        for ep in entry_points(group=GROUP):
            found.setdefault(ep.name, ep)
        _registered_cache = found
    return _registered_cache


def refresh() -> None:
    """Read the entry points again (after installing a plugin into a running process)."""
    global _registered_cache
    _registered_cache = None


def available() -> list[str]:
    """Names of every registered assignor."""
    return sorted(set(BUILTIN) | set(_registered()))


def _load(name: str) -> object:
    ep = _registered().get(name)
    if ep is not None:
        try:
            return ep.load()
        except Exception as exc:  # a broken plugin must not look like a typo
            raise ConfigError(f"assignor {name!r} ({ep.value}) cannot be loaded: {exc}") from exc
    target = BUILTIN.get(name)
    if target is None:
        raise ConfigError(f"unknown assignor {name!r}; available: {', '.join(available())}")
    module, _, attribute = target.partition(":")
    loaded: object = getattr(import_module(module), attribute)
    return loaded


def as_assignor(name: str, obj: object, **options: Any) -> Assignor:
    """Turn what a registration names into an :class:`Assignor`."""
    if inspect.isclass(obj):
        try:
            instance = obj(**options)
        except TypeError as exc:
            raise ConfigError(
                f"assignor {name!r} does not accept options {options}: {exc}"
            ) from exc
        if not isinstance(instance, Assignor):
            raise ConfigError(
                f"assignor {name!r}: {obj!r} does not implement the Assignor protocol"
            )
        return instance
    if isinstance(obj, Assignor):
        if options:
            raise ConfigError(f"assignor {name!r} is an instance and takes no options")
        return obj
    if callable(obj):
        if options:
            try:
                inspect.signature(obj).bind(None, **options)
            except TypeError as exc:
                raise ConfigError(
                    f"assignor {name!r} does not accept options {options}: {exc}"
                ) from exc
        return FunctionAssignor(name, obj, options)
    raise ConfigError(f"assignor {name!r} is registered as {obj!r}, which cannot assign")


def get_assignor(name: str, **options: Any) -> Assignor:
    """The assignor registered as ``name``, configured with ``options``.

    Raises :class:`~workgroup.errors.ConfigError` for unknown names, plugins that
    fail to load and options the assignor does not take.
    """
    return as_assignor(name, _load(name), **options)
