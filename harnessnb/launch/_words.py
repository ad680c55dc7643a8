"""Run events in words: the one wording of the command's progress lines and the
notebook's text progress, widget status and notes.

``event_words`` is pure: an event (and the run's step cap) in, one line out, or None
for an event not worth a line; it matches on the event's class. Layout (indent, a
``[harnessnb]`` prefix, HTML and its escaping) is each face's own; the words are not.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..loop._events import RunEvent
from ..loop._result import usd
from ..rules import _events as ev
from ..rules._secrets import scrub
from ..rules._text import printable, shorten

__all__ = ["event_words", "retry_words", "streamed_words", "tool_call_words"]

_ARGS_SHOWN = 60


def event_words(event: RunEvent, *, max_steps: int = 0) -> str | None:
    """One line for ``event``, or None (``finished``: the result card or summary says it).

    Control characters in what the model or a server chose (a path, a stall's detail)
    come out escaped: the line is shown, never obeyed by a terminal.

    Args:
        event: The run event.
        max_steps: The run's step cap, shown as ``step 3/12``; 0 when there is none
            (a coding-agent CLI), shown as ``step 3``.
    """
    line = _words(event, max_steps)
    # A line may quote tool arguments or a stall's detail: through the one scrubber,
    # for every face (the notebook's text progress prints it as it is), then shown with
    # its control characters escaped.
    return None if line is None else printable(scrub(line))


def _words(event: RunEvent, max_steps: int) -> str | None:
    match event:
        case ev.StartedEvent():
            verb = "resumed" if event.resumed else "started"
            return f"{verb} {event.run_id} with {event.provider} ({event.model})"
        case ev.StepEvent():
            calls = event.tool_calls
            did = "answered" if not calls else f"{calls} tool call{'' if calls == 1 else 's'}"
            of = f"/{max_steps}" if max_steps else ""
            spent = event.cost_usd
            cost = f", {usd(spent)} so far" if spent is not None and spent > 0 else ""
            return f"step {event.step}{of}: {did}, {event.tokens} tokens{cost}"
        case ev.ToolCallEvent():
            return tool_call_words(event.tool, event.args, event.status)
        case ev.RetryEvent():
            return retry_words(event.error_kind, event.status, event.delay_s, event.attempt,
                               event.max_attempts)  # fmt: skip
        case ev.FellBackEvent():
            after = f"{event.error_kind}{_http(event.status)}"
            return f"fell back from {event.from_provider} after {after}"
        case ev.ReplanEvent(signal=signal, detail=detail):
            return f"stall ({signal}): {detail}; told the model to change approach"
        case ev.StalledEvent(signal=signal, detail=detail):
            return f"stall ({signal}): {detail}; stopping"
        case ev.RefusedEvent() | ev.ApprovalRequestedEvent():
            said = "refused" if isinstance(event, ev.RefusedEvent) else "approval asked"
            return f"{said}: {event.act} {event.target}".rstrip()
        case ev.ApprovalDecidedEvent():
            return f"approval: {event.decision}"
        case ev.ShrunkEvent():
            return "context too long: old tool output dropped and the call retried"
    return None


def streamed_words(text: str, width: int = 72) -> str:
    """The newest ``width`` characters of a streamed answer as one line: ``... so far``.

    Line breaks become spaces; the text is scrubbed before it is cut and its control
    characters come out escaped, like every other line.
    """
    flat = " ".join(scrub(text).split())
    if len(flat) > width:
        flat = "\u2026" + flat[-(width - 1) :]
    return printable(flat)


def retry_words(
    kind: str, status: int | None, wait_s: float, attempt: int | None, of: int | None
) -> str:
    """``rate_limited (HTTP 429) - retrying in 7 s, attempt 2/3`` (the wait rounded up)."""
    wait = max(0, math.ceil(wait_s))
    return f"{kind}{_http(status)} - retrying in {wait} s, attempt {attempt}/{of}"


def tool_call_words(tool: str, args: dict[str, Any] | str, status: str) -> str:
    """``write_file("path": "NOTES.md", "content": "<8 chars>") ok``."""
    return printable(f"{tool}({_args(args)}) {status}")


def _http(status: int | None) -> str:
    return f" (HTTP {status})" if status is not None else ""


def _args(args: Any) -> str:
    if isinstance(args, dict) and "content" in args:
        # A file body says nothing on one line; its size does.
        args = {**args, "content": f"<{len(str(args['content']))} chars>"}
    if isinstance(args, dict):
        text = json.dumps(args, ensure_ascii=False, default=str)
        text = text.removeprefix("{").removesuffix("}")
    else:
        text = str(args)
    return shorten(text, _ARGS_SHOWN)
