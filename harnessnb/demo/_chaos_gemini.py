"""The chaos server's Gemini dialect: Google's ``generateContent`` and
``streamGenerateContent?alt=sse`` bodies, read and written.

``demo/_chaos.py`` routes ``/{version}/models/{model}:generateContent`` (and
``:streamGenerateContent``) here: a request's ``contents`` are read as OpenAI-shaped
messages (so the echo responder and the demo model read every protocol alike), and
answers, usage and errors are written as Gemini writes them. Plain data in and out:
this module knows nothing of the server.

Gemini's own failures, for ``Fault.status(..., body=google_error(...))``: a
``RetryInfo`` delay, a ``QuotaFailure`` naming a per-day limit, an ``ErrorInfo`` reason
(``API_KEY_INVALID``). ``Fault.blocked`` (a prompt blocked: ``promptFeedback``) and
``Fault.finish_empty`` (a candidate ended ``SAFETY``/``RECITATION``/``MAX_TOKENS`` with
no content) are rendered here.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "GEMINI_STATUSES",
    "blocked_prompt",
    "error_body",
    "gemini_chunks",
    "gemini_messages",
    "gemini_response",
    "gemini_route",
    "gemini_tools",
    "google_error",
    "thought_signature",
]

_ROUTE = re.compile(
    r".*/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)"
)

# HTTP status -> the canonical code Google's error object names, and its usual message.
GEMINI_STATUSES: Mapping[int, tuple[str, str]] = {
    400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
    401: ("UNAUTHENTICATED", "Request had invalid authentication credentials."),
    403: ("PERMISSION_DENIED", "The caller does not have permission."),
    404: ("NOT_FOUND", "Requested entity was not found."),
    429: ("RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."),
    500: ("INTERNAL", "An internal error has occurred."),
    503: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
    504: ("DEADLINE_EXCEEDED", "Deadline expired before operation could complete."),
}

_TYPE = "type.googleapis.com/google.rpc."


def gemini_route(path: str) -> tuple[str, bool] | None:
    """``(model, streamed)`` for a Gemini path, else None."""
    match = _ROUTE.fullmatch(path)
    if match is None:
        return None
    return match["model"], match["method"] == "streamGenerateContent"


def google_error(
    code: int,
    status: str | None = None,
    message: str | None = None,
    *,
    retry_delay: str | None = None,
    quota_id: str | None = None,
    quota_value: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """A whole Google error body: ``{"error": {code, message, status, details}}``.

    ``retry_delay`` adds a ``RetryInfo`` (``"30s"``), ``quota_id`` a ``QuotaFailure``
    violation (``"GenerateRequestsPerDayPerProjectPerModel-FreeTier"``), ``reason`` an
    ``ErrorInfo`` (``"API_KEY_INVALID"``).
    """
    known, default = GEMINI_STATUSES.get(code, ("UNKNOWN", "Unknown error."))
    details: list[dict[str, Any]] = []
    if reason is not None:
        details.append(
            {
                "@type": _TYPE + "ErrorInfo",
                "reason": reason,
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            }
        )
    if quota_id is not None:
        violation = {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": quota_id,
            "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
        }
        if quota_value is not None:
            violation["quotaValue"] = quota_value
        details.append({"@type": _TYPE + "QuotaFailure", "violations": [violation]})
    if retry_delay is not None:
        details.append({"@type": _TYPE + "RetryInfo", "retryDelay": retry_delay})
    error: dict[str, Any] = {
        "code": code,
        "message": message or default,
        "status": status or known,
    }
    if details:
        error["details"] = details
    return {"error": error}


def error_body(status: int, message: str | None = None) -> bytes:
    """The error body Gemini answers ``status`` with."""
    return json.dumps(google_error(status, message=message)).encode()


# ------------------------------------------------------------------ reading requests


def gemini_tools(payload: Any) -> list[str]:
    """The names of the functions a request declares, in order."""
    names: list[str] = []
    for tool in _list(payload, "tools"):
        for decl in _list(tool, "functionDeclarations"):
            names.append(str(decl.get("name")))
    return names


def gemini_messages(payload: Any) -> list[dict[str, Any]]:
    """A request's ``contents`` as OpenAI-shaped messages (``systemInstruction`` first).

    A function call without an id gets one (``fc_{turn}_{n}``) and a response without
    one answers the earliest unanswered call of its name, as Gemini pairs them.
    """
    out: list[dict[str, Any]] = []
    system = payload.get("systemInstruction") if isinstance(payload, Mapping) else None
    if isinstance(system, Mapping):
        out.append({"role": "system", "content": _texts(_list(system, "parts"))})
    open_calls: list[tuple[str, str]] = []  # (id, name) not yet answered
    for turn, content in enumerate(_list(payload, "contents")):
        parts = _list(content, "parts")
        if content.get("role") == "model":
            calls = []
            for n, part in enumerate(parts):
                call = part.get("functionCall")
                if isinstance(call, Mapping):
                    cid = str(call.get("id") or f"fc_{turn}_{n}")
                    name = str(call.get("name") or "")
                    open_calls.append((cid, name))
                    calls.append(
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": name, "arguments": call.get("args") or {}},
                        }
                    )
            message: dict[str, Any] = {"role": "assistant", "content": _texts(parts)}
            if calls:
                message["tool_calls"] = calls
            out.append(message)
            continue
        for part in parts:
            reply = part.get("functionResponse")
            if isinstance(reply, Mapping):
                name = str(reply.get("name") or "")
                cid = str(reply.get("id") or "")
                found = next(
                    (c for c in open_calls if (c[0] == cid if cid else c[1] == name)), None
                )
                if found is not None:
                    open_calls.remove(found)
                    cid = found[0]
                response = reply.get("response")
                result = response.get("result") if isinstance(response, Mapping) else response
                text = result if isinstance(result, str) else json.dumps(result)
                out.append({"role": "tool", "tool_call_id": cid, "content": text})
        text = _texts(parts)
        if text:
            out.append({"role": "user", "content": text})
    return out


def _list(obj: Any, key: str) -> list[Mapping[str, Any]]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _texts(parts: Sequence[Mapping[str, Any]]) -> str:
    return "".join(str(p["text"]) for p in parts if isinstance(p.get("text"), str))


# ------------------------------------------------------------------ writing answers


def _usage(inp: int, out: int) -> dict[str, int]:
    return {"promptTokenCount": inp, "candidatesTokenCount": out, "totalTokenCount": inp + out}


def gemini_response(
    model: str,
    response_id: str,
    text: str,
    tool_calls: Sequence[Mapping[str, Any]],
    tokens: tuple[int, int],
    *,
    usage: Mapping[str, Any] | None = None,
    finish: str | None = None,
    empty: bool = False,
) -> dict[str, Any]:
    """A whole ``GenerateContentResponse``: one candidate (no content when ``empty``)."""
    parts: list[dict[str, Any]] = [] if empty or not text else [{"text": text}]
    if not empty:
        # Signed as Gemini 3 signs them: the first call of the answer carries one.
        parts += [
            {
                "functionCall": {"name": c["name"], "args": dict(c.get("arguments") or {})},
                **({"thoughtSignature": thought_signature(response_id)} if n == 0 else {}),
            }
            for n, c in enumerate(tool_calls)
        ]
    candidate: dict[str, Any] = {"finishReason": finish or "STOP", "index": 0}
    if parts:
        candidate["content"] = {"role": "model", "parts": parts}
    return {
        "candidates": [candidate],
        "usageMetadata": dict(usage) if usage is not None else _usage(*tokens),
        "modelVersion": model,
        "responseId": response_id,
    }


def gemini_chunks(
    model: str,
    response_id: str,
    pieces: Sequence[str],
    tool_calls: Sequence[Mapping[str, Any]],
    tokens: tuple[int, int],
    *,
    usage: Mapping[str, Any] | None = None,
    finish: str | None = None,
    empty: bool = False,
) -> list[dict[str, Any]]:
    """A streamed answer's chunks: one per text piece, the calls whole, the finish reason
    and the usage on the last one (as Gemini streams)."""
    head = {"modelVersion": model, "responseId": response_id}
    inp = tokens[0]
    chunks: list[dict[str, Any]] = []
    for piece in [] if empty else pieces:
        part = {"role": "model", "parts": [{"text": piece}]}
        chunks.append({"candidates": [{"content": part, "index": 0}], **head, "usageMetadata": {
            "promptTokenCount": inp, "totalTokenCount": inp}})  # fmt: skip
    last = gemini_response(
        model, response_id, "", tool_calls, tokens, usage=usage, finish=finish, empty=empty
    )
    chunks.append(last)
    return chunks


def thought_signature(response_id: str) -> str:
    """The signature the chaos server puts on an answer's first call (base64, as Google's)."""
    return base64.b64encode(f"chaos thought of {response_id}".encode()).decode()


def blocked_prompt(reason: str, tokens: tuple[int, int]) -> dict[str, Any]:
    """The 200 Gemini answers a prompt it blocked with: no candidate, a block reason."""
    return {
        "promptFeedback": {
            "blockReason": reason,
            "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}
            ],
        },
        "usageMetadata": {"promptTokenCount": tokens[0], "totalTokenCount": tokens[0]},
        "modelVersion": "chaos",
        "responseId": "blocked",
    }
