"""A real browser: the executed chaos notebook, exported to HTML, in headless Chromium.

Needs Debian's chromium and Python Playwright (tests/browser_helpers.py says how);
skipped with that message when either is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from notebook_helpers import PLANTED, executed_notebook

from tests.browser_helpers import in_chromium, keep, needs_chromium

pytestmark = needs_chromium


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
    shot = tmp_path / "chaos_runs.png"
    # The error card scrolled into view (it throws when there is none) for the screenshot.
    text, pwned = in_chromium(
        page_html,
        "() => { document.querySelector('.harnessnb-error').scrollIntoView();"
        " return [document.body.innerText, window.__pwned]; }",
        viewport={"width": 1100, "height": 900},
        shot=shot,
    )
    assert "rate_limited, HTTP 429, retryable, retry after 100 s" in text
    assert "escalated_retryable" in text
    assert "retry_after" in text and "100.0" in text
    assert pwned is None
    assert PLANTED in text  # shown as text, not run
    assert shot.stat().st_size > 10_000


@pytest.mark.parametrize("doctype", ["<!DOCTYPE html>", ""], ids=["standards", "quirks"])
def test_cards_keep_the_page_text_colour_on_a_dark_page(tmp_path: Path, doctype: str) -> None:
    import harnessnb as hn
    import harnessnb.agents as ag

    cause = hn.ProviderError("slow down", kind=hn.ProviderErrorKind.RATE_LIMITED, status=429,
                             retry_after_s=100.0, provider="openai")  # fmt: skip
    cards = [
        cause._repr_mimebundle_()["text/html"],
        hn.RunResult("r1", hn.RunOutcome.ESCALATED_RETRYABLE, 1, 10, error=cause,
                     step_summaries=(hn.StepSummary(1, "tool_calls"),),
                     )._repr_mimebundle_()["text/html"],
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
    colours = in_chromium(
        page,
        "[...document.querySelectorAll('.harnessnb-card :is(th, td, div, li, code)')]"
        ".filter(e => !e.closest('.harnessnb-badge'))"
        ".map(e => getComputedStyle(e).color)",
    )
    assert len(colours) > 20
    assert set(colours) == {"rgb(212, 212, 212)"}  # every text keeps the page's colour



# Each stat's box, its line height and its row; the wide table's box and the page.
_LAYOUT = """
() => ({
  // a stat: a bold label and its value, in the card's row of stats (found by shape,
  // not by class, so the same measure holds for any markup); its lines are the distinct
  // tops of its text's boxes (a Range's client rects, one per line per text run)
  stats: [...document.querySelectorAll('.harnessnb-card b')].map(b => b.parentElement)
      .filter(e => e.firstElementChild.tagName === 'B' && e.children.length === 1
                   && /^(TR|DIV)$/.test(e.parentElement.tagName)
                   && e.parentElement.children.length > 1).map(e => {
    const range = document.createRange(); range.selectNodeContents(e);
    const rects = [...range.getClientRects()].filter(r => r.width > 0);
    const tops = rects.map(r => r.top);
    const r = e.getBoundingClientRect();
    return {text: e.textContent, spread: Math.max(...tops) - Math.min(...tops),
            glyph: Math.min(...rects.map(x => x.height)), top: Math.round(r.top),
            card: e.closest('.harnessnb-card').className};
  }),
  boxes: [...document.querySelectorAll('.harnessnb-scroll')].map(e => ({
    client: e.clientWidth, scroll: e.scrollWidth,
    room: e.parentElement.getBoundingClientRect().width,
    overflow: getComputedStyle(e).overflowX})),
  page: document.documentElement.scrollWidth, view: window.innerWidth,
})
"""


def _stat_cards() -> list[tuple[str, str]]:
    """The cards with stats, as a run in a notebook shows them, and a wide failures table."""
    import pandas as pd

    import harnessnb as hn
    from harnessnb.notebook._tables import scrolling_frame

    cause = hn.ProviderError("no key", kind=hn.ProviderErrorKind.AUTH, status=401,
                             provider="openai")  # fmt: skip
    runs = [
        hn.RunResult("run_51c57599c555485d", outcome, 3, 421, verified=True, elapsed_s=0.04,
                     providers=("demo",), attempts=3, cost_usd=0.0, task="summarise README.md",
                     commands="sandbox: bubblewrap", error=error)
        for outcome, error in [(hn.RunOutcome.SUCCESS, None),
                               (hn.RunOutcome.ESCALATED_TERMINAL, cause)]
    ]  # fmt: skip
    sweep = hn.SweepResult("sweep_1", hn.Store(":memory:"), ())
    columns = ["provider", "kind", "attempts", "failures", "failure_rate", "failure_rate_low",
               "failure_rate_high", "retry_after_s_mean", "retry_after_s_p50",
               "retry_after_s_max", "cost_usd", "cost_per_success_usd", "unpriced_attempts"]
    wide = scrolling_frame(pd.DataFrame([["local", "rate_limited", 7, 4, 0.571429, 0.250458,
                                          0.84178, 1.0, 1.0, 1.0, 0.0, 0.0, 0]], columns=columns))
    return [(f"run-{r.outcome.value}", r._repr_mimebundle_()["text/html"]) for r in runs] + [
        ("sweep", sweep._repr_mimebundle_()["text/html"]),
        ("failures", wide._repr_html_()),
    ]  # fmt: skip


@pytest.mark.parametrize("theme", ["lab-light", "lab-dark"])
def test_each_stat_stays_on_one_line_and_wide_tables_scroll_in_their_box(
    theme: str, tmp_path: Path
) -> None:
    # JupyterLab wrapped each stat of the run card over two lines ("commands sandbox:" /
    # "bubblewrap", "time 0.0" / "s"), and the failures table made the page 1533 px wide.
    from test_theme_contrast import _page

    page = _page(theme, _stat_cards(), tmp_path)
    shot = tmp_path / f"stats-{theme}.png"
    # About a notebook column at a narrow window: the stats must wrap between them.
    layout = in_chromium(page, _LAYOUT, viewport={"width": 640, "height": 900}, shot=shot)
    keep(shot)
    stats = layout["stats"]
    assert len(stats) >= 2 * 11 + 3  # two run cards and the sweep's
    two_lines = [s for s in stats if s["spread"] >= s["glyph"] / 2]
    assert not two_lines, two_lines  # label and value of each stat on one line
    run_rows = {s["top"] for s in stats if "harnessnb-run" in s["card"]}
    assert len(run_rows) >= 4  # the row wrapped between stats (2 rows a card at least)
    (table,) = [b for b in layout["boxes"] if b["scroll"] > 700]
    assert table["overflow"] == "auto" and table["client"] <= table["room"]
    assert layout["page"] <= layout["view"]  # nothing widened the page
