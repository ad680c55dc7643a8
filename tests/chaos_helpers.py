"""Responders for chaos servers that several test files script the same way."""

from __future__ import annotations

from harnessnb.chaos import ChaosRequest, Reply

NOTES = "# Notes\n"


def writes_notes(request: ChaosRequest) -> Reply:
    """A model that writes ``NOTES`` to NOTES.md with one tool call, then answers once the
    call's result is back."""
    if any(m.get("role") == "tool" for m in request.messages):
        return Reply(text="wrote NOTES.md")
    return Reply(tool_calls=[{"name": "write_file",
                              "arguments": {"path": "NOTES.md", "content": NOTES}}])
