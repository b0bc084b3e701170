"""Load balancing in the runtime: ``lease.report_load`` and the settings
``capacity``, ``imbalance_tolerance``, ``max_moves``, ``balance_interval_ms``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.unit.runtime.test_lease import FakeStore
from workgroup.cli import main
from workgroup.errors import ConfigError
from workgroup.runtime.app import Settings
from workgroup.runtime.config import read_environment, read_file, resolve
from workgroup.runtime.lease import Lease, Slot


async def test_report_load_goes_to_the_member_and_bad_values_are_refused() -> None:
    reported: list[float] = []
    lease = Lease("g", "shard", 1, slot=Slot("t", 0), store=FakeStore(), load_sink=reported.append)
    lease.report_load(12)
    lease.report_load(0.5)
    assert reported == [12.0, 0.5]
    for bad in (-1, math.nan, math.inf, "7"):
        with pytest.raises(ConfigError, match="load"):
            lease.report_load(bad)  # type: ignore[arg-type]
    assert reported == [12.0, 0.5]
    # Without a member (a lease made by hand) a report is checked, then dropped.
    Lease("g", "shard", 1, slot=Slot("t", 0), store=FakeStore()).report_load(3)


def test_settings_come_from_flags_environment_and_file(tmp_path: Path) -> None:
    config = tmp_path / "workgroup.toml"
    config.write_text("capacity = 2\nmax_moves = 4\nbalance_interval_ms = 30000\n")
    assert read_file(config) == {"capacity": 2.0, "max_moves": 4, "balance_interval_ms": 30000}
    assert read_environment({"WORKGROUP_IMBALANCE_TOLERANCE": "0.2"}) == {
        "imbalance_tolerance": 0.2
    }
    settings = resolve(
        Settings(),
        flags={"capacity": 3.0},
        environ={"WORKGROUP_IMBALANCE_TOLERANCE": "0.2"},
        config_file=str(config),
    )
    assert (settings.capacity, settings.imbalance_tolerance) == (3.0, 0.2)
    assert (settings.max_moves, settings.balance_interval_ms) == (4, 30_000)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"capacity": 0.0}, "capacity"),
        ({"imbalance_tolerance": -0.1}, "imbalance_tolerance"),
        ({"max_moves": -1}, "max_moves"),
        ({"balance_interval_ms": 0}, "balance_interval_ms"),
    ],
)
def test_bad_settings_are_clear_errors(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings().with_overrides(**overrides)


def test_bad_environment_numbers_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="WORKGROUP_CAPACITY must be a number"):
        read_environment({"WORKGROUP_CAPACITY": "big"})


def test_the_run_command_lists_the_balancing_flags() -> None:
    # Through the group, as users run it: click keeps the first help option it
    # makes for a command, and one made outside the group lacks its "-h".
    result = CliRunner().invoke(main, ["run", "--help"])
    for flag in ("--capacity", "--imbalance-tolerance", "--max-moves", "--balance-interval-ms"):
        assert flag in result.output
