"""Check the example's database: each counter equals the steps its writers applied
(``$FENCED_SQL_LOG``): no step lost, none applied twice, whatever was frozen."""

from __future__ import annotations

import json
import sys
from collections import Counter

from examples.fenced_sql.db import LOG, connect


def main() -> int:
    steps: Counter[str] = Counter()
    for line in LOG.read_text().splitlines():
        entry = json.loads(line)
        if entry["event"] == "step" and entry["applied"]:
            steps[entry["account"]] += 1
    conn = connect()
    counters = dict(conn.execute("SELECT id, value FROM counters").fetchall())
    conn.close()
    wrong = {a: (counters.get(a), n) for a, n in steps.items() if counters.get(a) != n}
    for account in sorted(counters):
        print(f"{account}: {counters[account]} (applied steps {steps[account]})")
    if wrong:
        print(f"MISMATCH (counter, applied steps): {wrong}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
