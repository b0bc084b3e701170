"""``workgroup console`` in a real browser (Debian's chromium, driven by Playwright,
never a downloaded browser): what a person sees appears, a kill shows as a
move, and the page updates without a reload."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.sharded_service.service import GROUP, SHARDS
from workgroup.console.server import ConsoleServer
from workgroup.testing import run_coordinator
from workgroup.testing.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
#: What the page shows in an empty cell.
EMPTY = "\u2013"
#: Set to a directory to keep the screenshot (the README's picture).
SCREENSHOT_DIR = os.environ.get("WORKGROUP_SCREENSHOT_DIR")


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with run_coordinator("--min-session-timeout-ms", "500") as server:
        yield server.bootstrap


def service(bootstrap: str, name: str, port: int) -> subprocess.Popen[bytes]:
    """A daemon of examples/sharded_service: leases, checkpoints, an endpoint."""
    return subprocess.Popen(
        [sys.executable, "-m", "examples.sharded_service.service", "--port", str(port),
         "--instance-id", name, "--bootstrap", bootstrap, "--session-timeout-ms", "2000"],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def test_the_console_shows_groups_owners_and_a_kill_as_a_move(
    bootstrap: str, page: object, tmp_path: Path
) -> None:
    from playwright.async_api import Page, expect

    assert isinstance(page, Page)
    group = GROUP
    console = ConsoleServer(bootstrap, port=0, refresh_ms=300)
    await console.start()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        await page.goto(console.url)
        await expect(page.locator("#status")).to_have_text("live", timeout=10_000)
        # Members start after the page loaded: the group appears without a reload.
        ports = {"a": free_port(), "b": free_port()}
        processes += [service(bootstrap, name, port) for name, port in ports.items()]
        row = page.locator(f'#groups tr[data-group="{group}"]')
        await expect(row).to_be_visible(timeout=60_000)
        await row.click()
        await expect(page.locator("#members tbody tr")).to_have_count(2, timeout=60_000)
        resources = page.locator("#resources tbody tr")
        await expect(resources).to_have_count(SHARDS, timeout=60_000)
        await expect(page.locator("#resources td.nobody")).to_have_count(0, timeout=60_000)
        # Every resource is owned once a joined, before b's cooperative round hands it
        # its share: wait for both owners.
        owner_cells = page.locator("#resources tbody tr td:nth-child(4)")
        async with asyncio.timeout(60):
            while set(await owner_cells.all_inner_texts()) != {"a", "b"}:  # noqa: ASYNC110 (polls the page)
                await asyncio.sleep(0.3)
        # Each member's advertised endpoint, each resource's token and checkpoint.
        endpoints = await page.locator("#members tbody tr td:nth-child(5)").all_inner_texts()
        assert sorted(endpoints) == sorted(f"127.0.0.1:{p}" for p in ports.values())
        tokens = page.locator("#resources tbody tr td:nth-child(5)")
        await expect(tokens.filter(has_text=EMPTY)).to_have_count(0, timeout=60_000)
        await expect(
            page.locator("#resources tbody tr td:nth-child(6)").filter(has_text=EMPTY)
        ).to_have_count(0, timeout=60_000)
        # Filtering asks the server for matching rows only.
        await page.locator("#filter").fill("3")
        await expect(resources).to_have_count(1)
        await page.locator("#filter").fill("")
        await expect(resources).to_have_count(SHARDS)
        if SCREENSHOT_DIR:
            await page.screenshot(path=str(Path(SCREENSHOT_DIR) / "console.png"), full_page=True)
        # SIGKILL b: once its session expires, the timeline shows its shards moving to a.
        processes[1].send_signal(signal.SIGKILL)
        left = page.locator("#timeline li[data-what='rebalance']", has_text="left: b")
        await expect(left.first).to_be_visible(timeout=60_000)
        # b's shards go to a: in the round b left, or (cooperative: first to
        # nobody) in a later one; the timeline lists the newest first.
        async with asyncio.timeout(60):
            while True:
                entries = await page.locator("#timeline li").all_inner_texts()
                gone_at = next(i for i, text in enumerate(entries) if "left: b" in text)
                if any("b → a" in t or "nobody → a" in t for t in entries[: gone_at + 1]):
                    break
                await asyncio.sleep(0.2)
        await expect(page.locator("#members tbody tr")).to_have_count(1, timeout=10_000)
        owners = await page.locator("#resources tbody tr td:nth-child(4)").all_inner_texts()
        assert set(owners) == {"a"}
        await page.screenshot(path=str(tmp_path / "after-kill.png"))
    finally:
        await page.close()
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        await console.close()


async def test_the_console_refuses_a_public_address_without_tls() -> None:
    from workgroup import ConfigError

    with pytest.raises(ConfigError, match="not a loopback address"):
        ConsoleServer("127.0.0.1:9092", host="0.0.0.0")
    await asyncio.sleep(0)


async def test_the_page_loads_its_icon_and_reports_no_error(
    bootstrap: str, page: object, page_problems: object
) -> None:
    """Every resource the page asks for, the favicon included, is served (the
    ``page`` fixture fails the test on a 404 or a console error)."""
    from playwright.async_api import Page, expect

    assert isinstance(page, Page)
    console = ConsoleServer(bootstrap, port=0, refresh_ms=300)
    await console.start()
    try:
        await page.goto(console.url)
        await expect(page.locator("#status")).to_have_text("live", timeout=10_000)
        icon = await page.request.get(console.url + "favicon.ico")
        assert icon.status == 200
        assert icon.headers["content-type"] == "image/svg+xml"
        linked = await page.locator("link[rel=icon]").get_attribute("href")
        assert linked is not None
        assert (await page.request.get(console.url + linked.lstrip("/"))).status == 200
        await page.close()
    finally:
        await console.close()


async def test_the_console_shows_a_keyspaces_slices_and_heat_strip(
    bootstrap: str, page: object
) -> None:
    """An app with a keyspace (two in-process apps): the group's page shows its
    slices in hash order, one heat band per slice as wide as its range."""
    import uuid

    from playwright.async_api import Page, expect

    from tests.wire.runtime.test_keyspaces import Process, settle
    from workgroup.keyspaces import HASH_SPACE, PlannerSettings

    assert isinstance(page, Page)
    settings = PlannerSettings(
        imbalance_tolerance=0.5, min_slices_per_member=3, max_slices_per_member=12
    )
    app_name = f"console-{uuid.uuid4().hex[:8]}"
    group = f"{app_name}.users"
    processes = [Process(name, app_name, settings) for name in ("a", "b")]
    running = [p.start(bootstrap, instance_id=p.name) for p in processes]
    console = ConsoleServer(bootstrap, port=0, refresh_ms=300)
    try:
        smap = await settle(processes)
        await console.start()
        await page.goto(console.url)
        row = page.locator(f'#groups tr[data-group="{group}"]')
        await expect(row).to_be_visible(timeout=30_000)
        await row.click()
        keyspace = page.locator('#keyspaces .keyspace[data-keyspace="users"]')
        await expect(keyspace.locator("h3")).to_contain_text(
            f"{len(smap)} slices · map epoch {smap.epoch}", timeout=30_000
        )
        bands = keyspace.locator(".heat span")
        await expect(bands).to_have_count(len(smap))
        rows = keyspace.locator("table.slices tbody tr")
        await expect(rows).to_have_count(len(smap))
        # Each slice in hash order: its owner (the map's), its token.
        expected = [(str(p.id), p.owner, str(p.token)) for p in smap.slices]
        names = {p.member().member_id: p.name for p in processes}
        async with asyncio.timeout(30):
            while True:
                shown = [tuple(await r.locator("td").all_inner_texts()) for r in await rows.all()]
                if [(s[0], s[3], s[4]) for s in shown] == [
                    (i, names[o or ""], t) for i, o, t in expected
                ]:
                    break
                await asyncio.sleep(0.2)
        # Bands as wide as their ranges (to a pixel), measured in one step: the
        # page draws the strip again at every refresh.
        strip, widths = await keyspace.locator(".heat").evaluate(
            "strip => [strip.clientWidth,"
            " [...strip.children].map(b => b.getBoundingClientRect().width)]"
        )
        assert len(widths) == len(smap)
        for width, piece in zip(widths, smap.slices, strict=True):
            assert width == pytest.approx(strip * piece.width / HASH_SPACE, abs=1)
        # Coloured by load: every slice reports the same load, so once the loads
        # are read every band is the hottest colour, hsl(0, 75%, 50%).
        async with asyncio.timeout(30):
            while True:
                colours = await bands.evaluate_all(
                    "bands => bands.map(b => getComputedStyle(b).backgroundColor)"
                )
                if set(colours) == {"rgb(223, 32, 32)"}:
                    break
                await asyncio.sleep(0.2)
        await page.close()
    finally:
        await console.close()
        for stop, _ in running:
            stop.set()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)
