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


WARM_EVENTS = [
    event(0.0, "etl-1", 11, "shard-0", "acquired", 1),
    event(0.0, "etl-1", 11, "shard-1", "acquired", 1),
    event(0.0, "etl-1", 11, "shard-2", "acquired", 1),
    # etl-2 joins at 10 and warms shard-0 and shard-1 up; shard-0 cuts over at 14.
    event(10.0, "etl-2", 22, "shard-0", "warming", 0),
    event(10.0, "etl-2", 22, "shard-1", "warming", 0),
    event(14.0, "etl-1", 11, "shard-0", "revoked", 1),
    event(14.1, "etl-2", 22, "shard-0", "acquired", 2),
    # shard-1's move goes away (called off); etl-2 warms shard-2 and is killed at 18.
    event(15.0, "etl-2", 22, "shard-1", "warmup_ended", 0),
    event(16.0, "etl-2", 22, "shard-2", "warming", 0),
]


def test_warm_up_spans_run_from_warming_to_the_cut_over_or_their_end() -> None:
    from examples.sharded_etl.report import WarmupSpan, warmup_intervals

    merged = with_kills(WARM_EVENTS, [Mark(18.0, "kill", "etl-2", 22)])
    spans = warmup_intervals(merged, "etl.shard", ended=20.0)
    assert spans == {
        "shard-0": [WarmupSpan(10.0, 14.1, "etl-2", "cut_over")],
        "shard-1": [WarmupSpan(10.0, 15.0, "etl-2", "called_off")],
        "shard-2": [WarmupSpan(16.0, 18.0, "etl-2", "called_off")],  # the kill ends it
    }
    # Warm-ups are not ownership: etl-1 owned shard-0 until its revocation.
    owned = ownership_intervals(merged, "etl.shard", ended=20.0)
    assert owned["shard-0"] == [(0.0, 14.0, "etl-1"), (14.1, 18.0, "etl-2")]  # killed at 18
    assert owned["shard-2"] == [(0.0, 20.0, "etl-1")]
    assert warmup_intervals(WARM_EVENTS[:5], "etl.shard", ended=12.0)["shard-1"] == [
        WarmupSpan(10.0, 12.0, "etl-2", "open")
    ]


def test_the_report_counts_and_draws_warm_ups(tmp_path: Path) -> None:
    from examples.sharded_etl.report import chart_png, figures, table_rows

    class Recorded(EtlCluster):
        def events(self) -> list[dict[str, Any]]:
            return WARM_EVENTS

        def batches(self) -> list[dict[str, Any]]:
            return [{"shard": "shard-0", "batch": 0, "token": 2, "time": 15.0, "events": 10}]

    marks = [Mark(18.0, "kill", "etl-2", 22)]
    cluster = Recorded(tmp_path, "127.0.0.1:1", shards=3, marks=marks)
    numbers = figures(cluster, started=0.0, ended=20.0)
    assert (numbers.warmups_cut_over, numbers.warmups_called_off) == (1, 2)
    assert numbers.warmup_mean_s == pytest.approx(4.1)
    # shard-0: 0.1 s between etl-1's revocation and etl-2's acquisition; the warm-ups add none.
    assert numbers.unowned_s == pytest.approx(0.1 + 2.0)  # and shard-0 after the kill at 18
    rows = dict(table_rows(numbers, Verification(input_events=10)))
    assert rows["warm-ups cut over / called off"] == "1 / 2"
    assert rows["warm-up to cut-over, mean"] == "4.1 s"
    plain = Recorded(tmp_path, "127.0.0.1:1", shards=3, marks=marks)
    plain.events = lambda: [e for e in WARM_EVENTS if e["event"] not in ("warming", "warmup_ended")]  # type: ignore[method-assign]
    # The hatched warm-up bars change the picture.
    assert chart_png(cluster, 0.0, 20.0) != chart_png(plain, 0.0, 20.0)


def test_each_move_gives_the_pause_in_its_shards_output(tmp_path: Path) -> None:
    from examples.sharded_etl.report import MoveGap, figures, move_rows, table_rows

    events = [
        *WARM_EVENTS[:8],  # shard-0 moves to etl-2 with a warm-up (cut over at 14.1)
        event(16.0, "etl-1", 11, "shard-1", "revoked", 1),
        event(16.5, "etl-2", 22, "shard-1", "acquired", 2),  # a plain move
        event(25.0, "etl-1", 11, "shard-2", "acquired", 2),  # etl-2 killed at 18: back
        event(25.0, "etl-1", 11, "shard-0", "acquired", 3),
    ]
    batches = [
        {"shard": "shard-0", "batch": 5, "token": 1, "time": 13.9, "events": 1},
        {"shard": "shard-0", "batch": 6, "token": 2, "time": 15.2, "events": 1},  # 1.3 s
        {"shard": "shard-0", "batch": 7, "token": 2, "time": 17.5, "events": 1},
        # etl-2's query goes on writing after the kill (Connect, until fenced).
        {"shard": "shard-0", "batch": 8, "token": 2, "time": 20.0, "events": 1},
        {"shard": "shard-0", "batch": 9, "token": 3, "time": 26.0, "events": 1},
        {"shard": "shard-1", "batch": 3, "token": 1, "time": 15.5, "events": 1},
        {"shard": "shard-1", "batch": 4, "token": 2, "time": 18.5, "events": 1},  # 3.0 s
    ]

    class Recorded(EtlCluster):
        def events(self) -> list[dict[str, Any]]:
            return events

        def batches(self) -> list[dict[str, Any]]:
            return batches

    marks = [Mark(18.0, "kill", "etl-2", 22)]
    cluster = Recorded(tmp_path, "127.0.0.1:1", shards=3, marks=marks)
    numbers = figures(cluster, started=0.0, ended=30.0)
    assert numbers.moves == [
        MoveGap(14.1, "shard-0", "etl-1", "etl-2", "warm-up", pytest.approx(1.3)),
        MoveGap(16.5, "shard-1", "etl-1", "etl-2", "plain", pytest.approx(3.0)),
        MoveGap(25.0, "shard-0", "etl-2", "etl-1", "SIGKILL", pytest.approx(6.0), 8.0),
    ]  # shard-2 went back to etl-1, which held it before: no move
    rows = dict(table_rows(numbers, Verification(input_events=7)))
    assert rows["first output after a move, median / max"] == "2.15 / 3.00 s"
    assert rows["first output after the SIGKILL, median / max"] == "8.00 / 8.00 s"
    assert move_rows(numbers.moves, started=0.0)[2] == (
        "25.0 s", "shard-0", "etl-2", "etl-1", "SIGKILL", "6.00 s", "8.00 s",
    )  # fmt: skip
    report = tmp_path / "report.html"
    write_html(report, cluster, numbers, Verification(input_events=7), 0.0, 30.0)
    assert "<td>warm-up</td><td>1.30 s</td>" in report.read_text()
