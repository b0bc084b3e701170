"""The coordinator's listener options: the advertised listener (Kafka's
``advertised.listeners``) and the refusal of a non-loopback address without ``--insecure``."""

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


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "10.1.2.3:9092", "[::]:0", "example.com:9092"])
def test_a_non_loopback_listener_is_refused_without_insecure(listen: str) -> None:
    result = CliRunner().invoke(main, ["coordinator", "--listen", listen])
    assert result.exit_code == 2
    assert "refusing to listen on" in result.output
    assert "--insecure" in result.output


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "localhost"])
def test_loopback_addresses_need_nothing(host: str) -> None:
    from workgroup.cli.coordinator import check_exposure

    check_exposure(host, insecure=False)


def test_insecure_says_so_loudly(capsys: pytest.CaptureFixture[str]) -> None:
    from workgroup.cli.coordinator import check_exposure

    check_exposure("0.0.0.0", insecure=True)
    assert "WARNING: --insecure" in capsys.readouterr().err


@pytest.mark.parametrize("minutes", ["0", "-5"])
def test_a_bad_offsets_retention_is_refused_with_exit_2(minutes: str) -> None:
    result = CliRunner().invoke(main, ["coordinator", "--offsets-retention-minutes", minutes])
    assert result.exit_code == 2
    assert "offsets retention must be >= 1 ms, or -1 (never)" in result.output
