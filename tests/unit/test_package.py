"""The package's public surface."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest
from mypy import api as mypy_api

import workgroup
import workgroup.assignors
import workgroup.coordinator
import workgroup.runtime
from workgroup.errors import CoordinatorError, ErrorCode, WorkgroupError


def test_importing_workgroup_loads_no_network_library() -> None:
    code = (
        "import sys, workgroup;"
        "loaded = [m for m in ('aiokafka', 'asyncio') if m in sys.modules];"
        "print(','.join(loaded))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_sans_io_modules_load_no_network_library() -> None:
    code = (
        "import sys, workgroup, workgroup.member.state, workgroup.coordinator.coordinator;"
        "loaded = [m for m in ('aiokafka', 'asyncio') if m in sys.modules];"
        "print(','.join(loaded))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "aiokafka" not in out.stdout


#: The application API: what an app and its callers import from ``workgroup``.
APP_API = [
    "App",
    "CheckpointError",
    "ConfigError",
    "CoordinatorError",
    "Directory",
    "Fence",
    "FenceTimeoutError",
    "Key",
    "Lease",
    "LeaseLostError",
    "Owner",
    "Resource",
    "WorkgroupError",
    "__version__",
]

#: Every other name ``workgroup`` offered -> where it is imported from now.
MOVED = {
    "ErrorCode": "workgroup.errors",
    "ProtocolError": "workgroup.errors",
    "SlotMismatchError": "workgroup.runtime",
    "LegacyLayoutError": "workgroup.runtime",
    "GroupMember": "workgroup.member",
    "AssignorError": "workgroup.member",
    "CallbackError": "workgroup.member",
    "CoordinatorUnavailableError": "workgroup.member",
    "FencedInstanceError": "workgroup.member",
    "GroupAuthorizationError": "workgroup.member",
    "GroupFullError": "workgroup.member",
    "InconsistentProtocolError": "workgroup.member",
    "InvalidSessionTimeoutError": "workgroup.member",
    "MemberClosedError": "workgroup.member",
    "MemberFatalError": "workgroup.member",
    "Protocol": "workgroup.protocol",
    "ResourceSpec": "workgroup.protocol",
    "Assignment": "workgroup.assignors",
    "AssignmentInput": "workgroup.assignors",
    "Assignor": "workgroup.assignors",
    "MemberInfo": "workgroup.assignors",
    "get_assignor": "workgroup.assignors",
    "CoordinatorConfig": "workgroup.coordinator",
    "CoordinatorServer": "workgroup.coordinator",
}


def test_all_is_the_application_api() -> None:
    assert workgroup.__all__ == APP_API


@pytest.mark.parametrize("name", APP_API)
def test_every_app_name_resolves_without_a_warning(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = getattr(workgroup, name)
    assert value is not None
    if name != "__version__":
        module, moved = workgroup._NAMES[name]
        assert not moved
        assert value is getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", sorted(MOVED))
def test_every_moved_name_still_resolves_with_a_warning_naming_its_new_place(name: str) -> None:
    new = MOVED[name]
    expected = getattr(importlib.import_module(new), name)
    for _ in range(2):  # every use warns, not only the first
        with pytest.warns(DeprecationWarning, match=rf"import it from {re.escape(new)} "):
            assert getattr(workgroup, name) is expected


def test_from_workgroup_import_a_moved_name_warns_at_the_importing_line() -> None:
    with pytest.warns(DeprecationWarning, match=r"workgroup\.GroupMember is deprecated") as caught:
        from workgroup import GroupMember  # noqa: F401
    assert caught[0].filename == __file__


def test_the_old_top_level_names_are_exactly_the_app_api_and_the_moved_ones() -> None:
    """Nothing the package offered before this split was dropped."""
    assert set(workgroup._NAMES) | {"__version__"} == set(APP_API) | set(MOVED)
    assert len(APP_API) + len(MOVED) == 38


def test_public_names_are_the_defining_modules_objects() -> None:
    from workgroup.coordinator import CoordinatorServer
    from workgroup.coordinator.server import CoordinatorServer as defined
    from workgroup.errors import CoordinatorError
    from workgroup.member import AssignorError, MemberFatalError

    assert CoordinatorServer is defined
    assert workgroup.CoordinatorError is CoordinatorError
    assert issubclass(MemberFatalError, workgroup.CoordinatorError)
    assert issubclass(AssignorError, workgroup.WorkgroupError)


def test_dir_lists_only_the_app_api_and_loads_nothing() -> None:
    code = (
        "import sys, workgroup;"
        "names = [n for n in dir(workgroup) if not n.startswith('__')];"
        "assert names == [n for n in workgroup.__all__ if n != '__version__'], names;"
        "assert '__version__' in dir(workgroup);"
        "loaded = sorted(m for m in sys.modules if m.startswith('workgroup.'));"
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        _ = workgroup.NoSuchThing  # type: ignore[attr-defined]


def test_coordinator_errors_say_whether_they_are_retriable() -> None:
    assert CoordinatorError(ErrorCode.REBALANCE_IN_PROGRESS).retriable
    assert not CoordinatorError(ErrorCode.FENCED_INSTANCE_ID).retriable
    assert isinstance(CoordinatorError(ErrorCode.NONE), WorkgroupError)


def _type_checking_imports(package: ModuleType) -> dict[str, str]:
    """Name -> module of every import under ``if TYPE_CHECKING:`` in ``package``'s __init__."""
    assert package.__file__ is not None
    tree = ast.parse(Path(package.__file__).read_text(encoding="utf-8"))
    [block] = [
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    ]
    return {
        alias.asname or alias.name: statement.module
        for statement in block.body
        if isinstance(statement, ast.ImportFrom) and statement.module
        for alias in statement.names
    }


def test_type_checkers_see_the_app_api_from_the_module_it_is_loaded_from() -> None:
    app = {name: module for name, (module, moved) in workgroup._NAMES.items() if not moved}
    assert _type_checking_imports(workgroup) == app


@pytest.mark.parametrize(
    "package",
    [workgroup.runtime, workgroup.coordinator, workgroup.assignors],
    ids=lambda p: p.__name__,
)
def test_type_checkers_see_every_lazy_name_from_the_module_it_is_loaded_from(
    package: ModuleType,
) -> None:
    lazy: dict[str, str] = package._LAZY
    assert _type_checking_imports(package) == lazy
    assert sorted(package.__all__) == sorted(lazy)
    for name, module in lazy.items():
        assert getattr(package, name) is getattr(importlib.import_module(module), name)


def test_an_apps_module_loads_neither_the_runner_nor_aiokafka() -> None:
    """A process-isolated handler's child imports the app's module to unpickle the
    handler: declaring an app must stay light."""
    code = (
        "import sys, workgroup;"
        "app = workgroup.App('light');"
        "app.resources('shard')(lambda: ['a']);"
        "app.worker('shard')(lambda lease: None);"
        "heavy = [m for m in ('workgroup.runtime.runner', 'workgroup.runtime.daemon',"
        " 'workgroup.member.driver', 'aiokafka') if m in sys.modules];"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_runtime_package_loads_its_names_on_first_use() -> None:
    code = (
        "import sys, workgroup.runtime.config, workgroup.runtime.errors;"
        "assert 'workgroup.runtime.app' not in sys.modules;"
        "assert 'aiokafka' not in sys.modules;"
        "import workgroup.runtime as runtime;"
        "assert runtime.App.__module__ == 'workgroup.runtime.app'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_mypy_sees_the_runtime_names_as_their_classes_not_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ("App", "Lease", "LeaseLostError", "CheckpointError", "Directory", "Fence")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "import workgroup\n"
        "from workgroup import App, Lease\n"  # re-exported: no error under --strict
        "import workgroup.member\n"
        + "".join(f"reveal_type(workgroup.{n})\n" for n in names)
        + "reveal_type(workgroup.member.GroupMember)\n"
    )
    monkeypatch.setenv("MYPYPATH", str(Path(workgroup.__file__).parents[1]))
    out, err, _ = mypy_api.run(
        ["--strict", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(snippet)]
    )
    revealed = [line.split("Revealed type is ", 1)[1] for line in out.splitlines()]
    assert len(revealed) == len(names) + 1, out + err
    assert ": error:" not in out, out
    for name, shown in zip([*names, "GroupMember"], revealed, strict=True):
        assert shown != '"Any"', f"{name}: {shown}"
        assert f".{name}" in shown, f"{name}: {shown}"
