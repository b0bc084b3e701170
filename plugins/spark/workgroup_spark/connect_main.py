"""The Spark Connect server's driver program: Spark's own ``SparkConnectServer``
main, with the server's settings as given (run by ``spark-submit``).

Spark's main forces per-session artifact isolation on
(``spark.sql.artifact.isolation.enabled``): every session gets a class loader
of its own, in the driver and in the executors, and Spark caches generated code
per class loader.  Each run of a streaming query is a new session (Spark
clones it per run), so a shard moved to another daemon compiled every class of
its plan again before its first batch: 15 classes, 0.3-0.5 s of that batch on
2 cores.  This program takes isolation from the server's settings instead, and
:data:`~workgroup_spark.connect_server.DEFAULT_SERVER_CONF` turns it off:
sessions share the server's class loader, hence its compiled code, and also the
artifacts one of them adds (jars and files, ``addArtifact``), which suits the
daemons of one app.

``spark-submit [--conf ...] connect_main.py`` runs it as a Python application
talking to its JVM through py4j: it starts Spark Connect's gRPC service there,
and stops the session on SIGTERM or SIGINT (the JVM's own shutdown hooks stop
the rest).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Any


def main() -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    jvm: Any = spark._jvm
    service = jvm.org.apache.spark.sql.connect.service.SparkConnectService
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _signum, _frame: stopping.set())
    try:
        service.start(spark.sparkContext._jsc.sc())
        port = spark.sparkContext.getConf().get("spark.connect.grpc.binding.port", "15002")
        print(
            f"workgroup_spark.connect_main: Spark Connect server started on port {port}",
            file=sys.stderr,
            flush=True,
        )
        stopping.wait()
    finally:
        with contextlib.suppress(Exception):  # the JVM may be going already
            spark.stop()


if __name__ == "__main__":
    main()
