"""Anthropic messages API: ``Anthropic``.

Normalised messages become Anthropic's shape here: system prompts go to the
top-level ``system`` field, tool calls and results become ``tool_use`` and
``tool_result`` blocks, and consecutive user-side messages (tool results, then
maybe text) merge into one user message, because the API wants roles to alternate.
Stop reasons are mapped onto the OpenAI vocabulary so every provider's
``Completion.finish_reason`` reads the same (``max_tokens`` is ``length``).

Typed answers: ``complete(output=OutputSchema(...))`` sends ``output_config``
``{"format": {"type": "json_schema", "schema": ...}}`` (Anthropic's structured outputs;
the schema's name is not sent). ``stop_reason: "refusal"`` is finish reason
``content_filter`` and ``Completion.refusal``: the answer's text, or ``REFUSED`` when it
said nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._completion import Messages, OutputSchema, ToolCall, ToolSpecs, Usage
from ._http import HTTPProvider
from ._wire import Parsed, StreamAccumulator, WireError, json_object, token_count, tool_arguments

__all__ = ["Anthropic"]

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
"""Sent when ``complete(max_tokens=None)``: the messages API requires a value."""

REFUSED = "the model refused (stop_reason: refusal)"
"""``Completion.refusal`` of a refusal that came with no text."""

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


class Anthropic(HTTPProvider):
    """Anthropic's messages API (``{base_url}/v1/messages``).

    With no ``base_url`` the key defaults to ``$ANTHROPIC_API_KEY``.
    """

    NAME, PATH, ENV = "anthropic", "/v1/messages", "ANTHROPIC"
    DEFAULT_BASE_URL, DEFAULT_MODEL = "https://api.anthropic.com", "claude-sonnet-4-5"

    @property
    def native_output(self) -> bool:
        """True: the messages API answers in a JSON Schema (``output_config.format``)."""
        return True

    def _with_output(self, body: dict[str, Any], output: OutputSchema) -> dict[str, Any]:
        schema_format = {"type": "json_schema", "schema": dict(output.schema)}
        return {**body, "output_config": {"format": schema_format}}

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def _request_body(
        self, messages: Messages, tools: ToolSpecs, max_tokens: int | None, stream: bool
    ) -> dict[str, Any]:
        system, wire = _wire_messages(messages)
        body: dict[str, Any] = {
            "model": self._model,
            "max_tokens": max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS,
            "messages": wire,
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {
                    "name": t["name"],
                    "description": t.get("description", ""),
                    "input_schema": t.get("parameters") or {"type": "object", "properties": {}},
                }
                for t in tools
            ]
        if stream:
            body["stream"] = True
        return body

    def _parse_body(self, body: Any) -> Parsed:
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in body.get("content") or ():
            btype = block.get("type")
            if btype == "text":
                text.append(block.get("text") or "")
            elif btype == "tool_use":
                args = block.get("input")
                if not isinstance(args, dict):
                    raise WireError.malformed(
                        f"tool call {block.get('name')!r} input is not an object"
                    )
                calls.append(ToolCall(id=str(block["id"]), name=block["name"], arguments=args))
        said = "".join(text)
        refusal = _refusal(body.get("stop_reason"), said)
        return Parsed(said, tuple(calls), _usage(body.get("usage")), _stop(body), refusal=refusal)

    def _stream_accumulator(self) -> StreamAccumulator:
        return _MessageStream()


def _refusal(stop_reason: Any, text: str) -> str | None:
    """What a ``refusal`` stop says (its text, or ``REFUSED``); None for any other stop."""
    return (text.strip() or REFUSED) if stop_reason == "refusal" else None


def _stop(body: Mapping[str, Any]) -> str | None:
    reason = body.get("stop_reason")
    return _STOP_REASONS.get(reason, reason) if isinstance(reason, str) else None


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None  # not reported
    # Cached prompt tokens are reported apart from input_tokens; they were still read.
    inp = sum(
        token_count(raw, k)
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    return Usage(inp, token_count(raw, "output_tokens"))


def _wire_messages(messages: Sequence[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        role = m["role"]
        content = m.get("content") or ""
        if role == "system":
            system.append(content)
        elif role == "tool":
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": m["tool_call_id"],
                        "content": content,
                    }
                ],
            )
        elif role == "assistant":
            # An empty text block is rejected by the API, so it is left out.
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
            blocks += [
                {
                    "type": "tool_use",
                    "id": c["id"],
                    "name": c["name"],
                    "input": c.get("arguments") or {},
                }
                for c in m.get("tool_calls") or ()
            ]
            add("assistant", blocks)
        else:
            add("user", [{"type": "text", "text": content}])
    return "\n\n".join(s for s in system if s), out


class _MessageStream(StreamAccumulator):
    """Message stream events: content blocks by index, input JSON in fragments."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.input_usage: Any = None
        self.output_tokens: int | None = None  # None: no event reported it
        self.stop_reason: str | None = None
        self.refused = False

    def feed(self, event: str, data: str) -> bool:
        self.fresh = ""
        obj = json_object(data, f"stream event {event!r} is")
        etype = obj.get("type") or event
        if etype == "error" or event == "error":
            raise WireError.from_error_object(obj.get("error", obj), "error event in the stream")
        if etype == "message_start":
            message = obj.get("message") or {}
            self.input_usage = message.get("usage")
            started = _usage(self.input_usage)
            self.output_tokens = None if started is None else started.output_tokens
        elif etype == "content_block_start":
            block: dict[str, Any] = dict(obj.get("content_block") or {})
            block["partial"] = ""
            self.blocks[int(obj.get("index", 0))] = block
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                self.fresh = block["text"]
            return bool(block.get("type") == "tool_use" or block.get("text"))
        elif etype == "content_block_delta":
            found = self.blocks.get(int(obj.get("index", 0)))
            if found is None:
                raise WireError.malformed("stream delta for a content block never started")
            delta = obj.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                piece = delta.get("text") or ""
                found["text"] = (found.get("text") or "") + piece
                self.fresh = piece
                return True
            if dtype == "input_json_delta":
                found["partial"] += delta.get("partial_json") or ""
                return True
        elif etype == "message_delta":
            reason = (obj.get("delta") or {}).get("stop_reason")
            if reason:
                self.stop_reason = _STOP_REASONS.get(reason, reason)
                self.refused = reason == "refusal"
            usage = obj.get("usage")
            if isinstance(usage, Mapping) and usage.get("output_tokens") is not None:
                self.output_tokens = token_count(usage, "output_tokens")  # cumulative
        elif etype == "message_stop":
            self.done = True
        return False

    def result(self) -> Parsed:
        if not self.done:
            raise WireError.malformed("stream ended before message_stop")
        text: list[str] = []
        calls: list[ToolCall] = []
        for _, block in sorted(self.blocks.items()):
            if block.get("type") == "text":
                text.append(block.get("text") or "")
            elif block.get("type") == "tool_use":
                name = str(block.get("name"))
                start_input = block.get("input")
                if block["partial"]:
                    args = tool_arguments(block["partial"], name)
                elif isinstance(start_input, dict):
                    args = start_input
                else:
                    args = {}
                calls.append(ToolCall(id=str(block.get("id")), name=name, arguments=args))
        started = _usage(self.input_usage)
        usage = (
            None
            if started is None and self.output_tokens is None
            else Usage(0 if started is None else started.input_tokens, self.output_tokens or 0)
        )
        said = "".join(text)
        refusal = _refusal("refusal" if self.refused else None, said)
        return Parsed(said, tuple(calls), usage, self.stop_reason, refusal=refusal)
