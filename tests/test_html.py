"""Card HTML has one home: escaping once, one palette, one shortening rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb.rules import _html
from harnessnb.rules._html import (
    OUTCOME_TONES,
    Html,
    Tone,
    badge,
    card,
    code,
    escape,
    join,
    kv_table,
    outcome_tone,
)
from harnessnb.rules._text import shorten

PACKAGE = Path(_html.__file__).resolve().parents[1]
SCRIPT = "<script>alert('x')</script>"
ESCAPED = "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"


def test_text_is_escaped_once_and_markup_passes_untouched() -> None:
    assert escape(SCRIPT) == ESCAPED
    assert escape(escape(SCRIPT)) == ESCAPED  # escaping what is escaped changes nothing
    assert escape(Html("<b>x</b>")) == "<b>x</b>"
    nested = card("c", [code(SCRIPT), badge(SCRIPT, Tone.BAD)], kv_table([(SCRIPT, SCRIPT)]),
                  tone=Tone.BAD)  # fmt: skip
    assert "<script>" not in nested and "&amp;lt;" not in nested
    assert nested.count(ESCAPED) == 4


def test_join_skips_empty_parts_and_escapes_text() -> None:
    assert join(["a", "", Html("<i>b</i>"), "<c>"], " ") == "a <i>b</i> &lt;c&gt;"


def test_key_value_table_leaves_out_none() -> None:
    table = kv_table([("kind", "busy"), ("path", None)])
    assert ">kind<" in table and "path" not in table
    assert kv_table([("path", None)]) == ""


def test_card_carries_its_class_and_tone_but_no_text_colour() -> None:
    html = card("harnessnb-error", ["Boom"], "body", tone=Tone.WARN)
    assert "class='harnessnb-card harnessnb-error'" in html
    assert f"border:1px solid {Tone.WARN}" in html
    # Text keeps the page's colour, so a dark notebook theme still reads it.
    assert ";color:" not in html and "'color:" not in html


def test_outcome_tones_are_green_for_passed_amber_for_waiting_red_for_the_rest() -> None:
    assert outcome_tone("success") is Tone.GOOD and outcome_tone("finished") is Tone.GOOD
    assert outcome_tone("unverified") is Tone.WARN  # stopped, but the check did not pass
    assert outcome_tone("cancelled") is Tone.WARN
    assert outcome_tone("step_cap") is Tone.BAD
    assert outcome_tone("an outcome added later") is Tone.BAD
    assert set(OUTCOME_TONES.values()) == {Tone.GOOD, Tone.WARN}


@pytest.mark.parametrize("outcome", list(hn.RunOutcome), ids=str)
def test_run_card_badge_takes_its_tone_from_the_outcome_map(outcome: hn.RunOutcome) -> None:
    html = hn.RunResult("r1", outcome, 1, 10)._repr_mimebundle_()["text/html"]
    assert f"border:1px solid {outcome_tone(outcome)}" in html


def test_every_colour_is_a_theme_variable_with_a_fallback() -> None:
    for tone in Tone:
        assert re.fullmatch(r"var\(--jp-[a-z0-9-]+, #[0-9a-f]{6}\)", tone.value), tone


# Colours and escaping live in rules/_html.py alone (STYLE: one place for each rule).
_COLOUR = re.compile(r"#[0-9a-fA-F]{3}(?:[0-9a-fA-F]{3})?\b['\";)]|rgba?\(")


@pytest.mark.parametrize(
    "path",
    sorted(p for p in PACKAGE.rglob("*.py") if p.name != "_html.py"),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_no_module_but_the_html_one_escapes_or_picks_colours(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert "html.escape" not in source
    assert not _COLOUR.search(source), _COLOUR.search(source)


@pytest.mark.parametrize(
    ("text", "limit", "shown"),
    [
        ("abc", 3, "abc"),
        ("abcd", 3, "abc"),
        ("abcdef", 5, "ab..."),
        ("", 0, ""),
        ("  padded  ", 20, "  padded  "),
        ("x" * 500, 400, "x" * 397 + "..."),
    ],
)
def test_shorten_keeps_what_fits_and_marks_the_cut(text: str, limit: int, shown: str) -> None:
    assert shorten(text, limit) == shown
    assert len(shorten(text, limit)) <= max(limit, 0)


def test_each_stat_keeps_its_label_and_value_on_one_line_and_the_row_wraps_between() -> None:
    # In JupyterLab the run card's one-row table wrapped inside a stat ("time 0.0" / "s").
    html = _html.facts([("commands", "sandbox: bubblewrap"), ("time", "0.0 s")])
    stats = re.findall(r"<span class='harnessnb-stat' style='([^']*)'>(.*?)</span>", html)
    assert [(style, body) for style, body in stats] == [
        ("white-space:nowrap", "<b>commands</b> sandbox: bubblewrap"),
        ("white-space:nowrap", "<b>time</b> 0.0 s"),
    ]
    assert "display:flex;flex-wrap:wrap" in html and "<table" not in html


def test_wide_tables_scroll_inside_their_own_box() -> None:
    table = _html.grid(["a", "b"], [[1, SCRIPT]])
    assert table.startswith("<div class='harnessnb-scroll' style='overflow-x:auto;max-width:100%'>")
    assert table.endswith("</table></div>") and ESCAPED in table
    assert _html.scrolling(SCRIPT).count(ESCAPED) == 1  # text handed in is escaped once


def test_an_awaiting_approval_card_says_what_waits_not_that_it_was_done() -> None:
    # The demo model's text comes with its write call: "Writing NOTES.md: ..." read as done.
    result = hn.RunResult("r1", hn.RunOutcome.AWAITING_APPROVAL, 2, 302,
                          text="Writing NOTES.md: a bullet list.")  # fmt: skip
    bundle = result._repr_mimebundle_()
    waiting = ("waiting: step 3's tool calls have not run; they wait for a person's approval "
               "(resume the run to ask again)")  # fmt: skip
    assert f"  {waiting}\n  planned, not done: Writing NOTES.md" in bundle["text/plain"]
    assert "answer:" not in bundle["text/plain"]
    html = re.sub(r"<[^>]+>", "|", bundle["text/html"]).replace("&#x27;", "'")
    assert f"|{waiting}|" in html
    assert "|planned, not done: Writing NOTES.md: a bullet list.|" in html
    done = hn.RunResult("r2", hn.RunOutcome.SUCCESS, 3, 400, text="Wrote NOTES.md.")
    assert "  answer: Wrote NOTES.md." in done.summary_text()
    assert "waiting" not in done._repr_mimebundle_()["text/html"]
