"""The files in ``deploy/``, each checked by its own tool, and against the daemon:
the systemd unit by ``systemd-analyze verify``, the Kubernetes manifests by
their API schemas, the alert rules by ``promtool check rules`` and their unit
tests by ``promtool test rules``, and the Grafana dashboard's queries against
the metrics a live daemon serves."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import workgroup
from workgroup.runtime.app import Settings
from workgroup.runtime.config import unknown_variables
from workgroup.runtime.runner import STOP_MARGIN_MS, AppRunner
from workgroup.testing import run_coordinator

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNIT = DEPLOY / "systemd" / "workgroup@.service"
MANIFESTS = DEPLOY / "kubernetes" / "statefulset.yaml"
RULES = DEPLOY / "prometheus" / "workgroup-rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "workgroup-rules.test.yml"
DASHBOARD = DEPLOY / "grafana" / "workgroup-dashboard.json"
#: How the test suite gets each tool: ``make test`` installs the Debian packages.
NEEDS = {"systemd-analyze": "Debian's systemd", "promtool": "Debian's prometheus"}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed ({NEEDS[name]}; `make test` installs it)")
    return path


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = tool("systemd-analyze")
    # verify checks that the command exists and the user is known: point them
    # at ones this machine has, and keep every other line as shipped.
    text = UNIT.read_text()
    text = text.replace("/opt/workgroup/.venv/bin/workgroup", "/bin/true")
    text = re.sub(r"^(User|Group)=workgroup$", r"\1=root", text, flags=re.M)
    unit = tmp_path / "workgroup@test.service"
    unit.write_text(text)
    result = run(analyze, "verify", str(unit))
    assert result.returncode == 0, result.stderr
    # It reports unknown keys and bad values as warnings, exit 0: none allowed.
    assert result.stdout.strip() == "", result.stdout
    assert result.stderr.strip() == "", result.stderr
    # A broken copy does fail the same check (the check is not blind).
    broken = tmp_path / "broken@test.service"
    broken.write_text(text.replace("KillMode=mixed", "KillMode=sometimes"))
    assert "kill mode" in run(analyze, "verify", str(broken)).stderr


def test_the_unit_gives_handlers_their_grace_and_does_not_restart_on_bad_config() -> None:
    text = UNIT.read_text()
    stop_s = int(re.search(r"^TimeoutStopSec=(\d+)$", text, re.M).group(1))  # type: ignore[union-attr]
    assert stop_s * 1000 > Settings().grace_ms + STOP_MARGIN_MS
    assert re.search(r"^RestartPreventExitStatus=2 3$", text, re.M)
    assert "WORKGROUP_INSTANCE_ID=%i" in text


def manifests() -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]


def test_the_kubernetes_manifests_match_the_api_schemas() -> None:
    from kubernetes_validate import validate  # type: ignore[import-untyped]

    for document in manifests():
        validate(document, "1.31.0", strict=True)
    broken = manifests()[1]
    broken["spec"]["template"]["spec"]["terminationGracePeriod"] = 30  # type: ignore[index]
    with pytest.raises(Exception, match="terminationGracePeriod"):
        validate(broken, "1.31.0", strict=True)


def test_the_statefulset_uses_the_pod_name_as_instance_id_and_outwaits_the_grace() -> None:
    statefulset = next(d for d in manifests() if d["kind"] == "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]  # type: ignore[index]
    [container] = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["WORKGROUP_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    grace_ms = int(env["WORKGROUP_GRACE_MS"]["value"])
    assert pod["terminationGracePeriodSeconds"] * 1000 > grace_ms + STOP_MARGIN_MS
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert "livenessProbe" not in container  # a long rebalance must not restart every pod


def test_every_workgroup_variable_in_the_files_is_one_the_daemon_reads() -> None:
    for path in (UNIT, MANIFESTS):
        names = set(re.findall(r"WORKGROUP_[A-Z_]*[A-Z]\b", path.read_text()))
        assert names, path.name
        assert unknown_variables(dict.fromkeys(names, "x")) == [], path.name


def test_the_alert_rules_check_and_pass_their_unit_tests() -> None:
    promtool = tool("promtool")
    checked = run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout
    tested = run(promtool, "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def metric_names(expr: str) -> set[str]:
    """The workgroup metrics a PromQL expression reads."""
    return set(re.findall(r"\bworkgroup_[a-z_]+\b", expr))


def exported(text: str) -> set[str]:
    """Every series name a /metrics page carries (``_bucket``, ``_total``... included)."""
    return {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with run_coordinator("--min-session-timeout-ms", "500") as server:
        yield server.bootstrap


async def test_every_dashboard_and_rule_query_names_a_metric_a_live_daemon_serves(
    bootstrap: str,
) -> None:
    app = workgroup.App(f"deploy-{uuid.uuid4().hex[:8]}", grace_ms=100)

    @app.resources("shard")
    def shards() -> list[str]:
        return ["a", "b"]

    @app.worker("shard")
    async def work(lease: workgroup.Lease) -> None:
        await lease.commit("1")
        await lease.wait_revoked()

    settings = Settings(
        bootstrap=bootstrap,
        session_timeout_ms=3_000,
        heartbeat_interval_ms=200,
        metrics_port=0,
        grace_ms=100,
        resource_metrics=True,
    )
    runner = AppRunner(app, settings)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        async with asyncio.timeout(30):
            while runner.metrics.unhealthy() or not runner.metrics._members:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
        assert runner.metrics_server is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", runner.metrics_server.port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        page = (await reader.read()).decode()
        writer.close()
        await writer.wait_closed()
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    served = exported(page)
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    rules = yaml.safe_load(RULES.read_text())
    queries += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert len(queries) > 20
    named = set().union(*(metric_names(q) for q in queries))
    missing = sorted(named - served)
    assert not missing, f"queries name metrics the daemon does not serve: {missing}"
    # Each panel reads at least one workgroup metric (none is left empty).
    for panel in dashboard["panels"]:
        assert any(metric_names(t["expr"]) for t in panel["targets"]), panel["title"]
