"""Daemons run their shards on a Spark standalone cluster (``WORKGROUP_SPARK_MASTER``):
each daemon's SparkSession is one application with its executor on the worker, and
the output is still every event exactly once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from examples.sharded_etl.cluster import EtlCluster
from examples.sharded_etl.feed import Feeder
from examples.sharded_etl.verify import verify
from tests.e2e.spark.standalone import standalone_cluster
from workgroup.testing import run_coordinator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]

STEP_S = 150.0


def test_daemons_run_their_shards_on_a_standalone_cluster(tmp_path: Path) -> None:
    with (
        standalone_cluster(tmp_path) as spark,
        run_coordinator(log=tmp_path / "coordinator.log") as coordinator,
    ):
        etl = EtlCluster(
            tmp_path / "data",
            coordinator.bootstrap,
            shards=2,
            extra_env={
                "WORKGROUP_SPARK_MASTER": spark.master_url,
                # One core and a small executor per daemon: two applications share the worker.
                "WORKGROUP_SPARK_CONF": "spark.cores.max=1,spark.executor.memory=512m",
            },
        )
        feeder = Feeder(etl.data, etl.shards, rate=200)
        try:
            etl.start("etl-a")
            etl.start("etl-b")
            feeder.start(seconds=300)
            etl.wait_for("both shards to commit", lambda: etl.all_committing(0), STEP_S)
            apps = spark.state()["activeapps"]
            assert sorted(a["name"] for a in apps) == ["workgroup-etl", "workgroup-etl"]
            assert all(a["cores"] == 1 for a in apps), apps
            # The daemon that joined second takes its shard with a warm-up: it may
            # still be warming up when both shards first commit.
            etl.wait_for(
                "each daemon to own a shard",
                lambda: {member for member, *_ in etl.owners().values()} == {"etl-a", "etl-b"},
                STEP_S,
            )
            resumed_at = time.time()
            etl.wait_for("more batches", lambda: etl.all_committing(resumed_at), STEP_S)
            feeder.stop()
            etl.wait_drained(feeder.written, STEP_S)
            etl.stop_all()
        finally:
            feeder.stop()
            etl.kill_all()  # also after a failure: no daemon outlives the test
    result = verify(etl.data, etl.shards)
    assert result.ok, result.problems
    assert result.input_events == feeder.written
