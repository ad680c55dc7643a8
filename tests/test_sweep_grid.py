"""The sweep's grid: samples x providers, each cell coloured by its score and opening
(``<details>``, no script) to its runs' transcripts; infrastructure failures apart from
wrong answers; untrusted text escaped; a size cap that keeps every cell's score."""

from __future__ import annotations

import html
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, cast

import pytest

import harnessnb as hn
from harnessnb.demo import demo_server
from harnessnb.demo._model import provider_for
from harnessnb.loop._result import ToolCallSummary
from harnessnb.sweeps._grid import MAX_GRID_BYTES, MAX_TRANSCRIPTS
from harnessnb.sweeps._sweep_result import RunScore, SweepRun
from tests.browser_helpers import in_chromium, keep, needs_chromium
from tests.files_helpers import folder

HOSTILE = "<img src=x onerror=alert(1)>"


class Parsed(HTMLParser):
    """The tags and attributes of a page, the grid's cells (``data-tone``) in order."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.cells: list[str] = []
        self.summaries: list[str] = []
        self._in_summary = False
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.tags.append((tag, found))
        if tag == "td" and "data-tone" in found:
            self.cells.append(str(found["data-tone"]))
        if tag == "summary":
            self._in_summary = True
            self.summaries.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "summary":
            self._in_summary = False

    def handle_data(self, data: str) -> None:
        if self._in_summary:
            self.summaries[-1] += data


def score(value: float | None, name: str = "includes", **kw: Any) -> RunScore:
    return RunScore(name, "1", value, **kw)


def sweep_run(sample: str, provider: str, repeat: int, *scores: RunScore, **kw: Any) -> SweepRun:
    fields: dict[str, Any] = {"outcome": "finished", "run_id": f"run-{sample}-{provider}-{repeat}"}
    fields.update(kw)
    return SweepRun(f"task of {sample}", provider, "m", repeat, sample_id=sample, scores=scores,
                    **fields)  # fmt: skip


def result(records: list[SweepRun], scorers: tuple[str, ...] = ("includes",)) -> hn.SweepResult:
    # The grid reads the records only: no store is opened.
    return hn.SweepResult(
        "sw-1", cast(Any, None), tuple(records), scorers=tuple((n, "1") for n in scorers)
    )


def page_of(res: hn.SweepResult) -> str:
    return res._repr_mimebundle_()["text/html"]


def infra(kind: str = "rate_limited") -> RunScore:
    return score(None, infra_failure=True, infra_kind=kind)


def mixed() -> hn.SweepResult:
    """Two samples x three providers: all pass, some pass, none pass, infrastructure
    only, a scoring error, and one not run."""
    steps = (hn.StepSummary(1, "tool_calls", (ToolCallSummary("write_file", "ok"),), 40),
             hn.StepSummary(2, "answer", tokens=12))  # fmt: skip
    card = hn.ProviderError("server said 503", kind=hn.ProviderErrorKind.SERVER,
                            status=503)._card_html()  # fmt: skip
    return result([
        *(sweep_run("s1", "good", i, score(1.0, explanation="found it"), step_summaries=steps,
                    text=f"answer {i}") for i in range(3)),
        *(sweep_run("s1", "half", i, score(float(i < 2))) for i in range(3)),
        *(sweep_run("s1", "down", i, infra("server"), outcome="escalated_retryable",
                    error_kind="server", error_card=card) for i in range(3)),
        *(sweep_run("s2", "good", i, score(0.0, explanation="no target")) for i in range(3)),
        *(sweep_run("s2", "half", i, score(None, error="ValueError: broken scorer"))
          for i in range(3)),
        *(sweep_run("s2", "down", i, outcome=None, run_id=None) for i in range(3)),
    ])  # fmt: skip


def test_every_cell_is_there_opens_as_details_and_no_script_nor_handler_is_emitted() -> None:
    parsed = Parsed(page_of(mixed()))
    assert parsed.cells == ["good", "partial", "infra", "bad", "error", "none"]
    assert not [t for t, _ in parsed.tags if t in ("script", "style", "iframe", "link")]
    assert not [a for _, attrs in parsed.tags for a in attrs if a.startswith("on")]
    # Each cell is a details element, its summary the cell's figure.
    cells = parsed.summaries[-6:]
    assert cells[:2] == ["3/3", "2/3"]
    assert cells[2] == "infra 3: server" and cells[3] == "0/3"
    assert cells[4] == "scorer error 3" and cells[5] == "not run"


def test_a_cell_holds_its_runs_transcripts_steps_text_verdicts_and_error_card() -> None:
    page = page_of(mixed())
    assert "step 1 tool_calls: write_file" in page and "answer 2" in page
    assert "found it" in page and "scoring error: ValueError: broken scorer" in page
    assert "not scored: infrastructure (server)" in page
    assert "server said 503" in page and "harnessnb-error" in page  # the error's own card
    for i in range(3):
        assert f"run-s1-good-{i}" in page


def test_infrastructure_failures_are_their_own_tone_never_a_wrong_answer() -> None:
    """A provider that only failed (503s) is blue and names the kind; a wrong answer is red."""
    res = result([sweep_run("s1", "down", 0, infra("server")),
                  sweep_run("s1", "wrong", 0, score(False))])  # fmt: skip
    parsed = Parsed(page_of(res))
    assert parsed.cells == ["infra", "bad"]
    assert parsed.summaries[-2:] == ["infra 1: server", "0/1"]
    tds = [a["style"] or "" for t, a in parsed.tags if t == "details" and "cursor" not in str(a)]
    assert any("--jp-info-color1" in s for s in tds) and any("--jp-error-color1" in s for s in tds)


def test_a_sweep_without_scorers_colours_cells_by_outcome() -> None:
    res = result([sweep_run("s1", "p", 0), sweep_run("s1", "p", 1, outcome="unverified"),
                  sweep_run("s2", "p", 0, outcome="escalated_retryable", error_kind="server")],
                 scorers=())  # fmt: skip
    parsed = Parsed(page_of(res))
    assert parsed.cells == ["partial", "infra"]
    assert parsed.summaries[-2:] == ["1/2 ok", "infra 1: server"]


def test_several_scorers_the_first_colours_and_every_one_is_listed() -> None:
    res = result([sweep_run("s1", "p", i, score(1.0), score(0.25 * i, "judge")) for i in range(2)],
                 scorers=("includes", "judge"))  # fmt: skip
    parsed = Parsed(page_of(res))
    assert parsed.cells == ["good"]
    assert parsed.summaries[-1] == "includes 2/2 · judge 0.12"
    legend = "includes's score over the repeats (its colour), every scorer's listed"
    assert legend in html.unescape(page_of(res))


def test_a_hostile_sample_answer_and_explanation_are_escaped() -> None:
    res = result([SweepRun(HOSTILE, HOSTILE, "m", 0, "finished", run_id=HOSTILE,
                           sample_id=HOSTILE, text=HOSTILE, error_card=cast(Any, HOSTILE),
                           scores=(score(0.5, explanation=HOSTILE),
                                   score(None, "judge", error=HOSTILE)))],
                 scorers=("includes", "judge"))  # fmt: skip
    page = page_of(res)
    parsed = Parsed(page)
    assert not [t for t, _ in parsed.tags if t == "img"]
    assert HOSTILE not in page
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") >= 6  # the error card's too


def test_2000_runs_keep_every_score_and_the_html_stays_under_the_cap() -> None:
    steps = tuple(hn.StepSummary(i, "tool_calls", (ToolCallSummary("run_command", "ok"),), 30)
                  for i in range(1, 51))  # fmt: skip
    records = [
        sweep_run(f"s{n}", p, r, score(float((n + r) % 2), explanation="x" * 1500),
                  step_summaries=steps, text="y" * 2000)
        for n in range(250) for p in ("a", "b", "c", "d") for r in range(2)
    ]  # fmt: skip
    assert len(records) == 2000
    page = page_of(result(records))
    parsed = Parsed(page)
    assert len(parsed.cells) == 1000  # 250 samples x 4 providers: every cell's score
    assert all(s in ("1/2",) for s in parsed.summaries[-1000:])
    assert len(page.encode()) < MAX_GRID_BYTES + 10_000  # the card around the grid
    shown = sum(f"run-s{n}-{p}-{r}</code>" in page for n in range(250) for p in "abcd"
                for r in range(2))  # fmt: skip
    assert 0 < shown <= MAX_TRANSCRIPTS
    assert f"transcripts of the first {shown} of 2000 runs shown" in page
    assert "see result.scores" in page


def test_a_small_sweep_shows_every_transcript_and_no_cap_note() -> None:
    page = page_of(mixed())
    assert "the grid's cap" not in page


async def test_a_real_sweep_keeps_what_its_grid_shows(tmp_path: Path) -> None:
    """Over the demo model on loopback: the good provider's cells hold the run's steps and
    final text, the 503 provider's the error card and its infra kind; no store query."""
    ws = folder(tmp_path / "template", {"data0.md": "# Topic 0\n\nSome text.\n"})
    policy = hn.Policy.default().layer("sweep").allow_write("NOTES.md")

    def says_topic(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        notes = workspace / "NOTES.md"
        return hn.Score(notes.exists() and "Topic 0" in notes.read_text(), "NOTES.md read")

    with demo_server() as good, demo_server(rates={"server": 1.0}) as down:
        providers = {"good": provider_for(good, name="good"),
                     "down": provider_for(down, name="down")}  # fmt: skip
        res = await hn.sweep([hn.Sample("summarise data0.md into NOTES.md", id="s0")],
                             providers, workspace=ws, store=tmp_path / "runs.duckdb",
                             policy=policy, scorers=[says_topic])  # fmt: skip
    good_run = next(r for r in res.records if r.provider == "good")
    down_run = next(r for r in res.records if r.provider == "down")
    assert good_run.step_summaries and good_run.text and not good_run.error_card
    assert "harnessnb-error" in down_run.error_card
    parsed = Parsed(page_of(res))
    assert parsed.cells == ["good", "infra"]
    page = page_of(res)
    assert "write_file" in page and "says_topic" in page and "NOTES.md read" in page


# --- in a real browser, light and dark -------------------------------------------------


@needs_chromium
@pytest.mark.parametrize("theme", ["lab-light", "lab-dark", "bare-light", "classic", "bare-dark"])
def test_a_cell_opens_on_click_and_every_text_reads(theme: str, tmp_path: Path) -> None:
    from tests.test_theme_contrast import _MEASURE, AA, _page

    page = _page(theme, [("sweep-grid", page_of(mixed()))], tmp_path)
    clicked = in_chromium(
        page,
        """() => {
          const d = document.querySelector('td[data-tone=infra] details');
          const closed = !d.open && d.innerText.indexOf('server said 503') < 0;
          d.querySelector('summary').click();
          return [closed, d.open, d.innerText];
        }""",
    )
    assert clicked[0] and clicked[1]
    assert "server said 503" in clicked[2] and "run-s1-down-0" in clicked[2]
    shot = tmp_path / f"grid-{theme}.png"
    measured = in_chromium(page, _MEASURE, viewport={"width": 1000, "height": 800}, shot=shot)
    keep(shot)
    rows = measured["rows"]
    assert len([r for r in rows if r["tag"] == "SUMMARY"]) == 6
    low = [r for r in rows if r["ratio"] < AA]
    assert not low, "\n".join(
        f"{r['ratio']:.2f} <{r['tag']}> {r['text']!r} fg {r['fg']} bg {r['bg']}" for r in low
    )
