"""Handlers run in child processes by the isolation tests (importable by the child)."""

from __future__ import annotations

import os
import time

from workgroup.runtime.isolation import ProcessLease


def commit_and_wait(lease: ProcessLease) -> None:
    previous = lease.checkpoint_sync(10)
    lease.commit_sync(f"{previous}>{lease.kind}/{lease.key}@{lease.token} pid {os.getpid()}", 10)
    lease.wait_revoked_sync(30)


def runaway(lease: ProcessLease) -> None:
    lease.commit_sync(f"pid {os.getpid()}", 10)
    while True:  # ignores revocation: must be killed
        time.sleep(1)


async def fail_once(lease: ProcessLease) -> None:
    if await lease.checkpoint() is None:
        await lease.commit("failed once")
        raise RuntimeError("first run fails")
    await lease.commit("second run")
    await lease.wait_revoked()


def report_loads(lease: ProcessLease) -> None:
    lease.report_load(42.5)
    try:
        lease.report_load(-1)
    except Exception as exc:  # refused in the child, before anything is sent
        lease.commit_sync(f"refused: {type(exc).__name__}", 10)
    lease.wait_revoked_sync(30)
