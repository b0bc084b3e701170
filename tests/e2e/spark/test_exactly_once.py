"""The sharded ETL (examples/sharded_etl) with real daemons, Spark and a coordinator:
every input event exactly once across a frozen zombie and a SIGKILL, input arriving
throughout.  Two layouts: a JVM in each daemon (``local[*]``), and thin daemons
(``remote=``) sharing one Spark Connect server.

What stops the zombie (a daemon frozen past its session timeout, JVM included,
then resumed while the new owner runs its shards): the lease.  Every micro-batch
first commits its batch id through the coordinator (``workgroup_spark.fenced``);
the coordinator refuses the zombie's commit, so its batch writes nothing.  Spark's
checkpoint log (batch files created only if absent) covers the remaining window:
a batch fenced just before the freeze and written after it is the batch the new
owner replays, with the same offsets, and only one copy is committed.

With Spark Connect the queries run on the server and outlive their daemon: a
frozen or killed daemon's queries go on running there.  Their ``foreachBatch``
(in the server's Python worker) commits through the lease's portable fence; once
the coordinator has ended the daemon's session it refuses, the batch writes
nothing and the query fails; the successor's query on the same checkpoint stops
any run still active (``spark.sql.streaming.stopActiveRunOnRestart``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.sharded_etl.cluster import EtlCluster
from examples.sharded_etl.feed import Feeder
from examples.sharded_etl.verify import verify
from workgroup.testing import run_coordinator
from workgroup_spark.connect_server import ConnectServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

SESSION_MS = 6_000
STEP_S = 150.0


@pytest.fixture(params=["jvm", "connect"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EtlCluster]:
    env = {}
    if request.param == "connect":
        server: ConnectServer = request.getfixturevalue("connect_server")
        env["WORKGROUP_SPARK_REMOTE"] = server.remote
    with run_coordinator(log=tmp_path / "coordinator.log") as coordinator:
        etl = EtlCluster(
            tmp_path / "data", coordinator.bootstrap, session_ms=SESSION_MS, extra_env=env
        )
        try:
            yield etl
        finally:
            etl.kill_all()


def test_exactly_once_across_a_zombie_and_a_sigkill(cluster: EtlCluster) -> None:
    feeder = Feeder(cluster.data, cluster.shards, rate=400)
    try:
        cluster.start("etl-a")
        cluster.start("etl-b")
        feeder.start(seconds=600)
        # Both daemons own shards and commit them: etl-a's start may be slower
        # than etl-b's (a JVM, a session), and etl-b then holds every shard
        # until etl-a joins and is handed its share.
        cluster.wait_for(
            "every shard to commit under its owner's token, etl-a owning some",
            lambda: (
                any(member == "etl-a" for member, *_ in cluster.owners().values())
                and cluster.all_committing(0, owners_only=True)
            ),
            STEP_S,
        )

        # --- the zombie: freeze etl-a (Python and its JVM, if it has one) past its
        # session; on Connect its queries go on running on the server -----------
        owners = cluster.owners()
        frozen = sorted(k for k, (member, *_) in owners.items() if member == "etl-a")
        assert frozen, f"etl-a owns nothing: {owners}"
        old_tokens = {k: owners[k][1] for k in frozen}
        cluster.pause("etl-a")
        paused_at = time.time()
        for shard in frozen:
            cluster.wait_for(
                f"{shard} to commit on etl-b",
                lambda s=shard: (
                    cluster.owners()[s][0] == "etl-b"  # type: ignore[misc]
                    and cluster.committing(s, paused_at, cluster.owners()[s][1])
                ),
                STEP_S,
            )
        successor_started = {
            shard: min(
                b["time"]
                for b in cluster.batches()
                if b["shard"] == shard and b["token"] > old_tokens[shard]
            )
            for shard in frozen
        }
        cluster.resume("etl-a")
        resumed_at = time.time()
        # The zombie learns it lost its leases at its first heartbeat; give it time
        # to try (and fail) to commit, then check no batch of its tokens landed.
        cluster.wait_for(
            "etl-a to take a shard again",
            lambda: any(
                m == "etl-a" and t_time > resumed_at for m, _, t_time in cluster.owners().values()
            ),
            STEP_S,
        )
        zombie_batches = [
            b
            for b in cluster.batches()
            if b["shard"] in frozen
            and b["token"] == old_tokens[b["shard"]]
            and b["time"] >= successor_started[b["shard"]]
        ]
        assert not zombie_batches, f"the zombie committed after its successor: {zombie_batches}"
        fenced = list(cluster.daemon_log_events("spark.batch_fenced")) + list(
            cluster.daemon_log_events("member.resources_lost")
        )
        assert any(e["daemon"] == "etl-a" for e in fenced), "etl-a never saw it was fenced"

        # --- SIGKILL etl-b mid-stream; input keeps arriving ---------------------
        settled_at = time.time()
        cluster.wait_for(
            "every shard to commit again", lambda: cluster.all_committing(settled_at), STEP_S
        )
        killed_at = time.time()
        cluster.kill("etl-b")
        cluster.wait_for(
            "etl-a to commit every shard",
            lambda: (
                all(m == "etl-a" for m, *_ in cluster.owners().values())
                and cluster.all_committing(killed_at)
            ),
            STEP_S,
        )
    finally:
        feeder.stop()
    cluster.wait_drained(feeder.written, STEP_S)
    cluster.stop_all()
    result = verify(cluster.data, cluster.shards)
    assert result.ok, result.problems
    assert result.input_events == feeder.written > 0
    assert result.duplicates == 0
    assert result.missing == 0
