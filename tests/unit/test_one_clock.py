"""One clock (rule 4 of :mod:`workgroup.clock`): no module of ``workgroup/`` but
``clock.py`` reads the system's time; the others take a ``Clock`` (or read
``SYSTEM_CLOCK``), so that a test can move time by hand."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import workgroup

#: ``time`` functions that read a clock (``time.sleep`` waits, ``time.strftime``
#: formats: neither reads the time).
TIME_READERS = frozenset(
    {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"}
)
#: ``datetime``/``date`` methods that read the system's wall clock.
DATETIME_READERS = frozenset({"now", "utcnow", "today"})

#: Modules (relative to ``workgroup/``) allowed to read the system's time, each
#: with the reason.
ALLOWED = {
    "clock.py": "the one clock: SystemClock reads the system's time for everyone",
}


def readings(source: str, filename: str = "<source>") -> list[str]:
    """Where ``source`` reads the system's time: ``line: what``."""
    tree = ast.parse(source, filename)
    time_names = set()  # names bound to the time module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            time_names |= {a.asname or a.name for a in node.names if a.name == "time"}
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            found += [
                f"{node.lineno}: from time import {a.name}"
                for a in node.names
                if a.name in TIME_READERS
            ]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in time_names and node.attr in TIME_READERS:
            found.append(f"{node.lineno}: {owner.id}.{node.attr}")
        elif node.attr in DATETIME_READERS:
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in ("datetime", "date"):
                found.append(f"{node.lineno}: {name}.{node.attr}")
    return sorted(found, key=lambda where: int(where.split(":")[0]))


@pytest.mark.parametrize(
    "source",
    [
        "import time\nstarted = time.monotonic()",
        "import time\nstamp = time.time()",
        "import time\nnow = time.monotonic_ns()",
        "import time\nnow = time.time_ns()",
        "import time\nbegan = time.perf_counter()",
        "import time as t\nf(clock=t.monotonic)",
        "def f():\n    import time\n    return time.time()",
        "from time import monotonic",
        "from time import time as wall",
        "import datetime\nstamp = datetime.datetime.now()",
        "from datetime import datetime\nstamp = datetime.now(tz=None)",
        "from datetime import datetime, timezone\nstamp = datetime.utcnow()",
        "import datetime\nday = datetime.date.today()",
    ],
)
def test_the_check_finds_every_way_of_reading_the_time(source: str) -> None:
    assert readings(source)


@pytest.mark.parametrize(
    "source",
    [
        "import time\ntime.sleep(0.05)",
        "import time\nstamp = time.strftime('%H:%M:%S', time.localtime(at))",
        "import datetime\ndelta = datetime.timedelta(milliseconds=5)",
        "from workgroup.clock import SYSTEM_CLOCK\nnow = SYSTEM_CLOCK.monotonic()",
        "now = self._clock.wall()",
        "time = 3\nx = time",
    ],
)
def test_the_check_leaves_waits_formatting_and_the_clock_alone(source: str) -> None:
    assert readings(source) == []


def test_no_module_but_clock_reads_the_systems_time() -> None:
    root = Path(workgroup.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name in ALLOWED:
            continue
        found += [f"{name}:{where}" for where in readings(path.read_text(), str(path))]
    assert not found, (
        "read the time from a workgroup.clock.Clock (a clock= argument, else SYSTEM_CLOCK), "
        f"or list the module in ALLOWED with the reason: {found}"
    )
    assert all((root / name).is_file() for name in ALLOWED)  # no stale exception
