"""``workgroup console`` in a real browser (Debian's chromium, driven by Playwright,
never a downloaded browser): what a person sees appears, a kill shows as a
move, and the page updates without a reload."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.sharded_service.service import GROUP, SHARDS
from workgroup.console.server import ConsoleServer
from workgroup.testing import run_coordinator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
#: What the page shows in an empty cell.
EMPTY = "\u2013"
#: Set to a directory to keep the screenshot (the README's picture).
SCREENSHOT_DIR = os.environ.get("WORKGROUP_SCREENSHOT_DIR")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
