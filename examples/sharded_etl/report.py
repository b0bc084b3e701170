"""The demo's report: figures from the ownership logs and outputs, and an HTML page.

Everything here is read back from what the run left on disk (ownership event
logs, daemon logs, output batches) plus the marks of what the demo did (starts,
kills, stops), so the report shows what happened, not what was planned.

Warm-ups (planned moves, ``warming`` events) are drawn beside ownership: a thin
hatched bar from a daemon's ``warming`` to its ``acquired`` of the same shard
(the cut-over), its ``warmup_ended`` (called off) or its SIGKILL.  They are not
ownership: the shard's owner keeps it meanwhile.
"""

from __future__ import annotations

import base64
import html
import io
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.sharded_etl.cluster import EtlCluster, Mark
from examples.sharded_etl.verify import Verification
from workgroup.runtime.events import unowned_seconds

SHARD_GROUP = "etl.shard"
PUBLISHER_GROUP = "etl.publisher"


@dataclass
class Figures:
    rebalances: int
    unowned_s: float
    unowned_per_rebalance_s: float
    shards_moved: int
    publisher_handovers: int
    records: int
    records_per_s: float
    duration_s: float
    #: Warm-ups that ended with the shard cut over to the warming daemon, and
    #: those called off (or killed); the mean time from warming to cut-over.
    warmups_cut_over: int = 0
    warmups_called_off: int = 0
    warmup_mean_s: float = 0.0
    #: Every move of a shard, with when its new owner's first output came.
    moves: list[MoveGap] = field(default_factory=list)


def with_kills(events: list[dict[str, Any]], marks: list[Mark]) -> list[dict[str, Any]]:
    """The events, plus a ``lost`` at each SIGKILL for every lease the killed process held
    (its own log cannot say it lost them: the kill is when ownership ended)."""
    merged = list(events)
    for mark in (m for m in marks if m.what == "kill"):
        held: dict[tuple[str, str], dict[str, Any]] = {}
        for e in events:
            if e["time"] > mark.time:
                break
            key = (e["group"], str(e["key"]))
            if e.get("pid") == mark.pid and e["event"] == "acquired":
                held[key] = e
            elif e.get("pid") == mark.pid or (e["event"] == "acquired" and key in held):
                held.pop(key, None)
        merged += [{**e, "event": "lost", "time": mark.time} for e in held.values()]
    for mark in (m for m in marks if m.what == "kill"):
        warming: dict[tuple[str, str], dict[str, Any]] = {}
        for e in events:
            if e["time"] > mark.time:
                break
            if e.get("pid") != mark.pid:
                continue
            key = (e["group"], str(e["key"]))
            if e["event"] == "warming":
                warming[key] = e
            else:  # acquired (cut over) or warmup_ended: that warm-up is over
                warming.pop(key, None)
        merged += [{**e, "event": "warmup_ended", "time": mark.time} for e in warming.values()]
    return sorted(merged, key=lambda e: e["time"])


@dataclass(frozen=True)
class WarmupSpan:
    """One warm-up of a shard by a daemon: ``outcome`` is ``cut_over`` (the
    daemon acquired it), ``called_off`` (ended or killed) or ``open``."""

    start: float
    end: float
    member: str
    outcome: str


def warmup_intervals(
    events: list[dict[str, Any]], group: str, ended: float
) -> dict[str, list[WarmupSpan]]:
    """``key -> warm-ups`` from the merged events (:func:`with_kills`)."""
    open_: dict[tuple[str, str, object], float] = {}  # (key, member, pid) -> start
    spans: dict[str, list[WarmupSpan]] = defaultdict(list)
    for e in events:
        if e["group"] != group:
            continue
        key = str(e["key"])
        who = (key, e["member"], e.get("pid"))
        if e["event"] == "warming":
            open_.setdefault(who, e["time"])
        elif e["event"] in ("acquired", "warmup_ended") and who in open_:
            outcome = "cut_over" if e["event"] == "acquired" else "called_off"
            spans[key].append(WarmupSpan(open_.pop(who), e["time"], e["member"], outcome))
    for (key, member, _), start in open_.items():
        spans[key].append(WarmupSpan(start, ended, member, "open"))
    return spans


@dataclass(frozen=True)
class MoveGap:
    """One shard's move to another daemon and how long its output paused.

    ``how``: ``SIGKILL`` (its owner was killed: the shard moves once the
    session times out), ``warm-up`` (a planned move, the new owner warmed up
    first) or ``plain`` (a move without warm-up: a SIGTERM, a rebalance).
    ``output_gap_s``: the old owner's last output batch to the new owner's
    first; ``since_kill_s``: the kill to the new owner's first output (SIGKILL
    only).  ``None``: the new owner wrote nothing (yet)."""

    time: float
    shard: str
    source: str
    target: str
    how: str
    output_gap_s: float | None
    since_kill_s: float | None = None


def move_gaps(
    events: list[dict[str, Any]],
    batches: list[dict[str, Any]],
    marks: list[Mark],
    warmups: dict[str, list[WarmupSpan]],
) -> list[MoveGap]:
    """Each move of a shard (its lease acquired by another daemon) from the merged
    events (:func:`with_kills`) and the output batches."""
    kills = [m for m in marks if m.what == "kill"]
    holder: dict[str, dict[str, Any]] = {}
    moves = []
    for e in events:
        if e["group"] != SHARD_GROUP or e["event"] != "acquired":
            continue
        key = str(e["key"])
        previous, holder[key] = holder.get(key), e
        if previous is None or previous["member"] == e["member"]:
            continue
        kill = next(
            (m for m in kills
             if m.pid == previous.get("pid") and previous["time"] <= m.time <= e["time"]),
            None,
        )  # fmt: skip
        warmed = any(
            w.member == e["member"] and w.outcome == "cut_over" and abs(w.end - e["time"]) < 1e-6
            for w in warmups.get(key, [])
        )
        how = "SIGKILL" if kill else "warm-up" if warmed else "plain"
        first_new = min(
            (b["time"] for b in batches if b["shard"] == key and b["token"] == e["token"]),
            default=None,
        )
        last_old = max(
            (b["time"] for b in batches
             if b["shard"] == key and b["token"] < e["token"]
             and (first_new is None or b["time"] <= first_new)),
            default=None,
        )  # fmt: skip
        gap = None if first_new is None or last_old is None else max(first_new - last_old, 0.0)
        since_kill = None if kill is None or first_new is None else first_new - kill.time
        moves.append(MoveGap(e["time"], key, previous["member"], e["member"], how, gap, since_kill))
    return moves


def median_max(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} / {max(values):.2f} s" if values else "-"


def figures(cluster: EtlCluster, started: float, ended: float) -> Figures:
    events = with_kills(cluster.events(), cluster.marks)
    generations = {
        (e["group"], e.get("generation")) for e in cluster.daemon_log_events("member.joined")
    }
    rebalances = sum(1 for group, _ in generations if group == SHARD_GROUP)
    unowned = unowned_seconds([e for e in events if e["group"] == SHARD_GROUP], until=ended)
    moved = 0
    last_member: dict[str, str] = {}
    handovers = -1
    for e in events:
        if e["event"] != "acquired":
            continue
        if e["group"] == SHARD_GROUP:
            key = str(e["key"])
            if key in last_member and last_member[key] != e["member"]:
                moved += 1
            last_member[key] = e["member"]
        elif e["group"] == PUBLISHER_GROUP:
            handovers += 1
    batches = cluster.batches()
    records = sum(b["events"] for b in batches)
    busy = (batches[-1]["time"] - batches[0]["time"]) if len(batches) > 1 else 0.0
    total_unowned = sum(unowned.values())
    spans = warmup_intervals(events, SHARD_GROUP, ended)
    warmups = [w for ws in spans.values() for w in ws]
    cut_over = [w.end - w.start for w in warmups if w.outcome == "cut_over"]
    return Figures(
        rebalances=rebalances,
        unowned_s=total_unowned,
        unowned_per_rebalance_s=total_unowned / max(rebalances - 1, 1),
        shards_moved=moved,
        publisher_handovers=max(handovers, 0),
        records=records,
        records_per_s=records / busy if busy else 0.0,
        duration_s=ended - started,
        warmups_cut_over=len(cut_over),
        warmups_called_off=sum(1 for w in warmups if w.outcome == "called_off"),
        warmup_mean_s=sum(cut_over) / len(cut_over) if cut_over else 0.0,
        moves=move_gaps(events, batches, cluster.marks, spans),
    )


def ownership_intervals(
    events: list[dict[str, Any]], group: str, ended: float
) -> dict[str, list[tuple[float, float, str]]]:
    """``key -> [(start, end, member)]`` of each lease, from the merged events."""
    open_: dict[tuple[str, int], tuple[float, str]] = {}
    spans: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for e in events:
        if e["group"] != group:
            continue
        key = str(e["key"])
        lease = (key, e["token"])
        if e["event"] == "acquired":
            for (other_key, token), (start, member) in list(open_.items()):
                if other_key == key and token < e["token"]:  # superseded
                    spans[key].append((start, e["time"], member))
                    del open_[(other_key, token)]
            open_[lease] = (e["time"], e["member"])
        elif lease in open_:
            start, member = open_.pop(lease)
            spans[key].append((start, e["time"], member))
    for (key, _), (start, member) in open_.items():
        spans[key].append((start, ended, member))
    return spans


def load_by_daemon(
    events: list[dict[str, Any]],
    batches: list[dict[str, Any]],
    started: float,
    bin_s: float = 2.0,
) -> dict[str, dict[int, float]]:
    """``daemon -> time bin -> records/s`` it wrote: each output batch counts for
    the daemon whose lease (shard and token) wrote it."""
    writer = {
        (str(e["key"]), e["token"]): e["member"]
        for e in events
        if e["event"] == "acquired" and e["group"] == SHARD_GROUP
    }
    out: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for batch in batches:
        daemon = writer.get((batch["shard"], batch["token"]), "unknown")
        out[daemon][int((batch["time"] - started) // bin_s)] += batch["events"] / bin_s
    return out


def chart_png(cluster: EtlCluster, started: float, ended: float) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = with_kills(cluster.events(), cluster.marks)
    shards = ownership_intervals(events, SHARD_GROUP, ended)
    publisher = ownership_intervals(events, PUBLISHER_GROUP, ended)
    rows = [*sorted(shards), *(["publisher"] if publisher else [])]
    members = sorted({m for spans in [*shards.values(), *publisher.values()] for *_, m in spans})
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(members)}

    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(12, 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.4]}
    )
    warmups = warmup_intervals(events, SHARD_GROUP, ended)
    for member in sorted({w.member for ws in warmups.values() for w in ws} - set(colours)):
        colours[member] = plt.get_cmap("tab10")(len(colours) % 10)
        members.append(member)
    labels = []
    for row, key in enumerate(rows):
        spans = shards[key] if key in shards else publisher["publisher"]
        for start, end, member in spans:
            top.barh(row, end - start, left=start - started, color=colours[member], height=0.6)
        # Warm-ups beside ownership: thin, hatched, above the owner's bar.
        for w in warmups.get(key, []) if key in shards else []:
            top.barh(
                row - 0.38,
                w.end - w.start,
                left=w.start - started,
                height=0.16,
                color=colours[w.member],
                alpha=0.55,
                hatch="////",
                edgecolor="black",
                linewidth=0.3,
            )
        labels.append(key)
    top.set_yticks(range(len(labels)), labels)
    top.invert_yaxis()
    for mark in cluster.marks:
        style = {"kill": ("red", "-"), "stop": ("orange", "--"), "start": ("green", ":")}.get(
            mark.what, ("grey", ":")
        )
        for axis in (top, bottom):
            axis.axvline(mark.time - started, color=style[0], linestyle=style[1], linewidth=1)
        top.annotate(
            f"{mark.what} {mark.daemon}",
            (mark.time - started, -0.7),
            rotation=90,
            fontsize=7,
            va="bottom",
            color=style[0],
            annotation_clip=False,
        )
    first_join: dict[object, str] = {}  # generation -> its first member's join
    for e in cluster.daemon_log_events("member.joined"):
        if e.get("group") == SHARD_GROUP:
            generation = e.get("generation")
            first_join[generation] = min(first_join.get(generation, e["timestamp"]), e["timestamp"])
    for stamp in sorted(first_join.values()):
        from datetime import datetime

        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - started
        top.plot(moment, len(labels) - 0.4, marker="v", color="black", markersize=5)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[m]) for m in members]
    top.legend(handles, members, loc="upper right", fontsize=8, ncols=len(members))
    fig.suptitle("Who owned each shard (bars), warm-ups (thin hatched bars); kills (red), "
                 "stops (orange), starts (green), rebalances (triangles)", fontsize=10)  # fmt: skip

    # Load per daemon over time: stacked, so that skew and balancing show.
    per_daemon = load_by_daemon(cluster.events(), cluster.batches(), started)
    last = max((max(b) for b in per_daemon.values() if b), default=-1)
    base = [0.0] * (last + 1)
    for daemon in sorted(per_daemon):
        heights = [per_daemon[daemon].get(x, 0.0) for x in range(last + 1)]
        bottom.bar(
            [x * 2 for x in range(last + 1)],
            heights,
            bottom=base,
            width=2,
            align="edge",
            color=colours.get(daemon, "grey"),
            label=daemon,
        )
        base = [b + h for b, h in zip(base, heights, strict=True)]
    bottom.set_ylabel("records/s by daemon")
    bottom.set_xlabel("seconds since the start of the demo")
    bottom.set_xlim(0, ended - started)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def write_html(
    path: Path,
    cluster: EtlCluster,
    figures_: Figures,
    verification: Verification,
    started: float,
    ended: float,
) -> None:
    png = base64.b64encode(chart_png(cluster, started, ended)).decode()
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{html.escape(value)}</td></tr>"
        for name, value in table_rows(figures_, verification)
    )
    marks = "".join(
        f"<li>{m.time - started:6.1f} s: {m.what} {html.escape(m.daemon)} (pid {m.pid})</li>"
        for m in cluster.marks
    )
    moves = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in move_rows(figures_.moves, started)
    )
    moves_head = "".join(f"<th>{html.escape(name)}</th>" for name in MOVE_COLUMNS)
    status = "passed" if verification.ok else "FAILED: " + "; ".join(verification.problems)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"""<!doctype html><html><head><meta charset="utf-8"><title>workgroup demo</title>
<style>body{{font-family:sans-serif;max-width:1250px;margin:2em auto}}
td{{padding:2px 12px}} tr:nth-child(odd){{background:#f3f3f3}}</style></head><body>
<h1>workgroup demo: sharded ETL on PySpark</h1>
<p>Verification <b>{html.escape(status)}</b>.</p>
<table>{rows}</table>
<h2>Ownership and throughput</h2>
<img alt="ownership timeline" src="data:image/png;base64,{png}" style="width:100%">
<h2>Moves: the new owner's first output</h2>
<table><tr>{moves_head}</tr>{moves}</table>
<h2>What the demo did</h2><ul>{marks}</ul>
</body></html>
"""
    )


#: The columns of :func:`move_rows`.
MOVE_COLUMNS = (
    "at",
    "shard",
    "from",
    "to",
    "how",
    "old owner's last output -> new owner's first",
    "kill -> first output",
)


def move_rows(moves: list[MoveGap], started: float) -> list[tuple[str, ...]]:
    """One row per move (:data:`MOVE_COLUMNS`)."""

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f} s"

    return [
        (f"{m.time - started:.1f} s", m.shard, m.source, m.target, m.how,
         seconds(m.output_gap_s), seconds(m.since_kill_s))
        for m in moves
    ]  # fmt: skip


def table_rows(f: Figures, v: Verification) -> list[tuple[str, str]]:
    after_move = [
        m.output_gap_s for m in f.moves if m.how != "SIGKILL" and m.output_gap_s is not None
    ]
    after_kill = [m.since_kill_s for m in f.moves if m.since_kill_s is not None]
    return [
        ("rebalances (shard group generations)", str(f.rebalances)),
        ("unowned shard-seconds, total", f"{f.unowned_s:.1f}"),
        ("unowned shard-seconds per rebalance", f"{f.unowned_per_rebalance_s:.2f}"),
        ("shards moved", str(f.shards_moved)),
        ("publisher handovers", str(f.publisher_handovers)),
        (
            "warm-ups cut over / called off",
            f"{f.warmups_cut_over} / {f.warmups_called_off}",
        ),
        ("warm-up to cut-over, mean", f"{f.warmup_mean_s:.1f} s"),
        # Planned and plain moves: the old owner's last output to the new owner's first.
        ("first output after a move, median / max", median_max(after_move)),
        ("first output after the SIGKILL, median / max", median_max(after_kill)),
        ("records processed", f"{f.records:,}"),
        ("records/s while processing", f"{f.records_per_s:,.0f}"),
        ("input records", f"{v.input_events:,}"),
        ("duplicates / missing", f"{v.duplicates} / {v.missing}"),
        ("summary = sum of shards", "yes" if v.ok else "no"),
        ("micro-batches", str(v.batches)),
        ("wall time", f"{f.duration_s:.0f} s"),
    ]
