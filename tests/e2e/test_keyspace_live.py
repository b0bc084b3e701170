"""A keyspace across processes (issue 29, live): three ``workgroup run`` daemons
of ``tests.e2e.apps.keyspace_live`` on the embedded coordinator, requests routed
with ``Directory.owner``, a hot key split out and moved, a SIGKILL of the hot
slice's owner the moment the split's map appears, an owner frozen past its
session across a move and a split, and a drain.

What must hold:

* every request is answered by the process the directory routed it to, which
  owns the key's slice then, with a token at or above the directory's, and a
  key's answers never go back to a lower token;
* the fenced table shows no token regression for any key: the applied writes
  of a key, in commit order, have non-decreasing tokens, and its row holds the
  last one and counts them all;
* the owner frozen across the split lands none of the writes it attempts once
  resumed (it writes with the token it took before the freeze: the fence refuses).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import workgroup
from tests.e2e.apps.keyspace_live import create_tables
from workgroup.keyspaces import key_hash
from workgroup.testing import run_coordinator
from workgroup.testing.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
GROUP = "kslive.users"
KEYSPACE = "users"
KEYS = [f"user-{i}" for i in range(32)]
SESSION_MS = 2_000
#: Rejoins for load at most this often: a hot key is cut out within a second or two.
BALANCE_MS = 500
#: Each wait for a condition (a loaded 2-core machine: starting daemons, a session,
#: a few rounds).
TIMEOUT_S = 60.0


class Daemon:
    """One ``workgroup run`` process of the app, static (its instance id is its name)."""

    def __init__(self, name: str, bootstrap: str, tmp: Path, db: Path, hot: Path) -> None:
        self.name = name
        self.port = free_port()
        self.log = tmp / f"{name}-{self.port}.log"
        env = {
            **os.environ,
            "KSLIVE_DB": str(db),
            "KSLIVE_HOT": str(hot),
            "KSLIVE_PORT": str(self.port),
            "KSLIVE_NAME": name,
            "KSLIVE_SESSION_MS": str(SESSION_MS),
            "PYTHONUNBUFFERED": "1",
        }
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "workgroup", "run", "tests.e2e.apps.keyspace_live:app",
                 "--bootstrap", bootstrap, "--instance-id", name,
                 "--advertise", f"127.0.0.1:{self.port}",
                 "--session-timeout-ms", str(SESSION_MS),
                 "--balance-interval-ms", str(BALANCE_MS), "--log-format", "json"],
                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink,
                env=env,
            )  # fmt: skip
        self.pid = self.process.pid

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # a stopped process too
        self.process.wait(10)


@dataclass(frozen=True)
class Answer:
    key: str
    #: Whom the directory routed the request to, and the token it gave the key.
    routed_to: str
    routed_token: int | None
    body: dict[str, Any]


class Requester:
    """Sends every key's request, one after another, to the owner the directory
    names; keeps each answer (200: the owner wrote the key through the fence)."""

    def __init__(self, directory: workgroup.Directory, session: aiohttp.ClientSession) -> None:
        self.directory = directory
        self.session = session
        self.answers: list[Answer] = []
        #: Requests not sent: the key's slice was moving (nobody holds it).
        self.unrouted = 0
        #: Requests not answered by their routed owner: 421, 409, no reply.
        self.unanswered = 0

    async def ask(self, key: str) -> None:
        owner = self.directory.owner(KEYSPACE, key)
        if owner is None or owner.endpoint is None or owner.instance_id is None:
            self.unrouted += 1
            await asyncio.sleep(0.02)  # until the directory's next reading
            return
        try:
            async with self.session.get(
                f"http://{owner.endpoint}/users/{key}", timeout=aiohttp.ClientTimeout(total=1)
            ) as reply:
                body = await reply.json()
        except (aiohttp.ClientError, TimeoutError):
            body = None  # killed, frozen or restarting
        if body is None or reply.status != 200:
            self.unanswered += 1
            await asyncio.sleep(0.02)  # until the directory's next reading
            return
        self.answers.append(Answer(key, owner.instance_id, owner.token, body))

    async def run(self) -> None:
        while True:
            for key in KEYS:
                await self.ask(key)
            await asyncio.sleep(0.01)

    def answered_since(self, count: int) -> set[str]:
        return {answer.key for answer in self.answers[count:]}


class Live:
    """The test's processes, its database and its waits."""

    def __init__(self, bootstrap: str, tmp: Path) -> None:
        self.bootstrap = bootstrap
        self.tmp = tmp
        self.db = tmp / "live.db"
        self.hot = tmp / "hot"
        self.hot.write_text("")
        with contextlib.closing(sqlite3.connect(self.db, isolation_level=None)) as conn:
            create_tables(conn)
        self.daemons: dict[str, Daemon] = {}
        self.stopped: list[Daemon] = []
        #: Seconds each wait took (printed: where the test's time goes).
        self.waited: dict[str, float] = {}

    def start(self, name: str) -> Daemon:
        daemon = Daemon(name, self.bootstrap, self.tmp, self.db, self.hot)
        self.daemons[name] = daemon
        return daemon

    def set_hot(self, key: str, *, reported: bool = True, cold: float = 1.0) -> None:
        """Make ``key`` the hot key (its owner writes it), with its load reported or
        not; ``cold``: the load of every other slice."""
        staged = self.hot.with_suffix(".tmp")
        staged.write_text(json.dumps({"key": key, "reported": reported, "cold": cold}))
        staged.replace(self.hot)  # a reader never sees half a name

    def writes(self) -> list[dict[str, Any]]:
        with contextlib.closing(sqlite3.connect(self.db, timeout=30)) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(row) for row in conn.execute("SELECT * FROM writes ORDER BY seq")]

    def snapshot(self) -> tuple[list[dict[str, Any]], dict[str, tuple[int, int]]]:
        """The log and each key's (count, token), read in one transaction (the
        daemons still write)."""
        with contextlib.closing(sqlite3.connect(self.db, timeout=30, isolation_level=None)) as conn:
            conn.row_factory = sqlite3.Row
            conn.execute("BEGIN")
            writes = [dict(row) for row in conn.execute("SELECT * FROM writes ORDER BY seq")]
            rows = {
                row["id"]: (row["count"], row["fence_token"])
                for row in conn.execute("SELECT id, count, fence_token FROM keys")
            }
            conn.execute("COMMIT")
        return writes, rows

    def write_lock_free(self) -> bool:
        """Whether a write transaction can start within a second (a frozen
        process holding the lock would hold it for as long as it is frozen)."""
        with contextlib.closing(sqlite3.connect(self.db, timeout=1, isolation_level=None)) as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                return False
            conn.execute("ROLLBACK")
            return True

    async def freeze(self, daemon: Daemon) -> None:
        """SIGSTOP ``daemon`` at a moment it holds no write lock of the database."""
        while True:
            os.kill(daemon.pid, signal.SIGSTOP)
            if await asyncio.to_thread(self.write_lock_free):
                return
            os.kill(daemon.pid, signal.SIGCONT)
            await asyncio.sleep(0.05)

    async def until(self, what: str, condition: Callable[[], bool]) -> None:
        started = time.monotonic()
        deadline = started + TIMEOUT_S
        while not condition():
            if time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                    for p in sorted(self.tmp.glob("*.log"))
                )
                raise AssertionError(f"timed out after {TIMEOUT_S} s waiting for {what}\n{logs}")
            await asyncio.sleep(0.05)
        self.waited[what] = round(time.monotonic() - started, 2)

    def close(self) -> None:
        for daemon in [*self.daemons.values(), *self.stopped]:
            with contextlib.suppress(Exception):
                daemon.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with run_coordinator(
        "--min-session-timeout-ms", "500", "--initial-rebalance-delay-ms", "200",
        log=tmp_path / "coordinator.log",
    ) as coordinator:  # fmt: skip
        processes = Live(coordinator.bootstrap, tmp_path)
        try:
            yield processes
        finally:
            processes.close()


def owners(directory: workgroup.Directory) -> dict[str, str | None]:
    """Each key's owner's name as the directory last read it (``None``: moving)."""
    found = {}
    for key in KEYS:
        owner = directory.owner(KEYSPACE, key)
        found[key] = None if owner is None else owner.instance_id
    return found


def holders(directory: workgroup.Directory) -> set[str]:
    """The names of the daemons holding a slice, as the directory last read the group."""
    snapshot = directory.snapshot
    if snapshot is None or KEYSPACE not in snapshot.keyspaces:
        return set()
    return {
        h.holder.instance_id
        for h in snapshot.slices(KEYSPACE)
        if h.holder is not None and h.holder.instance_id is not None
    }


def map_owner(directory: workgroup.Directory, key: str) -> str | None:
    """The name of the member the directory's map names as the key's slice's owner."""
    smap = directory.keyspaces().get(KEYSPACE)
    snapshot = directory.snapshot
    if smap is None or snapshot is None or snapshot.description is None:
        return None
    member_id = smap.slice_for_key(key).owner
    return next(
        (m.instance_id for m in snapshot.description.members if m.member_id == member_id), None
    )


def hot_slice(directory: workgroup.Directory, key: str) -> tuple[int, int, bool]:
    """The map's epoch, the key's slice token, and whether the slice is the key alone."""
    smap = directory.keyspaces().get(KEYSPACE)
    if smap is None:
        return 0, 0, False
    piece = smap.slice_for_key(key)
    return smap.epoch, piece.token, piece.width == 1


async def test_live_keyspace_kill_during_split_freeze_across_split_and_drain(
    live: Live,
) -> None:
    for name in ("a", "b", "c"):
        live.start(name)
    async with (
        workgroup.Directory(
            live.bootstrap, GROUP, refresh_ms=100, timeout_s=TIMEOUT_S
        ) as directory,
        aiohttp.ClientSession() as session,
    ):
        requester = Requester(directory, session)
        await live.until(
            "every key owned, and a slice held by each daemon",
            lambda: (
                None not in owners(directory).values() and holders(directory) == {"a", "b", "c"}
            ),
        )
        asking = asyncio.create_task(requester.run())
        try:
            # 1. A hot key, split out; its owner SIGKILLed as the split's map appears.
            first_hot = KEYS[0]
            epoch, _, alone = hot_slice(directory, first_hot)
            assert not alone
            holder = owners(directory)[first_hot]
            assert holder is not None
            live.set_hot(first_hot)
            await live.until(
                "the hot key cut into a slice of its own",
                lambda: (
                    hot_slice(directory, first_hot)[0] > epoch
                    and hot_slice(directory, first_hot)[2]
                ),
            )
            # The owner the new map names for the key's slice (the old holder if
            # the directory no longer lists that member).
            target = map_owner(directory, first_hot) or holder
            killed = live.daemons.pop(target)
            killed.process.kill()
            killed_at = time.time()
            live.stopped.append(killed)
            killed.process.wait(10)
            # Back to three daemons: a new one starts while the others take over.
            live.start("d")

            # The survivors take every key over, the hot key's writes go on there.
            survivors = set(live.daemons)

            def taken_over() -> bool:
                return (
                    set(owners(directory).values()) <= survivors
                    and holders(directory) <= survivors
                    and any(
                        w["key"] == first_hot and w["applied"] and w["time"] > killed_at
                        for w in live.writes()
                    )
                )

            await live.until("the killed daemon's keys taken over", taken_over)
            await live.until("the new daemon holding slices", lambda: "d" in holders(directory))
            answered = len(requester.answers)
            await live.until(
                "every key answered after the kill",
                lambda: requester.answered_since(answered) == set(KEYS),
            )

            # 2. The hot key moves; its owner is frozen past its session, across
            #    the move of its slice and the split of the key into its own: the
            #    key's load is reported only once its owner is frozen, so the
            #    split comes after the freeze.
            second_hot = next(k for k in KEYS[1:] if owners(directory)[k] is not None)
            live.set_hot(second_hot, reported=False)
            moved_at = time.time()

            def hot_writer() -> dict[str, Any] | None:
                done = [
                    w for w in live.writes()
                    if w["key"] == second_hot and w["source"] == "worker" and w["applied"]
                    and w["time"] > moved_at
                ]  # fmt: skip
                return done[-1] if done else None

            await live.until(
                "the new hot key written by its owner", lambda: hot_writer() is not None
            )
            last = hot_writer()
            assert last is not None
            frozen = next(d for d in live.daemons.values() if d.pid == last["pid"])
            await live.freeze(frozen)
            stale = max(
                w["token"] for w in live.writes() if w["key"] == second_hot and w["applied"]
            )
            assert not hot_slice(directory, second_hot)[2]  # not split yet
            # Once the frozen owner's slice moved, its new owner reports the key's
            # load: the leader's probe after the round that moved it had the new
            # owner publish the slice's load, and the key's makes it rejoin.
            await live.until(
                "the frozen owner's hot key owned elsewhere",
                lambda: owners(directory)[second_hot] not in (None, frozen.name),
            )
            live.set_hot(second_hot)

            def superseded() -> bool:
                _, token, alone = hot_slice(directory, second_hot)
                return (
                    alone
                    and token > stale
                    and owners(directory)[second_hot] not in (None, frozen.name)
                    and any(
                        w["key"] == second_hot and w["applied"] and w["token"] > stale
                        for w in live.writes()
                    )
                )

            await live.until("the frozen owner's hot key split and written elsewhere", superseded)
            resumed_at = time.time()
            os.kill(frozen.pid, signal.SIGCONT)
            await live.until(
                "the resumed owner's stale write of the hot key",
                lambda: any(
                    w["pid"] == frozen.pid and w["key"] == second_hot and w["time"] > resumed_at
                    for w in live.writes()
                ),
            )

            # 3. A drain: the owner of the hot key hands every slice over.
            drained = owners(directory)[second_hot]
            assert drained is not None
            result = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "workgroup", "drain", GROUP, "--instance-id", drained,
                 "--bootstrap", live.bootstrap, "--wait", "--wait-timeout-s", str(TIMEOUT_S)],
                cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S + 30, check=False,
            )  # fmt: skip
            assert result.returncode == 0, result.stdout + result.stderr
            await live.until(
                "no slice held by the drained daemon", lambda: drained not in holders(directory)
            )
            answered = len(requester.answers)
            await live.until(
                "every key answered after the drain",
                lambda: requester.answered_since(answered) == set(KEYS),
            )
            assert all(a.body["name"] != drained for a in requester.answers[answered:])
        finally:
            asking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asking

    check_answers(requester.answers)
    writes, rows = live.snapshot()
    check_no_token_regression(writes, rows)
    # The killed daemon wrote nothing after its death; the frozen one landed nothing once resumed.
    assert not [w for w in writes if w["pid"] == killed.pid and w["time"] > killed_at]
    after_resume = [w for w in writes if w["pid"] == frozen.pid and w["time"] > resumed_at]
    stale_writes = [w for w in after_resume if w["key"] == second_hot and w["token"] <= stale]
    assert stale_writes
    assert not [w for w in stale_writes if w["applied"]], stale_writes
    print(
        json.dumps(
            {
                "answers": len(requester.answers),
                "unrouted": requester.unrouted,
                "unanswered": requester.unanswered,
                "writes": len(writes),
                "refused": sum(1 for w in writes if not w["applied"]),
                "stale_writes_refused": len(stale_writes),
                "killed": {"map_owner": target, "holder_before": holder},
                "waited_s": live.waited,
            }
        )
    )


def check_answers(answers: list[Answer]) -> None:
    """Each answer from the routed owner, whose slice holds the key, with a token at
    or above the directory's; a key's answers never go back to a lower token."""
    assert answers
    highest: dict[str, int] = {}
    for answer in answers:
        body = answer.body
        assert body["applied"], answer
        assert body["name"] == answer.routed_to, answer
        assert body["start"] <= key_hash(answer.key) < body["end"], answer
        assert answer.routed_token is None or body["token"] >= answer.routed_token, answer
        assert body["token"] >= highest.get(answer.key, 0), (answer, highest[answer.key])
        highest[answer.key] = body["token"]


def check_no_token_regression(
    writes: list[dict[str, Any]], rows: dict[str, tuple[int, int]]
) -> None:
    """Per key, the applied writes in commit order never go down in token, and go
    up whenever the writer changes (a key's new owner holds a newer token); the
    row counts every applied write and holds the last token."""
    applied: dict[str, list[int]] = {}
    writer: dict[str, tuple[int, int]] = {}
    for write in writes:
        if write["applied"]:
            applied.setdefault(write["key"], []).append(write["token"])
            pid, token = writer.get(write["key"], (write["pid"], 0))
            assert pid == write["pid"] or write["token"] > token, write
            writer[write["key"]] = (write["pid"], write["token"])
        else:
            # Refused only below a token already written for the key.
            assert write["token"] < max(applied.get(write["key"], [0])), write
    for key, tokens in applied.items():
        assert tokens == sorted(tokens), (key, tokens)
        assert rows[key] == (len(tokens), tokens[-1]), (key, rows[key], tokens)
    assert set(rows) == set(applied)
