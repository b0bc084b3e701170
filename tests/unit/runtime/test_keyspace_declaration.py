"""``@app.keyspace``: what a declaration takes, and the one-line errors it refuses with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import workgroup
from workgroup.errors import ConfigError
from workgroup.keyspaces import PlannerSettings


async def handler(lease: Any) -> None:
    return None


def test_a_keyspace_is_declared_with_its_planner_settings() -> None:
    app = workgroup.App("shop")
    settings = PlannerSettings(min_slices_per_member=4, max_slices_per_member=8)
    app.keyspace(
        "users", settings=settings, max_sampled_keys=8, warm_up=True, warmup_timeout_ms=5_000
    )(handler)
    spec = app.keyspaces["users"]
    assert spec.handler is handler
    assert spec.settings == settings
    assert spec.max_sampled_keys == 8
    assert (spec.warm_up, spec.warmup_timeout_ms) == (True, 5_000)
    assert app.group_id("users") == "shop.users"
    app.check()  # a keyspace alone is an app that can run


def test_a_keyspace_without_settings_takes_the_planner_defaults() -> None:
    app = workgroup.App("shop")
    app.keyspace("users")(handler)
    assert app.keyspaces["users"].settings == PlannerSettings()
    assert app.keyspaces["users"].warm_up is False  # moves are plain unless asked
    assert app.keyspaces["users"].standbys == 0


def test_a_keyspace_declares_its_standbys_for_its_group() -> None:
    from workgroup.runtime.keyspaces import KeyspaceGroup

    app = workgroup.App("shop")
    app.keyspace("users", standbys=2)(handler)
    spec = app.keyspaces["users"]
    assert spec.standbys == 2
    assert KeyspaceGroup(spec, "shop.users").config.standbys == 2


def plain(lease: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("declare", "said"),
    [
        (lambda app: app.keyspace("users")(plain), "must be a coroutine function"),
        (lambda app: app.keyspace(handler), r"needs a name: @app.keyspace\('users'\)"),
        (lambda app: app.keyspace("bad name"), "keyspace name 'bad name'"),
        (lambda app: app.keyspace("users", settings={"churn_budget": 1}), "PlannerSettings"),
        (lambda app: app.keyspace("users", max_sampled_keys=-1), "max_sampled_keys"),
        (lambda app: app.keyspace("users", grace_ms=-1), "grace_ms"),
        (lambda app: app.keyspace("users", on_failure="explode"), "keyspace 'users'"),
        (lambda app: app.keyspace("users", warm_up="yes"), "warm_up must be True or False"),
        (lambda app: app.keyspace("users", warmup_timeout_ms=0), "warmup_timeout_ms must be > 0"),
        (lambda app: app.keyspace("users", standbys=-1), "standbys must be an integer >= 0"),
        (lambda app: app.keyspace("users", standbys=True), "standbys must be an integer >= 0"),
        (lambda app: app.keyspace("users", standbys=1.5), "standbys must be an integer >= 0"),
        (lambda app: app.keyspace("taken")(handler), "declared twice"),
        (lambda app: app.keyspace("users")(lambda: None), "must take one argument"),
    ],
)
def test_bad_declarations_say_what_is_wrong(
    declare: Callable[[workgroup.App], object], said: str
) -> None:
    app = workgroup.App("shop")
    app.leader("taken")(lambda lease: None)
    with pytest.raises(ConfigError, match=said) as caught:
        declare(app)
    assert "\n" not in str(caught.value)
    assert "users" not in app.keyspaces
