"""Tracebacks in workgroup's logs: never local variables (they can hold
secrets), and the user's frames alone where workgroup reports user code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workgroup.log import describe_error, is_user_frame, user_frames

LOG_AN_EXCEPTION = (
    "import workgroup.log\n"
    "workgroup.log.configure('info', json={json})\n"
    "log = workgroup.log.get_logger('workgroup.example')\n"
    "def list_shards():\n"
    "    password = 'hunter2-local'\n"
    "    raise RuntimeError('no shards')\n"
    "try:\n"
    "    list_shards()\n"
    "except RuntimeError:\n"
    "    log.exception('example.failed')\n"
)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_logged_exception_never_shows_local_variables(as_json: bool, tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(LOG_AN_EXCEPTION.format(json=as_json), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "RuntimeError: no shards" in done.stderr
    assert "raise RuntimeError('no shards')" in done.stderr
    assert "hunter2-local" not in done.stderr
    assert "password" not in done.stderr.replace("password = 'hunter2-local'", "")
    if as_json:
        assert json.loads(done.stderr)["event"] == "example.failed"
    else:
        assert len(done.stderr.splitlines()) < 15  # no rich box with locals


def test_user_frames_keep_the_users_code_and_drop_workgroups_and_librarys() -> None:
    import asyncio

    def mine() -> None:
        int("not a number")

    async def through_asyncio() -> None:
        await asyncio.sleep(0)
        mine()

    with pytest.raises(ValueError, match="not a number") as raised:
        asyncio.run(through_asyncio())
    frames = user_frames(raised.value)
    assert (
        describe_error(raised.value)
        == "ValueError: invalid literal for int() with base 10: 'not a number'"
    )
    lines = frames.splitlines()
    assert all("/asyncio/" not in line for line in lines)
    assert "in through_asyncio" in frames
    assert lines[-2].strip().startswith(f'File "{__file__}"')
    assert lines[-1].strip() == 'int("not a number")'
    assert is_user_frame(__file__)
    assert not is_user_frame(asyncio.__file__)
    import workgroup.runtime.handlers

    assert not is_user_frame(workgroup.runtime.handlers.__file__)


def test_an_error_without_a_message_is_named_by_its_type() -> None:
    assert describe_error(KeyError()) == "KeyError"
    assert describe_error(TimeoutError()) == "TimeoutError"


def test_no_user_frame_means_no_frames_rather_than_a_librarys() -> None:
    import asyncio

    async def library_only() -> BaseException | None:
        # A task's exception: its traceback holds the standard library's frames alone.
        task = asyncio.create_task(asyncio.wait_for(asyncio.Event().wait(), 0.001))
        await asyncio.wait({task})
        return task.exception()

    error = asyncio.run(library_only())
    assert isinstance(error, TimeoutError)
    assert error.__traceback__ is not None
    assert user_frames(error) == ""
