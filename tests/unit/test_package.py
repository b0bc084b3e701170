"""The package's public surface."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from mypy import api as mypy_api

import workgroup
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


def test_all_is_the_lazy_table_and_the_eager_names() -> None:
    assert sorted(workgroup.__all__) == sorted([*workgroup._LAZY, *workgroup._EAGER])
    assert len(set(workgroup.__all__)) == len(workgroup.__all__)


@pytest.mark.parametrize("name", workgroup.__all__)
def test_every_public_name_resolves(name: str) -> None:
    value = getattr(workgroup, name)
    assert value is not None
    module = workgroup._LAZY.get(name)
    if module is not None:
        assert value is getattr(sys.modules[module], name)


def test_public_names_are_the_defining_modules_objects() -> None:
    from workgroup.assignors.registry import get_assignor
    from workgroup.coordinator.server import CoordinatorServer
    from workgroup.member.errors import MemberFatalError

    assert workgroup.GroupMember.__name__ == "GroupMember"
    assert workgroup.Protocol.__name__ == "Protocol"
    assert workgroup.CoordinatorServer is CoordinatorServer
    assert workgroup.get_assignor is get_assignor
    assert workgroup.MemberFatalError is MemberFatalError
    assert issubclass(workgroup.MemberFatalError, workgroup.CoordinatorError)
    assert issubclass(workgroup.AssignorError, workgroup.WorkgroupError)


def test_dir_lists_the_lazy_names_before_they_are_loaded() -> None:
    code = (
        "import sys, workgroup;"
        "names = dir(workgroup);"
        "assert set(workgroup.__all__) <= set(names), names;"
        "assert 'workgroup.coordinator.server' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        _ = workgroup.NoSuchThing  # type: ignore[attr-defined]


def test_coordinator_errors_say_whether_they_are_retriable() -> None:
    assert CoordinatorError(ErrorCode.REBALANCE_IN_PROGRESS).retriable
    assert not CoordinatorError(ErrorCode.FENCED_INSTANCE_ID).retriable
    assert isinstance(CoordinatorError(ErrorCode.NONE), WorkgroupError)


def test_every_error_an_application_can_meet_is_public() -> None:
    """Every WorkgroupError the member raises to applications imports from workgroup
    (IllegalTransitionError is a bug in workgroup, not something to handle)."""
    import workgroup.member as member

    raised = {
        name
        for name in member.__all__
        if isinstance(getattr(member, name), type)
        and issubclass(getattr(member, name), WorkgroupError)
        and name != "IllegalTransitionError"
    }
    assert raised <= set(workgroup.__all__), raised - set(workgroup.__all__)


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


@pytest.mark.parametrize("package", [workgroup, workgroup.runtime], ids=lambda p: p.__name__)
def test_type_checkers_see_every_lazy_name_from_the_module_it_is_loaded_from(
    package: ModuleType,
) -> None:
    lazy: dict[str, str] = package._LAZY
    assert _type_checking_imports(package) == lazy
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
    names = ("App", "Lease", "LeaseLostError", "CheckpointError", "GroupMember")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "import workgroup\n" + "".join(f"reveal_type(workgroup.{n})\n" for n in names)
    )
    monkeypatch.setenv("MYPYPATH", str(Path(workgroup.__file__).parents[1]))
    out, err, _ = mypy_api.run(
        ["--strict", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(snippet)]
    )
    revealed = [line.split("Revealed type is ", 1)[1] for line in out.splitlines()]
    assert len(revealed) == len(names), out + err
    for name, shown in zip(names, revealed, strict=True):
        assert shown != '"Any"', f"{name}: {shown}"
        assert f".{name}" in shown, f"{name}: {shown}"
