"""Google Gemini's own API: ``Gemini`` (``generateContent`` and
``streamGenerateContent?alt=sse``).

Normalised messages become Gemini's ``contents``: the system prompt goes to
``systemInstruction``, the assistant is the ``model`` role, tool calls and results are
``functionCall`` and ``functionResponse`` parts, and consecutive turns of one role merge
into one. The key goes in the ``x-goog-api-key`` header, never the URL.

Answers Gemini sends with nothing usable are failures, classified here:

* a prompt blocked before any candidate (``promptFeedback.blockReason``) is ``request``
  (not retryable; the block reason in the message);
* a candidate that ended ``SAFETY``, ``RECITATION`` (or another block) with no content
  is ``request``; one that ended ``MAX_TOKENS`` with no content is ``malformed`` (a
  retry may answer).

Error statuses are read with ``rules._classify.read_google_error``: the body's status
word decides the kind, ``RetryInfo.retryDelay`` is the wait when no header says one,
and a ``QuotaFailure`` naming a per-day or per-month limit is not retryable.

Thought signatures: a function call's ``thoughtSignature`` (Gemini 3 sends one and
refuses a next turn without it, HTTP 400) is kept by the provider object, by call id,
and sent back verbatim with that call. A call whose signature this object never saw (a
resumed run in a new process, a turn another provider made under ``hn.Fallback``) is
sent with Google's documented stand-in, ``skip_thought_signature_validator``, on the
first call of its turn, except to the Gemini 1 and 2 models, which need none.

Finish reasons are mapped onto the OpenAI vocabulary (``stop``, ``tool_calls``,
``length``, ``content_filter``) like the other providers'; ``MAX_TOKENS`` with content
is ``length`` (``Completion.truncated``).

Typed answers: ``complete(output=OutputSchema(...))`` sets ``generationConfig``'s
``responseMimeType: "application/json"`` and ``responseJsonSchema`` (the JSON Schema as
given, which is what the ``google-genai`` SDK sends for ``response_json_schema=``; its
``response_schema=`` is Google's OpenAPI subset, ``responseSchema``, not used here).
Gemini has no refusal of its own: a candidate stopped for ``SAFETY`` stays the
``request`` failure above.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self, Unpack
from urllib.parse import quote

import httpx2

from ..rules._classify import ErrorReading, ProviderErrorKind, read_google_error
from ..rules._errors import ConfigError
from ..rules._renamed import renamed
from ._completion import Messages, OutputSchema, ToolCall, ToolSpecs, Usage
from ._http import (
    _TIMEOUT_RENAMES,
    DEFAULT_IDLE_TIMEOUT,
    REQUEST_TIMEOUT_S,
    HTTPOptions,
    HTTPProvider,
)
from ._wire import Parsed, StreamAccumulator, WireError, json_object, token_count

__all__ = ["Gemini"]

API_VERSION = "v1"
"""The API version asked by default: the stable one, as the ``google-genai`` SDK asks."""
KEY_ENVS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
"""Where the key is read from when none is passed, in this order."""

# Finish reasons of a candidate that was stopped for what it said.
_BLOCKED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "LANGUAGE",
    }
)
_FINISH = {"STOP": "stop", "MAX_TOKENS": "length", **{r: "content_filter" for r in _BLOCKED}}
_VERSION = re.compile(r"v\d+(?:alpha|beta)?\d*")
_CALL_PREFIX = "gemini_call_"  # an id harnessnb made up: Gemini sent none
SIGNATURE_STAND_IN = "skip_thought_signature_validator"
"""Sent for a call whose signature is unknown (Google's documented dummy value)."""
_KEPT_SIGNATURES = 1024  # per provider object; the oldest go first
_UNSIGNED_MODELS = re.compile(r"(models/)?gemini-[12](\.|-)")  # no signature needed


def _env(var: str) -> str | None:
    value = os.environ.get(var, "").strip()
    return value or None


@renamed(**_TIMEOUT_RENAMES)
class Gemini(HTTPProvider):
    """Google Gemini's API (``{base_url}/v1/models/{model}:generateContent``).

    With no ``base_url`` the key defaults to ``$GEMINI_API_KEY``, else
    ``$GOOGLE_API_KEY``; it is sent in the ``x-goog-api-key`` header, never the URL.
    ``base_url`` is the server root, as the ``google-genai`` SDK's ``base_url`` is;
    ``api_version`` (``v1``, or ``v1beta`` for early features) as the SDK's
    ``http_options``. Every other argument is ``HTTPProvider``'s.
    """

    NAME, PATH, ENV = "gemini", "", "GEMINI"
    DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
    DEFAULT_MODEL = "gemini-2.5-flash"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float | datetime.timedelta = REQUEST_TIMEOUT_S,
        *,
        api_version: str = API_VERSION,
        **options: Unpack[HTTPOptions],
    ) -> None:
        if not api_key and base_url is None:
            api_key = next((k for k in map(_env, KEY_ENVS) if k), None)
        super().__init__(model, api_key, base_url, timeout_s, **options)
        if not _VERSION.fullmatch(api_version):
            raise ConfigError(
                f"gemini: api_version must look like v1 or v1beta, not {api_version!r}"
            )
        # "models/gemini-2.5-flash" (as the API lists them) names the same model.
        name = quote(self._model.removeprefix("models/"), safe="-._~")
        root = f"{self._url}/{api_version}/models/{name}"
        self._signatures: dict[str, str] = {}  # tool call id -> its thoughtSignature
        self._urls = (
            httpx2.URL(f"{root}:generateContent"),
            httpx2.URL(f"{root}:streamGenerateContent?alt=sse"),
        )

    @classmethod
    def from_env(
        cls,
        model: str | None = None,
        *,
        timeout_s: float | datetime.timedelta = REQUEST_TIMEOUT_S,
        idle_timeout_s: float | datetime.timedelta = DEFAULT_IDLE_TIMEOUT,
        stream: bool = True,
    ) -> Self:
        """Configure from the environment: the key from ``$GEMINI_API_KEY`` or
        ``$GOOGLE_API_KEY``, ``$GEMINI_BASE_URL`` and ``$GEMINI_MODEL`` as for every
        provider (``HTTPProvider.from_env``)."""
        if _env(cls.KEY_ENV) is None and (key := _env("GOOGLE_API_KEY")) is not None:
            return cls(
                model or _env(cls.MODEL_ENV) or cls.DEFAULT_MODEL,
                api_key=key,
                base_url=_env(cls.BASE_URL_ENV),
                timeout_s=timeout_s,
                idle_timeout_s=idle_timeout_s,
                stream=stream,
            )
        return super().from_env(
            model, timeout_s=timeout_s, idle_timeout_s=idle_timeout_s, stream=stream
        )

    @property
    def native_output(self) -> bool:
        """True: ``generateContent`` answers in a JSON Schema (``responseJsonSchema``)."""
        return True

    def _with_output(self, body: dict[str, Any], output: OutputSchema) -> dict[str, Any]:
        config = {
            **(body.get("generationConfig") or {}),
            "responseMimeType": "application/json",
            "responseJsonSchema": dict(output.schema),
        }
        return {**body, "generationConfig": config}

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"x-goog-api-key": api_key} if api_key else {}

    def _url_for(self, stream: bool) -> httpx2.URL:
        return self._urls[1] if stream else self._urls[0]

    def _read_error(self) -> Callable[[Any, int], ErrorReading]:
        return read_google_error

    def _request_body(
        self, messages: Messages, tools: ToolSpecs, max_tokens: int | None, stream: bool
    ) -> dict[str, Any]:
        stand_in = None if _UNSIGNED_MODELS.match(self._model) else SIGNATURE_STAND_IN
        system, contents = _wire_contents(messages, self._signatures, stand_in)
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        if tools:
            body["tools"] = [
                {
                    "functionDeclarations": [
                        {
                            "name": t["name"],
                            "description": t.get("description", ""),
                            "parametersJsonSchema": t.get("parameters")
                            or {"type": "object", "properties": {}},
                        }
                        for t in tools
                    ]
                }
            ]
        if max_tokens is not None:
            body["generationConfig"] = {"maxOutputTokens": max_tokens}
        return body

    def _parse_body(self, body: Any) -> Parsed:
        acc = _ContentStream(self._signatures)
        acc.take(body)
        return acc.answer()

    def _stream_accumulator(self) -> StreamAccumulator:
        return _ContentStream(self._signatures)


def _wire_contents(
    messages: Sequence[dict[str, Any]], signatures: Mapping[str, str], stand_in: str | None
) -> tuple[str, list[dict[str, Any]]]:
    system: list[str] = []
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id -> its function's name

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})

    for m in messages:
        role = m["role"]
        content = m.get("content") or ""
        if role == "system":
            system.append(content)
        elif role == "assistant":
            parts: list[dict[str, Any]] = [{"text": content}] if content else []
            for n, c in enumerate(m.get("tool_calls") or ()):
                names[c["id"]] = c["name"]
                call: dict[str, Any] = {"name": c["name"], "args": c.get("arguments") or {}}
                if not str(c["id"]).startswith(_CALL_PREFIX):
                    call["id"] = c["id"]
                part: dict[str, Any] = {"functionCall": call}
                signature = signatures.get(c["id"]) or (stand_in if n == 0 else None)
                if signature:
                    part["thoughtSignature"] = signature
                parts.append(part)
            add("model", parts)
        elif role == "tool":
            cid = str(m.get("tool_call_id") or "")
            reply: dict[str, Any] = {
                "name": names.get(cid) or str(m.get("name") or ""),
                "response": {"result": content},
            }
            if cid and not cid.startswith(_CALL_PREFIX):
                reply["id"] = cid
            add("user", [{"functionResponse": reply}])
        else:
            add("user", [{"text": content}])
    return "\n\n".join(s for s in system if s), out


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None  # not reported
    # Thinking is billed as output; a tool's prompt (the built-in tools') as input.
    inp = token_count(raw, "promptTokenCount") + token_count(raw, "toolUsePromptTokenCount")
    out = token_count(raw, "candidatesTokenCount") + token_count(raw, "thoughtsTokenCount")
    return Usage(inp, out, cached_input_tokens=token_count(raw, "cachedContentTokenCount"))


class _ContentStream(StreamAccumulator):
    """``GenerateContentResponse`` chunks: text parts are pieces, function calls whole,
    usage and the finish reason on the last chunk. A whole answer is one chunk.

    ``done`` (the attempt stops reading) once the finish reason and the output token
    count are in; a stream that ends after a finish reason is whole either way."""

    def __init__(self, signatures: dict[str, str]) -> None:
        self.signatures = signatures  # the provider's, filled with the calls' signatures
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.usage: Usage | None = None
        self.finish: str | None = None
        self.response_id = ""

    def feed(self, event: str, data: str) -> bool:
        self.fresh = ""
        return self.take(json_object(data, "stream event is"))

    def take(self, chunk: Mapping[str, Any]) -> bool:
        """Take one response object; True when it carried model output."""
        if chunk.get("error") is not None:
            raise WireError.from_error_object(
                chunk["error"], "error event in the stream", read_google_error
            )
        if chunk.get("usageMetadata") is not None:
            self.usage = _usage(chunk["usageMetadata"])
        self.response_id = str(chunk.get("responseId") or self.response_id)
        feedback = chunk.get("promptFeedback")
        block = feedback.get("blockReason") if isinstance(feedback, Mapping) else None
        if block:
            message = (feedback or {}).get("blockReasonMessage") or ""
            said = f": {str(message)[:200]}" if message else ""
            raise WireError(
                ProviderErrorKind.REQUEST, f"prompt blocked ({block}){said}", self.usage
            )
        carried = False
        for candidate in chunk.get("candidates") or ():
            if candidate.get("index", 0) != 0:
                continue
            for part in (candidate.get("content") or {}).get("parts") or ():
                if part.get("thought"):
                    continue  # a thought summary is not the answer
                if isinstance(part.get("text"), str) and part["text"]:
                    self.text.append(part["text"])
                    self.fresh += part["text"]
                    carried = True
                call = part.get("functionCall")
                if call is not None:
                    self.calls.append(self._call(call, part.get("thoughtSignature")))
                    carried = True
            if candidate.get("finishReason"):
                self.finish = str(candidate["finishReason"])
        # The stream has no end marker: it is complete once the finish reason and the
        # answer's token count are in (they share the last chunk); a finish without
        # that count reads on to the stream's end, so a usage chunk after it is billed.
        usage = chunk.get("usageMetadata")
        if self.finish is not None and isinstance(usage, Mapping):
            self.done = "candidatesTokenCount" in usage or "thoughtsTokenCount" in usage
        return carried

    def _call(self, call: Mapping[str, Any], signature: Any) -> ToolCall:
        name = str(call.get("name") or "")
        args = call.get("args")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise WireError.malformed(f"tool call {name!r} args are not an object")
        given = call.get("id")
        n = len(self.calls)
        made = f"{_CALL_PREFIX}{self.response_id}_{n}" if self.response_id else f"{_CALL_PREFIX}{n}"
        cid = str(given) if given else made
        if isinstance(signature, str) and signature:
            self.signatures[cid] = signature
            while len(self.signatures) > _KEPT_SIGNATURES:
                self.signatures.pop(next(iter(self.signatures)))
        return ToolCall(id=cid, name=name, arguments=args)

    def answer(self) -> Parsed:
        """The answer so far, or the failure an answer with nothing usable is."""
        finish = self.finish
        if not self.text and not self.calls and finish is not None:
            if finish in _BLOCKED:
                raise WireError(
                    ProviderErrorKind.REQUEST,
                    f"candidate blocked: finishReason {finish} with no content",
                    self.usage,
                )
            if finish == "MAX_TOKENS":
                raise WireError.malformed(
                    "finishReason MAX_TOKENS with no content (the cap was spent before any "
                    "answer, thinking included)",
                    self.usage,
                )
            if finish != "STOP":
                raise WireError.malformed(f"finishReason {finish} with no content", self.usage)
        reason = "tool_calls" if self.calls else _FINISH.get(finish or "", finish)
        return Parsed("".join(self.text), tuple(self.calls), self.usage, reason)

    def result(self) -> Parsed:
        if self.finish is None:
            raise WireError.malformed("stream ended before a finishReason", self.usage)
        return self.answer()
