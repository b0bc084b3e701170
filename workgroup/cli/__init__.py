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


#: What the connection says when no broker answers, and what to try then.
_NOBODY_LISTENS = "no bootstrap server reachable"
_NOBODY_LISTENS_HINT = (
    "hint: is a coordinator running at that address? Start one with 'workgroup coordinator' "
    "(it listens on 127.0.0.1:9092), or point --bootstrap at your Kafka cluster."
)


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except WorkgroupError as exc:
            click.echo(f"error: {exc}", err=True)
            if _NOBODY_LISTENS in str(exc):
                click.echo(_NOBODY_LISTENS_HINT, err=True)
            sys.exit(exc.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="workgroup")
def main() -> None:
    """Hand resources to a pool of workers over Kafka's group protocol."""


for _name in _SUBCOMMANDS:
    main.add_command(importlib.import_module(f"workgroup.cli.{_name}").command)
