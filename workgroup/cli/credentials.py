"""``workgroup credentials``: the embedded coordinator's SASL users (SCRAM verifiers).

The file keeps, per user and SCRAM mechanism, a salt, an iteration count and
two derived keys; never the password (see workgroup/coordinator/scram.py).
The coordinator reads it at start (``--sasl-credentials FILE``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from workgroup.coordinator.scram import (
    DEFAULT_ITERATIONS,
    SCRAM_MECHANISMS,
    Credentials,
    ScramMechanism,
    check_iterations,
    check_user_name,
    verifiers,
)
from workgroup.errors import ConfigError


@click.group(name="credentials")
def command() -> None:
    """Manage the SASL users of the embedded coordinator (--sasl-credentials FILE)."""


def _load_or_new(path: Path) -> Credentials:
    return Credentials.load(path) if path.exists() else Credentials()


@command.command(name="add")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("user")
@click.option(
    "--mechanism",
    "mechanisms",
    type=click.Choice(SCRAM_MECHANISMS),
    multiple=True,
    help="SCRAM mechanism to store a verifier for (repeatable; default: both). "
    "PLAIN logins are checked against any of them.",
)
@click.option(
    "--iterations",
    type=int,
    default=DEFAULT_ITERATIONS,
    show_default=True,
    help="PBKDF2 iterations (Kafka's minimum is 4096): more slows an offline guesser "
    "and every PLAIN login alike.",
)
@click.option(
    "--password-stdin",
    is_flag=True,
    help="Read the password from the first line of stdin instead of prompting.",
)
def add(
    file: Path,
    user: str,
    mechanisms: tuple[ScramMechanism, ...],
    iterations: int,
    password_stdin: bool,
) -> None:
    """Add USER to FILE, or change their password (FILE is created if missing)."""
    check_user_name(user)
    check_iterations(iterations)
    credentials = _load_or_new(file)
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt(
            f"password for {user}", hide_input=True, confirmation_prompt=True, err=True
        )
    if not password:
        raise ConfigError("the password is empty")
    made = verifiers(password, mechanisms=mechanisms or SCRAM_MECHANISMS, iterations=iterations)
    existed = user in credentials.users
    credentials.with_user(user, made).save(file)
    what = "changed" if existed else "added"
    click.echo(f"{what} {user} ({', '.join(made)}) in {file}")


@command.command(name="remove")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.argument("user")
def remove(file: Path, user: str) -> None:
    """Remove USER from FILE."""
    credentials = Credentials.load(file)
    if user not in credentials.users:
        raise ConfigError(f"{file} has no user {user!r}")
    credentials.without_user(user).save(file)
    click.echo(f"removed {user} from {file}")


@command.command(name="list")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
def list_users(file: Path) -> None:
    """List FILE's users and their mechanisms (never anything secret)."""
    credentials = Credentials.load(file)
    for user in sorted(credentials.users):
        mechanisms = credentials.users[user]
        described = ", ".join(f"{m} ({mechanisms[m].iterations} iterations)" for m in mechanisms)
        click.echo(f"{user}: {described}")
