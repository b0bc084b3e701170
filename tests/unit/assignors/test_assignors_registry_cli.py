"""The assignor registry (entry points, plain functions) and ``workgroup assign``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from assignor_inputs import member
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from workgroup.assignors import registry
from workgroup.assignors.base import Assignment, AssignmentInput, Assignor
from workgroup.assignors.registry import FunctionAssignor, available, get_assignor
from workgroup.assignors.replicated import ReplicatedAssignor
from workgroup.assignors.sticky import CooperativeStickyAssignor
from workgroup.cli import main
from workgroup.cli.assign import format_json
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
        ('{"resources": {"k": 1}, "members": {"a": {"colour": 1}}}', "unknown fields colour"),
        ('{"resources": {"k": 1}, "members": {"a": {"owned": [["k"]]}}}', "owned entries"),
        ('{"resources": {"k": 1}, "members": {"a": {"generation": "1"}}}', "generation"),
        ('{"resources": {"k": 1}, "members": {"a": {"capacity": 0}}}', "capacity"),
        ('{"resources": {"k": 1}, "members": {"a": {"rack": 3}}}', "'rack' must be a string"),
        ('{"resources": {"k": 1}, "members": []}', "'members' must be an object"),
        ('{"resources": {"k": 1}, "members": {"a": {"kinds": "k"}}}', "'kinds' must be a list"),
        ('{"resources": {"k": 1}, "members": {"a": {"owned": {}}}}', "'owned' must be a list"),
        ('{"resources": {"k": 1}, "members": {"a": {"instance_id": ""}}}', "must not be empty"),
        ('{"resources": {"k": [{"key": 1, "attributes": [1]}]}, "members": {}}', "attributes"),
        ('{"resources": {"k": 1}, "members": {"a": 3}}', "expected an object"),
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


def run_assign(group: dict[str, Any], *args: str) -> tuple[dict[str, Any], str]:
    code, out, err = invoke(["--assignor", "cooperative-sticky", *args], json.dumps(group))
    assert code == 0, err
    return json.loads(out), err


JOINING: dict[str, Any] = {
    "resources": {"orders": 6},
    "members": {
        "a": {"owned": [["orders", 0], ["orders", 1], ["orders", 2]], "generation": 3},
        "b": {"owned": [["orders", 3], ["orders", 4], ["orders", 5]], "generation": 3},
        "c": {},
    },
}


def test_assign_shows_the_round_the_withheld_resources_and_the_target() -> None:
    result, _ = run_assign(JOINING)
    assignment, target, stats = result["assignment"], result["target"], result["stats"]
    # c's share is still owned by a and b: withheld this round, handed out after.
    assert assignment["c"] == []
    assert {len(rs) for rs in target.values()} == {2}
    assert sorted(map(tuple, target["c"])) == sorted(
        map(tuple, result["revoked"]["a"] + result["revoked"]["b"])
    )
    for mid in "ab":
        assert assignment[mid] == target[mid]
    assert stats["mode"] == "cooperative"
    assert stats["withheld"] == 2
    assert stats["rounds"] == 2
    assert stats["converged"] is True
    assert stats["ignored"] == {}
    # Load and movement describe the target against what members owned before.
    assert stats["load"] == {"a": 2, "b": 2, "c": 2}
    assert stats["moves"] == stats["min_moves"] == 2


def test_assign_mode_eager_revokes_everything_and_withholds_nothing() -> None:
    result, _ = run_assign(JOINING, "--mode", "eager")
    stats = result["stats"]
    assert stats["mode"] == "eager"
    assert stats["withheld"] == 0
    assert stats["rounds"] == 1
    assert result["assignment"] == result["target"]
    assert result["revoked"]["a"] == [["orders", i] for i in range(3)]
    assert result["revoked"]["c"] == []
    # Eager members report what they revoked, so a sticky assignor keeps it in
    # place: only the 2 resources balance requires change hands.
    assert (stats["moves"], stats["min_moves"]) == (2, 2)


def test_assign_mode_cooperative_needs_a_cooperative_assignor() -> None:
    code, out, err = invoke(["--assignor", "range", "--mode", "cooperative"], json.dumps(JOINING))
    assert code == 2
    assert out == ""
    assert "not sticky enough for cooperative" in err


def test_assign_ignores_and_reports_what_the_catalog_does_not_have() -> None:
    group = {
        "resources": {"orders": 2, "users": ["eu"]},
        "members": {
            "a": {
                "kinds": ["orders", "payments"],
                "owned": [["orders", "1"], ["payments", 0], ["orders", 7], ["orders", 0]],
                "generation": 2,
            },
            "b": {"kinds": ["users"], "owned": [["users", "eu"]], "generation": 2},
        },
    }
    result, err = run_assign(group)
    assert result["stats"]["ignored"] == {
        "a": {
            "unknown_kinds": ["payments"],
            "unknown_owned": [["orders", 7], ["payments", 0]],
            "key_type_mismatches": [["orders", "1"]],
        }
    }
    assert "ignored" in err
    assert "a" in err
    # The known claim is kept; the others are revoked, as the live leader says.
    assert ["orders", 0] in result["assignment"]["a"]
    assert ["orders", "1"] in result["revoked"]["a"]
    assert result["target"] == {"a": [["orders", 0], ["orders", 1]], "b": [["users", "eu"]]}


def test_assign_empty_kinds_means_every_kind_as_for_a_live_member() -> None:
    group = {"resources": {"k": 2, "l": 2}, "members": {"a": {"kinds": []}}}
    result, _ = run_assign(group)
    assert len(result["target"]["a"]) == 4


def test_assign_reports_a_rebalance_that_does_not_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_entry_points(monkeypatch, rotating="workgroup.testing.assignors:RotatingAssignor")
    group = {
        "resources": {"k": 2},
        "members": {"a": {"owned": [["k", 0]], "generation": 1}, "b": {}},
    }
    code, out, err = invoke(["--assignor", "rotating"], json.dumps(group))
    assert code == 0, err
    stats = json.loads(out)["stats"]
    assert stats["converged"] is False
    assert stats["rounds"] == 10
    assert "still withholds resources after 10 rounds" in err


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("{not json", "error: input is not valid JSON"),
        ('{"resources": {"k": 1}, "members": {"a": {"generation": true}}}', "'generation'"),
    ],
)
def test_assign_bad_input_in_a_process_is_one_line_with_status_2(stdin: str, message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "workgroup", "assign", "--assignor", "range"],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert message in done.stderr


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@given(value=json_values, indent=st.integers(0, 4))
def test_format_json_reads_back_as_the_same_value(value: object, indent: int) -> None:
    text = format_json(value, indent)
    assert json.loads(text) == value
    if indent == 0:
        assert "\n" not in text


def test_format_json_keeps_a_resource_on_one_line() -> None:
    text = format_json({"a": [["shard", 1], ["shard", 2]], "b": []}, 2)
    assert text.splitlines() == [
        "{",
        '  "a": [',
        '    ["shard", 1],',
        '    ["shard", 2]',
        "  ],",
        '  "b": []',
        "}",
    ]
