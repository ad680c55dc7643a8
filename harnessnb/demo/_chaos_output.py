"""The chaos server's typed answers: what a request asks for (a JSON Schema natively, as
a ``final_answer`` tool, or in the conversation), an answer that validates, and the four
output faults.

Reading, per wire (``output_schema``): chat's ``response_format.json_schema.schema``,
the Responses API's ``text.format.schema``, Anthropic's ``output_config.format.schema``,
Gemini's ``generationConfig.responseJsonSchema`` (or ``responseSchema``); else the
``final_answer`` tool's parameters (``tool_parameters``); else a JSON Schema a user or
system message gives after the words "JSON Schema" (``prompted_schema``: a typed run's
prompted mode), answered as a fenced ``json`` block.

Writing: ``instance`` makes a value that validates against a schema (object,
properties, required, array, string, integer, number, boolean, enum, const, nullable,
``anyOf``/``oneOf``/``allOf``, local ``$ref``), the integer and number fields filled
with a given number (the demo model's arithmetic answer); ``violating`` one that breaks
it (a required field missing, else a field of the wrong type).

The faults (``Fault.refusal``, ``truncated``, ``schema_violation``, ``schema_rejected``)
turn the responder's reply into an unusable one (the server does, with ``truncate`` and
``violating``) or a 400 in the wire's error shape (``rejection``); each dialect renders
a ``Reply``'s ``refusal`` and ``truncated`` its own way. Plain values in and out: this
module knows nothing of the server.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "FINAL_ANSWER",
    "REFUSAL_TEXT",
    "answer_text",
    "as_text",
    "instance",
    "max_tokens",
    "output_name",
    "output_schema",
    "prompted_schema",
    "rejection",
    "schema_of_reply",
    "tool_parameters",
    "truncate",
    "violating",
]

FINAL_ANSWER = "final_answer"
"""The tool a typed run in ``tool`` mode offers for its answer (its parameters the schema)."""
REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
"""What ``Fault.refusal()`` says by default (OpenAI's usual words)."""

# ------------------------------------------------------------------ reading requests


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def output_schema(protocol: str, payload: Any) -> Mapping[str, Any] | None:
    """The JSON Schema a request asks its answer in, natively (None: it asks none)."""
    if protocol == "openai":
        found = _get(payload, "response_format", "json_schema", "schema")
    elif protocol == "responses":
        found = _get(payload, "text", "format", "schema")
    elif protocol == "anthropic":
        found = _get(payload, "output_config", "format", "schema")
    elif protocol == "gemini":
        config = _get(payload, "generationConfig")
        found = _get(config, "responseJsonSchema") or _get(config, "responseSchema")
    else:
        found = None
    return found if isinstance(found, Mapping) else None


def output_name(protocol: str, payload: Any) -> str:
    """The name a request gives its schema (OpenAI's wires; ``answer`` elsewhere)."""
    if protocol == "openai":
        name = _get(payload, "response_format", "json_schema", "name")
    elif protocol == "responses":
        name = _get(payload, "text", "format", "name")
    else:
        name = None
    return str(name or "answer")


def tool_parameters(protocol: str, payload: Any) -> dict[str, Mapping[str, Any]]:
    """The parameters schema of each tool a request offers, by name."""
    out: dict[str, Mapping[str, Any]] = {}
    tools = _get(payload, "tools")
    for tool in tools if isinstance(tools, list) else ():
        if protocol == "gemini":
            decls = _get(tool, "functionDeclarations")
            for decl in decls if isinstance(decls, list) else ():
                params = _get(decl, "parametersJsonSchema") or _get(decl, "parameters")
                out[str(_get(decl, "name"))] = params if isinstance(params, Mapping) else {}
            continue
        fn = _get(tool, "function")
        spec = fn if isinstance(fn, Mapping) else tool
        params = _get(spec, "parameters") or _get(spec, "input_schema")
        out[str(_get(spec, "name"))] = params if isinstance(params, Mapping) else {}
    return out


def prompted_schema(messages: Sequence[Any]) -> Mapping[str, Any] | None:
    """The JSON Schema the conversation asks the answer in (prompted mode): the first
    JSON object after the words "JSON Schema" in the last user or system message that
    has one, when it looks like a schema (``type``, ``properties`` or ``$defs``)."""
    decoder = json.JSONDecoder()
    for message in reversed(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "system"):
            continue
        text = _said(message.get("content"))
        at = text.lower().rfind("json schema")
        while at >= 0:
            at = text.find("{", at)
            if at < 0:
                break
            try:
                found, _ = decoder.raw_decode(text, at)
            except ValueError:
                at += 1
                continue
            if isinstance(found, dict) and {"type", "properties", "$defs"} & set(found):
                return found
            at += 1
    return None


def _said(content: Any) -> str:
    """A message's text: a string, or its text blocks (Anthropic's) joined."""
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else ()
    return "\n".join(
        str(b.get("text") or "") for b in blocks if isinstance(b, Mapping) and "text" in b
    )


def max_tokens(protocol: str, payload: Any) -> int | None:
    """The token cap a request sets, if it sets one."""
    if protocol == "gemini":
        found = _get(payload, "generationConfig", "maxOutputTokens")
    elif protocol == "responses":
        found = _get(payload, "max_output_tokens")
    else:
        found = _get(payload, "max_completion_tokens") or _get(payload, "max_tokens")
    return found if type(found) is int and found > 0 else None


# ------------------------------------------------------------------ answers that validate


def instance(schema: Mapping[str, Any], *, number: int | None = None, text: str = "") -> Any:
    """A value that validates against ``schema``: every property given (required or
    not), one item per array (``minItems`` honoured), the first of an ``enum``, its
    integer and number fields ``number`` (0 when None, kept within bounds), its strings
    ``text`` (``"text"`` when empty, kept within length bounds)."""
    return _Maker(schema, number, text or "text").make(schema, 0)


class _Maker:
    def __init__(self, root: Mapping[str, Any], number: int | None, text: str) -> None:
        self.root = root
        self.number = number
        self.text = text

    def resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = node.get("$ref")
        for _ in range(32):  # a chain of refs, not a cycle
            if not isinstance(ref, str) or not ref.startswith("#/"):
                return node
            target: Any = self.root
            for key in ref[2:].split("/"):
                key = key.replace("~1", "/").replace("~0", "~")
                target = target.get(key, {}) if isinstance(target, Mapping) else {}
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            ref = target.get("$ref") if isinstance(target, Mapping) else None
        return node

    def make(self, node: Any, depth: int) -> Any:
        if not isinstance(node, Mapping) or depth > 16:
            return None if depth > 16 else {}
        node = self.resolve(node)
        if "const" in node:
            return node["const"]
        if isinstance(node.get("enum"), list) and node["enum"]:
            return node["enum"][0]
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list) and branches:
                useful = [b for b in branches if not _is_null(self.resolve(b))]
                return self.make(useful[0], depth + 1) if useful else None
        if isinstance(node.get("allOf"), list) and node["allOf"]:
            merged: dict[str, Any] = {}
            for part in node["allOf"]:
                merged.update(self.resolve(part) if isinstance(part, Mapping) else {})
            rest = {k: v for k, v in node.items() if k != "allOf"}
            return self.make({**merged, **rest}, depth + 1)
        kind = _type_of(node)
        if kind == "object":
            props = node.get("properties")
            props = props if isinstance(props, Mapping) else {}
            return {name: self.make(sub, depth + 1) for name, sub in props.items()}
        if kind == "array":
            count = max(1, int(node.get("minItems") or 0))
            if node.get("maxItems") == 0:
                count = 0
            return [self.make(node.get("items") or {}, depth + 1) for _ in range(count)]
        if kind in ("integer", "number"):
            value = _bounded(self.number if self.number is not None else 0, node)
            return int(value) if kind == "integer" else float(value)
        if kind == "boolean":
            return True
        if kind == "null":
            return None
        return self.string(node)

    def string(self, node: Mapping[str, Any]) -> str:
        formats = {
            "date-time": "2026-01-01T00:00:00Z",
            "date": "2026-01-01",
            "time": "00:00:00Z",
            "email": "demo@example.com",
            "uri": "https://example.com/",
            "uuid": "00000000-0000-4000-8000-000000000000",
        }
        value = formats.get(str(node.get("format")), self.text)
        low, high = node.get("minLength"), node.get("maxLength")
        if type(high) is int:
            value = value[:high]
        if type(low) is int and len(value) < low:
            value += "x" * (low - len(value))
        return value


def _is_null(node: Mapping[str, Any]) -> bool:
    return node.get("type") == "null"


def _type_of(node: Mapping[str, Any]) -> str:
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if kinds else "null"
    if isinstance(kind, str):
        return kind.lower()  # Gemini's responseSchema spells them OBJECT, STRING...
    if "properties" in node:
        return "object"
    if "items" in node:
        return "array"
    return "string"


def _bounded(value: float, node: Mapping[str, Any]) -> float:
    low = node.get("minimum", node.get("exclusiveMinimum"))
    high = node.get("maximum", node.get("exclusiveMaximum"))
    if isinstance(low, (int, float)) and value < low:
        value = low + (1 if "exclusiveMinimum" in node else 0)
    if isinstance(high, (int, float)) and value > high:
        value = high - (1 if "exclusiveMaximum" in node else 0)
    return value


def violating(schema: Mapping[str, Any]) -> Any:
    """Valid JSON that breaks ``schema``: a valid instance less its first required field,
    else with its first field of the wrong type, else a value of the wrong type."""
    maker = _Maker(schema, None, "text")
    root = maker.resolve(schema)
    good = maker.make(root, 0)
    if isinstance(good, dict):
        required = root.get("required")
        if isinstance(required, list) and required and required[0] in good:
            return {k: v for k, v in good.items() if k != required[0]}
        if good:
            name = next(iter(good))
            bad = copy.deepcopy(good)
            bad[name] = 12345 if isinstance(good[name], str) else "not the type asked"
            return bad
        return []
    return {"unexpected": "an object where the schema asks no object"}


# ------------------------------------------------------------------ the faults


def schema_of_reply(
    schema: Mapping[str, Any] | None,
    tools: Mapping[str, Mapping[str, Any]],
    prompted: Mapping[str, Any] | None,
) -> tuple[Mapping[str, Any] | None, str]:
    """The schema the answer is asked in and how: ``native`` (``schema``, the request's
    own), ``tool`` (``final_answer``'s parameters), ``prompted`` (the conversation's);
    ``(None, "")`` when none is asked."""
    if schema is not None:
        return schema, "native"
    if FINAL_ANSWER in tools:
        return tools[FINAL_ANSWER], "tool"
    if prompted is not None:
        return prompted, "prompted"
    return None, ""


def as_text(value: Any, mode: str) -> str:
    """A typed answer's text: its JSON, in a fenced ``json`` block when prompted."""
    said = json.dumps(value)
    return f"```json\n{said}\n```" if mode == "prompted" else said


def truncate(text: str) -> str:
    """``text`` cut at half its length (mid-JSON for a JSON answer)."""
    return text[: max(1, len(text) // 2)] if len(text) > 1 else ""


def answer_text(text: str, calls: Sequence[Mapping[str, Any]]) -> str:
    """The text an answer would have given: its first call's arguments when it called."""
    if calls:
        return json.dumps(dict(calls[0].get("arguments") or {}))
    return text


_STRICT_REASON = "In context=(), 'additionalProperties' is required to be supplied and to be false."


def rejection(protocol: str, name: str, message: str | None) -> dict[str, Any]:
    """The 400 body a wire answers a schema its strict mode refuses with."""
    reason = message or _STRICT_REASON
    if protocol == "gemini":
        detail = f"* GenerateContentRequest.generation_config.response_json_schema: {reason}"
        return {
            "error": {
                "code": 400,
                "message": f"Invalid JSON payload received. Unknown name or value.\n{detail}",
                "status": "INVALID_ARGUMENT",
            }
        }
    if protocol == "anthropic":
        text = f"output_config.format.schema: Invalid schema: {reason}"
        return {"type": "error", "error": {"type": "invalid_request_error", "message": text}}
    param = "text.format.schema" if protocol == "responses" else "response_format"
    return {
        "error": {
            "message": f"Invalid schema for response_format '{name}': {reason}",
            "type": "invalid_request_error",
            "param": param,
            "code": "invalid_json_schema",
        }
    }
