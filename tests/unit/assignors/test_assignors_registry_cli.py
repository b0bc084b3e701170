"""The assignor registry (entry points, plain functions) and ``workgroup assign``."""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from assignor_inputs import member
from click.testing import CliRunner

from workgroup.assignors import registry
from workgroup.assignors.base import Assignment, AssignmentInput, Assignor
from workgroup.assignors.registry import FunctionAssignor, available, get_assignor
from workgroup.assignors.replicated import ReplicatedAssignor
from workgroup.assignors.sticky import CooperativeStickyAssignor
from workgroup.cli import main
from workgroup.errors import ConfigError


def test_builtins_are_registered_as_entry_points() -> None:
    from importlib.metadata import entry_points

    registered = {ep.name for ep in entry_points(group="workgroup.assignors")}
    assert set(registry.BUILTIN) <= registered
    for name in registry.BUILTIN:
        assignor = get_assignor(name)
        assert isinstance(assignor, Assignor)
        assert assignor.name == name
    assert isinstance(get_assignor("cooperative-sticky"), CooperativeStickyAssignor)


def test_options_reach_the_constructor() -> None:
    assignor = get_assignor("replicated", replicas=3)
    assert isinstance(assignor, ReplicatedAssignor)
    assert assignor.replicas == 3


@pytest.mark.parametrize("bad", [0, -1, "many"])
def test_bad_option_values_are_config_errors(bad: object) -> None:
    with pytest.raises(ConfigError, match="replicas"):
        get_assignor("replicated", replicas=bad)


def test_unknown_option_is_config_error() -> None:
    with pytest.raises(ConfigError, match="does not accept options"):
        get_assignor("range", colour="blue")


def test_unknown_name_lists_the_available_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown assignor 'nope'; available: .*range"):
        get_assignor("nope")


def everything_to_first(data: AssignmentInput, *, reverse: bool = False) -> Assignment:
    ids = sorted(data.members, reverse=reverse)
    out: Assignment = {mid: [] for mid in ids}
    for kind in sorted(data.resources):
        out[ids[0]].extend((kind, key) for key in data.resources[kind])
    return out


class Plugin:
    name = "plugin"
    supports_cooperative = True

    def assign(self, data: AssignmentInput) -> Assignment:
        return everything_to_first(data)


def _fake_entry_points(monkeypatch: pytest.MonkeyPatch, **targets: str) -> None:
    fakes = [EntryPoint(name, value, registry.GROUP) for name, value in targets.items()]

    def entry_points(group: str) -> list[EntryPoint]:
        assert group == registry.GROUP
        return fakes

    monkeypatch.setattr(registry, "entry_points", entry_points)
    monkeypatch.setattr(registry, "_registered_cache", None)


def test_function_plugin_is_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    here = __name__
    _fake_entry_points(monkeypatch, first=f"{here}:everything_to_first", cls=f"{here}:Plugin")
    data = AssignmentInput({"k": range(3)}, {"a": member("a", ["k"]), "b": member("b", ["k"])})
    wrapped = get_assignor("first")
    assert isinstance(wrapped, FunctionAssignor)
    assert wrapped.name == "first"
    assert wrapped.supports_cooperative is False
    assert wrapped.assign(data) == {"a": [("k", 0), ("k", 1), ("k", 2)], "b": []}
    reversed_ = get_assignor("first", reverse=True)
    assert reversed_.assign(data)["b"] == [("k", 0), ("k", 1), ("k", 2)]
    with pytest.raises(ConfigError, match="does not accept options"):
        get_assignor("first", colour="blue")
    assert get_assignor("cls").name == "plugin"
    assert "first" in available()


def test_entry_points_are_read_once_until_refreshed(monkeypatch: pytest.MonkeyPatch) -> None:
    here = __name__
    _fake_entry_points(monkeypatch, first=f"{here}:everything_to_first")
    assert "first" in available()
    later = [EntryPoint("cls", f"{here}:Plugin", registry.GROUP)]
    monkeypatch.setattr(registry, "entry_points", lambda group: later)
    assert "cls" not in available()  # read once per process
    registry.refresh()
    assert "cls" in available()
    assert "first" not in available()


def test_broken_plugin_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_entry_points(monkeypatch, broken="no_such_module_anywhere:thing")
    with pytest.raises(ConfigError, match="cannot be loaded"):
        get_assignor("broken")


def test_non_assignor_plugin_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_entry_points(monkeypatch, number=f"{__name__}:NOT_AN_ASSIGNOR")
    with pytest.raises(ConfigError, match="cannot assign"):
        get_assignor("number")


NOT_AN_ASSIGNOR = 42


# -- workgroup assign ------------------------------------------------------------


def invoke(args: list[str], stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["assign", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


GROUP: dict[str, Any] = {
    "resources": {"orders": 4, "users": ["eu", {"key": "us", "racks": ["r1"]}]},
    "members": {
        "m1": {"owned": [["orders", 0], ["orders", 1]], "generation": 3, "rack": "r1"},
        "m2": {"kinds": ["orders"], "owned": [["orders", 2]], "generation": 3},
        "m3": {"instance_id": "host-3", "capacity": 2},
    },
}


def test_assign_reads_stdin_and_prints_assignment_and_stats() -> None:
    code, out, err = invoke(["--assignor", "cooperative-sticky"], json.dumps(GROUP))
    assert code == 0, err
    result = json.loads(out)
    assignment = result["assignment"]
    assert set(assignment) == {"m1", "m2", "m3"}
    owners = [tuple(r) for rs in assignment.values() for r in rs]
    assert sorted(owners, key=str) == sorted(
        [("orders", i) for i in range(4)] + [("users", "eu"), ("users", "us")], key=str
    )
    assert ["orders", 2] in assignment["m2"]
    stats = result["stats"]
    assert stats["assignor"] == "cooperative-sticky"
    assert stats["load"] == {mid: len(rs) for mid, rs in assignment.items()}
    assert stats["max_minus_min"] == 0
    assert stats["moves"] == stats["min_moves"] == 3
    assert stats["unassigned"] == 0


def test_assign_reads_a_file_and_takes_options(tmp_path: Path) -> None:
    path = tmp_path / "group.json"
    path.write_text(json.dumps({"resources": {"k": 3}, "members": {"a": {}, "b": {}, "c": {}}}))
    code, out, err = invoke(
        ["--assignor", "replicated", "--input", str(path), "--option", "replicas=2"]
    )
    assert code == 0, err
    assignment = json.loads(out)["assignment"]
    assert sum(len(v) for v in assignment.values()) == 6


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "JSON object"),
        ('{"resources": {"k": 1}, "members": {}, "extra": 1}', "unknown top-level"),
        ('{"resources": {"k": -1}, "members": {}}', "must be >= 0"),
        ('{"resources": {"k": "three"}, "members": {}}', "key count or a list"),
        ('{"resources": {"k": [1, 1]}, "members": {}}', "duplicate keys"),
        ('{"resources": {"k": [1.5]}, "members": {}}', "strings or integers"),
        ('{"resources": {"k": [{"racks": ["a"]}]}, "members": {}}', "key object"),
        ('{"resources": {"k": 1}, "members": {"a": {"kinds": ["x"]}}}', "unknown kinds x"),
        ('{"resources": {"k": 1}, "members": {"a": {"colour": 1}}}', "unknown fields colour"),
        ('{"resources": {"k": 1}, "members": {"a": {"owned": [["k"]]}}}', "owned entries"),
        ('{"resources": {"k": 1}, "members": {"a": {"owned": [["x", 0]]}}}', "unknown kind 'x'"),
        ('{"resources": {"k": 1}, "members": {"a": {"generation": "1"}}}', "generation"),
        ('{"resources": {"k": 1}, "members": {"a": {"capacity": 0}}}', "capacity"),
        ('{"resources": {"k": 1}, "members": {"a": {"rack": 3}}}', "'rack' must be a string"),
        ('{"resources": {"k": 1}, "members": []}', "'members' must be an object"),
    ],
)
def test_bad_input_is_a_clear_error_with_exit_code_2(stdin: str, message: str) -> None:
    code, out, err = invoke(["--assignor", "range"], stdin)
    assert code == 2
    assert out == ""
    assert message in err


def test_unknown_assignor_and_bad_option_exit_2() -> None:
    code, _, err = invoke(["--assignor", "nope"], json.dumps(GROUP))
    assert code == 2
    assert "unknown assignor 'nope'" in err
    code, _, err = invoke(["--assignor", "range", "--option", "novalue"], json.dumps(GROUP))
    assert code == 2
    assert "name=value" in err


def test_unreadable_file_exits_2(tmp_path: Path) -> None:
    code, _, err = invoke(["--assignor", "range", "--input", str(tmp_path / "missing.json")])
    assert code == 2
    assert "cannot read" in err


def test_replicated_stats_count_every_claim() -> None:
    group = {
        "resources": {"k": 3},
        "members": {"a": {"owned": [["k", 0], ["k", 1]]}, "b": {"owned": [["k", 0]]}, "c": {}},
    }
    code, out, err = invoke(
        ["--assignor", "replicated", "--option", "replicas=2", "--indent", "0"], json.dumps(group)
    )
    assert code == 0, err
    result = json.loads(out)
    # a and b keep their replicas of k0 (shared ownership is not a conflict here).
    assert ["k", 0] in result["assignment"]["a"]
    assert ["k", 0] in result["assignment"]["b"]
    assert result["stats"]["moves"] == result["stats"]["min_moves"] == 3
