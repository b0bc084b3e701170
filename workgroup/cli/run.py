"""``workgroup run MODULE:APP``: the worker daemon.

Imports the app (the current directory is on ``sys.path``), resolves its
settings (flags, then ``WORKGROUP_*`` variables, then ``--config`` /
``WORKGROUP_CONFIG`` TOML, then the app's own) and runs it until SIGTERM or
SIGINT: the first stops taking work (with ``--drain-on-stop``, after moving
everything to the other daemons with warm-ups, up to ``--drain-timeout-ms``),
revokes everything within the grace period, leaves the group (a static
member keeps its place until its session expires, unless ``--leave-on-stop``)
and exits 0; a second exits at once with status 130.

Exit status (the README lists them too): 0 stopped by a signal; 1 a fatal error
(no coordinator answers, another process took over the instance id, the
connect or unreachable timeout passed, ...); 2 bad settings, a bad
``MODULE:APP`` or a resource function that raises, before anything runs; 3 a
handler failed ``max_failures`` times in a row under ``on_failure="stop"``;
120 stdout or stderr was closed (a ``| head`` that ended); 130 a second signal.

Logs go to stderr: readable lines on a terminal, JSON lines otherwise
(``--log-format``).

Rules:

* the settings' flags are made from their declarations
  (:class:`workgroup.runtime.config.Settings`): a flag not given is ``None``,
  so that the environment, the file or the app decide.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from workgroup.cli.options import configure_logging, log_options
from workgroup.member.driver import parse_bootstrap
from workgroup.runtime.config import SETTINGS, Setting, resolve
from workgroup.runtime.daemon import run_app
from workgroup.runtime.loader import load_app

F = TypeVar("F", bound=Callable[..., Any])


def setting_options(table: Sequence[Setting] = SETTINGS) -> Callable[[F], F]:
    """A ``--<name>`` option for each setting that has a flag, as declared: its type,
    its choices and its help (with its default).  An option not given is ``None``:
    the setting then comes from the environment, the file or the app."""

    def decorate(command: F) -> F:
        # click lists options in the reverse order of their decoration.
        for setting in reversed([s for s in table if s.flag]):
            assert setting.flag is not None
            kind: dict[str, Any] = {"type": setting.kind}
            if setting.kind is bool:
                kind = {"is_flag": True}
            elif setting.doc.choices:
                kind = {"type": click.Choice(setting.doc.choices)}
            elif setting.doc.path:
                kind = {"type": click.Path(dir_okay=False)}
            help_text = setting.doc.help
            if setting.kind is not bool and setting.default_text != "none":
                help_text += f" Default: {setting.default_text}."
            command = click.option(
                setting.flag, setting.name, default=None, help=help_text, **kind
            )(command)
        return command

    return decorate


@click.command("run")
@click.argument("target", metavar="MODULE:APP")
@setting_options()
@click.option(
    "--config",
    "config_file",
    default=None,
    type=click.Path(dir_okay=False),
    help="TOML file with settings (see the README).",
)
@log_options(level="info", log_format="auto")
def command(
    target: str, config_file: str | None, log_level: str, log_format: str, **flags: Any
) -> None:
    """Run the workers and leaders of MODULE:APP until SIGTERM/SIGINT."""
    configure_logging(log_level, log_format)
    app = load_app(target)
    settings = resolve(app.settings, flags=flags, environ=os.environ, config_file=config_file)
    if settings.bootstrap is not None:
        parse_bootstrap(settings.bootstrap)
    app.check(settings)
    run_app(app, settings)
