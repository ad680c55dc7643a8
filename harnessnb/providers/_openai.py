"""OpenAI chat completions: ``OpenAI`` (and any compatible server) and ``OpenRouter``.

Finish reasons are kept as the protocol sends them (``stop``, ``tool_calls``,
``length``, ``content_filter``); the Anthropic provider maps its own onto these.

Typed answers: ``complete(output=OutputSchema(...))`` sends ``response_format``
``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`` (the Responses
API its own ``text.format``). A refusal (``message.refusal``, streamed as
``delta.refusal``) is ``Completion.refusal``, and stays the answer's text too, as before.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Unpack

from ..rules._errors import ConfigError
from ..rules._renamed import renamed
from ._completion import Messages, OutputSchema, ToolCall, ToolSpecs, Usage
from ._http import _TIMEOUT_RENAMES, REQUEST_TIMEOUT_S, HTTPOptions, HTTPProvider
from ._responses import ResponsesStream, parse_response, request_body, text_format
from ._wire import (
    Parsed,
    StreamAccumulator,
    WireError,
    json_object,
    schema_name,
    token_count,
    tool_arguments,
)

__all__ = ["API", "OpenAI", "OpenRouter"]

API = Literal["chat", "responses"]
"""Which OpenAI API a provider speaks: chat completions or the Responses API."""


@renamed(**_TIMEOUT_RENAMES)
class OpenAI(HTTPProvider):
    """OpenAI chat completions, or any OpenAI-compatible server via ``base_url``.

    A local server (vLLM, llama.cpp, Ollama) is
    ``OpenAI(model, base_url="http://127.0.0.1:8000/v1")`` and needs no key.
    With no ``base_url`` the key defaults to ``$OPENAI_API_KEY``.

    ``name=`` (every HTTP provider takes it; default ``NAME``, here ``openai``) is what
    attempt rows, runs and failure tables call it: name your own server
    (``name="local"``, as ``--provider local`` does) so its failures stay apart from
    the official host's. Every attempt row also keeps its ``base_url``.

    ``api="responses"`` speaks OpenAI's Responses API (``POST {base_url}/responses``:
    ``providers/_responses.py``), the recommended choice for OpenAI itself (an answer's
    reasoning items are handed back between turns); chat completions (``api="chat"``) stay the
    default, the API every OpenAI-compatible server speaks. A Responses provider is
    named ``openai-responses`` unless ``name=`` says otherwise, so its failures count
    apart from chat's.

    Native typed answers (``native_output``) on both APIs: ``response_format``
    ``json_schema`` on chat completions, ``text.format`` on the Responses API. A local
    server is asked the same way: vLLM, llama.cpp's server and Ollama read chat's
    ``response_format`` ``json_schema`` (a server that does not answers 400, and a typed
    run falls back to its next mode).
    """

    NAME, PATH, ENV = "openai", "/chat/completions", "OPENAI"
    DEFAULT_BASE_URL, DEFAULT_MODEL = "https://api.openai.com/v1", "gpt-4o-mini"
    RESPONSES_PATH, RESPONSES_NAME = "/responses", "openai-responses"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float | datetime.timedelta = REQUEST_TIMEOUT_S,
        *,
        api: API = "chat",
        **options: Unpack[HTTPOptions],
    ) -> None:
        if api not in ("chat", "responses"):
            raise ConfigError(f"{self.NAME}: api must be 'chat' or 'responses', not {api!r}")
        self._api: API = api
        if api == "responses" and not options.get("name"):
            options["name"] = self.RESPONSES_NAME
        super().__init__(model, api_key, base_url, timeout_s, **options)

    @property
    def api(self) -> API:
        """The API this provider speaks: ``chat`` or ``responses``."""
        return self._api

    @property
    def native_output(self) -> bool:
        """True: both APIs answer in a JSON Schema (``response_format`` / ``text.format``)."""
        return True

    def _with_output(self, body: dict[str, Any], output: OutputSchema) -> dict[str, Any]:
        if self._api == "responses":
            return {**body, "text": {"format": text_format(output)}}
        json_schema = {
            "name": schema_name(output.name),
            "schema": dict(output.schema),
            "strict": output.strict,
        }
        return {**body, "response_format": {"type": "json_schema", "json_schema": json_schema}}

    def _path(self) -> str:
        return self.RESPONSES_PATH if self._api == "responses" else self.PATH

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _max_tokens_field(self) -> str:
        # api.openai.com rejects max_tokens for its reasoning models; compatible
        # servers (vLLM, llama.cpp, Ollama, OpenRouter) all read max_tokens.
        return "max_completion_tokens" if "api.openai.com" in self.hosts() else "max_tokens"

    def _request_body(
        self, messages: Messages, tools: ToolSpecs, max_tokens: int | None, stream: bool
    ) -> dict[str, Any]:
        if self._api == "responses":
            return request_body(self._model, messages, tools, max_tokens, stream)
        body: dict[str, Any] = {"model": self._model, "messages": _wire_messages(messages)}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t["name"],
                        "description": t.get("description", ""),
                        "parameters": t.get("parameters") or {"type": "object", "properties": {}},
                    },
                }
                for t in tools
            ]
        if max_tokens is not None:
            body[self._max_tokens_field()] = max_tokens
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _parse_body(self, body: Any) -> Parsed:
        if self._api == "responses":
            return parse_response(body)
        choices = body.get("choices")
        usage = _usage(body.get("usage"))
        if not choices:
            raise WireError.malformed("200 body has no choice", usage)
        choice = choices[0]
        message = choice.get("message") or {}
        refusal = message.get("refusal")
        refusal = str(refusal) if refusal else None
        text = message.get("content") or refusal or ""
        calls = tuple(
            ToolCall(
                id=str(c.get("id") or f"call_{i}"),
                name=c["function"]["name"],
                arguments=tool_arguments(c["function"].get("arguments"), c["function"]["name"]),
            )
            for i, c in enumerate(message.get("tool_calls") or ())
        )
        return Parsed(str(text), calls, usage, choice.get("finish_reason"), refusal=refusal)

    def _stream_accumulator(self) -> StreamAccumulator:
        return ResponsesStream() if self._api == "responses" else _ChatStream()


@renamed(**_TIMEOUT_RENAMES)
class OpenRouter(OpenAI):
    """OpenRouter: OpenAI-compatible, errors often inside 200 bodies and streams.

    Args:
        app_url: Sent as ``HTTP-Referer`` (OpenRouter's app attribution), optional.
        app_name: Sent as ``X-Title``, optional (``headers=`` of the same name win).

    Every other argument is ``OpenAI``'s: the keywords are handed on as they are
    (``_http.HTTPOptions``).
    """

    NAME, ENV = "openrouter", "OPENROUTER"
    DEFAULT_BASE_URL, DEFAULT_MODEL = "https://openrouter.ai/api/v1", "openai/gpt-4o-mini"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float | datetime.timedelta = REQUEST_TIMEOUT_S,
        *,
        app_url: str | None = None,
        app_name: str | None = None,
        **options: Unpack[HTTPOptions],
    ) -> None:
        app = {"HTTP-Referer": app_url, "X-Title": app_name}
        attribution = {header: value for header, value in app.items() if value}
        options["headers"] = {**attribution, **(options.get("headers") or {})}
        super().__init__(model, api_key, base_url, timeout_s, **options)


def _wire_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "assistant" and m.get("tool_calls"):
            out.append(
                {
                    "role": "assistant",
                    "content": m.get("content") or None,
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {
                                "name": c["name"],
                                "arguments": json.dumps(c.get("arguments") or {}),
                            },
                        }
                        for c in m["tool_calls"]
                    ],
                }
            )
        elif role == "tool":
            out.append(
                {"role": "tool", "tool_call_id": m["tool_call_id"], "content": m.get("content", "")}
            )
        else:
            out.append({"role": role, "content": m.get("content", "")})
    return out


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None  # not reported
    return Usage(token_count(raw, "prompt_tokens"), token_count(raw, "completion_tokens"))


class _ChatStream(StreamAccumulator):
    """Chat-completion chunks: text deltas, tool calls in fragments keyed by index."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.saw_choice = False

    def feed(self, event: str, data: str) -> bool:
        self.fresh = ""
        if data.strip() == "[DONE]":
            self.done = True
            return False
        chunk = json_object(data, "stream event is")
        if chunk.get("error") is not None:
            raise WireError.from_error_object(chunk["error"], "error event in the stream")
        if chunk.get("usage"):
            self.usage = _usage(chunk["usage"])
        carried = False
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            self.saw_choice = True
            delta = choice.get("delta") or {}
            refused = delta.get("refusal")
            if refused:
                self.refusal.append(str(refused))
            piece = delta.get("content") or refused
            if piece:
                self.text.append(piece)
                self.fresh += piece
                carried = True
            for frag in delta.get("tool_calls") or ():
                carried = True
                call = self.calls.setdefault(
                    int(frag.get("index", 0)), {"id": "", "name": "", "arguments": ""}
                )
                if frag.get("id"):
                    call["id"] = frag["id"]
                fn = frag.get("function") or {}
                # Concatenate like the official SDK's delta accumulator does.
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return carried

    def result(self) -> Parsed:
        if not self.done and self.finish_reason is None:
            raise WireError.malformed("stream ended before its last chunk")
        if not self.saw_choice:
            raise WireError.malformed("stream carried no choice", self.usage)
        calls = tuple(
            ToolCall(
                id=c["id"] or f"call_{i}",
                name=c["name"],
                arguments=tool_arguments(c["arguments"], c["name"]),
            )
            for i, c in sorted(self.calls.items())
        )
        refusal = "".join(self.refusal) or None
        return Parsed("".join(self.text), calls, self.usage, self.finish_reason, refusal=refusal)
