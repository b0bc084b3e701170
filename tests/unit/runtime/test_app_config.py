"""Declaring an app, and the daemon's settings: precedence and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

import workgroup
from workgroup.errors import ConfigError
from workgroup.runtime.app import Settings
from workgroup.runtime.config import resolve
from workgroup.runtime.loader import load_app


def make_app() -> workgroup.App:
    app = workgroup.App("billing", session_timeout_ms=6_000)

    @app.resources("shard")
    def shards() -> list[str]:
        return ["a", "b"]

    @app.worker("shard")
    async def run(lease: workgroup.Lease) -> None: ...

    @app.leader("publisher")
    async def publish(lease: workgroup.Lease) -> None: ...

    return app


def test_an_app_names_its_groups_after_kinds_and_leaders() -> None:
    app = make_app()
    app.check()
    assert sorted(app.workers) == ["shard"]
    assert sorted(app.leaders) == ["publisher"]
    assert app.group_id("shard") == "billing.shard"
    assert app.settings.heartbeat_ms() == 250  # a third of the session, at most 250 ms


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda app: app.worker("shard", assignor="nope"), "nope"),
        (lambda app: app.worker("shard", assignor=["range", "nope"]), "nope"),
        (lambda app: app.worker("shard", assignor=["range", "range"]), "distinct"),
        (lambda app: app.worker("shard", assignor=[]), "distinct"),
        (lambda app: app.worker("bad kind"), "kind 'bad kind'"),
        (lambda app: app.leader("shard")(lambda lease: None), "declared twice"),
        (lambda app: app.resources("shard")(lambda: []), "declared twice"),
        (lambda app: app.worker("x", grace_ms=-1), "grace_ms"),
    ],
)
def test_declarations_that_cannot_work_are_refused(declare: object, message: str) -> None:
    app = make_app()
    with pytest.raises(ConfigError, match=message):
        declare(app)  # type: ignore[operator]


def test_a_worker_may_offer_several_assignors_for_a_rolling_change() -> None:
    app = workgroup.App("a")
    app.worker("shard", assignor=["round-robin", "cooperative-sticky"])(lambda lease: None)
    assert app.workers["shard"].assignors == ("round-robin", "cooperative-sticky")
    app.worker("other")(lambda lease: None)
    assert app.workers["other"].assignors == ("cooperative-sticky",)


def test_a_worker_without_resources_is_refused() -> None:
    app = workgroup.App("a")

    @app.worker("shard")
    async def run(lease: workgroup.Lease) -> None: ...

    with pytest.raises(ConfigError, match=r"no @app\.resources"):
        app.check()
    with pytest.raises(ConfigError, match=r"no @app\.worker"):
        workgroup.App("empty").check()


def test_settings_precedence_flags_then_environment_then_file(tmp_path: Path) -> None:
    config = tmp_path / "workgroup.toml"
    config.write_text(
        'bootstrap = "file:1"\ninstance_id = "from-file"\n'
        "grace_ms = 500\nsession_timeout_ms = 9000\n"
    )
    settings = resolve(
        make_app().settings,
        flags={"bootstrap": "flag:1", "instance_id": None},
        environ={"WORKGROUP_INSTANCE_ID": "from-env", "WORKGROUP_GRACE_MS": "700"},
        config_file=str(config),
    )
    assert settings.bootstrap == "flag:1"
    assert settings.instance_id == "from-env"
    assert settings.grace_ms == 700
    assert settings.session_timeout_ms == 9000
    assert settings.rebalance_timeout_ms == 60_000  # the app's own


def test_the_config_file_may_come_from_the_environment_and_use_a_table(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[workgroup]\ninstance_id = "w7"\n')
    settings = resolve(
        make_app().settings, flags={}, environ={"WORKGROUP_CONFIG": str(config)}, config_file=None
    )
    assert settings.instance_id == "w7"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("grace_ms = 'soon'\n", "grace_ms must be an integer"),
        ("colour = 'blue'\n", "unknown setting"),
        ("bootstrap = [\n", "not valid TOML"),
        ("heartbeat_interval_ms = 7000\n", "must be below session_timeout_ms"),
        ("session_timeout_ms = true\n", "must be an integer"),
    ],
)
def test_bad_config_files_are_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=message) as raised:
        resolve(make_app().settings, flags={}, environ={}, config_file=str(config))
    assert raised.value.exit_code == 2


def test_missing_config_file_and_bad_environment_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        resolve(make_app().settings, flags={}, environ={}, config_file=str(tmp_path / "no"))
    with pytest.raises(ConfigError, match="WORKGROUP_GRACE_MS must be an integer"):
        resolve(
            make_app().settings, flags={}, environ={"WORKGROUP_GRACE_MS": "x"}, config_file=None
        )


def test_load_app_imports_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "myapp_for_test.py").write_text(
        "import workgroup\napp = workgroup.App('x')\nnot_app = 3\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert isinstance(load_app("myapp_for_test:app"), workgroup.App)
    with pytest.raises(ConfigError, match=r"not a workgroup\.App"):
        load_app("myapp_for_test:not_app")
    with pytest.raises(ConfigError, match="has no attribute"):
        load_app("myapp_for_test:missing")
    with pytest.raises(ConfigError, match="cannot import module"):
        load_app("no_such_module_here:app")
    with pytest.raises(ConfigError, match="MODULE:APP"):
        load_app("just_a_module")


def test_the_session_margin_and_request_timeout_are_settings(tmp_path: Path) -> None:
    app = workgroup.App("billing", session_timeout_ms=6_000, session_margin_ms=900)
    assert app.settings.session_margin_ms == 900
    assert app.settings.request_timeout_ms is None  # the member derives it from the session
    config = tmp_path / "workgroup.toml"
    config.write_text("session_margin_ms = 1200\nrequest_timeout_ms = 4000\n")
    settings = resolve(
        app.settings,
        flags={"session_margin_ms": 1_500},
        environ={"WORKGROUP_REQUEST_TIMEOUT_MS": "5000"},
        config_file=str(config),
    )
    assert settings.session_margin_ms == 1_500
    assert settings.request_timeout_ms == 5_000
    # A margin that leaves less than two heartbeat intervals (2 x 250 ms) of the session.
    with pytest.raises(ConfigError, match="must leave two heartbeat intervals"):
        resolve(app.settings, flags={"session_margin_ms": 5_501}, environ={}, config_file=None)
    resolve(app.settings, flags={"session_margin_ms": 5_500}, environ={}, config_file=None)
    with pytest.raises(ConfigError, match="request_timeout_ms must be > 0"):
        resolve(
            app.settings, flags={}, environ={"WORKGROUP_REQUEST_TIMEOUT_MS": "0"}, config_file=None
        )
    # Zero is not "the default": it is refused as negatives are, naming the setting.
    for value in (0, -5):
        with pytest.raises(ConfigError, match=f"heartbeat_interval_ms must be > 0, got {value}"):
            resolve(
                app.settings, flags={"heartbeat_interval_ms": value}, environ={}, config_file=None
            )


def test_a_grace_period_must_fit_in_the_rebalance_timeout_with_the_cancellation_margin() -> None:
    # Longer than the session (the default) is fine: the member heartbeats meanwhile.
    settings = Settings(session_timeout_ms=6_000, grace_ms=10_000).validated()
    assert settings.grace_ms > settings.session_timeout_ms
    with pytest.raises(ConfigError, match=r"grace_ms \(56000\).*rebalance_timeout_ms \(60000\)"):
        Settings(grace_ms=56_000).validated()
    app = workgroup.App("billing", rebalance_timeout_ms=20_000)

    @app.resources("invoice")
    def invoices() -> list[str]:
        return ["a"]

    @app.worker("invoice", grace_ms=16_000)
    async def handle(lease: workgroup.Lease) -> None: ...

    with pytest.raises(ConfigError, match=r"worker 'invoice' grace_ms \(16000\)"):
        app.check()
    app.check(app.settings.with_overrides(rebalance_timeout_ms=21_000))
