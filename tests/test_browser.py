"""A real browser: the executed chaos notebook, exported to HTML, in headless Chromium.

Needs Debian's chromium and Python Playwright (``apt-get install chromium`` and
``pip install playwright``; no ``playwright install`` is needed, the system browser
is used). Skipped with that message when either is missing.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
from notebook_helpers import PLANTED, executed_notebook

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or importlib.util.find_spec("playwright") is None,
    reason="needs chromium and playwright: apt-get install chromium; pip install playwright",
)

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def page_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from nbconvert import HTMLExporter

    nb, _ = executed_notebook(tmp_path_factory.mktemp("nbexec"))
    body, _ = HTMLExporter().from_notebook_node(nb)
    out = tmp_path_factory.mktemp("html") / "chaos_runs.html"
    out.write_text(body, encoding="utf-8")
    return out


def test_error_card_reads_in_a_browser_and_planted_script_does_not_run(
    page_html: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    shot = tmp_path / "chaos_runs.png"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            # Offline: anything but the file itself (CDN scripts, fonts) is refused at once.
            page.route("**/*", _only_files)
            page.goto(page_html.as_uri(), wait_until="load")
            text = page.inner_text("body")
            pwned: Any = page.evaluate("window.__pwned")
            card = page.locator(".harnessnb-error").first
            card.scroll_into_view_if_needed()
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert "rate_limited, HTTP 429, retryable, retry after 100 s" in text
    assert "escalated_retryable" in text
    assert "retry_after" in text and "100.0" in text
    assert pwned is None
    assert PLANTED in text  # shown as text, not run
    assert shot.stat().st_size > 10_000


@pytest.mark.parametrize("doctype", ["<!DOCTYPE html>", ""], ids=["standards", "quirks"])
def test_cards_keep_the_page_text_colour_on_a_dark_page(tmp_path: Path, doctype: str) -> None:
    from playwright.sync_api import sync_playwright

    import harnessnb as hn
    import harnessnb.agents as ag

    cause = hn.ProviderError("slow down", kind=hn.ProviderErrorKind.RATE_LIMITED, status=429,
                             retry_after=100.0, provider="openai")  # fmt: skip
    cards = [
        cause._repr_mimebundle_()["text/html"],
        hn.RunResult("r1", hn.RunOutcome.ESCALATED_RETRYABLE, 1, 10, error=cause,
                     step_rows=({"step": 1, "decision": "tool"},))._repr_mimebundle_()["text/html"],
        ag.RateLimited("quota", agent="codex", bin="codex", detail="q")._repr_mimebundle_()[
            "text/html"],
    ]  # fmt: skip
    page = tmp_path / "dark.html"
    page.write_text(
        # The theme's colour set on a container, as JupyterLab's dark theme does.
        f"{doctype}<html><body><div style='background:#111;color:rgb(212, 212, 212)'>"
        + "".join(cards) + "</div></body></html>",
        encoding="utf-8",
    )  # fmt: skip
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            tab = browser.new_page()
            tab.goto(page.as_uri(), wait_until="load")
            colours = tab.evaluate(
                "[...document.querySelectorAll('.harnessnb-card :is(th, td, div, li, code)')]"
                ".filter(e => !e.closest('.harnessnb-badge'))"
                ".map(e => getComputedStyle(e).color)"
            )
        finally:
            browser.close()
    assert len(colours) > 20
    assert set(colours) == {"rgb(212, 212, 212)"}  # every text keeps the page's colour


def _only_files(route: Any) -> None:
    if route.request.url.startswith("file:"):
        route.continue_()
    else:
        route.abort()
