"""The package's layers stay apart: a test that walks every module's imports.

- The member, the protocol codecs and the assignors never import the
  coordinator; the coordinator never imports the member.  Both speak the shared
  vocabulary (``workgroup.kafka``, ``workgroup.types``, ``workgroup.errors``).
- The shared vocabulary imports neither side.
- Keyspaces (hash, slice map, planner) are pure values and functions: they
  import neither the member, the coordinator, the assignors nor the clients.
- Nothing below the runtime (the member, the coordinator, the protocol codecs,
  the assignors, the shared vocabulary) imports ``workgroup.runtime``.
- Sans-I/O modules import neither asyncio nor a network library, so they run
  under a fake clock.
- No import cycles among the package's modules.  Every ``import`` statement
  counts, wherever it is: at module level, in a function, or under ``if
  TYPE_CHECKING:`` (a type is a dependency too).  ``from package import name``
  depends on the module ``package.name`` when there is one, else on the
  package.  The parent packages Python runs first are not counted: a package's
  ``__init__`` loads its public names lazily and imports them only for type
  checkers.
- The core never imports a plugin (``plugins/*``, any ``workgroup_*``
  package): plugins depend on the core, and load through entry points.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "workgroup"
#: The plugins' top-level packages (``plugins/<name>/<package>/``).
PLUGIN_PACKAGES = sorted(p.parent.name for p in ROOT.glob("plugins/*/*/__init__.py"))

RUNTIME = "workgroup.runtime"
#: package prefix -> prefixes it must not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "workgroup.member": ("workgroup.coordinator", RUNTIME),
    "workgroup.protocol": ("workgroup.coordinator", "workgroup.member", RUNTIME),
    "workgroup.assignors": (
        "workgroup.coordinator",
        "workgroup.member",
        "workgroup.protocol",
        RUNTIME,
    ),
    "workgroup.coordinator": (
        "workgroup.member",
        "workgroup.assignors",
        "workgroup.protocol",
        RUNTIME,
    ),
    "workgroup.kafka": ("workgroup.coordinator", "workgroup.member", RUNTIME),
    "workgroup.keyspaces": (
        "workgroup.coordinator",
        "workgroup.member",
        "workgroup.assignors",
        "workgroup.client",
        RUNTIME,
    ),
    "workgroup.types": ("workgroup.",),
    "workgroup.errors": ("workgroup.",),
}

#: Modules that must stay sans-I/O.
SANS_IO = (
    "workgroup.kafka",
    "workgroup.keyspaces",
    "workgroup.types",
    "workgroup.protocol",
    "workgroup.assignors",
    "workgroup.member.state",
    "workgroup.member.errors",
    "workgroup.member.actions",
    "workgroup.member.commits",
    "workgroup.member.closing",
    "workgroup.member.config",
    "workgroup.member.delay",
    "workgroup.member.lookup",
    "workgroup.member.ownership",
    "workgroup.member.requests",
    "workgroup.member.heartbeat",
    "workgroup.member.holdings",
    "workgroup.member.membership",
    "workgroup.member.departure",
    "workgroup.member.intents",
    "workgroup.member.assignment",
    "workgroup.member.catalog",
    "workgroup.member.outcomes",
    "workgroup.member.outgoing",
    "workgroup.member.responses",
    "workgroup.member.generation",
    "workgroup.member.round_plan",
    "workgroup.member.leading",
    "workgroup.member.application",
    "workgroup.member.parts",
    "workgroup.member.views",
    "workgroup.member.transitions",
    "workgroup.coordinator.coordinator",
    "workgroup.coordinator.group",
    "workgroup.coordinator.offsets",
    "workgroup.coordinator.timers",
    "workgroup.client.bootstrap",
    "workgroup.client.errors",
    "workgroup.client.owners",
    "workgroup.client.slots",
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


# --- cycles --------------------------------------------------------------------------


def _depends_on(path: Path) -> set[str]:
    """The package's modules that ``path`` imports (see the module docstring)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(_resolve(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.update(
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else _resolve(base)
                for a in node.names
            )
    return {name for name in found if name and name != here}


def _resolve(name: str) -> str:
    """The package module ``name`` is, or is in ("" outside the package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _tangles(graph: dict[str, set[str]]) -> Iterator[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def connect(node: str) -> Iterator[set[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                yield from connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                yield component

    for node in sorted(graph):
        if node not in index:
            yield from connect(node)


def _a_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A path from the component's first module back to itself, inside the component."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node] & component):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    raise AssertionError(f"{sorted(component)} is not strongly connected")


GRAPH = {module: _depends_on(path) for module, path in MODULES.items()}


def test_no_import_cycles() -> None:
    tangles = [
        f"{' -> '.join(_a_cycle(GRAPH, tangle))} (modules that import each other: "
        f"{', '.join(sorted(tangle))})"
        for tangle in _tangles(GRAPH)
    ]
    assert not tangles, "import cycles:\n" + "\n".join(tangles)


def test_the_cycle_finder_finds_every_tangle_and_a_cycle_through_each() -> None:
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    tangles = sorted(map(sorted, _tangles(graph)))
    assert tangles == [["a", "b", "c"], ["d", "e"]]
    assert _a_cycle(graph, {"a", "b", "c"}) == ["a", "b", "a"]
    assert _a_cycle(graph, {"d", "e"}) == ["d", "e", "d"]
    assert not list(_tangles({"a": {"b"}, "b": set()}))


def test_the_graph_counts_type_checking_and_function_level_imports() -> None:
    # ``workgroup`` imports the runtime only for type checkers; ``App.serve``
    # imports the runner when called.
    assert "workgroup.runtime.app" in GRAPH["workgroup"]
    assert "workgroup.runtime.runner" in GRAPH["workgroup.runtime.app"]
    # ``from workgroup import log`` depends on the module, not on the package.
    assert "workgroup.log" in GRAPH["workgroup.runtime.runner"]
    assert "workgroup" not in GRAPH["workgroup.runtime.runner"]


# --- plugins ------------------------------------------------------------------------


def _is_plugin(name: str) -> bool:
    top = name.split(".")[0]
    return top.startswith("workgroup_") or top in PLUGIN_PACKAGES


def test_the_plugins_are_found() -> None:
    assert "workgroup_spark" in PLUGIN_PACKAGES


@pytest.mark.parametrize("module", sorted(MODULES))
def test_the_core_never_imports_a_plugin(module: str) -> None:
    plugins = sorted(name for name in _imports(MODULES[module]) if _is_plugin(name))
    assert not plugins, f"{module} imports {plugins}"
