"""Mistakes a newcomer makes in the app module, each said in one line (or the
user's frames), exit 2, before anything runs: a module that raises or does not
parse, a handler without the lease argument, a decorator without its name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import workgroup
from workgroup.errors import ConfigError
from workgroup.runtime.loader import load_app

ROOT = Path(__file__).resolve().parents[3]


def import_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as raised:
        load_app(f"{name}:app")
    assert raised.value.exit_code == 2
    return str(raised.value)


def test_a_module_that_raises_is_its_error_and_the_users_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = import_error(
        tmp_path,
        monkeypatch,
        "raises_at_import",
        "import workgroup\napp = workgroup.App('x')\nprint(undefined_name)\n",
    )
    assert message.splitlines()[:3] == [
        "cannot import module 'raises_at_import': NameError: name 'undefined_name' is not defined",
        f'  File "{tmp_path}/raises_at_import.py", line 3, in <module>',
        "    print(undefined_name)",
    ]
    assert "importlib" not in message


def test_a_module_that_does_not_parse_shows_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = import_error(
        tmp_path, monkeypatch, "does_not_parse", "import workgroup\napp = workgroup.App('x'\n"
    )
    lines = message.splitlines()
    assert lines[0] == "cannot import module 'does_not_parse':"
    assert lines[1] == f'  File "{tmp_path}/does_not_parse.py", line 2'
    assert lines[-1] == "SyntaxError: '(' was never closed"


def test_a_handler_without_the_lease_argument_is_refused_when_declared() -> None:
    app = workgroup.App("x")
    with pytest.raises(ConfigError) as raised:

        @app.worker("shard")
        async def work() -> None: ...

    assert str(raised.value) == (
        "worker 'shard': test_a_handler_without_the_lease_argument_is_refused_when_declared."
        "<locals>.work() must take one argument, the lease (def work(lease): ...)"
    )
    with pytest.raises(ConfigError, match=r"leader 'publisher': .* must take one argument"):
        app.leader("publisher")(lambda: None)
    with pytest.raises(ConfigError, match=r"resources of kind 'shard': .* must take no arguments"):
        app.resources("shard")(lambda lease: [])


def test_handlers_that_take_the_lease_in_any_way_are_accepted() -> None:
    app = workgroup.App("x")

    class Handler:
        async def __call__(self, lease: workgroup.Lease) -> None: ...

    app.worker("a")(lambda lease: None)
    app.worker("b")(lambda *args: None)
    app.worker("c")(Handler())
    app.leader("d")(lambda lease, extra=1: None)
    assert set(app.workers) == {"a", "b", "c"}


def test_a_decorator_without_its_name_says_how_to_write_it() -> None:
    app = workgroup.App("x")

    async def work(lease: workgroup.Lease) -> None: ...

    with pytest.raises(ConfigError) as raised:
        app.worker(work)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "@app.worker needs a name: @app.worker('shard'), not @app.worker alone "
        "(on 'test_a_decorator_without_its_name_says_how_to_write_it.<locals>.work')"
    )


def test_workgroup_run_says_it_in_one_error_line_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "nolease.py").write_text(
        "import workgroup\napp = workgroup.App('x')\n"
        "@app.resources('k')\ndef keys():\n    return ['a']\n"
        "@app.worker('k')\nasync def work():\n    pass\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "workgroup", "run", "nolease:app", "--bootstrap", "127.0.0.1:9"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: worker 'k': work() must take one argument, the lease (def work(lease): ...)"
    ]
