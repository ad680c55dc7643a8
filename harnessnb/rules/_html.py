"""Card HTML: the one place text is escaped for a page, and the one palette.

Every card (errors, ``RunResult``, ``AgentResult``, the approval panel, progress,
notes) is built from these helpers. Text handed to a helper is escaped here, once;
what a helper returns is ``Html``, which is never escaped again, so helpers nest
without double escaping and a caller never calls ``html.escape`` itself.

Colours come from JupyterLab's theme variables (``--jp-*``), each with a fallback
for pages that define none (classic Notebook, nbviewer, GitHub, VS Code), so a card
reads in Lab's light and dark themes and elsewhere: plain text keeps the page's own
colour; an element that sets a background sets its text colour from the same theme;
a tone (success, warn, error) colours borders and tints, never text on its own (Lab's
orange on white is 2.9:1), and tinted text mixes the tone into the theme's strongest
text colour. ``tests/test_theme_contrast.py`` measures every text at 4.5:1 or more.
"""

from __future__ import annotations

import enum
import html
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from ._secrets import scrub
from ._text import printable

__all__ = [
    "FAINT",
    "OUTCOME_TONES",
    "SHADE",
    "STRONG",
    "Html",
    "Tone",
    "badge",
    "bold",
    "bullets",
    "card",
    "code",
    "details",
    "escape",
    "facts",
    "grid",
    "join",
    "kv_table",
    "outcome_tone",
    "panel",
    "preview",
    "retry_badge",
    "scrolling",
    "text_block",
    "tinted",
]


class Html(str):
    """Markup that is already safe: ``escape`` passes it through untouched."""

    __slots__ = ()


class Tone(enum.StrEnum):
    """The palette; a tone's value is a CSS colour for borders and tints (never text)."""

    GOOD = "var(--jp-success-color1, #2e7d32)"  # success, finished
    WARN = "var(--jp-warn-color1, #b45309)"  # may pass: retryable, waiting, unverified
    BAD = "var(--jp-error-color1, #c62828)"  # will not pass by itself
    NEUTRAL = "var(--jp-border-color1, #6b7280)"  # a frame that judges nothing
    INFRA = "var(--jp-info-color1, #0277bd)"  # not the answer's fault: infrastructure


# A run outcome's badge tone (``RunOutcome`` values; rules/ cannot import loop/).
# Anything not named here is BAD: a new outcome is red until someone says otherwise.
OUTCOME_TONES: Mapping[str, Tone] = MappingProxyType({
    "success": Tone.GOOD,
    "finished": Tone.GOOD,
    "unverified": Tone.WARN,  # the agent stopped but its check did not pass
    "awaiting_approval": Tone.WARN,
    "needs_reconciliation": Tone.WARN,
    "cancelled": Tone.WARN,
})  # fmt: skip

# The theme's strongest text colour (badges); the page's own colour where none is set.
STRONG = "var(--jp-content-font-color0, inherit)"
# Secondary text: the page's text colour at 75%. Not --jp-content-font-color2: that is
# 4.54:1 on Lab's white and under 4.5 on any tint.
FAINT = "color-mix(in srgb, var(--jp-content-font-color1, currentColor) 75%, transparent)"
# Behind previews: Lab's second layout colour with its text colour; elsewhere a shade
# off any page, light or dark, with the page's text colour.
SHADE = "var(--jp-layout-color2, rgba(127,127,127,0.12))"
_SHADE_TEXT = "var(--jp-content-font-color1, inherit)"
_MONO = "font-family:var(--jp-code-font-family, monospace)"
_FONT = (
    "font-family:var(--jp-content-font-family, system-ui, sans-serif);font-size:13px;"
    "line-height:1.4"
)
# A page without a doctype (quirks mode) gives tables the default black text and
# font: on a dark page that is black on black unless the table inherits.
_TABLE = "color:inherit;font-size:inherit;border-collapse:collapse"


def outcome_tone(outcome: str) -> Tone:
    """The badge tone of a run outcome (its value): green, amber or red."""
    return OUTCOME_TONES.get(str(outcome), Tone.BAD)


def _tint(tone: Tone, percent: int) -> str:
    """``tone`` at ``percent``% over whatever is behind it (a badge's fill)."""
    return f"color-mix(in srgb, {tone} {percent}%, transparent)"


def escape(value: object) -> Html:
    """``value`` as text safe in a page (``Html`` is already safe and passes as is).

    Secrets are scrubbed here too: every piece of text that becomes HTML (cards, the
    progress widget, the approval panel) passes this one function exactly once. Control
    characters and bidirectional marks are shown as their escapes (``printable``), so
    what a person reads is what the text says.
    """
    if isinstance(value, Html):
        return value
    return Html(html.escape(printable(scrub(str(value)), lines=True)))


def join(parts: Iterable[object], sep: str = "") -> Html:
    """The parts (text or ``Html``) one after another, ``sep`` between them; "" is skipped."""
    return Html(escape(sep).join(escape(p) for p in parts if p != ""))


def code(text: object) -> Html:
    # Colour and background set together: a host style (Lab's, classic's) may set either.
    return Html(
        f"<code style='color:inherit;background:transparent;padding:0;{_MONO}'>"
        f"{escape(text)}</code>"
    )


def bold(text: object) -> Html:
    return Html(f"<b>{escape(text)}</b>")


def tinted(text: object, tone: Tone) -> Html:
    """Bold text in a tone (a retry countdown): the tone mixed into the theme's strongest
    text colour (or the page's), so it reads on light and dark alike."""
    colour = f"color-mix(in srgb, {tone} 55%, var(--jp-content-font-color0, currentColor))"
    return Html(f"<span style='color:{colour};font-weight:bold'>{escape(text)}</span>")


def badge(text: object, tone: Tone) -> Html:
    """A label in a tone (a kind, an outcome, a status): a border and a light tint of the
    tone, the text in the theme's strongest colour."""
    return Html(
        f"<span class='harnessnb-badge' style='background:{_tint(tone, 22)};color:{STRONG};"
        f"border:1px solid {tone};border-radius:4px;padding:0 5px;white-space:nowrap'>"
        f"{escape(text)}</span>"
    )


def retry_badge(text: object, *, retryable: bool) -> Html:
    """The failure badge: amber for one a retry may cure, red for one it will not."""
    return badge(text, Tone.WARN if retryable else Tone.BAD)


def text_block(text: object, *, faint: bool = False) -> Html:
    """A block of text whose line breaks show (a message, an answer)."""
    dim = f";color:{FAINT}" if faint else ""
    return Html(f"<div style='white-space:pre-wrap;margin:4px 0{dim}'>{escape(text)}</div>")


def preview(text: object) -> Html:
    """Verbatim text in a scrolling shaded box (a file about to be written)."""
    return Html(
        f"<pre style='max-height:16em;overflow:auto;background:{SHADE};color:{_SHADE_TEXT};"
        f"padding:4px 6px;margin:4px 0;border-radius:4px;white-space:pre-wrap;{_MONO}'>"
        f"{escape(text)}</pre>"
    )


def bullets(items: Iterable[object]) -> Html:
    """A list, one ``<li>`` an item; "" for none."""
    lis = "".join(f"<li>{escape(item)}</li>" for item in items)
    return Html(f"<ul style='margin:2px 0'>{lis}</ul>") if lis else Html("")


def kv_table(rows: Iterable[tuple[object, object]]) -> Html:
    """Key/value rows, keys on the left; a row whose value is None is left out."""
    body = "".join(
        f"<tr><th style='text-align:left;padding-right:1em;vertical-align:top'>{escape(k)}"
        f"</th><td style='text-align:left;white-space:pre-wrap'>{escape(v)}</td></tr>"
        for k, v in rows
        if v is not None
    )
    return Html(f"<table style='{_TABLE}'>{body}</table>") if body else Html("")


def facts(rows: Iterable[tuple[object, object]]) -> Html:
    """Key/value pairs side by side (``steps 3  tokens 120 ...``).

    Each pair is one ``harnessnb-stat`` that never wraps inside (a label and its value
    stay on one line); the row wraps between pairs when the card is narrow.
    """
    stats = "".join(
        f"<span class='harnessnb-stat' style='white-space:nowrap'><b>{escape(k)}</b> "
        f"{escape(v)}</span>"
        for k, v in rows
    )
    return Html(
        "<div class='harnessnb-stats' style='display:flex;flex-wrap:wrap;column-gap:10px;"
        f"row-gap:2px;margin:2px 0'>{stats}</div>"
    )


def scrolling(body: object) -> Html:
    """``body`` (a table) in a box as wide as the page that scrolls sideways when the
    table is wider, so a wide table never widens the notebook."""
    return Html(
        f"<div class='harnessnb-scroll' style='overflow-x:auto;max-width:100%'>{escape(body)}</div>"
    )


def grid(columns: Sequence[object], rows: Iterable[Sequence[object]]) -> Html:
    """A table with a header row, scrolling sideways when wider than the page."""
    head = "".join(
        f"<th style='text-align:left;padding-right:10px'>{escape(c)}</th>" for c in columns
    )
    body = "".join(
        "<tr>" + "".join(f"<td style='padding-right:10px'>{escape(v)}</td>" for v in row) + "</tr>"
        for row in rows
    )
    return scrolling(Html(f"<table style='{_TABLE};font-size:12px'><tr>{head}</tr>{body}</table>"))


def details(summary: object, body: object) -> Html:
    """A collapsed section: ``summary`` shows, ``body`` opens on a click."""
    return Html(
        f"<details style='margin-top:6px'><summary>{escape(summary)}</summary>"
        f"{escape(body)}</details>"
    )


def card(css_class: str, head: Iterable[object], *body: object, tone: Tone) -> Html:
    """The card frame: a border in ``tone``, a bold head line, then the body parts.

    ``css_class`` names the card for tests and stylesheets (``harnessnb-error``...).
    """
    return Html(
        f"<div class='harnessnb-card {escape(css_class)}' style='border:1px solid {tone};"
        f"border-left:4px solid {tone};border-radius:6px;padding:8px 12px;margin:4px 0;"
        f"{_FONT}'><div style='font-weight:bold'>{join(head, ' ')}</div>{join(body)}</div>"
    )


def panel(css_class: str, *body: object, faint: bool = False) -> Html:
    """A frameless block in the cards' font (progress, a one-line note)."""
    dim = f";color:{FAINT}" if faint else ""
    return Html(f"<div class='{escape(css_class)}' style='{_FONT}{dim}'>{join(body)}</div>")
