"""What an answer that reported no usage is taken to have cost, in tokens.

Every answer that arrived was billed, whether the run could use it or not; a server
that leaves usage out of its answer (streamed or not) must not make the attempt free,
or no cost budget binds. The estimate is the common rule of thumb, about four
characters of English text or JSON a token: the request's JSON bytes for input, the
answer's text and tool calls for output, rounded up. It is flagged ``estimated`` on the
``Usage`` and ``usage_estimated`` on the attempt row, and priced like reported usage.
"""

from __future__ import annotations

import json

from ._completion import Usage
from ._wire import Parsed

__all__ = ["CHARS_PER_TOKEN", "answer_chars", "estimate_usage"]

CHARS_PER_TOKEN = 4
"""About four characters of English text (or JSON) a token."""


def estimate_usage(request_bytes: int, answer_chars: int) -> Usage:
    """Tokens of an answer that reported none, at ``CHARS_PER_TOKEN``, rounded up."""
    return Usage(
        -(-request_bytes // CHARS_PER_TOKEN), -(-answer_chars // CHARS_PER_TOKEN), estimated=True
    )


def answer_chars(parsed: Parsed) -> int:
    """Characters of an answer: its text, and its tool calls' names and JSON arguments."""
    calls = sum(len(c.name) + len(json.dumps(c.arguments)) for c in parsed.tool_calls)
    return len(parsed.text) + calls
