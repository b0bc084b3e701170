"""The trace guard: the member machine's scenarios must do exactly what they did.

Each scenario (simulated groups over a faulty network, random faults, random
events for one member, and every scripted member test that needs no fixture
but a simulation) runs with :func:`member_traces.recording`; its trace (every
event with ``now``, the actions returned, the state, generation and deadline
after) is reduced to a line count and a digest, compared with
``traces/golden.json``.

* ``WORKGROUP_TRACES_UPDATE=1`` rewrites the golden file (only for a change
  that means to change behaviour: say which in the commit message).
* ``WORKGROUP_TRACES_DUMP=DIR`` writes each scenario's trace to
  ``DIR/<scenario>.jsonl``; run it on the commit before a change and after, and
  ``diff -r`` the two directories to see the first difference.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from hypothesis import Phase, given, seed, settings
from hypothesis import strategies as st
from member_coordinator_double import CoordinatorDouble
from member_sim import EmbeddedCoordinator, Simulation
from member_traces import Recorder, recording

GOLDEN = Path(__file__).parent / "traces" / "golden.json"
NETWORK_SEEDS = range(12)
CHAOS_SEEDS = range(3)
RANDOM_EVENT_EXAMPLES = 60
#: Modules whose scripted tests replay here (the seeded ones are listed above).
SKIPPED_MODULES = {
    "test_member_traces",
    "test_member_network_sim",
    "test_member_chaos",
    "test_member_random_events",
    "test_member_driver_clock",
}


def network_scenarios() -> dict[str, Callable[[], object]]:
    import test_member_network_sim as network

    return {
        f"network/{'lossy' if lossy else 'latency'}/{n}": (
            lambda n=n, lossy=lossy: network.run(n, lossy=lossy)
        )
        for lossy in (False, True)
        for n in NETWORK_SEEDS
    }


def chaos_scenarios() -> dict[str, Callable[[], object]]:
    import test_member_chaos as chaos

    return {
        f"chaos/{coordinator}/{assignor}/{n}": (
            lambda n=n, c=coordinator, a=assignor: chaos.run(n, c, a)
        )
        for coordinator in ("embedded", "double")
        for assignor in ("sticky-test", "cooperative-sticky")
        for n in CHAOS_SEEDS
    }


def random_events() -> None:
    import test_member_random_events as random_events
    from hypothesis.internal.conjecture import providers

    # Hypothesis now and then draws a literal found in the project's own modules
    # (its "local constants"): a new number anywhere in workgroup (a daemon's
    # thread count) changed this replay.  It must change with the machine only.
    providers._get_local_constants = providers.Constants  # none
    providers.CONSTANTS_CACHE.cache.clear()

    body = random_events.test_random_events_keep_the_machine_within_its_rules.hypothesis.inner_test  # type: ignore[attr-defined]
    replay = seed(26)(
        settings(
            max_examples=RANDOM_EVENT_EXAMPLES,
            database=None,
            deadline=None,
            phases=[Phase.generate],
        )(
            given(
                data=st.data(),
                rebalance=st.sampled_from(["cooperative", "eager"]),
                static=st.booleans(),
                connect_timeout_ms=st.sampled_from([None, None, None, 30_000]),
                policy=st.sampled_from(["log", "release", "fail"]),
            )(body)
        )
    )
    replay()


def scripted_scenarios() -> dict[str, Callable[[], object]]:
    """Every test of the member's modules that takes no argument, or only a
    simulation (run against both coordinators)."""
    scenarios: dict[str, Callable[[], object]] = {}
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        if path.stem in SKIPPED_MODULES:
            continue
        module = importlib.import_module(path.stem)
        for name, fn in sorted(vars(module).items()):
            if not name.startswith("test_") or not inspect.isfunction(fn):
                continue
            if inspect.iscoroutinefunction(fn) or hasattr(fn, "hypothesis"):
                continue
            if hasattr(fn, "pytestmark"):
                continue  # parametrized: its parameters live in pytest
            params = list(inspect.signature(fn).parameters)
            if not params:
                scenarios[f"scripted/{path.stem}/{name}"] = fn
            elif params == ["sim"]:
                for variant, make in (
                    ("embedded", EmbeddedCoordinator),
                    ("double", CoordinatorDouble),
                ):

                    def replay(fn: Callable[..., object] = fn, make: type = make) -> object:
                        return fn(Simulation(make()))

                    scenarios[f"scripted/{path.stem}/{name}[{variant}]"] = replay
    return scenarios


def all_scenarios() -> dict[str, Callable[[], object]]:
    return {
        **network_scenarios(),
        **chaos_scenarios(),
        "random-events": random_events,
        **scripted_scenarios(),
    }


def trace(name: str, scenario: Callable[[], object]) -> Recorder:
    with recording() as recorder:
        scenario()
    dump = os.environ.get("WORKGROUP_TRACES_DUMP")
    if dump:
        out = Path(dump) / (re.sub(r"[^\w.\-\[\]]+", "_", name) + ".jsonl")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(line + "\n" for line in recorder.lines))
    return recorder


def current_digests() -> dict[str, str]:
    # Scenarios that drive no machine (tests of a part alone) are left out.
    return {
        name: f"{len(rec.lines)}:{rec.digest()}"
        for name, rec in ((name, trace(name, fn)) for name, fn in all_scenarios().items())
        if rec.lines
    }


def test_member_traces_match_the_golden_file() -> None:
    # In a fresh interpreter: the traces must not depend on what other tests did
    # before in the same worker process (imported state, caches, random state).
    here = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(here), str(here.parents[2])]),
        "PYTHONHASHSEED": "0",
    }
    answer = subprocess.run(
        [sys.executable, str(Path(__file__).resolve())],
        env=env,
        cwd=here,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert answer.returncode == 0, answer.stderr[-4000:]
    current: dict[str, str] = json.loads(answer.stdout)
    if os.environ.get("WORKGROUP_TRACES_UPDATE"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    golden = {
        name: digest
        for name, digest in json.loads(GOLDEN.read_text()).items()
        if not digest.startswith("0:")
    }
    changed = sorted(n for n in golden.keys() & current.keys() if golden[n] != current[n])
    missing = sorted(golden.keys() - current.keys())
    new = sorted(current.keys() - golden.keys())
    differences = changed + missing + new
    assert not differences, (
        f"member traces differ: {len(changed)} changed {changed[:10]}, "
        f"missing {missing[:10]}, new {new[:10]}; dump both sides with "
        "WORKGROUP_TRACES_DUMP=DIR (see this module's docstring)"
    )


def test_a_trace_is_the_same_in_every_run() -> None:
    first, second = (
        trace("chaos", chaos_scenarios()["chaos/double/cooperative-sticky/0"]) for _ in "ab"
    )
    assert len(first.lines) > 100
    assert first.lines == second.lines


if __name__ == "__main__":
    print(json.dumps(current_digests()))
