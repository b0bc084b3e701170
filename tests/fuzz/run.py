"""Coverage-guided fuzzing of :mod:`tests.fuzz.targets` with atheris (libFuzzer).

``python -m tests.fuzz.run [--seconds N] [TARGET ...]`` fuzzes each target for N
seconds in its own process, with workgroup's modules instrumented, and prints
the inputs tried per target.  A crash (an exception a target does not expect)
stops that target, prints the input, saves it as ``crash-*`` in the current
directory and makes the command exit 1.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table


def fuzz_one(name: str) -> None:
    """Runs in the child: instrument workgroup, then hand the target to libFuzzer."""
    import atheris

    with atheris.instrument_imports(include=["workgroup"]):
        from tests.fuzz.targets import TARGETS

    target = TARGETS[name]
    atheris.Setup(sys.argv[:1] + sys.argv[3:], target)
    atheris.Fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("targets", nargs="*")
    args = parser.parse_args()
    from tests.fuzz.targets import TARGETS

    names = args.targets or sorted(TARGETS)
    table = Table(title=f"atheris, {args.seconds} s per target")
    for column in ("target", "inputs tried", "inputs/s", "coverage edges", "result"):
        table.add_column(column, justify="left" if column in ("target", "result") else "right")
    failed = False
    for name in names:
        began = time.monotonic()
        child = subprocess.run(
            [
                sys.executable, "-m", "tests.fuzz.run", "--child", name,
                f"-max_total_time={args.seconds}", "-print_final_stats=1", "-rss_limit_mb=2048",
            ],
            capture_output=True,
            text=True,
        )  # fmt: skip
        took = time.monotonic() - began
        out = child.stdout + child.stderr
        runs = re.search(r"stat::number_of_executed_units:\s*(\d+)", out)
        edges = re.findall(r"cov: (\d+)", out)
        ok = child.returncode == 0
        failed |= not ok
        if not ok:
            print(out[-4000:], file=sys.stderr)
        count = int(runs.group(1)) if runs else 0
        table.add_row(
            name,
            f"{count:,}",
            f"{count / took:,.0f}",
            edges[-1] if edges else "?",
            "ok" if ok else f"FAILED (exit {child.returncode})",
        )
    Console().print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        fuzz_one(sys.argv[2])
    else:
        sys.exit(main())
