"""What a process that only uses a fence loads: no aiokafka, no member machine.

A Spark executor or a subprocess imports ``workgroup.fence`` to write with a
pickled fence; it must not pay for the asyncio client or the member.  Importing
it loads not even the wire path (kio and the Kafka records): that waits for
the fence's first use.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

HEAVY = ("aiokafka", "workgroup.member", "workgroup.member.state", "workgroup.member.driver",
         "structlog", "hypothesis")  # fmt: skip


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``statement``."""
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(json.loads(out))


#: What ``import workgroup.fence`` may cost, in the interpreter's own import
#: accounting (``-X importtime``: the cumulative time of the ``workgroup.fence``
#: line, i.e. the self-times of every module it loads, the interpreter's start
#: excluded).  About 20 ms on an idle machine.
FENCE_IMPORT_BUDGET_US = 50_000


def test_importing_the_fence_loads_neither_aiokafka_nor_the_member() -> None:
    loaded = loaded_after("import workgroup.fence")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    wire = {m for m in loaded if m.startswith(("kio", "asyncio", "workgroup.kafka"))}
    assert not wire, sorted(wire)
    assert "workgroup.client.blocking" not in loaded


def test_a_fence_used_once_loads_its_wire_path_but_neither_aiokafka_nor_the_member() -> None:
    loaded = loaded_after(
        "from workgroup.fence import FenceTimeoutError, make_fence\n"
        "from workgroup.client.security import PLAINTEXT\n"
        "fence = make_fence(bootstrap='127.0.0.1:1', security=PLAINTEXT, group_id='g',"
        " member_id='m', instance_id=None, generation=1, topic='t', partition=0,"
        " kind='k', key=1, token=1)\n"
        "try:\n"
        "    fence.check(timeout_s=0.2)\n"
        "except FenceTimeoutError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('nothing listens on port 1, yet the check passed')"
    )
    assert "workgroup.client.blocking" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def fence_import_us() -> int:
    """``import workgroup.fence`` in a fresh interpreter, as ``-X importtime`` counts it."""
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import workgroup.fence"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stderr  # fmt: skip
    found = re.search(r"^import time:\s+\d+ \|\s+(\d+) \| workgroup\.fence$", err, re.MULTILINE)
    assert found is not None, err[-2000:]
    return int(found.group(1))


def test_importing_the_fence_takes_at_most_its_budget() -> None:
    # The best of three: a machine busy with other work slows a run, never speeds one.
    best = min(fence_import_us() for _ in range(3))
    assert best <= FENCE_IMPORT_BUDGET_US, f"import workgroup.fence took {best / 1000:.1f} ms"


def test_parsing_a_bootstrap_address_loads_no_client() -> None:
    loaded = loaded_after(
        "from workgroup.client.bootstrap import parse_bootstrap\nparse_bootstrap('[::1]:9092')"
    )
    assert not {
        m for m in loaded if m.startswith(("asyncio", "aiokafka", "kio", "workgroup.kafka"))
    }
