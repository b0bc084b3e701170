"""A revoked handler commits while it finishes its work, in its grace period, also
after another round ran meanwhile (embedded coordinator, in-process apps).

A drain revokes both of a process's shards in one round; one handler returns at
once, and its release asks for the next round; the other finishes a step of
work and then commits.  Its commit used to go under the generation the shard
was given up in: refused once the group moved on, it was retried until the
grace period ended, so the shard's hand-over waited the whole grace period."""

from __future__ import annotations

import asyncio
import time
import uuid

import workgroup
from tests.wire.member.backends import Backend
from tests.wire.runtime.test_drains import TIMEOUT_S, backend, running  # noqa: F401

GRACE_MS = 10_000
#: The step of work a revoked handler finishes before it commits.
FINISH_S = 1.0


async def test_a_revoked_handler_commits_after_another_round_within_its_grace(
    backend: Backend,  # noqa: F811
) -> None:
    name = f"revoked-commits-{uuid.uuid4().hex[:8]}"
    commits: dict[str, float | str] = {}
    app = workgroup.App(name, grace_ms=GRACE_MS)

    @app.resources("shard")
    def shards() -> list[str]:
        return ["fast", "slow"]

    @app.worker("shard")
    async def work(lease: workgroup.Lease) -> None:
        await lease.wait_revoked()
        if lease.key != "slow":
            return  # released at once: its release asks for another round
        await asyncio.sleep(FINISH_S)  # the work in flight
        began = time.monotonic()
        try:
            await lease.commit("finished after its revocation")
        except workgroup.LeaseLostError as exc:
            commits["slow"] = f"refused: {exc}"
            return
        commits["slow"] = time.monotonic() - began

    async with running(app, backend, "a", grace_ms=GRACE_MS) as runner:
        member = runner.groups[0].member
        async with asyncio.timeout(TIMEOUT_S):
            while len(member.assignment) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        generation = member.generation
        member.drain()
        try:
            async with asyncio.timeout(GRACE_MS / 1000 + 5):
                while "slow" not in commits:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(
                "the revoked handler's commit never ended: it waited out the grace period "
                "and the handler was cancelled"
            ) from None
        # Another round ran while the slow handler finished (the fast one's release).
        assert member.generation >= generation + 2
    took = commits["slow"]
    assert isinstance(took, float), took
    assert took < 2.0  # not the rest of the grace period (9 s)
