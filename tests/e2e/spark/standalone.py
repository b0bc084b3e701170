"""A Spark standalone master and worker on loopback, from the pyspark package's own scripts."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent


@dataclass
class Standalone:
    master_url: str
    web_url: str

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as answer:
            state: dict[str, Any] = json.load(answer)
        return state


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _spark_class(*argv: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    with log.open("wb") as sink:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *argv],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


@contextlib.contextmanager
def standalone_cluster(logs: Path, cores: int = 2, timeout_s: float = 90) -> Iterator[Standalone]:
    """Master and one worker with ``cores`` cores; yields once the worker registered."""
    port, web = _free_port(), _free_port()
    cluster = Standalone(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}")
    master = _spark_class(
        "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web),
        log=logs / "spark-master.log",
    )  # fmt: skip
    worker = _spark_class(
        "org.apache.spark.deploy.worker.Worker",
        "--host", "127.0.0.1", "--cores", str(cores), "--memory", "2g",
        "--webui-port", str(_free_port()), cluster.master_url,
        log=logs / "spark-worker.log",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(OSError, ValueError):
                if any(w.get("state") == "ALIVE" for w in cluster.state().get("workers", [])):
                    break
            if time.monotonic() > deadline or master.poll() is not None:
                raise RuntimeError(
                    "the Spark standalone cluster did not start:\n"
                    + (logs / "spark-master.log").read_text(errors="replace")[-2000:]
                    + (logs / "spark-worker.log").read_text(errors="replace")[-2000:]
                )
            time.sleep(0.5)
        yield cluster
    finally:
        for process in (worker, master):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 15)
        for process in (worker, master):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
