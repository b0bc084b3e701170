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


def security_from(config_file: Path | None, environ: Mapping[str, str] = os.environ) -> Security:
    """TLS and SASL settings from ``config_file`` and the environment (ConfigError if bad)."""
    values: dict[str, Any] = read_file(config_file) if config_file is not None else {}
    values.update(read_environment(environ))
    return Settings(**values).security()
