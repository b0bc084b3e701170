"""Each setting is declared once (a field of ``Settings`` or of the embedded
``Security``), and every source, the ``workgroup run`` flags and the docs follow."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from workgroup.cli import main
from workgroup.cli import run as cli_run
from workgroup.cli.run import setting_options
from workgroup.errors import ConfigError
from workgroup.runtime.app import App
from workgroup.runtime.config import (
    SETTINGS,
    Setting,
    Settings,
    read_environment,
    read_file,
    resolve,
    settings_of,
    settings_table,
    unknown_variables,
)
from workgroup.security import Security
from workgroup.setting import setting
from workgroup.testing import capture_logs

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True, slots=True)
class WithRetention(Settings):
    """The daemon's settings plus one more, declared as a new setting would be."""

    retention_ms: int = setting(3_000, "How long finished work is kept.")


def sample(declared: Setting) -> tuple[Any, str, str]:
    """A value of the setting's type: as Python, as an environment variable, as TOML."""
    if declared.kind is bool:
        return True, "yes", "true"
    if declared.kind is int:
        return 1234, "1234", "1234"
    if declared.kind is float:
        return 0.25, "0.25", "0.25"
    value = declared.doc.choices[-1] if declared.doc.choices else "some-value"
    return value, value, f'"{value}"'


def flags_of(table: tuple[Setting, ...], args: list[str]) -> dict[str, Any]:
    """What a command with the generated flags receives for ``args``."""
    seen: dict[str, Any] = {}

    @click.command()
    @setting_options(table)
    def command(**flags: Any) -> None:
        seen.update(flags)

    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output
    return seen


@pytest.mark.parametrize("declared", SETTINGS, ids=[s.name for s in SETTINGS])
def test_every_setting_is_read_from_its_variable_its_toml_key_and_its_flag(
    declared: Setting, tmp_path: Path
) -> None:
    value, raw, toml = sample(declared)
    assert declared.variable == "WORKGROUP_" + declared.name.upper()
    assert read_environment({declared.variable: raw}) == {declared.name: value}
    assert unknown_variables({declared.variable: raw}) == []
    config = tmp_path / "workgroup.toml"
    config.write_text(f"{declared.name} = {toml}\n")
    assert read_file(config) == {declared.name: value}
    config.write_text(f"[workgroup]\n{declared.name} = {toml}\n")
    assert read_file(config) == {declared.name: value}
    flags = flags_of(SETTINGS, [])
    assert all(v is None for v in flags.values())  # not given: the other sources decide
    if declared.flag is None:
        assert declared.name not in flags
    else:
        assert declared.flag == "--" + declared.name.replace("_", "-")
        args = [declared.flag] if declared.kind is bool else [declared.flag, raw]
        assert flags_of(SETTINGS, args)[declared.name] == value


def test_a_new_declared_setting_is_a_variable_a_toml_key_a_flag_and_a_docs_row(
    tmp_path: Path,
) -> None:
    table = settings_of(WithRetention)
    assert [s.name for s in table] == [s.name for s in SETTINGS] + ["retention_ms"]
    config = tmp_path / "workgroup.toml"
    config.write_text("retention_ms = 1000\ngrace_ms = 500\n")
    environ = {"WORKGROUP_RETENTION_MS": "2000"}
    flags = flags_of(table, ["--retention-ms", "3000"])
    assert flags["retention_ms"] == 3000

    def resolved(flags: dict[str, Any], environ: dict[str, str]) -> WithRetention:
        with capture_logs() as logs:
            settings = resolve(
                WithRetention(), flags=flags, environ=environ, config_file=str(config)
            )
        assert [e for e in logs if e["event"] == "config.unknown_variable"] == []
        assert isinstance(settings, WithRetention)
        assert settings.grace_ms == 500  # the others still come from the file
        return settings

    # Precedence as for every setting: the flag, then the variable, then the file,
    # then the declared value.
    assert resolved(flags, environ).retention_ms == 3000
    assert resolved({}, environ).retention_ms == 2000
    assert resolved({}, {}).retention_ms == 1000
    assert WithRetention().retention_ms == 3000
    with pytest.raises(ConfigError, match="WORKGROUP_RETENTION_MS must be an integer"):
        read_environment({"WORKGROUP_RETENTION_MS": "soon"}, table)
    row = "| `retention_ms` | `--retention-ms` | `WORKGROUP_RETENTION_MS` | 3000 |"
    assert row in settings_table(table)
    assert row not in settings_table()


def test_the_docs_settings_table_is_the_declaration() -> None:
    docs = (ROOT / "docs" / "runtime.md").read_text(encoding="utf-8")
    expected = settings_table()
    assert expected in docs, f"docs/runtime.md: replace the settings table with\n{expected}"


def test_run_help_has_a_flag_for_each_setting_that_declares_one() -> None:
    result = CliRunner().invoke(main, ["run", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    options = {
        opt
        for param in main.commands["run"].params
        if isinstance(param, click.Option) and not param.hidden
        for opt in param.opts
        if opt.startswith("--")
    }
    declared = {s.flag for s in SETTINGS if s.flag}
    assert declared <= options
    assert options - declared == {"--config", "--log-level", "--log-format"}
    assert all(flag in result.output for flag in declared)
    assert "--sasl-password" not in result.output  # a secret: environment or file only
    assert "[retry|release|stop]" in result.output  # the declared choices


def test_workgroup_run_passes_its_flags_first_in_precedence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran: list[Settings] = []

    class FakeApp:  # what the command needs of an app
        settings = Settings()

        def check(self, settings: Settings) -> None:
            pass

    monkeypatch.setattr(cli_run, "load_app", lambda target: FakeApp())
    monkeypatch.setattr(cli_run, "run_app", lambda app, settings: ran.append(settings))
    monkeypatch.setenv("WORKGROUP_GRACE_MS", "700")
    monkeypatch.setenv("WORKGROUP_ON_FAILURE", "stop")
    config = tmp_path / "c.toml"
    config.write_text("max_failures = 9\nleave_on_stop = false\n")
    result = CliRunner().invoke(
        main,
        ["run", "x:app", "--config", str(config), "--grace-ms", "800", "--leave-on-stop",
         "--bootstrap", "127.0.0.1:9999"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (settings,) = ran
    assert settings.grace_ms == 800  # the flag over the variable
    assert settings.on_failure == "stop"  # the variable over the declared value
    assert settings.max_failures == 9  # the file over the declared value
    assert settings.leave_on_stop is True  # the flag over the file
    assert settings.bootstrap == "127.0.0.1:9999"
    assert settings.session_timeout_ms == 10_000  # nothing set it


def test_security_is_embedded_and_its_fields_are_settings(tmp_path: Path) -> None:
    names = {f.name for f in fields(Settings)}
    assert "security" in names
    assert not names & {"security_protocol", "sasl_mechanism", "ssl_cafile"}
    embedded = [s for s in SETTINGS if s.path[0] == "security"]
    assert [s.name for s in embedded] == [
        "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
        "ssl_cafile", "ssl_certfile", "ssl_keyfile",
    ]  # fmt: skip
    assert [s.path[1] for s in embedded] == [f.name for f in fields(Security)]
    config = tmp_path / "workgroup.toml"
    config.write_text('security_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "PLAIN"\n')
    settings = resolve(
        Settings(),
        flags={},
        environ={"WORKGROUP_SASL_USERNAME": "u", "WORKGROUP_SASL_PASSWORD": "pw"},
        config_file=str(config),
    )
    assert settings.security == Security("SASL_PLAINTEXT", "PLAIN", "u", "pw")
    # The app's own Security keeps the fields no source sets.
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    own = Settings(security=Security("SSL"))
    assert own.with_overrides(ssl_cafile=str(ca)).security == Security("SSL", ssl_cafile=str(ca))
    assert "pw" not in repr(settings)  # the password stays out of logs


def test_settings_that_cannot_be_declared_are_refused_at_import() -> None:
    @dataclass(frozen=True)
    class Plain:
        retention_ms: int = 3_000

    @dataclass(frozen=True)
    class Listed:
        names: tuple[str, ...] = setting(("a",), "Several names.")

    @dataclass(frozen=True)
    class Twice(Settings):
        protocol: str = setting("x", "Another protocol.", name="security_protocol")

    with pytest.raises(TypeError, match=r"Plain\.retention_ms is not declared by setting"):
        settings_of(Plain)
    with pytest.raises(TypeError, match=r"Listed\.names: a setting is an int, a float, a str"):
        settings_of(Listed)
    with pytest.raises(TypeError, match="settings declared twice: security_protocol"):
        settings_of(Twice)


def test_unknown_names_stay_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^unknown setting\(s\): colour$"):
        Settings().with_overrides(colour="blue")
    config = tmp_path / "c.toml"
    config.write_text("sasl_pasword = 'x'\n")
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) sasl_pasword; known: bootstrap"):
        read_file(config)
    assert unknown_variables({"WORKGROUP_SASL_PASWORD": "x"}) == [
        ("WORKGROUP_SASL_PASWORD", "WORKGROUP_SASL_PASSWORD")
    ]


def test_the_apps_keywords_are_settings_with_the_declared_defaults() -> None:
    declared = {s.name: s.default for s in SETTINGS}
    keywords = {
        name: parameter.default
        for name, parameter in inspect.signature(App).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert keywords
    assert {name: declared.get(name, "not a setting") for name in keywords} == keywords
