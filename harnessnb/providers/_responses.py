"""OpenAI's Responses API: the wire format behind ``OpenAI(model, api="responses")``.

``POST {base_url}/responses``. Normalised messages become ``input`` items: system and
user text as role messages, an assistant's tool calls as ``function_call`` items, tool
results as ``function_call_output`` items. An answer that reasoned is handed back as
the output items it came as (``Completion.output_items``, on its assistant message):
the API pairs each reasoning item with the item that followed it, by id, and refuses a
reasoning item without it (or a message or call without its reasoning). Function tools
are sent with ``strict: false`` (the API's default is strict, which refuses most
hand-written schemas).

A typed answer (``output=``) is asked in ``text.format`` (``text_format``: ``type
json_schema``, ``name``, ``schema``, ``strict``). The answer's ``output`` items are read
back: ``message`` text (a ``refusal`` content part is ``Parsed.refusal``, and read as
its text too, like chat; streamed as ``response.refusal.delta``), ``function_call``
items as tool calls keyed by their ``call_id``, and every item kept as sent when one
is a ``reasoning`` item. A response whose ``status`` is ``failed`` (a 200 body, or a
stream's ``response.failed``) and a stream's ``error`` event are classified by their
error object like any other body error; ``incomplete`` for the token cap
(``incomplete_details.reason`` ``max_output_tokens``) is finish reason ``length``.
Finish reasons are the chat vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ._completion import Messages, OutputSchema, ToolCall, ToolSpecs, Usage
from ._wire import (
    Parsed,
    StreamAccumulator,
    WireError,
    json_object,
    schema_name,
    token_count,
    tool_arguments,
)

__all__ = ["ResponsesStream", "parse_response", "request_body", "text_format"]

_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def request_body(
    model: str, messages: Messages, tools: ToolSpecs, max_tokens: int | None, stream: bool
) -> dict[str, Any]:
    """The ``POST /responses`` body for a normalised conversation."""
    body: dict[str, Any] = {"model": model, "input": input_items(messages)}
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t.get("parameters") or {"type": "object", "properties": {}},
                "strict": False,
            }
            for t in tools
        ]
    if max_tokens is not None:
        body["max_output_tokens"] = max_tokens
    if stream:
        body["stream"] = True
    return body


def text_format(output: OutputSchema) -> dict[str, Any]:
    """The ``text.format`` asking for an answer in ``output``'s JSON Schema."""
    return {
        "type": "json_schema",
        "name": schema_name(output.name),
        "schema": dict(output.schema),
        "strict": output.strict,
    }


def input_items(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalised messages as Responses ``input`` items."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        content = m.get("content") or ""
        if role == "tool":
            out.append(
                {"type": "function_call_output", "call_id": m["tool_call_id"], "output": content}
            )
        elif role == "assistant" and m.get("output_items"):
            out += [_kept(item) for item in m["output_items"]]
        elif role == "assistant":
            if content:
                out.append({"role": "assistant", "content": content})
            out += [
                {
                    "type": "function_call",
                    "call_id": c["id"],
                    "name": c["name"],
                    "arguments": json.dumps(c.get("arguments") or {}),
                }
                for c in m.get("tool_calls") or ()
            ]
        else:
            out.append({"role": role, "content": content})
    return out


def _kept(item: Any) -> dict[str, Any]:
    """An output item as handed back: as received, less its null fields."""
    return {k: v for k, v in dict(item).items() if v is not None}


def parse_response(body: Any) -> Parsed:
    """A non-streamed 200 body (a response object) as an answer, or a ``WireError``."""
    if not isinstance(body, Mapping):
        raise WireError.malformed("200 body is not a response object")
    usage = _usage(body.get("usage"))
    _raise_if_failed(body, usage)
    output = body.get("output")
    if not isinstance(output, list):
        raise WireError.malformed("200 body has no output list", usage)
    return _read_output(output, usage, body)


def _raise_if_failed(response: Mapping[str, Any], usage: Usage | None) -> None:
    if response.get("status") == "failed" or response.get("error"):
        error = response.get("error") or {"message": "response failed with no error object"}
        err = WireError.from_error_object(error, "response failed")
        err.usage = usage  # a failed response may still have been billed
        raise err


def _read_output(output: list[Any], usage: Usage | None, response: Mapping[str, Any]) -> Parsed:
    text: list[str] = []
    refusal: list[str] = []
    calls: list[ToolCall] = []
    reasoned = False
    for i, item in enumerate(output):
        if not isinstance(item, Mapping):
            raise WireError.malformed("an output item is not an object", usage)
        itype = item.get("type")
        if itype == "message":
            for part in item.get("content") or ():
                if isinstance(part, Mapping):
                    piece = part.get("text") if part.get("type") == "output_text" else None
                    if part.get("type") == "refusal" and part.get("refusal"):
                        refusal.append(str(part["refusal"]))
                    piece = piece or part.get("refusal")
                    text.append(str(piece or ""))
        elif itype == "function_call":
            name = str(item.get("name") or "")
            call_id = str(item.get("call_id") or item.get("id") or f"call_{i}")
            calls.append(ToolCall(call_id, name, tool_arguments(item.get("arguments"), name)))
        elif itype == "reasoning":
            reasoned = True
    finish = "tool_calls" if calls else "stop"
    if response.get("status") == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        finish = _INCOMPLETE.get(str(reason), str(reason or "incomplete"))
    kept = tuple(dict(item) for item in output) if reasoned else ()
    said = "".join(refusal) or None
    return Parsed("".join(text), tuple(calls), usage, finish, kept, said)


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None  # not reported
    details = raw.get("input_tokens_details")
    cached = token_count(details, "cached_tokens") if isinstance(details, Mapping) else 0
    return Usage(
        token_count(raw, "input_tokens"),
        token_count(raw, "output_tokens"),
        cached_input_tokens=cached,
    )


class ResponsesStream(StreamAccumulator):
    """Responses stream events: text and argument deltas by output item, the final
    response from ``response.completed`` (or ``response.incomplete``)."""

    def __init__(self) -> None:
        self.items: dict[int, dict[str, Any]] = {}  # by output_index, as they complete
        self.final: Mapping[str, Any] | None = None

    def feed(self, event: str, data: str) -> bool:
        self.fresh = ""
        obj = json_object(data, f"stream event {event!r} is")
        etype = obj.get("type") or event
        if etype == "error" or event == "error":
            error = obj.get("error")
            if not isinstance(error, Mapping):  # the event is the error: {type, code, message}
                error = {k: v for k, v in obj.items() if k not in ("type", "sequence_number")}
            raise WireError.from_error_object(error, "error event in the stream")
        if etype in ("response.completed", "response.incomplete", "response.failed"):
            response = obj.get("response")
            if not isinstance(response, Mapping):
                raise WireError.malformed(f"{etype} event carries no response")
            if etype == "response.failed":
                _raise_if_failed({**response, "status": "failed"}, _usage(response.get("usage")))
            self.final = response
            self.done = True
            return False
        if etype in ("response.output_text.delta", "response.refusal.delta"):
            piece = obj.get("delta")
            item = self._item(obj, "message")
            if isinstance(piece, str) and piece:
                field = "refusal" if etype == "response.refusal.delta" else "text"
                item[field] = item.get(field, "") + piece
                self.fresh = piece
                return True
            return False
        if etype == "response.function_call_arguments.delta":
            item = self._item(obj, "function_call")
            item["arguments"] = item.get("arguments", "") + str(obj.get("delta") or "")
            return True
        if etype in ("response.output_item.added", "response.output_item.done"):
            whole = obj.get("item")
            if isinstance(whole, Mapping):
                index = int(obj.get("output_index", len(self.items)))
                started = self.items.get(index, {})
                self.items[index] = {**started, **whole}
                return whole.get("type") == "function_call" and etype.endswith("added")
        return False

    def _item(self, obj: Mapping[str, Any], itype: str) -> dict[str, Any]:
        index = int(obj.get("output_index", 0))
        return self.items.setdefault(index, {"type": itype})

    def result(self) -> Parsed:
        if not self.done or self.final is None:
            raise WireError.malformed("stream ended before response.completed")
        usage = _usage(self.final.get("usage"))
        output = self.final.get("output")
        if not isinstance(output, list) or not output:
            # A final event that left its output out: the items the stream brought.
            output = [self._whole(item) for _, item in sorted(self.items.items())]
        return _read_output(output, usage, self.final)

    @staticmethod
    def _whole(item: dict[str, Any]) -> dict[str, Any]:
        """An item assembled from deltas, in the shape a response's output has."""
        if item.get("type") == "message" and ("text" in item or "refusal" in item):
            whole = {k: v for k, v in item.items() if k not in ("text", "refusal")}
            if not whole.get("content"):
                parts = [{"type": "output_text", "text": item["text"]}] if "text" in item else []
                if "refusal" in item:
                    parts.append({"type": "refusal", "refusal": item["refusal"]})
                whole["content"] = parts
            return whole
        return item
