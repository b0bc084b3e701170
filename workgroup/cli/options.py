"""Options every command shares: the log level and the log format.

Rules:

* one spelling everywhere: ``--log-level`` and ``--log-format [auto|console|json]``
  (auto: readable lines on a terminal, JSON lines otherwise);
* ``--log-json``, the older spelling of ``--log-format json``, stays as a hidden alias;
* timeouts are named for what they bound, with their unit: ``--request-timeout-s``
  (each request to the coordinator), ``--wait-timeout-s`` (how long ``--wait``
  waits), as the daemon's ``--request-timeout-ms``; an older spelling stays as
  a hidden alias (:func:`option_with_alias`);
* logs go to stderr, so stdout stays the command's output;
* tables on a terminal fit its width; piped, they are never wrapped or cut (full
  member ids for ``grep`` and friends).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from workgroup import log as wlog

F = TypeVar("F", bound=Callable[..., Any])

LOG_FORMATS = ("auto", "console", "json")
#: The width of tables written to a pipe or a file: wide enough never to wrap.
PIPED_WIDTH = 10_000


def console() -> Console:
    """A console for stdout: the terminal's width, or unlimited when piped."""
    if sys.stdout.isatty():
        return Console()
    return Console(width=PIPED_WIDTH, soft_wrap=True)


def log_options(*, level: str = "info", log_format: str = "auto") -> Callable[[F], F]:
    """Add ``--log-level``, ``--log-format`` and the hidden ``--log-json`` to a command.

    The command receives ``log_level`` and ``log_format`` (``--log-json`` is folded
    into ``log_format``); it calls :func:`configure_logging` with them.
    """

    def fold_log_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            ctx.meta["workgroup.log_json"] = True
        return value

    def decorate(command: F) -> F:
        command = click.option(
            "--log-json",
            is_flag=True,
            hidden=True,
            expose_value=False,
            callback=fold_log_json,
            help="The older spelling of --log-format json.",
        )(command)
        command = click.option(
            "--log-format",
            type=click.Choice(LOG_FORMATS),
            default=log_format,
            show_default=True,
            help="auto: readable lines on a terminal, JSON lines otherwise (logs go to stderr).",
        )(command)
        return click.option(
            "--log-level",
            type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
            default=level,
            show_default=True,
            help="Level of the structured log on stderr.",
        )(command)

    return decorate


def option_with_alias(
    name: str,
    old_name: str,
    dest: str,
    *,
    default: float,
    help_text: str,
) -> Callable[[F], F]:
    """A float option ``name`` filling ``dest``, and its older spelling
    ``old_name`` as a hidden alias that still works (the last one given wins)."""
    seen = f"workgroup.alias.{dest}"

    def from_alias(ctx: click.Context, _param: click.Parameter, value: float | None) -> None:
        if value is not None:
            ctx.meta[seen] = value
            if dest in ctx.params:  # the new spelling came first: the alias wins
                ctx.params[dest] = value

    def resolve(ctx: click.Context, _param: click.Parameter, value: float | None) -> float:
        if value is not None:
            return value
        aliased: float = ctx.meta.get(seen, default)
        return aliased

    def decorate(command: F) -> F:
        command = click.option(
            old_name,
            type=float,
            default=None,
            hidden=True,
            expose_value=False,
            callback=from_alias,
            help=f"The older spelling of {name}.",
        )(command)
        return click.option(
            name,
            dest,
            type=float,
            default=None,
            callback=resolve,
            help=f"{help_text}  [default: {default:g}]",
        )(command)

    return decorate


def configure_logging(log_level: str, log_format: str) -> bool:
    """Configure workgroup's log on stderr; whether it is JSON."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get("workgroup.log_json"):
        log_format = "json"
    json_logs = log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())
    wlog.configure(log_level, json=json_logs)
    return json_logs


__all__ = [
    "LOG_FORMATS",
    "PIPED_WIDTH",
    "configure_logging",
    "console",
    "log_options",
    "option_with_alias",
]
