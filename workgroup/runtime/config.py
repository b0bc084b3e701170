"""The daemon's settings, each declared once, and where their values come from.

:class:`Settings` declares each setting as one field (:func:`~workgroup.setting.setting`):
its name is its TOML key, ``WORKGROUP_<NAME>`` its environment variable and
``--<name>`` its ``workgroup run`` flag; its annotation gives its type, and its
help text the flag's help and its row of the settings table in docs/runtime.md
(:func:`settings_table`).  The TLS and SASL settings are the fields of the
embedded :class:`~workgroup.security.Security`.  :data:`SETTINGS` lists them all.

Rules:

* precedence: flags, then ``WORKGROUP_*`` variables, then a TOML file
  (``--config`` or ``WORKGROUP_CONFIG``; top-level keys or a ``[workgroup]``
  table), then what the app declares;
* a ``WORKGROUP_*`` variable that is neither a setting nor one of the other
  variables workgroup reads (:data:`OTHER_VARIABLES`, ``WORKGROUP_SPARK_*``) is
  reported with a warning naming the closest valid one: a misspelt variable
  must not be ignored silently;
* an unknown key in the file, a value of the wrong type or a bad value of a
  setting is a :class:`ConfigError` (exit 2) that names the setting;
* a new setting is one new field of :class:`Settings` (or :class:`Security`):
  the variable, the TOML key, the flag and the docs row follow from it.
"""

from __future__ import annotations

import difflib
import os
import tomllib
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from workgroup.assignors.balance import DEFAULT_MAX_MOVES, DEFAULT_TOLERANCE
from workgroup.errors import ConfigError
from workgroup.log import get_logger
from workgroup.member.config import DEFAULT_MAX_WARMUPS, check_session_margin
from workgroup.member.load_balancing import DEFAULT_BALANCE_INTERVAL_MS, BalanceSettings
from workgroup.protocol.endpoint import check_endpoint
from workgroup.runtime.handlers import DEFAULT_MAX_FAILURES, ON_FAILURE_CHOICES
from workgroup.security import PLAINTEXT, Security
from workgroup.setting import SettingDoc, setting, setting_doc

ENV_PREFIX = "WORKGROUP_"
#: ``WORKGROUP_*`` variables that are not settings but are read elsewhere.
OTHER_VARIABLES = frozenset(
    {
        "WORKGROUP_CONFIG",  # the TOML file (``--config``)
        "WORKGROUP_STATE_DIR",  # the auto-started coordinator's directory
        "WORKGROUP_HANDLER_KEY",  # process-isolated handlers
        "WORKGROUP_SASL_PASSWORD_FILE",  # where a portable fence's user reads its password
    }
)
#: Prefixes of variables that plugins read (``WORKGROUP_SPARK_MASTER``).
PLUGIN_PREFIXES = ("WORKGROUP_SPARK_",)
#: Longest default heartbeat interval of an app's members.
DEFAULT_MAX_HEARTBEAT_MS = 250
#: Time beyond a handler's grace period for its cancellation (a task unwinding,
#: a child process terminated then killed) and the member's release.  A grace
#: period plus this must fit in the rebalance timeout: an eager rebalance, or one
#: that meets a closing member, waits that long for the revocation to end.
STOP_MARGIN_MS = 5_000

log = get_logger(__name__)
_BOOLEANS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
_TYPE_NAMES = {int: "an integer", str: "a string", bool: "true or false", float: "a number"}
_SETTINGS_OF: dict[type[Any], tuple[Setting, ...]] = {}


@dataclass(frozen=True, slots=True)
class Settings:
    """How the app's members run; the daemon overrides them from flags, environment
    and configuration file (see the module docstring)."""

    bootstrap: str | None = setting(
        None,
        "Coordinator or Kafka bootstrap, HOST:PORT[,...].",
        default_text="127.0.0.1:9092, where a local coordinator is started if nothing "
        "answers (see 'workgroup coordinator --status')",
    )
    instance_id: str | None = setting(
        None,
        "Static membership: a stable id per process (also its name in logs, client ids "
        "(workgroup-ID) and the event log).",
        default_text="dynamic membership, named HOST-PID",
    )
    session_timeout_ms: int = setting(
        10_000,
        "How long the coordinator waits for a heartbeat before it moves this process's "
        "resources elsewhere.",
    )
    heartbeat_interval_ms: int | None = setting(
        None,
        "Time between heartbeats (a handover waits for the next heartbeat).",
        default_text="a third of the session, at most 250 ms",
    )
    rebalance_timeout_ms: int = setting(
        60_000,
        "How long a rebalance waits for the members to rejoin: at least every grace period + 5 s.",
        flag=False,
    )
    session_margin_ms: int | None = setting(
        None,
        "End leases this long before the session can end on the coordinator.",
        default_text="a tenth of the session, at least 500 ms while two heartbeat "
        "intervals of the session remain",
    )
    request_timeout_ms: int | None = setting(
        None,
        "Time limit of a coordinator lookup and of lease commits and fetches.",
        default_text="the session timeout, at most 30 s",
    )
    connect_timeout_ms: int | None = setting(
        None,
        "At start, wait this long for something to answer at the bootstrap address (and "
        "for each member's first coordinator) before exiting 1.",
        default_text="exit 1 at once if nothing answers",
    )
    unreachable_timeout_ms: int | None = setting(
        None,
        "Exit 1 when no coordinator has been reachable for this long while running.",
        default_text="never; a line is logged every 30 s",
    )
    grace_ms: int = setting(10_000, "Grace period of revoked handlers.")
    resource_poll_interval_ms: int = setting(
        5_000, "How often the resource functions are read.", flag=False
    )
    event_log: str | None = setting(
        None, "Append ownership events (JSON lines) to this file.", path=True
    )
    leave_on_stop: bool = setting(
        False,
        "A static member leaves the group when stopped (scale-down, KIP-812): its "
        "resources move at once instead of waiting for its session to expire.",
        default_text="false: a static member keeps its place",
    )
    drain_on_stop: bool = setting(
        False,
        "On SIGTERM, drain first: every resource moves to the other processes (with "
        "warm-ups where the worker has warm_up=True) before this one stops. A stop with "
        "leave_on_stop drains first too in groups whose worker warms up.",
        default_text="false: stopping revokes at once",
    )
    drain_timeout_ms: int = setting(
        90_000,
        "How long a drain before stopping may take; then the process stops as without "
        "it (what it still owns is revoked and moves without warm-up).",
    )
    metrics_port: int | None = setting(
        None,
        "Serve Prometheus /metrics and /healthz on this port of metrics_host (0: a free "
        "port, logged).",
        default_text="off",
    )
    metrics_host: str = setting(
        "127.0.0.1", "The address the metrics endpoint listens on.", flag=False
    )
    #: TLS and SASL for the cluster: each of its fields is a setting.
    security: Security = PLAINTEXT
    migrate_lease_layout: bool = setting(
        False,
        "Copy lease state of the legacy position-based layout to the key slots at start "
        "(every daemon of the group stopped first; see workgroup.runtime.legacy).",
        default_text="false: such state is refused (exit 2)",
    )
    resource_metrics: bool = setting(
        False,
        "Serve a token and a checkpoint-age series per resource held (one series per "
        "key: mind Prometheus' cardinality).",
        default_text="false: no per-key series",
    )
    advertise: str | None = setting(
        None,
        "HOST:PORT other services reach this daemon at, published in its member metadata "
        "for owner lookup (workgroup.Directory, workgroup whois).",
        default_text="none: no endpoint published",
    )
    on_failure: str = setting(
        "retry",
        "What a handler that failed max_failures times in a row gets, unless its "
        "decorator says: retry (go on restarting it), release (give the resource to "
        "another process; this one refuses it for 5 minutes) or stop (stop the daemon, "
        "exit 3). /healthz answers 503 while a handler is failing.",
        choices=ON_FAILURE_CHOICES,
    )
    max_failures: int = setting(
        DEFAULT_MAX_FAILURES,
        "Failures in a row after which a handler is failing (see on_failure).",
    )
    capacity: float = setting(
        1.0,
        "Load balancing: this process's share of the load relative to the others' (> 0).",
    )
    imbalance_tolerance: float = setting(
        DEFAULT_TOLERANCE,
        "Load balancing: how far above the mean load (relative to capacity) the busiest "
        "process may be before the leader moves resources.",
    )
    max_moves: int = setting(
        DEFAULT_MAX_MOVES,
        "Load balancing: resources moved per rebalance at most (0: off).",
    )
    balance_interval_ms: int = setting(
        DEFAULT_BALANCE_INTERVAL_MS,
        "Load balancing: time between probing rebalances while the load is over the "
        "tolerance (handlers report load with lease.report_load).",
    )
    max_warmups: int = setting(
        DEFAULT_MAX_WARMUPS,
        "Planned moves: warm-ups running in a group at once, as the leader decides them "
        "(workers declared with warm_up=True; 0: plain moves).",
    )

    def heartbeat_ms(self) -> int:
        """The heartbeat interval: given, or a third of the session up to 250 ms.

        Members notice a rebalance at their next heartbeat (the classic protocol
        cannot push), so the interval bounds how long a handover waits: a
        daemon's SIGTERM waited 0-0.5 s for its peers with 500 ms.  Four
        heartbeats a second per member are little for a coordinator (the
        embedded one answers 6,000-9,000 a second on two cores).
        """
        if self.heartbeat_interval_ms is not None:
            return self.heartbeat_interval_ms
        return max(min(self.session_timeout_ms // 3, DEFAULT_MAX_HEARTBEAT_MS), 1)

    def validated(self) -> Settings:
        if self.session_timeout_ms <= 0:
            raise ConfigError(f"session_timeout_ms must be > 0, got {self.session_timeout_ms}")
        if self.heartbeat_interval_ms is not None and self.heartbeat_interval_ms <= 0:
            raise ConfigError(
                f"heartbeat_interval_ms must be > 0, got {self.heartbeat_interval_ms}"
            )
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
        if self.drain_timeout_ms <= 0:
            raise ConfigError(f"drain_timeout_ms must be > 0, got {self.drain_timeout_ms}")
        if self.grace_ms < 0:
            raise ConfigError(f"grace_ms must be >= 0, got {self.grace_ms}")
        check_grace(self.grace_ms, self.rebalance_timeout_ms, "grace_ms")
        check_failure_policy(self.on_failure, self.max_failures)
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be 0-65535, got {self.metrics_port}")
        if self.advertise is not None:
            check_endpoint(self.advertise)
        if not self.capacity > 0:
            raise ConfigError(f"capacity must be > 0, got {self.capacity}")
        BalanceSettings(self.imbalance_tolerance, self.max_moves, self.balance_interval_ms)
        return self

    def replaced(self, values: Mapping[str, Any]) -> Settings:
        """These settings with ``values``, by setting name (``None``: unchanged); a
        :class:`Security` value checks itself, the rest is checked by :meth:`validated`."""
        table = {s.name: s for s in settings_of(type(self))}
        unknown = set(values) - set(table) - {f.name for f in fields(self)}
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        own: dict[str, Any] = {}
        embedded: dict[str, dict[str, Any]] = {}
        for name, value in values.items():
            if value is None:
                continue
            path = table[name].path if name in table else (name,)
            if len(path) == 1:
                own[name] = value
            else:
                embedded.setdefault(path[0], {})[path[1]] = value
        for holder, inner in embedded.items():
            own[holder] = replace(own.get(holder, getattr(self, holder)), **inner)
        return replace(self, **own)

    def with_overrides(self, **values: Any) -> Settings:
        """:meth:`replaced`, then :meth:`validated`."""
        return self.replaced(values).validated()


@dataclass(frozen=True, slots=True)
class Setting:
    """One declared setting, as each source spells it."""

    #: Its TOML key (and, upper-cased, the end of its environment variable).
    name: str
    #: ``int``, ``str`` or ``bool``.
    kind: type
    default: Any
    doc: SettingDoc
    #: The field that holds it: ``("grace_ms",)``, ``("security", "protocol")``.
    path: tuple[str, ...]

    @property
    def variable(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str | None:
        """Its ``workgroup run`` flag, if it has one."""
        return "--" + self.name.replace("_", "-") if self.doc.flag else None

    @property
    def default_text(self) -> str:
        """How its default reads in ``--help`` and the docs."""
        if self.doc.default_text is not None:
            return self.doc.default_text
        if self.default is None:
            return "none"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        return str(self.default)


def settings_of(cls: type[Any]) -> tuple[Setting, ...]:
    """The settings that the fields of ``cls`` (:class:`Settings`) declare, those of
    an embedded dataclass of settings included (:class:`TypeError` for a field that
    is neither)."""
    if cls in _SETTINGS_OF:
        return _SETTINGS_OF[cls]
    found = list(_declared_fields(cls, ()))
    names = [s.name for s in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TypeError(f"settings declared twice: {', '.join(twice)}")
    _SETTINGS_OF[cls] = tuple(found)
    return _SETTINGS_OF[cls]


def _declared_fields(owner: type[Any], holder: tuple[str, ...]) -> Iterator[Setting]:
    hints = get_type_hints(owner)
    for item in fields(owner):
        doc, hint = setting_doc(item), hints[item.name]
        if doc is None and not holder and _is_embedded(hint):
            assert isinstance(hint, type)
            yield from _declared_fields(hint, (item.name,))
        elif doc is None:
            raise TypeError(f"{owner.__name__}.{item.name} is not declared by setting()")
        else:
            yield Setting(
                name=doc.name or item.name,
                kind=_kind(hint, f"{owner.__name__}.{item.name}"),
                default=item.default,
                doc=doc,
                path=(*holder, item.name),
            )


def _is_embedded(hint: object) -> bool:
    return isinstance(hint, type) and is_dataclass(hint)


def _kind(hint: object, where: str) -> type:
    """``int`` for ``int`` and ``int | None`` (likewise ``str``, ``bool``)."""
    if get_origin(hint) in (Union, types.UnionType):
        rest = [arg for arg in get_args(hint) if arg is not type(None)]
        hint = rest[0] if len(rest) == 1 else hint
    if hint not in _TYPE_NAMES:
        raise TypeError(f"{where}: a setting is an int, a float, a str or a bool, not {hint!r}")
    assert isinstance(hint, type)
    return hint


#: Every setting of the daemon, in declaration order.
SETTINGS = settings_of(Settings)


def read_file(path: str | os.PathLike[str], table: Sequence[Setting] = SETTINGS) -> dict[str, Any]:
    """Settings from a TOML file (top-level keys, or a ``[workgroup]`` table)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from exc
    values = data.get("workgroup", data)
    if not isinstance(values, dict):
        raise ConfigError(f"config file {str(path)!r}: [workgroup] must be a table")
    return _typed(values, f"config file {str(path)!r}", table)


def read_environment(
    environ: Mapping[str, str], table: Sequence[Setting] = SETTINGS
) -> dict[str, Any]:
    """Settings from ``WORKGROUP_<NAME>`` variables (e.g. ``WORKGROUP_BOOTSTRAP``)."""
    values: dict[str, Any] = {}
    for item in table:
        name, variable = item.name, item.variable
        raw = environ.get(variable)
        if raw is None or raw == "":
            continue
        if item.kind is bool:
            flag = raw.strip().lower()
            if flag not in _BOOLEANS:
                raise ConfigError(f"{variable} must be true or false (or 1/0, yes/no), got {raw!r}")
            values[name] = _BOOLEANS[flag]
        elif item.kind is int:
            try:
                values[name] = int(raw)
            except ValueError:
                raise ConfigError(f"{variable} must be an integer, got {raw!r}") from None
        elif item.kind is float:
            try:
                values[name] = float(raw)
            except ValueError:
                raise ConfigError(f"{variable} must be a number, got {raw!r}") from None
        else:
            values[name] = raw
    return values


def setting_variables(table: Sequence[Setting] = SETTINGS) -> list[str]:
    """Every ``WORKGROUP_*`` variable workgroup itself reads."""
    return [s.variable for s in table] + sorted(OTHER_VARIABLES)


def unknown_variables(
    environ: Mapping[str, str], table: Sequence[Setting] = SETTINGS
) -> list[tuple[str, str | None]]:
    """``WORKGROUP_*`` variables nobody reads, each with the closest valid name
    (``None`` when nothing is close)."""
    valid = setting_variables(table)
    unknown = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in valid or name.startswith(PLUGIN_PREFIXES):
            continue
        # Compared without the prefix, which every candidate shares.
        suffixes = {v.removeprefix(ENV_PREFIX): v for v in valid}
        close = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), suffixes, n=1)
        unknown.append((name, suffixes[close[0]] if close else None))
    return unknown


def warn_unknown_variables(environ: Mapping[str, str], table: Sequence[Setting] = SETTINGS) -> None:
    """Log ``config.unknown_variable`` once per variable nobody reads."""
    for name, closest in unknown_variables(environ, table):
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
    table = settings_of(type(declared))
    warn_unknown_variables(environ, table)
    merged: dict[str, Any] = {}
    path = config_file or environ.get(ENV_PREFIX + "CONFIG") or None
    if path:
        merged.update(read_file(path, table))
    merged.update(read_environment(environ, table))
    merged.update({k: v for k, v in flags.items() if v is not None})
    return declared.with_overrides(**merged)


def settings_table(table: Sequence[Setting] = SETTINGS) -> str:
    """The Markdown table of the settings in docs/runtime.md (a test keeps it there)."""
    rows = ["| setting | flag | environment | default | what it sets |", "|---|---|---|---|---|"]
    for s in table:
        flag = f"`{s.flag}`" if s.flag else ""
        cells = [f"`{s.name}`", flag, f"`{s.variable}`", s.default_text, s.doc.help]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


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


def _typed(values: Mapping[str, Any], where: str, table: Sequence[Setting]) -> dict[str, Any]:
    kinds = {s.name: s.kind for s in table}
    unknown = sorted(set(values) - set(kinds) - {"workgroup"})
    if unknown:
        raise ConfigError(
            f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(kinds)}"
        )
    typed = {}
    for name, value in values.items():
        kind = kinds[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)  # TOML: ``capacity = 2``
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            raise ConfigError(f"{where}: {name} must be {_TYPE_NAMES[kind]}, got {value!r}")
        typed[name] = value
    return typed


__all__ = [
    "DEFAULT_MAX_HEARTBEAT_MS",
    "ENV_PREFIX",
    "OTHER_VARIABLES",
    "SETTINGS",
    "STOP_MARGIN_MS",
    "Setting",
    "Settings",
    "check_failure_policy",
    "check_grace",
    "read_environment",
    "read_file",
    "resolve",
    "setting_variables",
    "settings_of",
    "settings_table",
    "unknown_variables",
    "warn_unknown_variables",
]
