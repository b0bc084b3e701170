"""The ``workgroup`` command line: one module per subcommand."""

from __future__ import annotations

import importlib
import sys

import click

from workgroup.errors import WorkgroupError

#: Subcommand modules; each defines a click command named ``command``.
_SUBCOMMANDS = (
    "coordinator",
    "credentials",
    "assign",
    "member",
    "run",
    "describe",
    "groups",
    "delete",
    "reset",
    "drain",
    "undrain",
    "whois",
    "console",
    "top",
    "plugins",
)


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except WorkgroupError as exc:
            # The one place a command's error is said: the same words (and hint)
            # for the same failure, whichever command met it.
            click.echo(f"error: {exc}", err=True)
            if exc.hint is not None:
                click.echo(f"hint: {exc.hint}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="workgroup")
def main() -> None:
    """Hand resources to a pool of workers over Kafka's group protocol."""


for _name in _SUBCOMMANDS:
    main.add_command(importlib.import_module(f"workgroup.cli.{_name}").command)
