"""What the demo model reads of a request: the task, the tool calls made earlier with
their results, the tools offered, whatever the wire form (OpenAI or Anthropic; Gemini's
reaches it as OpenAI-shaped messages: ``ChaosRequest.messages``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ._chaos import ChaosRequest

__all__ = ["Call", "Conversation", "read_conversation"]


@dataclasses.dataclass
class Call:
    """One tool call the model made earlier, with the result it got (None: no result yet)."""

    id: str
    name: str
    args: dict[str, Any]
    result: str | None = None
    failed: bool = False


@dataclasses.dataclass
class Conversation:
    """What the demo model needs from a request, whatever its wire form."""

    task: str
    calls: list[Call]
    tools: list[str]


def _text(content: Any) -> str:
    """The text of an OpenAI string content or an Anthropic list of blocks."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    if isinstance(content, Sequence):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text") or ""))
    return "".join(parts)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(str(b.get("text") or "") for b in content if isinstance(b, Mapping))
    return ""


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str):
        with contextlib.suppress(ValueError):
            value = json.loads(raw or "{}")
            if isinstance(value, dict):
                return value
    return {}


def read_conversation(request: ChaosRequest) -> Conversation:
    """Normalise an OpenAI or Anthropic request into task, earlier calls and tools."""
    task = ""
    calls: list[Call] = []
    by_id: dict[str, Call] = {}
    for message in request.messages:
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        content = message.get("content")
        if role == "user":
            if not task:
                task = _text(content)
            # Anthropic: tool results are blocks inside a user message.
            if isinstance(content, Sequence) and not isinstance(content, str):
                for block in content:
                    if isinstance(block, Mapping) and block.get("type") == "tool_result":
                        call = by_id.get(str(block.get("tool_use_id")))
                        if call is not None:
                            call.result = _result_text(block.get("content"))
                            call.failed = bool(block.get("is_error"))
        elif role == "assistant":
            for raw in message.get("tool_calls") or ():  # OpenAI
                if isinstance(raw, Mapping):
                    fn = raw.get("function") or {}
                    name = str(fn.get("name") or "")
                    call = Call(str(raw.get("id")), name, _arguments(fn.get("arguments")))
                    calls.append(call)
                    by_id[call.id] = call
            if isinstance(content, Sequence) and not isinstance(content, str):
                for block in content:  # Anthropic
                    if isinstance(block, Mapping) and block.get("type") == "tool_use":
                        call = Call(
                            str(block.get("id")),
                            str(block.get("name") or ""),
                            _arguments(block.get("input")),
                        )
                        calls.append(call)
                        by_id[call.id] = call
        elif role == "tool":  # OpenAI
            call = by_id.get(str(message.get("tool_call_id")))
            if call is not None:
                call.result = _result_text(content)
    for call in calls:
        # harnessnb reports a failed tool as "ERROR [CODE] message" in both protocols.
        if call.result is not None and call.result.startswith("ERROR ["):
            call.failed = True
    return Conversation(task=task.strip(), calls=calls, tools=request.tools)
