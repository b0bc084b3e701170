"""``fenced()`` on a real Spark Connect server: the ``foreachBatch`` function runs in
the server's Python worker, away from the daemon, and its portable fence must
reach the coordinator from there.  A coordinator it cannot reach is a timeout,
then a clear error in the query, and nothing written."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.processes import threads
from workgroup.fence import make_fence
from workgroup.security import Security
from workgroup_spark import fenced, jit, write_batch_parquet
from workgroup_spark.connect_server import ConnectServer, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_an_unreachable_coordinator_fails_the_query_with_a_clear_error(
    connect_server: ConnectServer, tmp_path: Path
) -> None:
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession

    closed = free_port()  # nothing listens there
    fence = make_fence(
        bootstrap=f"127.0.0.1:{closed}",
        security=Security(),
        group_id="etl.shard",
        member_id="etl-1-abc",
        instance_id="etl-1",
        generation=3,
        topic="__workgroup_slots",
        partition=0,
        kind="shard",
        key="shard-0",
        token=7,
    )
    source = tmp_path / "input"
    source.mkdir()
    (source / "events.json").write_text('{"id": 1}\n{"id": 2}\n')
    output = str(tmp_path / "output")

    def write(batch: Any, batch_id: int) -> None:
        import pyarrow as pa

        write_batch_parquet(pa.table({"rows": [batch.count()]}), output, batch_id)

    spark = SparkSession.builder.remote(connect_server.remote).getOrCreate()
    try:
        began = time.monotonic()
        query = (
            spark.readStream.schema("id LONG")
            .json(str(source))
            .writeStream.foreachBatch(fenced(fence, write, timeout_s=3.0))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        with pytest.raises(StreamingQueryException, match="FenceTimeoutError") as caught:
            query.awaitTermination(180)
        elapsed = time.monotonic() - began
    finally:
        spark.stop()
    message = str(caught.value)
    assert f"127.0.0.1:{closed}" in message
    assert elapsed >= 3.0  # it tried for its timeout first
    assert not Path(output).exists()  # the batch wrote nothing


def test_a_session_the_server_closed_is_replaced(connect_server: ConnectServer) -> None:
    """What a daemon sees after the server's idle timeout closed its session (or a
    server restart): every call fails; the holder drops the session, the next
    attempt opens a new one."""
    from workgroup_spark.session import SessionHolder, SessionOptions

    holder = SessionHolder(SessionOptions("closed-session", remote=connect_server.remote))
    first = holder.get()
    assert first.range(3).count() == 3
    first.client.release_session()  # the server closes it, as its idle timeout would
    with pytest.raises(Exception, match=r"INVALID_HANDLE\.SESSION_(CLOSED|NOT_FOUND)") as caught:
        first.range(3).count()
    assert holder.forget_if_gone(caught.value)
    second = holder.get()
    assert second is not first
    assert second.range(4).count() == 4
    holder.stop()


def test_the_servers_jit_compiles_below_its_work(connect_server: ConnectServer) -> None:
    """The server ``run_connect_server`` starts has its compiler threads, and only
    them, at the niceness :mod:`workgroup_spark.jit` gives them."""
    niceness: dict[str, int] = {}
    for name, nice in threads(connect_server.pid).values():
        niceness[name] = max(niceness.get(name, nice), nice)
    compilers = {name: nice for name, nice in niceness.items() if "CompilerThre" in name}
    assert compilers, f"no compiler thread among {sorted(niceness)}"
    started = os.getpriority(os.PRIO_PROCESS, connect_server.pid)  # a suite run under `nice`
    assert set(compilers.values()) == {max(jit.COMPILER_NICENESS, started)}
    assert niceness.get("VM Thread") == started
