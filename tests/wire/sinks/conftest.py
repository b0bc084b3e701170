"""A real PostgreSQL server for the sink tests (started once per module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from workgroup.errors import ConfigError
from workgroup.testing.servers import PostgresServer, postgres_binaries, run_postgres


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """PostgreSQL in a temporary directory on a free loopback port; skipped, with
    the reason, only when PostgreSQL or psycopg cannot be had on this machine."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'psycopg[binary]', in .[dev])")
    try:
        postgres_binaries()
    except ConfigError as exc:
        pytest.skip(str(exc))
    with run_postgres() as server:
        yield server
