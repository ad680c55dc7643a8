"""The attribute tables of a run's spans, from its rows: ``run_spans`` (pure values;
``_traces`` hands them to OpenTelemetry).

The names are the GenAI semantic conventions' (the newest: ``gen_ai.provider.name``,
``gen_ai.conversation.id``, ``gen_ai.response.time_to_first_chunk``...), ``error.type``
a harnessnb kind (``rate_limited``, ``server``, ``refusal``...), ``operation.cost`` the
dollars (the name pydantic-ai and Logfire use); what the conventions have no name for
is ``harnessnb.*``. Content (messages, tool arguments and results, the task, a stall's
detail) only with ``content=True``, every string of it through the one scrubber.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from ..rules._text import clip
from ._trace_rows import RunRows, conversations, tool_call_ids

__all__ = ["AttrValue", "EventSpec", "SpanSpec", "run_spans"]

AttrValue = str | bool | int | float

# harnessnb's provider names the conventions spell otherwise (the rest are the same
# words: openai, anthropic; or have no well-known value: local, openrouter, scripted).
PROVIDER_NAMES: Final = {"gemini": "gcp.gemini"}
# How a run may end without its span saying error: it did what it was asked, or waits.
_FINE_OUTCOMES: Final = frozenset({"success", "finished", "awaiting_approval"})
# The budgets of a contract, as ``harnessnb.budget.<name>`` on the agent span.
_BUDGETS: Final = ("max_steps", "max_time_s", "max_total_tokens", "max_cost_usd")
# A typed answer that came but could not be used: the model did answer.
_ANSWERED_KINDS: Final = frozenset({"refusal", "truncated", "schema_violation"})
# Tool statuses that are failures (``deferred`` waits for a person; ``intent`` is unsettled).
_FAILED_TOOL: Final = frozenset({"error", "refused", "needs_reconciliation"})
MAX_DESCRIPTION: Final = 500  # characters of an error's text in a span's status


@dataclasses.dataclass
class EventSpec:
    """A span event: its name, time and attributes."""

    name: str
    at_ns: int
    attributes: dict[str, AttrValue]


@dataclasses.dataclass
class SpanSpec:
    """A span as values: ``error`` (the status description) is set when it failed."""

    name: str
    client: bool  # CLIENT (a model call) or INTERNAL
    start_ns: int
    end_ns: int
    attributes: dict[str, AttrValue]
    events: list[EventSpec] = dataclasses.field(default_factory=list)
    error: str | None = None
    children: list[SpanSpec] = dataclasses.field(default_factory=list)


def run_spans(rows: RunRows, *, content: bool, clean: Callable[[str], str]) -> SpanSpec:
    """The ``invoke_agent`` span of a run, its ``chat`` and ``execute_tool`` spans as
    children. ``clean`` scrubs every string that may carry a secret."""
    run = rows.run
    extras = run.get("extras") or {}
    agent = str(extras.get("agent") or "harnessnb")
    span = SpanSpec(f"invoke_agent {agent}", False, run["started_at_ns"], rows.end_ns, {})
    span.attributes = _agent_attributes(run, agent)
    span.error = _agent_error(run, span.attributes, clean, content)
    steps = conversations(rows) if content else {}
    ids = tool_call_ids(rows)
    attempts = rows.attempts
    for i, attempt in enumerate(attempts):
        following = attempts[i + 1] if i + 1 < len(attempts) else None
        chat = _chat_span(attempt, following, clean, content)
        if content:
            _chat_content(chat, attempt, steps, clean)
        span.children.append(chat)
    previous: dict[int, int] = {}
    for call in rows.tool_calls:
        start = _tool_start(call, attempts, previous.get(call["step"]))
        previous[call["step"]] = call["at_ns"]
        tool = _tool_span(call, start, ids.get((call["step"], call["seq"])), clean, content)
        span.children.append(tool)
    span.events += [_stall_event(s, clean, content) for s in rows.stalls]
    span.events += [_marker_event(m, clean, content) for m in rows.markers]
    if content:
        _agent_content(span, run, clean)
    return span


# ----------------------------------------------------------------- the run


def _agent_attributes(run: Mapping[str, Any], agent: str) -> dict[str, AttrValue]:
    extras = run.get("extras") or {}
    attrs = _kept(
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.conversation.id": run["run_id"],
            # A Fallback is no provider: its chat spans name each one it asked.
            "gen_ai.provider.name": None
            if str(run.get("provider")).startswith("fallback(")
            else provider_name(run.get("provider")),
            "harnessnb.provider": run.get("provider"),
            "gen_ai.request.model": run.get("model"),
            "harnessnb.outcome": run.get("outcome"),
            "harnessnb.sweep_id": run.get("sweep_id"),
            "harnessnb.steps": run.get("steps"),
            "harnessnb.tokens": run.get("tokens"),
            "operation.cost": run.get("cost_usd"),
            "harnessnb.output_mode": run.get("output_mode"),
            "gen_ai.output.type": "json" if run.get("output_mode") else None,
            "harnessnb.agent.session": extras.get("session"),
        }
    )
    contract = run.get("contract") or {}
    for name in _BUDGETS:
        if isinstance(contract.get(name), int | float):
            attrs[f"harnessnb.budget.{name}"] = contract[name]
    return attrs


def _agent_error(
    run: Mapping[str, Any],
    attrs: dict[str, AttrValue],
    clean: Callable[[str], str],
    content: bool,
) -> str | None:
    """The run's failure (``error.type``: its error's kind, else the outcome), or None;
    the error's message as the description (a typed answer's failure quotes the
    model's answer: only with content)."""
    outcome, error = run.get("outcome"), run.get("error") or {}
    if outcome is None or outcome in _FINE_OUTCOMES:
        return None
    kind = str(error.get("kind") or error.get("reason") or outcome)
    attrs["error.type"] = kind
    if kind in _ANSWERED_KINDS and not content:
        return kind
    return _description(str(error.get("message") or outcome), clean)


def _agent_content(span: SpanSpec, run: Mapping[str, Any], clean: Callable[[str], str]) -> None:
    if run.get("task"):
        span.attributes["gen_ai.input.messages"] = _dumps([_text("user", run["task"])], clean)
    if run.get("output"):
        answer = {**_text("assistant", run["output"]), "finish_reason": "stop"}
        span.attributes["gen_ai.output.messages"] = _dumps([answer], clean)


def _stall_event(stall: Mapping[str, Any], clean: Callable[[str], str], content: bool) -> EventSpec:
    attrs = _kept(
        {
            "harnessnb.step": stall.get("step"),
            "harnessnb.stall.signal": stall.get("signal"),
            "harnessnb.stall.action": stall.get("action"),
            "harnessnb.stall.detail": clean(stall["detail"])
            if content and stall.get("detail")
            else None,
        }
    )
    return EventSpec("harnessnb.stall", stall["at_ns"], attrs)


def _marker_event(
    marker: Mapping[str, Any], clean: Callable[[str], str], content: bool
) -> EventSpec:
    """A marker (resume, skipped, resolved, abandoned, output_cut); its detail, which
    may quote a person's reason, only with content."""
    detail = marker.get("detail") if content else None
    attrs = _kept({"harnessnb.detail": _description(detail, clean) if detail else None})
    return EventSpec(f"harnessnb.{marker['kind']}", marker["at_ns"], attrs)


# ------------------------------------------------------------ model calls


def _chat_span(
    attempt: Mapping[str, Any],
    following: Mapping[str, Any] | None,
    clean: Callable[[str], str],
    content: bool,
) -> SpanSpec:
    model = attempt.get("model")
    span = SpanSpec(f"chat {model}" if model else "chat", True, attempt["started_at_ns"],
                    attempt["end_ns"], chat_attributes(attempt))  # fmt: skip
    span.attributes.update(
        _kept(
            {
                "harnessnb.attempt": attempt.get("attempt"),
                "harnessnb.step": attempt.get("step"),
                "harnessnb.retry_after_s": attempt.get("retry_after_s"),
                "harnessnb.request_id": attempt.get("request_id"),
                "harnessnb.fell_back": attempt.get("fell_back") or None,
                "harnessnb.cancelled": attempt.get("cancelled") or None,
                "harnessnb.usage_estimated": attempt.get("usage_estimated") or None,
                "harnessnb.output_mode": attempt.get("output_mode"),
                "gen_ai.output.type": "json" if attempt.get("output_mode") else None,
                "gen_ai.usage.input_tokens": attempt.get("input_tokens"),
                "gen_ai.usage.output_tokens": attempt.get("output_tokens"),
                "gen_ai.response.time_to_first_chunk": _seconds(attempt.get("ttft_ms")),
                "http.response.status_code": attempt.get("status"),
                "operation.cost": attempt.get("cost_usd"),
            }
        )
    )
    if "error.type" in span.attributes:
        kind = str(span.attributes["error.type"])
        # An unusable typed answer's reasons quote the model's answer: only with content.
        quoted = kind in _ANSWERED_KINDS and not content
        span.error = kind if quoted else _description(str(attempt.get("error") or kind), clean)
    if span.error and following is not None and following.get("step") == attempt.get("step"):
        span.events.append(_retry_event(attempt, following))
    return span


def chat_attributes(attempt: Mapping[str, Any]) -> dict[str, AttrValue]:
    """What a ``chat`` span and its metrics share: operation, provider, models, server,
    ``error.type`` (the attempt's kind; ``cancelled`` for one a cancel cut off)."""
    kind, cancelled = attempt.get("kind"), bool(attempt.get("cancelled"))
    answered = not cancelled and (kind is None or kind in _ANSWERED_KINDS)
    attrs = _kept(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(attempt.get("provider")),
            "gen_ai.request.model": attempt.get("model"),
            "gen_ai.response.model": attempt.get("model") if answered else None,
            "error.type": "cancelled" if cancelled else kind,
        }
    )
    attrs.update(_server(attempt.get("base_url")))
    return attrs


def _retry_event(attempt: Mapping[str, Any], following: Mapping[str, Any]) -> EventSpec:
    """A failed attempt followed by another in its step: a retry, or a fallback."""
    wait_ns = max(0, following["started_at_ns"] - attempt["end_ns"])
    name = "harnessnb.fallback" if attempt.get("fell_back") else "harnessnb.retry"
    attrs = _kept(
        {
            "error.type": attempt.get("kind"),
            "harnessnb.retry_after_s": attempt.get("retry_after_s"),
            "harnessnb.next_attempt": following.get("attempt"),
            "harnessnb.next_provider": provider_name(following.get("provider")),
            "harnessnb.wait_s": wait_ns / 1e9,
        }
    )
    return EventSpec(name, attempt["end_ns"], attrs)


def _chat_content(
    span: SpanSpec,
    attempt: Mapping[str, Any],
    steps: Mapping[int, list[dict[str, Any]]],
    clean: Callable[[str], str],
) -> None:
    """The conversation the attempt was sent and, when it was answered, the answer."""
    step = attempt.get("step")
    after = steps.get(step) if isinstance(step, int) else None
    if after is None or not isinstance(step, int):
        return
    known = max((len(m) for s, m in steps.items() if s < step), default=0)
    found = [i for i, m in enumerate(after) if i >= known and m.get("role") == "assistant"]
    cut = found[-1] if found else len(after)
    sent = after[:cut]
    system = [m for m in sent if m.get("role") == "system"]
    if system:
        parts = [{"type": "text", "content": str(m.get("content") or "")} for m in system]
        span.attributes["gen_ai.system_instructions"] = _dumps(parts, clean)
    messages = [_message(m) for m in sent if m.get("role") != "system"]
    span.attributes["gen_ai.input.messages"] = _dumps(messages, clean)
    if attempt.get("answer"):  # a typed answer that came but could not be used
        span.attributes["gen_ai.output.messages"] = _dumps(
            [_text("assistant", attempt["answer"])], clean
        )
    elif found and "error.type" not in span.attributes:
        reason = "tool_call" if after[cut].get("tool_calls") else "stop"
        answer = {**_message(after[cut]), "finish_reason": reason}
        span.attributes["gen_ai.output.messages"] = _dumps([answer], clean)


# ------------------------------------------------------------- tool calls


def _tool_start(
    call: Mapping[str, Any], attempts: list[dict[str, Any]], previous_ns: int | None
) -> int:
    """When a call began: the later of its step's answer (the last attempt of the step
    that ended by the call's time) and the step's call before it (calls run in turn)."""
    end = call["at_ns"]
    answered = [
        a["end_ns"]
        for a in attempts
        if a.get("step") == call["step"] and not a.get("cancelled") and a["end_ns"] <= end
    ]
    start = max([*answered, *([] if previous_ns is None else [previous_ns])], default=end)
    return int(min(start, end))


def _tool_span(
    call: Mapping[str, Any],
    start_ns: int,
    call_id: str | None,
    clean: Callable[[str], str],
    content: bool,
) -> SpanSpec:
    status, tool = call.get("status"), call.get("tool")
    failed = status in _FAILED_TOOL
    attrs = _kept(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.type": "extension" if call.get("server") else "function",
            "gen_ai.tool.call.id": call_id,
            "harnessnb.step": call.get("step"),
            "harnessnb.tool.seq": call.get("seq"),
            "harnessnb.tool.effect": call.get("effect"),
            "harnessnb.tool.status": status,
            "harnessnb.tool.sandbox": call.get("sandbox"),
            "harnessnb.tool.output_bytes": call.get("output_bytes"),
            "harnessnb.mcp.server": call.get("server"),
            "error.type": (call.get("error_kind") or call.get("error_code") or status)
            if failed and status != "refused"
            else ("refused" if failed else None),
        }
    )
    span = SpanSpec(f"execute_tool {tool}", False, start_ns, call["at_ns"], attrs)
    if failed:
        span.error = _description(str(call.get("error_name") or status), clean)
    if status in ("refused", "deferred"):
        name = "harnessnb.refused" if status == "refused" else "harnessnb.approval_deferred"
        span.events.append(EventSpec(name, call["at_ns"], _kept({
            "harnessnb.tool.effect": call.get("effect"), "error.code": call.get("error_code"),
        })))  # fmt: skip
    if content:
        if call.get("args") is not None:
            span.attributes["gen_ai.tool.call.arguments"] = clean(str(call["args"]))
        if call.get("output") is not None:
            span.attributes["gen_ai.tool.call.result"] = clean(str(call["output"]))
    return span


# ----------------------------------------------------------------- helpers


def provider_name(name: Any) -> str | None:
    """``gen_ai.provider.name`` of a harnessnb provider name."""
    return None if name is None else PROVIDER_NAMES.get(str(name), str(name))


def _server(base_url: Any) -> dict[str, AttrValue]:
    """``server.address`` and ``server.port`` of a base URL (the scheme's port if none)."""
    if not base_url:
        return {}
    try:
        parts = urlsplit(str(base_url))
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        return {}
    return _kept({"server.address": parts.hostname, "server.port": port})


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A stored chat message in the conventions' shape: a role and its parts."""
    role = str(message.get("role") or "user")
    if role == "tool":
        part = {"type": "tool_call_response", "id": message.get("tool_call_id"),
                "response": message.get("content")}  # fmt: skip
        return {"role": "tool", "parts": [part]}
    parts: list[dict[str, Any]] = []
    if message.get("content"):
        parts.append({"type": "text", "content": message["content"]})
    for call in message.get("tool_calls") or []:
        parts.append({"type": "tool_call", "id": call.get("id"), "name": call.get("name"),
                      "arguments": call.get("arguments")})  # fmt: skip
    return {"role": role, "parts": parts}


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _dumps(value: Any, clean: Callable[[str], str]) -> str:
    return clean(json.dumps(value, ensure_ascii=False, default=str))


def _description(text: str, clean: Callable[[str], str]) -> str:
    return clip(clean(text), MAX_DESCRIPTION)


def _seconds(ms: Any) -> float | None:
    return None if ms is None else float(ms) / 1000


def _kept(values: Mapping[str, Any]) -> dict[str, AttrValue]:
    """The attributes that have a value (OpenTelemetry drops None with a warning)."""
    return {k: v for k, v in values.items() if v is not None}
