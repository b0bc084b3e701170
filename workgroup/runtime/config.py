"""The daemon's settings (:class:`Settings`): flags, then ``WORKGROUP_*``
environment variables, then a TOML file, then what the app declares, in that
order of precedence.  The app, the runner and the daemon read them from here.

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from workgroup.errors import ConfigError
from workgroup.log import get_logger
from workgroup.member.config import check_session_margin
from workgroup.runtime.handlers import DEFAULT_MAX_FAILURES, ON_FAILURE_CHOICES
from workgroup.security import Security

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
#: Longest default heartbeat interval of an app's members.
DEFAULT_MAX_HEARTBEAT_MS = 500
#: Time beyond a handler's grace period for its cancellation (a task unwinding,
#: a child process terminated then killed) and the member's release.  A grace
#: period plus this must fit in the rebalance timeout: an eager rebalance, or one
#: that meets a closing member, waits that long for the revocation to end.
STOP_MARGIN_MS = 5_000

log = get_logger(__name__)
_BOOLEANS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
_TYPE_NAMES = {int: "an integer", str: "a string", bool: "true or false"}


@dataclass(frozen=True, slots=True)
class Settings:
    """How the app's members run; the daemon overrides them from flags, environment
    and configuration file."""

    bootstrap: str | None = None
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int | None = None
    rebalance_timeout_ms: int = 60_000
    #: Members end their leases this long before their session can end on the
    #: coordinator (``None``: a tenth of the session, at least 500 ms).
    session_margin_ms: int | None = None
    #: Time limit of a coordinator lookup and of lease commits and fetches
    #: (``None``: the session timeout, at most 30 s).
    request_timeout_ms: int | None = None
    #: Give up (exit 1) when nothing answers at the bootstrap address within this
    #: long at start (``None``: one attempt, then exit 1 with a hint).
    connect_timeout_ms: int | None = None
    #: Give up (exit 1) when no coordinator has been reachable for this long
    #: while running (``None``: never; a line is logged every 30 s meanwhile).
    unreachable_timeout_ms: int | None = None
    grace_ms: int = 10_000
    resource_poll_interval_ms: int = 5_000
    event_log: str | None = None
    #: A static member leaves the group on a stop too (scale-down, KIP-812).
    leave_on_stop: bool = False
    #: Serve /metrics and /healthz on this port (0: any free port; None: off).
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    #: Copy lease state of the legacy (position) layout to the key slots at start
    #: (see :mod:`workgroup.runtime.legacy`); without it such state is refused.
    migrate_lease_layout: bool = False
    #: What a handler that failed ``max_failures`` times in a row gets, unless its
    #: ``@app.worker``/``@app.leader`` says: ``"retry"`` (go on), ``"release"``
    #: (give the resource to another process, refused here for a while) or
    #: ``"stop"`` (stop the daemon, exit 3).  /healthz says 503 from then on.
    on_failure: str = "retry"
    max_failures: int = DEFAULT_MAX_FAILURES

    def security(self) -> Security:
        """TLS and SASL for the cluster (validated: :class:`ConfigError`)."""
        return Security(
            protocol=self.security_protocol,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=self.sasl_username,
            sasl_password=self.sasl_password,
            ssl_cafile=self.ssl_cafile,
            ssl_certfile=self.ssl_certfile,
            ssl_keyfile=self.ssl_keyfile,
        )

    def heartbeat_ms(self) -> int:
        """The heartbeat interval: given, or a third of the session up to 500 ms.

        Members notice a rebalance at their next heartbeat (the classic protocol
        cannot push), so the interval bounds how long a handover waits; two
        heartbeats a second per member are nothing for a coordinator.
        """
        return self.heartbeat_interval_ms or max(
            min(self.session_timeout_ms // 3, DEFAULT_MAX_HEARTBEAT_MS), 1
        )

    def validated(self) -> Settings:
        if self.session_timeout_ms <= 0:
            raise ConfigError(f"session_timeout_ms must be > 0, got {self.session_timeout_ms}")
        if self.heartbeat_ms() >= self.session_timeout_ms:
            raise ConfigError(
                f"heartbeat_interval_ms ({self.heartbeat_ms()}) must be below "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.rebalance_timeout_ms <= 0 or self.resource_poll_interval_ms <= 0:
            raise ConfigError("rebalance_timeout_ms and resource_poll_interval_ms must be > 0")
        if self.session_margin_ms is not None:
            check_session_margin(
                self.session_margin_ms,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                heartbeat_interval_ms=self.heartbeat_ms(),
            )
        if self.request_timeout_ms is not None and self.request_timeout_ms <= 0:
            raise ConfigError(f"request_timeout_ms must be > 0, got {self.request_timeout_ms}")
        for name in ("connect_timeout_ms", "unreachable_timeout_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be > 0, got {value}")
        if self.grace_ms < 0:
            raise ConfigError(f"grace_ms must be >= 0, got {self.grace_ms}")
        check_grace(self.grace_ms, self.rebalance_timeout_ms, "grace_ms")
        check_failure_policy(self.on_failure, self.max_failures)
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be 0-65535, got {self.metrics_port}")
        self.security()
        return self

    def with_overrides(self, **values: Any) -> Settings:
        unknown = set(values) - set(self.__dataclass_fields__)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        return replace(self, **{k: v for k, v in values.items() if v is not None}).validated()


def check_grace(grace_ms: int, rebalance_timeout_ms: int, what: str) -> None:
    """A grace period, plus the cancellation margin, must fit in the rebalance
    timeout: a rebalance waits that long for a revoked handler to stop."""
    if grace_ms + STOP_MARGIN_MS > rebalance_timeout_ms:
        raise ConfigError(
            f"{what} ({grace_ms}) plus {STOP_MARGIN_MS} ms to cancel the handler must fit in "
            f"rebalance_timeout_ms ({rebalance_timeout_ms}): raise rebalance_timeout_ms to at "
            f"least {grace_ms + STOP_MARGIN_MS} or shorten the grace period"
        )


def check_failure_policy(on_failure: object, max_failures: object) -> None:
    """A bad ``on_failure`` or ``max_failures`` is a :class:`ConfigError`."""
    if on_failure not in ON_FAILURE_CHOICES:
        raise ConfigError(
            f"on_failure must be one of {', '.join(map(repr, ON_FAILURE_CHOICES))}, "
            f"got {on_failure!r}"
        )
    if isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < 1:
        raise ConfigError(f"max_failures must be an integer >= 1, got {max_failures!r}")


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
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            raise ConfigError(f"{where}: {name} must be {_TYPE_NAMES[kind]}, got {value!r}")
        values[name] = value
    return values


__all__ = [
    "DEFAULT_MAX_HEARTBEAT_MS",
    "ENV_PREFIX",
    "OTHER_VARIABLES",
    "SETTING_TYPES",
    "STOP_MARGIN_MS",
    "Settings",
    "check_failure_policy",
    "check_grace",
    "read_environment",
    "read_file",
    "resolve",
    "unknown_variables",
    "warn_unknown_variables",
]
