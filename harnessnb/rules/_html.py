"""Card HTML: the one place text is escaped for a page, and the one palette.

Every card (errors, ``RunResult``, ``AgentResult``, the approval panel, progress,
notes) is built from these helpers. Text handed to a helper is escaped here, once;
what a helper returns is ``Html``, which is never escaped again, so helpers nest
without double escaping and a caller never calls ``html.escape`` itself.

Colours read on a light and on a dark notebook page alike: text keeps the page's
own colour (secondary text is only fainter, never a fixed grey), and colour is
carried by borders and by filled badges (white on a saturated tone).
"""

from __future__ import annotations

import enum
import html
from collections.abc import Iterable, Sequence

from ._secrets import scrub
from ._text import printable

__all__ = [
    "BADGE_TEXT",
    "FAINT",
    "SHADE",
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
    "panel",
    "preview",
    "retry_badge",
    "text_block",
    "tinted",
]


class Html(str):
    """Markup that is already safe: ``escape`` passes it through untouched."""

    __slots__ = ()


class Tone(enum.StrEnum):
    """The palette; a tone's value is its colour (borders, badges, tinted text)."""

    GOOD = "#2e7d32"  # success, finished
    WARN = "#b45309"  # may pass: retryable, waiting, retrying
    BAD = "#c62828"  # will not pass by itself
    NEUTRAL = "#6b7280"  # a frame that judges nothing


BADGE_TEXT = "#ffffff"  # on every tone above at a contrast of 4.5:1 or more
SHADE = "rgba(127,127,127,0.12)"  # behind previews: a shade off any page, light or dark
FAINT = "0.75"  # the opacity of secondary text (it keeps the page's colour)
_FONT = "font-family:sans-serif;font-size:13px;line-height:1.4"
# A page without a doctype (quirks mode) gives tables the default black text and
# font: on a dark page that is black on black unless the table inherits.
_TABLE = "color:inherit;font-size:inherit;border-collapse:collapse"


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
    return Html(f"<code>{escape(text)}</code>")


def bold(text: object) -> Html:
    return Html(f"<b>{escape(text)}</b>")


def tinted(text: object, tone: Tone) -> Html:
    """Bold text in a tone (a retry countdown); every tone reads on light and dark."""
    return Html(f"<span style='color:{tone};font-weight:bold'>{escape(text)}</span>")


def badge(text: object, tone: Tone) -> Html:
    """A filled label: a kind, an outcome, a status."""
    return Html(
        f"<span class='harnessnb-badge' style='background:{tone};color:{BADGE_TEXT};"
        f"border-radius:4px;padding:1px 6px;white-space:nowrap'>{escape(text)}</span>"
    )


def retry_badge(text: object, *, retryable: bool) -> Html:
    """The failure badge: amber for one a retry may cure, red for one it will not."""
    return badge(text, Tone.WARN if retryable else Tone.BAD)


def text_block(text: object, *, faint: bool = False) -> Html:
    """A block of text whose line breaks show (a message, an answer)."""
    dim = f";opacity:{FAINT}" if faint else ""
    return Html(f"<div style='white-space:pre-wrap;margin:4px 0{dim}'>{escape(text)}</div>")


def preview(text: object) -> Html:
    """Verbatim text in a scrolling shaded box (a file about to be written)."""
    return Html(
        f"<pre style='max-height:16em;overflow:auto;background:{SHADE};padding:4px 6px;"
        f"border-radius:4px;white-space:pre-wrap'>{escape(text)}</pre>"
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
    """Key/value pairs side by side on one row (``steps 3  tokens 120 ...``)."""
    cells = "".join(
        f"<td style='padding:0 10px 0 0'><b>{escape(k)}</b> {escape(v)}</td>" for k, v in rows
    )
    return Html(f"<table style='{_TABLE}'><tr>{cells}</tr></table>")


def grid(columns: Sequence[object], rows: Iterable[Sequence[object]]) -> Html:
    """A table with a header row."""
    head = "".join(
        f"<th style='text-align:left;padding-right:10px'>{escape(c)}</th>" for c in columns
    )
    body = "".join(
        "<tr>" + "".join(f"<td style='padding-right:10px'>{escape(v)}</td>" for v in row) + "</tr>"
        for row in rows
    )
    return Html(f"<table style='{_TABLE};font-size:12px'><tr>{head}</tr>{body}</table>")


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
    dim = f";opacity:{FAINT}" if faint else ""
    return Html(f"<div class='{escape(css_class)}' style='{_FONT}{dim}'>{join(body)}</div>")
