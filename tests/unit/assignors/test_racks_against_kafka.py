"""Off-rack placement of ``sticky`` and ``cooperative-sticky`` against Kafka's
own assignors, on random groups with racks (``benchmarks/balance.py``).

Runs when ``java`` and ``javac`` are installed and Kafka's client jar is at
``benchmarks/.cache/kafka-clients.jar`` (``benchmarks/balance.py --fetch-kafka``
puts it there) or at ``$KAFKA_CLIENTS_JAR``; nothing is downloaded
here.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
JAR = Path(
    os.environ.get("KAFKA_CLIENTS_JAR", ROOT / "benchmarks" / ".cache" / "kafka-clients.jar")
)

pytestmark = [
    pytest.mark.skipif(
        not (shutil.which("java") and shutil.which("javac")), reason="needs java and javac"
    ),
    pytest.mark.skipif(
        not JAR.exists(),
        reason=f"needs Kafka's client jar at {JAR} (benchmarks/balance.py --fetch-kafka)",
    ),
]


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import balance
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return balance


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_no_more_off_rack_than_kafka_anywhere(bench, name: str) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(7)
    groups = [(bench.EXAMPLE_RACKS, bench.EXAMPLE_MEMBERS)] + [
        bench.random_group(rng) for _ in range(120)
    ]
    assignor = bench.StickyAssignor() if name == "sticky" else bench.CooperativeStickyAssignor()
    theirs = bench.run_kafka(JAR, groups, name)
    ours_total = kafka_total = 0
    for group, kafka in zip(groups, theirs, strict=True):
        mine = bench.ours(group, assignor)
        ours_off, kafka_off = bench.off_rack(group, mine), bench.off_rack(group, kafka)
        ours_total += ours_off
        kafka_total += kafka_off
        assert ours_off <= kafka_off, (group, mine, kafka)
        # Kafka's balance criterion: nobody holds a kind a subscriber with two fewer takes.
        load = {m: len(mine.get(m, [])) for m in group[1]}
        for holder, resources in mine.items():
            for kind in {k for k, _ in resources}:
                lightest = min(load[m] for m, (_, kinds) in group[1].items() if kind in kinds)
                assert load[holder] <= lightest + 1, (group, mine)
    assert bench.off_rack(groups[0], bench.ours(groups[0], assignor)) == 4  # the example
    assert ours_total <= kafka_total
