"""The chaos server's Responses API dialect (``POST /v1/responses``).

``demo/_chaos.py`` routes a path ending in ``/responses`` here: a request's ``input``
items are read as chat messages (``chat_messages``, so the echo responder and the demo
model read every dialect alike), and a healthy answer, an empty one, a failed one and
a stream's error event are rendered in the Responses shape: a response object with
``output`` items (a ``reasoning`` item first, then the ``message`` and the
``function_call`` items), or its SSE events (``response.created`` ...
``response.completed``; ``response.failed``; ``error``). A refusal is a message whose
content is a ``refusal`` part (streamed as ``response.refusal.delta``/``.done``); an
answer cut at the token cap is ``status: incomplete`` with ``incomplete_details.reason``
``max_output_tokens`` (streamed: ``response.incomplete``). The faults themselves
(statuses, drops, silence) are the server's, the same for every dialect.

Plain values in, bytes or objects out: this module knows nothing of the server.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "Answer",
    "chat_messages",
    "error_event",
    "failed_events",
    "failed_response",
    "input_error",
]


@dataclasses.dataclass(frozen=True)
class Answer:
    """What one Responses answer says, worked out by the server (ids, token counts)."""

    request_id: str
    model: str
    text: str
    calls: Sequence[tuple[str, str, Mapping[str, Any]]]  # (call_id, name, arguments)
    input_tokens: int
    output_tokens: int
    usage: Mapping[str, Any] | None = None  # replaces the usage object as sent
    empty: bool = False
    refusal: str | None = None  # the message is a refusal part saying this
    truncated: bool = False  # stopped at max_output_tokens: status incomplete

    def usage_object(self) -> Mapping[str, Any]:
        if self.usage is not None:
            return self.usage
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.input_tokens + self.output_tokens,
        }

    def items(self) -> list[dict[str, Any]]:
        """The output items, complete: reasoning, the message, the function calls."""
        if self.empty:
            return []
        rid = self.request_id
        items: list[dict[str, Any]] = [
            {
                "id": f"rs_{rid}",
                "type": "reasoning",
                "summary": [],
                "encrypted_content": f"enc_{rid}",
            }
        ]
        content: list[dict[str, Any]] = []
        if self.text:
            content.append({"type": "output_text", "text": self.text, "annotations": []})
        if self.refusal is not None:
            content.append({"type": "refusal", "refusal": self.refusal})
        if content:
            items.append(
                {
                    "id": f"msg_{rid}",
                    "type": "message",
                    "status": "incomplete" if self.truncated else "completed",
                    "role": "assistant",
                    "content": content,
                }
            )
        for i, (call_id, name, arguments) in enumerate(self.calls):
            items.append(
                {
                    "id": f"fc_{rid}_{i}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": call_id,
                    "name": name,
                    "arguments": json.dumps(dict(arguments)),
                }
            )
        return items

    def response(self, status: str | None = None, **fields: Any) -> dict[str, Any]:
        """The response object (``status`` in_progress: no output, no usage yet; None:
        ``completed``, or ``incomplete`` for a truncated answer)."""
        if status is None:
            status = "incomplete" if self.truncated else "completed"
        done = status != "in_progress"
        if status == "incomplete":
            fields = {"incomplete_details": {"reason": "max_output_tokens"}, **fields}
        return {
            "id": f"resp_{self.request_id}",
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "model": self.model,
            "output": self.items() if status in ("completed", "incomplete") else [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": self.usage_object() if done else None,
            **fields,
        }

    def events(self) -> list[bytes]:
        """The SSE events of a healthy (or empty) streamed answer."""
        seq = _Sequence()
        events = [
            seq.event("response.created", response=self.response("in_progress")),
            seq.event("response.in_progress", response=self.response("in_progress")),
        ]
        for index, item in enumerate(self.items()):
            at = {"output_index": index, "item_id": item["id"]}
            if item["type"] == "message":
                start = {**item, "status": "in_progress", "content": []}
                events.append(
                    seq.event("response.output_item.added", output_index=index, item=start)
                )
                for n, whole in enumerate(item["content"]):
                    events += _part_events(seq, at, n, whole)
            elif item["type"] == "function_call":
                start = {**item, "status": "in_progress", "arguments": ""}
                events.append(
                    seq.event("response.output_item.added", output_index=index, item=start)
                )
                events += [
                    seq.event("response.function_call_arguments.delta", **at, delta=piece)
                    for piece in _split(item["arguments"])
                ]
                events.append(
                    seq.event(
                        "response.function_call_arguments.done", **at, arguments=item["arguments"]
                    )
                )
            else:
                events.append(
                    seq.event("response.output_item.added", output_index=index, item=item)
                )
            events.append(seq.event("response.output_item.done", output_index=index, item=item))
        final = self.response()
        events.append(seq.event(f"response.{final['status']}", response=final))
        return events


def _part_events(
    seq: _Sequence, at: Mapping[str, Any], n: int, whole: Mapping[str, Any]
) -> list[bytes]:
    """A message's content part streamed: added, its deltas, done (text or refusal)."""
    field = "refusal" if whole["type"] == "refusal" else "text"
    name = "refusal" if field == "refusal" else "output_text"
    said = str(whole[field])
    part = {**whole, field: ""}
    return [
        seq.event("response.content_part.added", **at, content_index=n, part=part),
        *(
            seq.event(f"response.{name}.delta", **at, content_index=n, delta=piece)
            for piece in _split(said)
        ),
        seq.event(f"response.{name}.done", **at, content_index=n, **{field: said}),
        seq.event("response.content_part.done", **at, content_index=n, part=dict(whole)),
    ]


def failed_response(answer: Answer, error: Any) -> dict[str, Any]:
    """A 200 body whose response failed: ``status: failed`` with ``error``."""
    return answer.response("failed", error=error)


def failed_events(answer: Answer, error: Any) -> list[bytes]:
    """A stream that starts, then ends in ``response.failed`` carrying ``error``."""
    seq = _Sequence()
    return [
        seq.event("response.created", response=answer.response("in_progress")),
        seq.event("response.failed", response=failed_response(answer, error)),
    ]


def error_event(error: Any, sequence_number: int) -> bytes:
    """A stream's ``error`` event for an error object (its ``type`` read as the code when
    it names no code)."""
    fields = dict(error) if isinstance(error, Mapping) else {"message": str(error)}
    code = fields.get("code") or fields.get("type")
    payload = {"code": code, "message": fields.get("message"), "param": fields.get("param")}
    return _sse("error", {"type": "error", **payload, "sequence_number": sequence_number})


def input_error(payload: Any) -> str | None:
    """What OpenAI answers 400 about in a request's items handed back, or None.

    Its pairing rule, as the API words it: a reasoning item must be followed at once by
    an item of the same answer (here, an id naming the same request: ``rs_X`` by
    ``msg_X`` or ``fc_X_i``), and an answer's message or call handed back with its id
    needs that answer's reasoning item before it.
    """
    items = payload.get("input") if isinstance(payload, Mapping) else None
    if not isinstance(items, list):
        return None
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        item_id, itype = str(item.get("id") or ""), item.get("type")
        answer = _answer_of(item_id)
        if itype == "reasoning":
            nxt = items[i + 1] if i + 1 < len(items) else None
            following = str(nxt.get("id") or "") if isinstance(nxt, Mapping) else ""
            if _answer_of(following) != answer or following.startswith("rs_"):
                return (
                    f"Item '{item_id}' of type 'reasoning' was provided without its "
                    "required following item."
                )
            seen.add(answer)
        elif answer and itype in ("message", "function_call") and answer not in seen:
            return (
                f"Item '{item_id}' of type '{itype}' was provided without its required "
                f"'reasoning' item: 'rs_{answer}'."
            )
    return None


def _answer_of(item_id: str) -> str:
    """The request an item id of this server names (``rs_``/``msg_``/``fc_`` ids), or ""."""
    for prefix in ("rs_", "msg_", "fc_"):
        if item_id.startswith(prefix):
            rest = item_id[len(prefix) :]
            return rest.rsplit("_", 1)[0] if prefix == "fc_" else rest
    return ""


def chat_messages(payload: Any) -> list[dict[str, Any]]:
    """A Responses request's ``instructions`` and ``input`` as chat messages: role
    messages kept, ``function_call`` items as an assistant's tool calls,
    ``function_call_output`` items as tool messages, reasoning items left out."""
    if not isinstance(payload, Mapping):
        return []
    out: list[dict[str, Any]] = []
    if isinstance(payload.get("instructions"), str):
        out.append({"role": "system", "content": payload["instructions"]})
    items = payload.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping):
            continue
        itype = item.get("type")
        if itype == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            last = out[-1] if out else None
            if last is not None and last.get("role") == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif itype == "function_call_output":
            out.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output")}
            )
        elif "role" in item and itype in (None, "message"):
            out.append({"role": item["role"], "content": _text(item.get("content"))})
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        str(part.get("text") or "")
        for part in content or ()
        if isinstance(part, Mapping) and part.get("type") in ("input_text", "output_text")
    )


class _Sequence:
    """Numbers a stream's events (``sequence_number``), as the API does."""

    def __init__(self) -> None:
        self.n = 0

    def event(self, etype: str, **fields: Any) -> bytes:
        data = _sse(etype, {"type": etype, **fields, "sequence_number": self.n})
        self.n += 1
        return data


def _sse(event: str, obj: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(obj)}\n\n".encode()


def _split(text: str, parts: int = 3) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]
