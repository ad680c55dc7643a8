"""Headless Chromium for the browser tests (test_browser.py, test_theme_contrast.py).

Needs Debian's chromium and Python Playwright (``apt-get install chromium`` and
``pip install playwright``; no ``playwright install`` is needed, the system browser is
used); ``needs_chromium`` skips with that message when either is missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None or importlib.util.find_spec("playwright") is None,
    reason="needs chromium and playwright: apt-get install chromium; pip install playwright",
)
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def in_chromium(
    page: Path, script: str, *, viewport: dict[str, int] | None = None, shot: Path | None = None
) -> Any:
    """Open ``page`` in headless Chromium offline (anything but a file, CDN scripts and
    fonts, is refused at once), evaluate ``script`` on it and return its value; with
    ``shot``, a full-page screenshot there too (after the script)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            tab = browser.new_page(viewport=viewport)  # None: Playwright's 1280 x 720
            tab.route("**/*", _only_files)
            tab.goto(page.as_uri(), wait_until="load")
            value = tab.evaluate(script)
            if shot is not None:
                tab.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    return value


def keep(shot: Path) -> None:
    """Copy a screenshot to ``$HARNESSNB_ARTIFACTS`` (CI keeps that folder)."""
    target = os.environ.get("HARNESSNB_ARTIFACTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy2(shot, Path(target) / shot.name)


def _only_files(route: Any) -> None:
    if route.request.url.startswith("file:"):
        route.continue_()
    else:
        route.abort()
