"""The coordinator's advertised listener (Kafka's ``advertised.listeners``)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from workgroup.cli import main
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.errors import ConfigError


def test_an_advertised_listener_is_parsed() -> None:
    assert CoordinatorConfig().advertised() is None
    assert CoordinatorConfig(advertised_listener="127.0.0.1:19092").advertised() == (
        "127.0.0.1",
        19092,
    )
    assert CoordinatorConfig(advertised_listener="[::1]:9092").advertised() == ("::1", 9092)


@pytest.mark.parametrize("bad", ["nohost", ":9092", "host:", "host:port", "host:70000"])
def test_a_malformed_advertised_listener_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="advertised listener must be HOST:PORT"):
        CoordinatorConfig(advertised_listener=bad)


def test_the_command_line_refuses_it_with_exit_2() -> None:
    result = CliRunner().invoke(main, ["coordinator", "--advertised-listener", "nohost"])
    assert result.exit_code == 2
    assert "advertised listener must be HOST:PORT" in result.output
