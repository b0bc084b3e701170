"""A JVM's JIT compilers run below its work: HotSpot's compiler threads at niceness 10.

A young JVM compiles Spark's code for minutes.  In a Spark Connect server
running four shards' 1 s micro-batches on two cores, the compiler threads used
0.58 of the server's 1.14 cores in its first minute, and 0.12 of 0.63 three
minutes later, while the median batch went from 0.62 s to 0.38 s.  Every
shard's trigger fires on the same whole second, so the compilations competed
with the batches, a moved shard's first one among them, and left the CPU idle
between them.  At niceness 10 the compilers take the CPU the batches leave:
the same compilations (0.45 cores in the first minute, 0.15 three minutes
later), and batches no slower at any age.  On that server a SIGTERM move's
worst first output went from 2.58-2.89 s to 1.98-2.34 s, and three thin
daemons' throughput from 72-87k to 91-99k records/s (``benchmarks/README.md``).

Rules:

1. HotSpot names its compiler threads ``C1 CompilerThread<n>`` and
   ``C2 CompilerThread<n>`` (15 characters in ``/proc/<pid>/task/<tid>/comm``);
   where ``/proc`` has no such threads (another OS, another JVM) nothing changes.
2. A compiler thread HotSpot adds later is started by a compiler thread
   (``CompileBroker::possibly_add_compiler_threads``, in the compilers' loop),
   and a Linux thread starts with its creator's niceness: one pass suffices.
3. A niceness is only raised (needing no privilege), never lowered; a thread
   that has ended or refuses is skipped.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

#: The compiler threads' niceness: they get about a tenth of a core that the
#: JVM's work wants (Linux's weights: 110 against 1024 at niceness 0).
COMPILER_NICENESS = 10

#: What ``comm`` shows of HotSpot's compiler threads' names (rule 1).
_COMPILER_THREAD_PREFIXES = ("C1 CompilerThre", "C2 CompilerThre")


def lower_compiler_priority(pid: int, niceness: int = COMPILER_NICENESS) -> int:
    """Raise the niceness of the JIT compiler threads of the JVM ``pid`` to
    ``niceness`` (rules 1-3); the number of threads at ``niceness`` or nicer."""
    tasks = Path(f"/proc/{pid}/task")
    lowered = 0
    with contextlib.suppress(OSError):  # rule 1: no /proc, or the process is gone
        for task in tasks.iterdir():
            with contextlib.suppress(OSError, ValueError):  # rule 3
                name = (task / "comm").read_text().strip()
                if not name.startswith(_COMPILER_THREAD_PREFIXES):
                    continue
                tid = int(task.name)
                if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                    os.setpriority(os.PRIO_PROCESS, tid, niceness)
                lowered += 1
    return lowered
