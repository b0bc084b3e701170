"""The daemon's settings: flags, then ``WORKGROUP_*`` environment variables, then a
TOML file, then what the app declares, in that order of precedence."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workgroup.errors import ConfigError
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
}
ENV_PREFIX = "WORKGROUP_"
_BOOLEANS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
_TYPE_NAMES = {int: "an integer", str: "a string", bool: "true or false"}


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
        else:
            values[name] = raw
    return values


def resolve(
    declared: Settings,
    *,
    flags: Mapping[str, Any],
    environ: Mapping[str, str],
    config_file: str | None,
) -> Settings:
    """The settings the daemon runs with (see the module docstring for precedence)."""
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
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            raise ConfigError(f"{where}: {name} must be {_TYPE_NAMES[kind]}, got {value!r}")
        values[name] = value
    return values


__all__ = ["ENV_PREFIX", "SETTING_TYPES", "read_environment", "read_file", "resolve"]
