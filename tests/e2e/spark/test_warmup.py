"""A planned move of a Spark shard warms up first: a daemon that joins has its session
and each moved shard's checkpoint ready while the previous owner's query still runs,
and starts the query only at the cut-over.  Thin daemons on the shared Spark Connect
server (a session in under a second), real ``workgroup run`` processes and input
arriving; every event exactly once at the end."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from examples.sharded_etl.cluster import EtlCluster
from examples.sharded_etl.feed import Feeder
from examples.sharded_etl.verify import verify
from workgroup.testing import run_coordinator
from workgroup_spark.connect_server import ConnectServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SESSION_MS = 6_000
STEP_S = 120.0


def test_a_joining_daemon_warms_its_shards_up_before_it_takes_them_over(
    connect_server: ConnectServer, tmp_path: Path
) -> None:
    env = {"WORKGROUP_SPARK_REMOTE": connect_server.remote}
    with run_coordinator(log=tmp_path / "coordinator.log") as coordinator:
        cluster = EtlCluster(
            tmp_path / "data", coordinator.bootstrap, session_ms=SESSION_MS, extra_env=env
        )
        feeder = Feeder(cluster.data, cluster.shards, rate=200, files_per_s=2.0)
        try:
            check_warm_ups(cluster, feeder, connect_server.log)
        finally:
            feeder.stop()
            cluster.kill_all()
    result = verify(cluster.data, cluster.shards)
    assert result.ok, result.problems
    assert result.duplicates == 0
    assert result.missing == 0


def check_warm_ups(cluster: EtlCluster, feeder: Feeder, server_log: Path) -> None:
    cluster.start("etl-a")
    feeder.start(seconds=600)
    cluster.wait_for("every shard to commit", lambda: cluster.all_committing(0), STEP_S)
    logged_before_move = server_log.stat().st_size
    joined_at = time.time()
    cluster.start("etl-b")

    seen: dict[str, object] = {}

    def taken_over() -> bool:
        """etl-b commits half the shards, and etl-a's event log has recorded
        handing each over (it writes that when its query has stopped)."""
        owners = cluster.owners()
        of_b = [key for key, (member, *_) in owners.items() if member == "etl-b"]
        handed = {
            str(e["key"])
            for e in cluster.events()
            if e["group"] == "etl.shard" and e["event"] == "revoked" and e["member"] == "etl-a"
        }
        committing = [k for k in of_b if cluster.committing(k, joined_at, owners[k][1])]
        # What the last poll saw, for the failure's message.
        seen.update(of_b=sorted(of_b), committing=sorted(committing), handed=sorted(handed))
        return len(of_b) == cluster.shards // 2 and committing == of_b and set(of_b) <= handed

    try:
        cluster.wait_for("etl-b to commit the shards it took", taken_over, STEP_S)
    except TimeoutError as exc:
        raise TimeoutError(f"last seen: {seen}\n{exc}") from None
    feeder.stop()
    # The moved shards' new runs reuse the code the server compiled for their
    # first runs (one class loader for all sessions): without that, each run
    # compiles its plan's 15 classes again, 0.3-0.5 s of its first batch.
    with server_log.open("rb") as log:
        before_move = log.read(logged_before_move).count(b"CodeGenerator: Code generated in")
        compiled = log.read().count(b"CodeGenerator: Code generated in")
    assert before_move > 0, "the server's log says nothing of the code it generates"
    assert compiled <= 3, f"the server compiled {compiled} classes for the moved shards' runs"
    events = cluster.events()
    moved = sorted(k for k, (m, *_) in cluster.owners().items() if m == "etl-b")
    of_b = {name: [e for e in cluster.daemon_log_events(name) if e["daemon"] == "etl-b"]
            for name in ("spark.query_started", "spark.query_warmed", "spark.session_started",
                         "member.joined")}  # fmt: skip
    started = {e["query"]: _epoch(e) for e in of_b["spark.query_started"]}
    warmed = {e["query"]: _epoch(e) for e in of_b["spark.query_warmed"]}
    for key in moved:
        of_key = [e for e in events if e["group"] == "etl.shard" and str(e["key"]) == key]
        warming = next(e for e in of_key if e["event"] == "warming" and e["member"] == "etl-b")
        handed = next(e for e in of_key if e["event"] == "revoked" and e["member"] == "etl-a")
        taken = next(e for e in of_key if e["event"] == "acquired" and e["member"] == "etl-b")
        # etl-a kept the shard while etl-b warmed up, and etl-b owned it only after.
        assert warming["time"] < handed["time"] <= taken["time"], of_key
        # Ready (session, checkpoint read) before the query started, at the cut-over.
        query = f"etl.shard.{key}"
        assert warmed[query] < started[query], (warmed, started)
    # The daemon's session was up before it joined the group.
    assert of_b["spark.session_started"], "etl-b never logged spark.session_started"
    assert of_b["member.joined"], "etl-b never logged member.joined"
    assert _epoch(of_b["spark.session_started"][0]) <= _epoch(of_b["member.joined"][0])
    cluster.wait_drained(feeder.written, STEP_S)
    cluster.stop_all()


def _epoch(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()
