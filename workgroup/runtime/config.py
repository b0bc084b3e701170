"""The daemon's settings: flags, then ``WORKGROUP_*`` environment variables, then a
TOML file, then what the app declares, in that order of precedence.

Rules:

* a ``WORKGROUP_*`` variable that is neither a setting nor one of the other
  variables workgroup reads (:data:`OTHER_VARIABLES`, ``WORKGROUP_SPARK_*``) is
  reported with a warning naming the closest valid one: a misspelt variable
  must not be ignored silently;
* a bad value of a known setting is a :class:`ConfigError` (exit 2).
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workgroup.errors import ConfigError
from workgroup.log import get_logger
from workgroup.runtime.app import Settings

#: Setting name -> type, for the file and the environment.
SETTING_TYPES: dict[str, type] = {
    "bootstrap": str,
    "instance_id": str,
    "session_timeout_ms": int,
    "heartbeat_interval_ms": int,
    "rebalance_timeout_ms": int,
    "session_margin_ms": int,
    "request_timeout_ms": int,
    "connect_timeout_ms": int,
    "unreachable_timeout_ms": int,
    "grace_ms": int,
    "resource_poll_interval_ms": int,
    "event_log": str,
    "leave_on_stop": bool,
    "metrics_port": int,
    "metrics_host": str,
    "security_protocol": str,
    "sasl_mechanism": str,
    "sasl_username": str,
    "sasl_password": str,
    "ssl_cafile": str,
    "ssl_certfile": str,
    "ssl_keyfile": str,
    "migrate_lease_layout": bool,
    "on_failure": str,
    "max_failures": int,
    "capacity": float,
    "imbalance_tolerance": float,
    "max_moves": int,
    "balance_interval_ms": int,
}
ENV_PREFIX = "WORKGROUP_"
#: ``WORKGROUP_*`` variables that are not settings but are read elsewhere.
OTHER_VARIABLES = frozenset(
    {
        "WORKGROUP_CONFIG",  # the TOML file (``--config``)
        "WORKGROUP_STATE_DIR",  # the auto-started coordinator's directory
        "WORKGROUP_HANDLER_KEY",  # process-isolated handlers
    }
)
#: Prefixes of variables that plugins read (``WORKGROUP_SPARK_MASTER``).
PLUGIN_PREFIXES = ("WORKGROUP_SPARK_",)

log = get_logger(__name__)
_BOOLEANS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
_TYPE_NAMES = {int: "an integer", str: "a string", bool: "true or false", float: "a number"}


def read_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Settings from a TOML file (top-level keys, or a ``[workgroup]`` table)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from exc
    table = data.get("workgroup", data)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {str(path)!r}: [workgroup] must be a table")
    return _typed(table, f"config file {str(path)!r}")


def read_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """Settings from ``WORKGROUP_<NAME>`` variables (e.g. ``WORKGROUP_BOOTSTRAP``)."""
    values: dict[str, Any] = {}
    for name, kind in SETTING_TYPES.items():
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is None or raw == "":
            continue
        if kind is bool:
            flag = raw.strip().lower()
            if flag not in _BOOLEANS:
                raise ConfigError(
                    f"{ENV_PREFIX}{name.upper()} must be true or false (or 1/0, yes/no), "
                    f"got {raw!r}"
                )
            values[name] = _BOOLEANS[flag]
        elif kind is int:
            try:
                values[name] = int(raw)
            except ValueError:
                raise ConfigError(
                    f"{ENV_PREFIX}{name.upper()} must be an integer, got {raw!r}"
                ) from None
        elif kind is float:
            try:
                values[name] = float(raw)
            except ValueError:
                raise ConfigError(
                    f"{ENV_PREFIX}{name.upper()} must be a number, got {raw!r}"
                ) from None
        else:
            values[name] = raw
    return values


def setting_variables() -> list[str]:
    """Every ``WORKGROUP_*`` variable workgroup itself reads."""
    return [ENV_PREFIX + name.upper() for name in SETTING_TYPES] + sorted(OTHER_VARIABLES)


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """``WORKGROUP_*`` variables nobody reads, each with the closest valid name
    (``None`` when nothing is close)."""
    valid = setting_variables()
    unknown = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in valid or name.startswith(PLUGIN_PREFIXES):
            continue
        # Compared without the prefix, which every candidate shares.
        suffixes = {v.removeprefix(ENV_PREFIX): v for v in valid}
        close = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), suffixes, n=1)
        unknown.append((name, suffixes[close[0]] if close else None))
    return unknown


def warn_unknown_variables(environ: Mapping[str, str]) -> None:
    """Log ``config.unknown_variable`` once per variable nobody reads."""
    for name, closest in unknown_variables(environ):
        log.warning(
            "config.unknown_variable",
            variable=name,
            closest=closest,
            hint=f"did you mean {closest}?" if closest else "not a workgroup setting; ignored",
        )


def resolve(
    declared: Settings,
    *,
    flags: Mapping[str, Any],
    environ: Mapping[str, str],
    config_file: str | None,
) -> Settings:
    """The settings the daemon runs with (see the module docstring for precedence)."""
    warn_unknown_variables(environ)
    merged: dict[str, Any] = {}
    path = config_file or environ.get(ENV_PREFIX + "CONFIG") or None
    if path:
        merged.update(read_file(path))
    merged.update(read_environment(environ))
    merged.update({k: v for k, v in flags.items() if v is not None})
    return declared.with_overrides(**merged)


def _typed(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(table) - set(SETTING_TYPES) - {"workgroup"})
    if unknown:
        raise ConfigError(
            f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(SETTING_TYPES)}"
        )
    values = {}
    for name, value in table.items():
        kind = SETTING_TYPES[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)  # TOML: ``capacity = 2``
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            raise ConfigError(f"{where}: {name} must be {_TYPE_NAMES[kind]}, got {value!r}")
        values[name] = value
    return values


__all__ = [
    "ENV_PREFIX",
    "OTHER_VARIABLES",
    "SETTING_TYPES",
    "read_environment",
    "read_file",
    "resolve",
    "unknown_variables",
    "warn_unknown_variables",
]
