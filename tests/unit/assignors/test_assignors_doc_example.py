"""The custom-assignor example of docs/assignors.md runs as written.

Its module is written to a temporary directory together with an installed
distribution's metadata holding the documented entry point, so that
``get_assignor`` finds it exactly as it finds a real plugin.
"""

from __future__ import annotations

import importlib
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from workgroup.assignors import registry

DOC = Path(__file__).resolve().parents[3] / "docs" / "assignors.md"
MODULE_HEADER = "# my_package/assign.py\n"


def section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


@pytest.fixture
def installed_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Install the documented module and entry point; yield the remaining python blocks."""
    text = section("Custom assignors")
    python = blocks(text, "python")
    (toml,) = blocks(text, "toml")
    (module,) = [block for block in python if block.startswith(MODULE_HEADER)]
    package = tmp_path / "my_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "assign.py").write_text(module)
    entry_points = tomllib.loads(toml)["project"]["entry-points"]
    dist_info = tmp_path / "my_package-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-package\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in eps.items())
            for group, eps in entry_points.items()
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.refresh()
    try:
        yield [block for block in python if not block.startswith(MODULE_HEADER)]
    finally:
        registry.refresh()
        for name in [m for m in sys.modules if m == "my_package" or m.startswith("my_package.")]:
            del sys.modules[name]


def test_the_custom_assignor_example_runs(installed_example: list[str]) -> None:
    (usage,) = installed_example
    namespace: dict[str, object] = {}
    exec(compile(usage, str(DOC), "exec"), namespace)
    assignor = namespace["assignor"]
    assert type(assignor).__module__ == "my_package.assign"
    assert getattr(assignor, "separator", None) == "/"
    assert "by-tenant" in registry.available()


def test_the_example_imports_only_public_names() -> None:
    for block in blocks(section("Custom assignors"), "python"):
        for line in block.splitlines():
            if line.startswith(("from ", "import ")):
                match = re.fullmatch(r"from (workgroup(?:\.\w+)?) import (.+)", line)
                assert match, f"not a public import: {line}"
                package = importlib.import_module(match.group(1))
                names = {name.strip() for name in match.group(2).split(",")}
                assert names <= set(package.__all__), line
