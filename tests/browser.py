"""Browser fixtures: Debian's chromium driven by Playwright (never a downloaded browser),
for every test (a plugin of tests/conftest.py).

``page`` is a fresh tab that watches itself: a console error, an uncaught page
error, a request of the page's own origin that failed or answered 4xx/5xx (a
missing favicon included) fails the test.  A test may close the page itself
(before stopping the server it shows, so that closing is not a failure); what
the page reported until then is checked after the test.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: The flags a headless Chromium needs on a machine with a closed network.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (`make test` installs it)")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
        )
        try:
            yield launched
        finally:
            await launched.close()


class PageProblems:
    """What went wrong in a page: console errors, page errors, failed requests."""

    def __init__(self) -> None:
        self.found: list[str] = []
        #: Set when the test closes the page: requests it aborts are not failures.
        self.closing = False

    def watch(self, page: object) -> None:
        from playwright.async_api import ConsoleMessage, Page, Request, Response

        assert isinstance(page, Page)

        def same_origin(url: str) -> bool:
            return page.url != "about:blank" and urlsplit(url)[:2] == urlsplit(page.url)[:2]

        def on_console(message: ConsoleMessage) -> None:
            if message.type == "error":
                self.found.append(f"console error: {message.text} ({message.location})")

        def on_page_error(error: Exception) -> None:
            self.found.append(f"page error: {error}")

        def on_request_failed(request: Request) -> None:
            if same_origin(request.url) and not self.closing:
                self.found.append(f"request failed: {request.url} ({request.failure})")

        def on_response(response: Response) -> None:
            if same_origin(response.url) and response.status >= 400:
                self.found.append(f"{response.status} for {response.url}")

        def on_close(_page: object) -> None:
            self.closing = True

        page.on("console", on_console)
        page.on("pageerror", on_page_error)
        page.on("requestfailed", on_request_failed)
        page.on("response", on_response)
        page.on("close", on_close)


@pytest.fixture
def page_problems() -> PageProblems:
    return PageProblems()


@pytest.fixture
async def page(browser: object, page_problems: PageProblems) -> AsyncIterator[object]:
    """A new tab of ``browser``; the test fails if the page reported a problem."""
    from playwright.async_api import Browser

    assert isinstance(browser, Browser)
    opened = await browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
    page_problems.watch(opened)
    try:
        yield opened
    finally:
        if not opened.is_closed():
            page_problems.closing = True
            await opened.close()
    if page_problems.found:
        pytest.fail("the page reported problems:\n" + "\n".join(page_problems.found))
