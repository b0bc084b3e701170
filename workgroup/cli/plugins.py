"""``workgroup plugins``: the installed plugins (``workgroup.plugins`` entry points)."""

from __future__ import annotations

import click

from workgroup.plugins import installed


@click.command("plugins")
def command() -> None:
    """List the installed workgroup plugins."""
    plugins = installed()
    if not plugins:
        click.echo("no plugins installed (e.g. `pip install -e plugins/spark`)")
        return
    for plugin in plugins:
        version = f" {plugin.version}" if plugin.version else ""
        dist = f"  ({plugin.distribution}{version})" if plugin.distribution else ""
        click.echo(f"{plugin.name}  {plugin.target}{dist}")
