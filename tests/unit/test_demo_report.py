"""The demo's report (examples/sharded_etl/report.py) from synthetic logs: kills end
ownership at the kill, moves and handovers are counted, and the chart is a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from examples.sharded_etl.cluster import EtlCluster, Mark
from examples.sharded_etl.report import ownership_intervals, with_kills, write_html
from examples.sharded_etl.verify import Verification


def event(t: float, member: str, pid: int, key: str, kind: str, token: int) -> dict[str, Any]:
    group = "etl.publisher" if key == "publisher" else "etl.shard"
    return {"time": t, "member": member, "pid": pid, "group": group, "kind": "shard",
            "key": key, "event": kind, "token": token}  # fmt: skip


EVENTS = [
    event(0.0, "etl-1", 11, "shard-0", "acquired", 1),
    event(0.0, "etl-2", 22, "shard-1", "acquired", 1),
    event(0.0, "etl-1", 11, "publisher", "acquired", 1),
    # etl-1 is SIGKILLed at 10; its shard and the publisher move at 16.
    event(16.0, "etl-2", 22, "shard-0", "acquired", 2),
    event(16.0, "etl-2", 22, "publisher", "acquired", 2),
]
MARKS = [Mark(10.0, "kill", "etl-1", 11)]


def test_a_kill_ends_what_the_killed_process_held() -> None:
    merged = with_kills(EVENTS, MARKS)
    lost = [e for e in merged if e["event"] == "lost"]
    assert {(e["key"], e["time"]) for e in lost} == {("shard-0", 10.0), ("publisher", 10.0)}
    spans = ownership_intervals(merged, "etl.shard", ended=20.0)
    assert spans["shard-0"] == [(0.0, 10.0, "etl-1"), (16.0, 20.0, "etl-2")]
    assert spans["shard-1"] == [(0.0, 20.0, "etl-2")]


def test_the_report_is_html_with_an_embedded_chart(tmp_path: Path) -> None:
    class Recorded(EtlCluster):
        def events(self) -> list[dict[str, Any]]:
            return EVENTS

        def batches(self) -> list[dict[str, Any]]:
            return [{"shard": "shard-0", "batch": 0, "token": 1, "time": 5.0, "events": 100}]

    cluster = Recorded(tmp_path, "127.0.0.1:1", shards=2, marks=list(MARKS))
    from examples.sharded_etl.report import figures

    numbers = figures(cluster, started=0.0, ended=20.0)
    assert numbers.shards_moved == 1
    assert numbers.publisher_handovers == 1
    assert numbers.unowned_s == 6.0  # shard-0 from the kill at 10 to 16
    report = tmp_path / "report.html"
    write_html(report, cluster, numbers, Verification(input_events=100), 0.0, 20.0)
    html = report.read_text()
    assert "data:image/png;base64,iVBOR" in html  # a PNG's signature
    assert "kill etl-1" in html
    assert "passed" in html


def test_load_per_daemon_follows_the_lease_that_wrote_each_batch() -> None:
    from examples.sharded_etl.report import load_by_daemon

    batches = [
        {"shard": "shard-0", "batch": 0, "token": 1, "time": 1.0, "events": 100},
        {"shard": "shard-1", "batch": 0, "token": 1, "time": 1.5, "events": 40},
        {"shard": "shard-0", "batch": 1, "token": 2, "time": 17.0, "events": 60},
    ]
    load = load_by_daemon(EVENTS, batches, started=0.0, bin_s=2.0)
    assert load["etl-1"] == {0: 50.0}  # shard-0 under token 1
    assert load["etl-2"] == {0: 20.0, 8: 30.0}  # shard-1, then shard-0 under token 2


def test_a_skewed_feeder_splits_the_rate_by_zipf(tmp_path: Path) -> None:
    from examples.sharded_etl.feed import Feeder

    feeder = Feeder(tmp_path, 4, rate=1000, skew=1.1)
    rates = list(feeder.rates.values())
    assert sum(rates) == pytest.approx(1000)
    assert rates == sorted(rates, reverse=True)
    assert rates[0] / rates[1] == pytest.approx(2**1.1)
    even = Feeder(tmp_path, 4, rate=1000)
    assert list(even.rates.values()) == [250.0] * 4
    assert feeder.write_round() == sum(int(r / 4) for r in rates)
