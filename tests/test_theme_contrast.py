"""Every card reads in every theme: text contrast measured in headless Chromium.

Each card kind (an error card for every kind, the run card for every outcome, the
agent card, the step table, the approval panel and its saved record, the progress
panel, a note) is rendered as a notebook output and exported by nbconvert's ``lab``
template with JupyterLab's own light and dark theme CSS (the ``theme-light.css`` /
``theme-dark.css`` and ``index.css`` nbconvert ships from JupyterLab 4: its variables,
and its rules for rendered HTML, tables and code). Then on pages that define no
``--jp-*`` variable: a bare light page (GitHub, nbviewer), nbconvert's ``classic``
template, and a dark page (an editor's dark theme without Lab's variables).

In the browser, every element with text of its own gets its computed colour composed
over its effective background (the ancestors' backgrounds, translucent ones blended,
down to the first opaque one), and the WCAG contrast ratio must be 4.5:1 or more.
Screenshots go to ``tmp_path/artifacts`` and, when ``$HARNESSNB_ARTIFACTS`` names a
folder, are copied there.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nbformat
import pytest

import harnessnb as hn
import harnessnb.agents as ag
import harnessnb.events as ev
from harnessnb.loop._result import ToolCallSummary
from harnessnb.notebook._approver import ApprovalRecord, _request_html
from harnessnb.notebook._progress import ProgressState
from harnessnb.rules._html import panel
from tests.browser_helpers import in_chromium, keep, needs_chromium

pytestmark = needs_chromium
AA = 4.5


def _error_cards() -> list[tuple[str, str]]:
    cards = []
    for kind in hn.ProviderErrorKind:
        err = hn.ProviderError(
            f"{kind.value} from the provider", kind=kind, status=429, retry_after_s=100.0,
            provider="openai", request_id="req-1",
        )  # fmt: skip
        cards.append((f"provider-{kind.value}", err))
    try:
        try:
            raise OSError("connection reset by peer")
        except OSError as cause:
            raise hn.ProviderError("transport", kind=hn.ProviderErrorKind.TRANSPORT) from cause
    except hn.ProviderError as chained:
        cards.append(("provider-with-cause", chained))
    cards += [
        ("refused", hn.RefusedError("write denied", act="write", target="src/a.py",
                                    rule="write:src/**", layer="app")),
        ("store", hn.StoreError("database is locked", kind="busy", path="/tmp/runs.duckdb")),
        ("config", hn.ConfigError("no API key: set OPENAI_API_KEY")),
        ("tool", hn.ToolError("no such file: notes.md")),
        ("agent-rate-limited", ag.RateLimited("quota", agent="codex", bin="codex", detail="q")),
    ]  # fmt: skip
    return [(name, err._repr_mimebundle_()["text/html"]) for name, err in cards]


def _run_cards() -> list[tuple[str, str]]:
    rows = (
        hn.StepSummary(1, "tool_calls", (ToolCallSummary("read_file", "ok"),), 120,
                       provider="openai"),
        hn.StepSummary(2, "tool_calls", (ToolCallSummary("write_file", "refused"),), 340,
                       cost_usd=0.0123, provider="openrouter", changed_workspace=True,
                       failures=("rate_limited 429", "server 503")),
    )  # fmt: skip
    cause = hn.ProviderError("slow down", kind=hn.ProviderErrorKind.RATE_LIMITED, status=429)
    cards = []
    for outcome in hn.RunOutcome:  # every outcome, including any added later
        result = hn.RunResult(
            f"run-{outcome.value}", outcome, 2, 460, verified=outcome.value == "success",
            error=None if outcome.value in ("success", "finished") else cause,
            elapsed_s=3.2, text="Wrote NOTES.md", providers=("openai", "openrouter"),
            attempts=4, retries=2, fallbacks=1, task="write the notes",
            verify_detail="pytest -q: 3 passed", commands="sandbox: bubblewrap",
            step_summaries=rows,
        )  # fmt: skip
        cards.append((f"run-{outcome.value}", result._repr_mimebundle_()["text/html"]))
    return cards


def _agent_card() -> tuple[str, str]:
    result = ag.AgentResult(
        "a-1", "codex", hn.RunOutcome.ESCALATED_TERMINAL, text="gave up",
        usage=hn.Usage(input_tokens=10, output_tokens=3), exit_code=1,
        error=ag.RateLimited("quota", agent="codex", bin="codex", detail="q"),
    )  # fmt: skip
    return "agent", result._repr_mimebundle_()["text/html"]


def _approval_cards() -> list[tuple[str, str]]:
    request = hn.ApprovalRequest("write", "NOTES.md", "# Notes\n- <b>bold</b> claim\n",
                                 "write:*", "app", "write_file")  # fmt: skip
    at = datetime(2026, 11, 30, 8, 12, tzinfo=UTC)
    decisions = {"approved": hn.Decision.approve(), "denied": hn.Decision.deny("not that file"),
                 "timed-out": hn.Decision.defer("no answer within 30 s")}  # fmt: skip
    cards = [("approval-panel", str(_request_html(request)))]
    for name, decision in decisions.items():
        record = ApprovalRecord(request, decision, "", at)
        cards.append((f"approval-{name}", record._repr_mimebundle_()["text/html"]))
    return cards


def _progress_cards() -> list[tuple[str, str]]:
    state = ProgressState()
    events = [
        ev.StartedEvent(run_id="r-9", max_steps=8, provider="openai", model="m"),
        ev.StepEvent(run_id="r-9", step=1, tokens=120, tool_calls=0, provider="openrouter"),
        ev.FellBackEvent(run_id="r-9", step=1, from_provider="openai", model="m",
                         error_kind="server", status=503),
        ev.RetryEvent(run_id="r-9", step=2, error_kind="rate_limited", status=429, attempt=2,
                      max_attempts=3, delay_s=7.0),
    ]  # fmt: skip
    for event in events:
        state.fold(event, 10.0)
    note = str(panel("harnessnb-note", "harnessnb: run r-9 recorded as cancelled", faint=True))
    return [("progress", state.html(11.0)), ("note", note)]


def all_cards() -> list[tuple[str, str]]:
    return [*_error_cards(), *_run_cards(), _agent_card(), *_approval_cards(),
            *_progress_cards()]  # fmt: skip


def _notebook(cards: list[tuple[str, str]]) -> Any:
    nb = nbformat.v4.new_notebook()
    for name, html in cards:
        out = nbformat.v4.new_output("display_data", data={"text/html": html, "text/plain": name})
        nb.cells.append(nbformat.v4.new_code_cell(f"# {name}", outputs=[out]))
    return nb


def _page(theme: str, cards: list[tuple[str, str]], folder: Path) -> Path:
    """The cards in one environment, written as an HTML file."""
    from nbconvert import HTMLExporter

    if theme in ("lab-light", "lab-dark"):
        body, _ = HTMLExporter(template_name="lab", theme=theme[4:]).from_notebook_node(
            _notebook(cards)
        )
    elif theme == "classic":
        body, _ = HTMLExporter(template_name="classic").from_notebook_node(_notebook(cards))
    else:
        # No stylesheet at all: a light page (GitHub, nbviewer's look), or a dark page
        # with its colour on a container, as an editor's dark theme does.
        style = "" if theme == "bare-light" else "background:#1e1e1e;color:rgb(204, 204, 204)"
        blocks = "".join(f"<div class='output' data-card='{n}'>{h}</div>" for n, h in cards)
        body = f"<!DOCTYPE html><html><body><div style='{style}'>{blocks}</div></body></html>"
    page = folder / f"cards-{theme}.html"
    page.write_text(body, encoding="utf-8")
    return page


# Composes colours with a 1x1 canvas, which parses every CSS colour syntax the page
# computes (rgb(), color(srgb ...) from color-mix) and blends exactly as the page does.
_MEASURE = """
() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const cv = document.createElement('canvas'); cv.width = cv.height = 1;
  const cx = cv.getContext('2d', {willReadFrequently: true});
  const alpha = c => {
    cx.globalAlpha = 1; cx.clearRect(0, 0, 1, 1); cx.fillStyle = 'rgba(0,0,0,0)';
    cx.fillStyle = c; cx.fillRect(0, 0, 1, 1); return cx.getImageData(0, 0, 1, 1).data[3] / 255;
  };
  const paint = layers => {
    cx.globalAlpha = 1; cx.fillStyle = '#fff'; cx.fillRect(0, 0, 1, 1);  // the canvas
    for (const [c, a] of layers) {
      cx.globalAlpha = a; cx.fillStyle = 'rgba(0,0,0,0)'; cx.fillStyle = c;
      cx.fillRect(0, 0, 1, 1);
    }
    return [...cx.getImageData(0, 0, 1, 1).data.slice(0, 3)];
  };
  const lum = rgb => {
    const [r, g, b] = rgb.map(v => { v /= 255; return v <= 0.04045 ? v / 12.92
                                                   : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const roots = document.querySelectorAll(
    '.harnessnb-card, .harnessnb-progress, .harnessnb-note');
  const seen = new Set(); const rows = [];
  for (const root of roots) {
    if (root.parentElement.closest('.harnessnb-card, .harnessnb-progress')) continue;
    for (const el of [root, ...root.querySelectorAll('*')]) {
      if (seen.has(el)) continue; seen.add(el);
      const own = [...el.childNodes].filter(n => n.nodeType === 3 && n.data.trim());
      if (!own.length || !el.getClientRects().length) continue;
      const backs = []; let opacity = 1;
      for (let e = el; e; e = e.parentElement) {
        const st = getComputedStyle(e);
        opacity *= parseFloat(st.opacity);
        const a = alpha(st.backgroundColor);
        if (a > 0) backs.unshift([st.backgroundColor, 1]);
        if (a >= 1) break;
      }
      const bg = paint(backs);
      const fg = paint([...backs, [getComputedStyle(el).color, opacity]]);
      const [hi, lo] = [lum(fg), lum(bg)].sort((x, y) => y - x);
      rows.push({card: root.className, tag: el.tagName, text: own[0].data.trim().slice(0, 40),
                 ratio: (hi + 0.05) / (lo + 0.05), fg: fg.join(','), bg: bg.join(',')});
    }
  }
  return {rows, body: getComputedStyle(document.body).backgroundColor,
          cards: document.querySelectorAll('.harnessnb-card').length};
}
"""

THEMES = ["lab-light", "lab-dark", "bare-light", "classic", "bare-dark"]
# What proves the theme's CSS was applied (so the measure is not of an unstyled page).
BODY = {"lab-light": "rgb(255, 255, 255)", "lab-dark": "rgb(17, 17, 17)"}


@pytest.fixture(scope="module")
def cards() -> list[tuple[str, str]]:
    return all_cards()


@pytest.mark.parametrize("theme", THEMES)
def test_every_card_text_has_aa_contrast(
    theme: str, cards: list[tuple[str, str]], tmp_path: Path
) -> None:
    page = _page(theme, cards, tmp_path)
    shots = tmp_path / "artifacts"
    shots.mkdir()
    shot = shots / f"cards-{theme}.png"
    measured = in_chromium(page, _MEASURE, viewport={"width": 1000, "height": 800}, shot=shot)
    keep(shot)
    rows = measured["rows"]
    if theme in BODY:
        assert measured["body"] == BODY[theme]
    assert measured["cards"] >= len(cards) - 2  # progress and note are panels, not cards
    assert len(rows) > 30 * len(cards) // 10
    low = [r for r in rows if r["ratio"] < AA]
    assert not low, "\n".join(
        f"{r['ratio']:.2f} {r['card']} <{r['tag']}> {r['text']!r} fg {r['fg']} bg {r['bg']}"
        for r in low
    )
    assert shot.stat().st_size > 10_000


def test_the_dark_theme_is_dark_and_the_preview_follows_it(
    cards: list[tuple[str, str]], tmp_path: Path
) -> None:
    """The issue's case: the approval preview in Lab's dark theme (was white on #f7f7f7)."""
    page = _page("lab-dark", [c for c in cards if c[0] == "approval-panel"], tmp_path)
    pre = in_chromium(
        page,
        "(() => { const s = getComputedStyle(document.querySelector("
        "'.harnessnb-approval pre')); return [s.color, s.backgroundColor]; })()",
    )
    assert pre == ["rgb(255, 255, 255)", "rgb(66, 66, 66)"]  # Lab dark: font-color1 on layout2

