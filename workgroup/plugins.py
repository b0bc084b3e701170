"""Runtime plugins, found through the ``workgroup.plugins`` entry-point group.

A plugin is an optional package (heavy dependencies such as PySpark stay out of
the core) that registers a factory::

    [project.entry-points."workgroup.plugins"]
    spark = "workgroup_spark:attach"

``app.use("spark", **options)`` loads the factory (:func:`load`), calls it with
``(app, **options)`` and returns what it returns (the Spark plugin returns an
object whose ``query`` decorator registers workers).  ``workgroup plugins`` lists what is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from workgroup.errors import ConfigError

GROUP = "workgroup.plugins"


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """An installed plugin: its name, its factory and the distribution that ships it."""

    name: str
    target: str
    distribution: str | None
    version: str | None


def _entry_points() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        found.setdefault(ep.name, ep)
    return found


def installed() -> list[PluginInfo]:
    """Every installed plugin, by name."""
    infos = []
    for name, ep in sorted(_entry_points().items()):
        dist = ep.dist
        infos.append(
            PluginInfo(
                name,
                ep.value,
                dist.metadata["Name"] if dist is not None else None,
                dist.version if dist is not None else None,
            )
        )
    return infos


def load(name: str) -> Any:
    """The factory of plugin ``name`` (:class:`ConfigError` if missing or broken)."""
    ep = _entry_points().get(name)
    if ep is None:
        names = ", ".join(p.name for p in installed()) or "none"
        raise ConfigError(
            f"no workgroup plugin named {name!r} is installed (installed: {names}); "
            f"install it, e.g. `pip install -e plugins/{name}`"
        )
    try:
        return ep.load()
    except Exception as exc:  # a broken plugin must not look like a missing one
        raise ConfigError(f"plugin {name!r} ({ep.value}) cannot be loaded: {exc}") from exc


__all__ = ["GROUP", "PluginInfo", "installed", "load"]
