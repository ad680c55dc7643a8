"""Run events in words: the one wording of the command's progress lines and the
notebook's text progress, widget status and notes.

``event_words`` is pure: an event (and the run's step cap) in, one line out, or None
for an event not worth a line. Layout (indent, a ``[harnessnb]`` prefix, HTML and its
escaping) is each face's own; the words are not.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..loop._events import RunEvent
from ..loop._result import usd
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
    data = event.data
    kind = event.kind
    if kind == "started":
        verb = "resumed" if data.get("resumed") else "started"
        return f"{verb} {event.run_id} with {data.get('provider')} ({data.get('model')})"
    if kind == "step":
        calls = int(data.get("tool_calls") or 0)
        did = "answered" if not calls else f"{calls} tool call{'' if calls == 1 else 's'}"
        of = f"/{max_steps}" if max_steps else ""
        spent = data.get("cost_usd")
        cost = f", {usd(spent)} so far" if isinstance(spent, float) and spent > 0 else ""
        return f"step {event.step}{of}: {did}, {int(data.get('tokens') or 0)} tokens{cost}"
    if kind == "tool_call":
        return tool_call_words(data)
    if kind == "retry":
        return retry_words(data.get("kind"), data.get("status"), float(data.get("delay") or 0.0),
                           data.get("attempt"), data.get("max_attempts"))  # fmt: skip
    if kind == "fell_back":
        return (f"fell back from {data.get('from_provider')} after {data.get('kind')}"
                f"{_http(data.get('status'))}")  # fmt: skip
    if kind in ("replan", "stalled"):
        then = "told the model to change approach" if kind == "replan" else "stopping"
        return f"stall ({data.get('signal')}): {data.get('detail')}; {then}"
    if kind == "refused":
        return f"refused: {data.get('act', '')} {data.get('target', '')}".rstrip()
    if kind == "approval_requested":
        return f"approval asked: {data.get('act', '')} {data.get('target', '')}".rstrip()
    if kind == "approval_decided":
        return f"approval: {data.get('decision', data.get('kind', ''))}"
    if kind == "shrunk":
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


def retry_words(kind: Any, status: Any, wait_s: float, attempt: Any, of: Any) -> str:
    """``rate_limited (HTTP 429) - retrying in 7 s, attempt 2/3`` (the wait rounded up)."""
    wait = max(0, math.ceil(wait_s))
    return f"{kind}{_http(status)} - retrying in {wait} s, attempt {attempt}/{of}"


def tool_call_words(data: dict[str, Any]) -> str:
    """``write_file("path": "NOTES.md", "content": "<8 chars>") ok``."""
    return printable(f"{data.get('tool')}({_args(data.get('args'))}) {data.get('status')}")


def _http(status: Any) -> str:
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
