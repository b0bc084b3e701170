"""The chaos suite: daemons and a coordinator under a seeded random schedule of
faults (see :mod:`tests.chaos.harness`), then the guarantees checked from what
every handler recorded.

``make test`` runs a short schedule; ``make chaos`` a long one
(``CHAOS_EVENTS=1000``).  ``CHAOS_SEED`` replays a schedule (a failing run
prints its seed); the same seed gives the same faults in the same order, though
the processes' own timing varies."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from tests.chaos.harness import Fault, check, run_chaos

EVENTS = int(os.environ.get("CHAOS_EVENTS", "25"))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(300, EVENTS * 6))]


def test_guarantees_hold_under_random_faults(tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED", random.randrange(1 << 30)))
    print(f"chaos seed {seed} (replay: CHAOS_SEED={seed}), {EVENTS} fault events")
    began = time.monotonic()
    kinds: dict[str, int] = {}

    def progress(fault: Fault) -> None:
        kinds[fault.kind] = kinds.get(fault.kind, 0) + 1
        total = sum(kinds.values())
        if total % 100 == 0:
            print(f"  {total} faults after {time.monotonic() - began:.0f} s", flush=True)

    try:
        result = run_chaos(tmp_path, seed, EVENTS, progress=progress)
        figures = check(result)
    except BaseException:
        print(f"FAILED: chaos seed {seed}; logs in {tmp_path}")
        raise
    took = time.monotonic() - began
    print(
        f"survived {figures['faults']} fault events in {took:.0f} s, 0 violations; "
        f"{figures['commits']} commits in {figures['handler_runs']} handler runs; "
        f"{figures['list_changes']} list changes; {figures['slow_stops']} graceful stops "
        f"with slow handlers; {figures['recoveries']} recoveries after a kill, "
        f"median {figures['recovery_median_s']:.2f} s, max {figures['recovery_max_s']:.2f} s "
        f"({figures['recoveries_not_bounded']} not bounded: out of the list, or another "
        f"fault overlapped); {figures['zombies_fenced']} zombie holders fenced"
    )
    print("faults:", ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    assert figures["faults"] == EVENTS
