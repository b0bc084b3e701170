"""``workgroup top`` (no ``--once``) with stdout a pipe, as under systemd or in CI:
it writes the group as lines as it goes, and an error once, not once per poll."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import uuid

from tests.wire.member.backends import run_backend
from workgroup.member.driver import GroupMember
from workgroup.protocol import Protocol
from workgroup.testing import free_port

TIMEOUT_S = 30
#: Polls are this far apart: a quiet stretch of QUIET_S spans many of them.
INTERVAL_S = 0.05
QUIET_S = 1.0
STAMP = r"\d\d:\d\d:\d\d"


async def next_line(top: asyncio.subprocess.Process) -> str:
    assert top.stdout is not None
    line = await top.stdout.readline()
    assert line, "top's stdout ended"
    return line.decode().rstrip("\n")


async def test_top_writes_lines_to_a_pipe_and_each_error_once() -> None:
    port = free_port()
    group = f"top-piped-{uuid.uuid4().hex[:8]}"
    top = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "workgroup", "top", group],
        *["--bootstrap", f"127.0.0.1:{port}", "--interval", str(INTERVAL_S)],
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(TIMEOUT_S):
            # Nothing listens yet: the error as soon as the first poll meets it.
            refused = await next_line(top)
            assert re.fullmatch(
                rf"{STAMP} error: nothing answers at 127\.0\.0\.1:{port}: Connection refused",
                refused,
            ), refused
            await asyncio.sleep(QUIET_S)
            with run_backend("embedded", port) as backend:
                # The coordinator answers: a new error (no such group yet), and no
                # line in between repeats the one before it.
                lines = [refused]
                while "no group" not in lines[-1]:
                    lines.append(await next_line(top))
                    assert re.fullmatch(rf"{STAMP} error: .+", lines[-1]), lines
                    assert lines[-1][9:] != lines[-2][9:], lines
                assert not any("nothing answers" in line for line in lines[1:]), lines
                member = GroupMember(
                    backend.bootstrap,
                    group,
                    [Protocol.of("cooperative-sticky")],
                    resources={"shard": [0, 1]},
                    session_timeout_ms=backend.session_timeout_ms,
                    heartbeat_interval_ms=300,
                )
                async with member:
                    await member.wait_stable()
                    # The member shows up in a row of the group's table, owning both
                    # shards (once its assignment is synced: an earlier table may
                    # show it owning nothing yet).
                    row = ""
                    while not (member.member_id in row and "shard: 0, 1" in row):
                        row = await next_line(top)
            # A signal ends it as Ctrl-C does.
            top.send_signal(signal.SIGINT)
            assert await top.wait() == 0
    finally:
        if top.returncode is None:
            top.kill()
            await top.wait()
