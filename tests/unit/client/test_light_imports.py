"""What a process that only uses a fence loads: no aiokafka, no member machine.

A Spark executor or a subprocess imports ``workgroup.fence`` to write with a
pickled fence; it must not pay for the asyncio client or the member.
"""

from __future__ import annotations

import json
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


def test_importing_the_fence_loads_neither_aiokafka_nor_the_member() -> None:
    loaded = loaded_after("import workgroup.fence")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    assert "workgroup.client.blocking" in loaded


def test_parsing_a_bootstrap_address_loads_no_client() -> None:
    loaded = loaded_after(
        "from workgroup.client.bootstrap import parse_bootstrap\nparse_bootstrap('[::1]:9092')"
    )
    assert not {
        m for m in loaded if m.startswith(("asyncio", "aiokafka", "kio", "workgroup.kafka"))
    }
