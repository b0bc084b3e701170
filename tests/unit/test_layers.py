"""The package's layers stay apart: a test that walks every module's imports.

- The member, the protocol codecs and the assignors never import the
  coordinator; the coordinator never imports the member.  Both speak the shared
  vocabulary (``workgroup.kafka``, ``workgroup.types``, ``workgroup.errors``).
- The shared vocabulary imports neither side.
- Sans-I/O modules import neither asyncio nor a network library, so they run
  under a fake clock.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "workgroup"

#: package prefix -> prefixes it must not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "workgroup.member": ("workgroup.coordinator",),
    "workgroup.protocol": ("workgroup.coordinator", "workgroup.member"),
    "workgroup.assignors": ("workgroup.coordinator", "workgroup.member", "workgroup.protocol"),
    "workgroup.coordinator": ("workgroup.member", "workgroup.assignors", "workgroup.protocol"),
    "workgroup.kafka": ("workgroup.coordinator", "workgroup.member"),
    "workgroup.types": ("workgroup.",),
    "workgroup.errors": ("workgroup.",),
}

#: Modules that must stay sans-I/O.
SANS_IO = (
    "workgroup.kafka",
    "workgroup.types",
    "workgroup.protocol",
    "workgroup.assignors",
    "workgroup.member.state",
    "workgroup.member.errors",
    "workgroup.member.actions",
    "workgroup.member.commits",
    "workgroup.member.config",
    "workgroup.member.delay",
    "workgroup.member.lookup",
    "workgroup.member.ownership",
    "workgroup.member.requests",
    "workgroup.member.heartbeat",
    "workgroup.member.generation",
    "workgroup.member.leader",
    "workgroup.member.transitions",
    "workgroup.coordinator.coordinator",
    "workgroup.coordinator.group",
    "workgroup.coordinator.offsets",
    "workgroup.coordinator.timers",
)
IO_LIBRARIES = ("asyncio", "aiokafka", "socket", "selectors", "kafka", "time")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (lazy imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
SANS_IO_MODULES = sorted(
    m for m in MODULES if any(m == s or m.startswith(s + ".") for s in SANS_IO)
)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix if prefix.endswith(".") else prefix + ".")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_layers_do_not_reach_across(module: str) -> None:
    rules = [bad for owner, bad in FORBIDDEN.items() if _within(module, owner)]
    imported = _imports(MODULES[module])
    wrong = sorted(
        name
        for name in imported
        for forbidden in rules
        for prefix in forbidden
        if _within(name, prefix)
    )
    assert not wrong, f"{module} imports {wrong}"


@pytest.mark.parametrize("module", SANS_IO_MODULES)
def test_sans_io_modules_do_no_io(module: str) -> None:
    imported = {name.split(".")[0] for name in _imports(MODULES[module])}
    assert not imported & set(IO_LIBRARIES), f"{module} imports {imported & set(IO_LIBRARIES)}"


def test_the_walk_sees_the_package() -> None:
    assert "workgroup.member.state" in MODULES
    assert "workgroup.coordinator.coordinator" in MODULES
    assert "workgroup.coordinator.actions" in _imports(MODULES["workgroup.coordinator.coordinator"])


@pytest.mark.parametrize("prefix", SANS_IO)
def test_every_sans_io_entry_names_a_module_or_package(prefix: str) -> None:
    assert any(_within(m, prefix) for m in MODULES), f"{prefix} is not in the package"
