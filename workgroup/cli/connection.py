"""How the inspection commands (describe, list, top) reach a secured cluster.

They read the same connection settings as ``workgroup run``: ``security_protocol``,
``sasl_*`` and ``ssl_*`` from a TOML file (``--config``), overridden by
``WORKGROUP_*`` environment variables, so one file (or one environment) serves
the daemon and the tools that watch it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from workgroup.cli.options import configure_logging, log_options, option_with_alias
from workgroup.member.transport import parse_bootstrap
from workgroup.runtime.config import Settings, read_environment, read_file
from workgroup.security import Security

F = TypeVar("F", bound=Callable[..., Any])


def config_option(command: F) -> F:
    """The ``--config FILE`` option: connection settings as for ``workgroup run``."""
    return click.option(
        "--config",
        "config_file",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="TOML file with the connection settings (security_protocol, sasl_*, ssl_*), "
        "as for 'workgroup run'; WORKGROUP_* variables override it.",
    )(command)


#: Where the commands that ask a coordinator look for it by default.
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def coordinator_options(*, timeout: bool = True) -> Callable[[F], F]:
    """``--bootstrap``, ``--config``, ``--request-timeout-s`` (older spelling
    ``--timeout-s``; unless ``timeout=False``) and the log options of a command
    that asks a coordinator (see :func:`connect`)."""

    def decorate(command: F) -> F:
        command = log_options(level="warning")(command)
        if timeout:
            command = option_with_alias(
                "--request-timeout-s",
                "--timeout-s",
                "timeout_s",
                default=10.0,
                help_text="Give up on a request to the coordinator after this long (seconds).",
            )(command)
        command = config_option(command)
        return click.option(
            "--bootstrap", default=DEFAULT_BOOTSTRAP, show_default=True, help="HOST:PORT[,...]"
        )(command)

    return decorate


def connect(bootstrap: str, config_file: Path | None, log_level: str, log_format: str) -> Security:
    """What each such command does first: logging set up, the address checked
    (a malformed one exits 2), the connection settings read."""
    configure_logging(log_level, log_format)
    parse_bootstrap(bootstrap)
    return security_from(config_file)


def security_from(config_file: Path | None, environ: Mapping[str, str] = os.environ) -> Security:
    """TLS and SASL settings from ``config_file`` and the environment (ConfigError if bad)."""
    values: dict[str, Any] = read_file(config_file) if config_file is not None else {}
    values.update(read_environment(environ))
    return Settings().replaced(values).security
