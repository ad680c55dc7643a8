"""Tools: what the model can call, what each call may do, and how failures come back.

A tool declares an ``Effect``:

* ``READ``: no side effect; a failed execution may be repeated freely;
* ``IDEMPOTENT``: repeats collapse given the same idempotency key; a retry reuses the
  call's key (drawn once per call by the loop, reused on resume);
* ``WRITE``: may land once; never repeated on a guess.

``ToolExecutor.execute`` is the one path from a model's tool call to a result:
unknown tool -> argument validation -> workspace containment -> policy verdict ->
approver (for ``ask``) -> ``before_run`` (the loop commits the intent) -> execution
with per-effect retry. Every failure comes back as a ``ToolResult`` carrying the
``HarnessError``'s name and code, never as an exception, so the model can act on it.

Policy targets of user tools (``@tool``): a READ tool is not checked (like reading a
file, it changes nothing); an IDEMPOTENT or WRITE tool is checked as
``("exec", "tool:NAME")``, so ``Policy.default()`` asks before a side effect and
``allow_exec("tool:publish")`` lets one through.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import inspect
import json
import logging
import re
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin, overload

from ..providers._completion import ToolCall
from ..rules._errors import (
    ConfigError,
    HarnessError,
    RefusedError,
    SandboxError,
    ToolError,
    wrap_unknown,
)
from ..rules._policy import Policy
from ._approval import ApprovalRequest, Approver
from ._gate import EventSink, Gate

if TYPE_CHECKING:
    from ._workspace import Workspace

__all__ = [
    "MAX_EXECUTIONS",
    "OUTPUT_LIMIT",
    "Effect",
    "EventSink",
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolExecutor",
    "ToolOutput",
    "ToolResult",
    "bound_output",
    "builtin_tools",
    "is_transient",
    "retry_decision",
    "tool",
    "validate_args",
]

log = logging.getLogger("harnessnb.tools")

MAX_EXECUTIONS = 3
OUTPUT_LIMIT = 16_000
_PREVIEW_LIMIT = 4_000


class Effect(enum.Enum):
    """What a tool does to the world, which decides whether a failure may be retried."""

    READ = "read"
    IDEMPOTENT = "idempotent"
    WRITE = "write"


# ------------------------------------------------------------------ results


def bound_output(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, head and tail kept, the elision marked."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    elided = len(text) - head - tail
    return f"{text[:head]}\n... [{elided} chars elided] ...\n{text[-tail:]}"


@dataclasses.dataclass(frozen=True)
class ToolOutput:
    """What a tool body returns: the text for the model and whether files changed."""

    text: str
    changed_workspace: bool = False


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call, as the loop records it and the model sees it.

    ``status`` is ``ok``, ``error``, ``refused`` or ``deferred``; ``error`` is the
    ``HarnessError.to_dict()`` of a failure (``name``, ``code``, ``message``...);
    ``executions`` counts how often the tool body actually ran; ``approval`` is the
    pending request of a deferred call.
    """

    ok: bool
    output: str
    changed_workspace: bool = False
    error: dict[str, Any] | None = None
    status: str = "ok"
    executions: int = 0
    approval: ApprovalRequest | None = None

    def to_message_content(self) -> str:
        """The tool message text: the output, or ``ERROR [code] message`` on failure."""
        if self.ok:
            return self.output or "(no output)"
        code = (self.error or {}).get("code", "UNKNOWN")
        return f"ERROR [{code}] {self.output}"


@dataclasses.dataclass
class ToolContext:
    """What a tool body may use besides its arguments."""

    workspace: Workspace
    idempotency_key: str | None = None
    command_timeout_s: float = 30.0
    policy: Policy | None = None
    run_id: str | None = None
    call_id: str | None = None
    attempt: int = 1

    def may_read(self, relative_path: str) -> bool:
        """True when the policy outright allows reading this path (grep skips the rest)."""
        return self.policy is None or self.policy.explain("read", relative_path).allowed


# ------------------------------------------------------------------ the protocol


class Tool:
    """A tool the model can call. Subclass it, or use ``@tool`` on a function.

    Attributes:
        name: The model-facing name.
        description: What the tool does, for the model.
        parameters: A JSON schema of type object for the arguments.
        effect: READ, IDEMPOTENT or WRITE.
    """

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012
    effect: Effect = Effect.READ

    def spec(self) -> dict[str, Any]:
        """The spec handed to providers: name, description, parameters."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def target(self, args: Mapping[str, Any]) -> tuple[str, str] | None:
        """The (act, target) the policy judges; ``None`` means no check (READ tools)."""
        if self.effect is Effect.READ:
            return None
        return ("exec", f"tool:{self.name}")

    def resolve_target(
        self, args: Mapping[str, Any], workspace: Workspace
    ) -> tuple[str, str] | None:
        """Like ``target`` with workspace paths resolved; raises ``RefusedError`` on escape."""
        return self.target(args)

    def preview(self, args: Mapping[str, Any], workspace: Workspace) -> str:
        """What an approver is shown; the arguments unless a tool knows better."""
        return bound_output(json.dumps(dict(args), ensure_ascii=False, default=str), _PREVIEW_LIMIT)

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run the tool once; raise a ``HarnessError`` the model can act on to fail."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, effect={self.effect.name})"


# ------------------------------------------------------------------ @tool


class FunctionTool(Tool):
    """A tool made from a typed function (sync or async) by ``@tool``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        effect: Effect = Effect.READ,
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.effect = Effect(effect)
        summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
        self.description = description or summary or f"Call {self.name}."
        self.parameters, self._wants_key = schema_from_signature(fn, arg_docs)
        functools.update_wrapper(self, fn)

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        kwargs = dict(args)
        if self._wants_key:
            kwargs["idempotency_key"] = ctx.idempotency_key
        if inspect.iscoroutinefunction(self.fn):
            value = await self.fn(**kwargs)
        else:
            # A sync body may block (HTTP, disk): keep it off the loop thread.
            value = await asyncio.to_thread(self.fn, **kwargs)
        return _to_output(value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (handy in tests and notebooks)."""
        return self.fn(*args, **kwargs)


def _to_output(value: Any) -> ToolOutput:
    if isinstance(value, ToolOutput):
        return value
    if value is None:
        return ToolOutput("")
    if isinstance(value, str):
        return ToolOutput(value)
    try:
        return ToolOutput(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return ToolOutput(str(value))


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    effect: Effect = Effect.READ,
    name: str | None = None,
    description: str | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    effect: Effect = Effect.READ,
    name: str | None = None,
    description: str | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a typed function into a tool: ``@hn.tool`` or ``@hn.tool(effect=...)``.

    The JSON schema comes from the type hints (str, int, float, bool, list[...],
    dict, Optional, Literal, Enum; defaults make a parameter optional) and the
    Google-style docstring (summary and ``Args:``). A parameter named
    ``idempotency_key`` is not shown to the model; it receives the call's key.
    """
    if fn is None:
        return lambda f: FunctionTool(f, effect=effect, name=name, description=description)
    return FunctionTool(fn, effect=effect, name=name, description=description)


_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?)\s*:\s*$"
)
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The description (text before the first section) and the ``Args:`` entries."""
    lines = doc.splitlines()
    summary: list[str] = []
    i = 0
    while i < len(lines) and not _SECTION.match(lines[i].strip()):
        summary.append(lines[i].rstrip())
        i += 1
    args: dict[str, str] = {}
    while i < len(lines):
        header = _SECTION.match(lines[i].strip())
        i += 1
        if header and header.group(1) in ("Args", "Arguments", "Parameters"):
            i = _parse_args_section(lines, i, args)
    return "\n".join(summary).strip(), args


def _parse_args_section(lines: list[str], i: int, out: dict[str, str]) -> int:
    base: int | None = None
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        if base is None:
            base = indent
        if indent < base or (indent == base and _SECTION.match(line.strip())):
            break
        match = _ARG_LINE.match(line.strip()) if indent == base else None
        if match:
            current = match.group(1).lstrip("*")
            out[current] = match.group(2).strip()
        elif current is not None:
            out[current] = f"{out[current]} {line.strip()}".strip()
        i += 1
    return i


def schema_from_signature(
    fn: Callable[..., Any], arg_docs: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], bool]:
    """The JSON schema of ``fn``'s parameters, and whether it takes ``idempotency_key``."""
    arg_docs = arg_docs or {}
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # unresolvable forward references: say which function
        raise ConfigError(f"cannot read the type hints of {fn.__name__}: {exc}") from exc
    properties: dict[str, Any] = {}
    required: list[str] = []
    wants_key = False
    for param in inspect.signature(fn).parameters.values():
        if param.name == "idempotency_key":
            wants_key = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ConfigError(f"tool {fn.__name__}: parameter {param.name} must be named")
        prop = _schema_for(hints.get(param.name, Any), f"{fn.__name__}.{param.name}")
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif _jsonable(param.default):
            prop["default"] = param.default
        properties[param.name] = prop
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return schema, wants_key


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_for(tp: Any, where: str) -> dict[str, Any]:
    """One type hint as a JSON schema fragment."""
    if tp is Any:
        return {}
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if tp is type(None):
        return {"type": "null"}
    origin, targs = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        return _union_schema(targs, where)
    if origin is Literal:
        return _enum_schema(list(targs))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_schema([m.value for m in tp])
    if tp in (list, tuple, set) or origin in (list, tuple, set, Sequence):
        items = _schema_for(targs[0], where) if targs and targs[0] is not Ellipsis else {}
        return {"type": "array", "items": items} if items else {"type": "array"}
    if tp is dict or origin in (dict, Mapping):
        return {"type": "object"}
    raise ConfigError(f"tool parameter {where}: unsupported type {tp!r}")


def _union_schema(targs: tuple[Any, ...], where: str) -> dict[str, Any]:
    options = [_schema_for(a, where) for a in targs if a is not type(None)]
    nullable = len(options) < len(targs)
    if nullable:
        options.append({"type": "null"})
    return options[0] if len(options) == 1 else {"anyOf": options}


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"enum": values}
    kinds = {_SCALARS.get(type(v)) for v in values}
    if len(kinds) == 1 and None not in kinds:
        schema["type"] = kinds.pop()
    return schema


# ------------------------------------------------------------------ validation


def validate_args(schema: Mapping[str, Any], args: Any) -> list[str]:
    """Problems found checking ``args`` against ``schema`` (empty when valid).

    Covers the subset tools use: type (one or a list), properties, required,
    additionalProperties, items, enum, anyOf, minItems.
    """
    problems: list[str] = []
    _check(schema, args, "arguments", problems)
    return problems


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _check(schema: Mapping[str, Any], value: Any, where: str, problems: list[str]) -> None:
    if "anyOf" in schema:
        if not any(not validate_args(option, value) for option in schema["anyOf"]):
            problems.append(f"{where}: {_short(value)} matches none of the allowed forms")
        return
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_TYPE_CHECKS.get(n, lambda v: True)(value) for n in names):
            problems.append(f"{where}: expected {' or '.join(names)}, got {_json_type(value)}")
            return
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {_short(value)} is not one of {schema['enum']}")
    if isinstance(value, dict):
        _check_object(schema, value, where, problems)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{where}: needs at least {schema['minItems']} item(s)")
        if "items" in schema:
            for i, item in enumerate(value):
                _check(schema["items"], item, f"{where}[{i}]", problems)


def _check_object(
    schema: Mapping[str, Any], value: dict[str, Any], where: str, problems: list[str]
) -> None:
    props: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            problems.append(f"{where}: missing required {name!r}")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in props:
            _check(props[name], item, f"{name}", problems)
        elif extra is False:
            allowed = ", ".join(props) or "none"
            problems.append(f"{where}: unexpected {name!r} (allowed: {allowed})")
        elif isinstance(extra, Mapping):
            _check(extra, item, f"{name}", problems)


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPE_CHECKS[name](value):
            return name
    return type(value).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ------------------------------------------------------------------ retry


def is_transient(error: BaseException) -> bool:
    """True for failures a repeat can cure.

    Transient: ``TimeoutError`` and ``ConnectionError`` (and subclasses), a
    ``SandboxError`` with reason ``timeout``, and any error whose ``retryable``
    attribute is true (``ProviderError``, ``StoreError`` busy, or a user's own).
    Everything else is deterministic: refusals, bad arguments, missing files, no-match
    edits, binary or huge files, and a user tool's ``ValueError``.
    """
    if isinstance(error, RefusedError | ToolError):
        return False
    if isinstance(error, SandboxError):
        return error.reason == "timeout"
    if isinstance(error, TimeoutError | ConnectionError):
        return True
    return getattr(error, "retryable", False) is True


def retry_decision(effect: Effect, executions: int, error: BaseException) -> bool:
    """Whether to run a tool again after ``executions`` runs ended in ``error``. Pure.

    READ retries, IDEMPOTENT retries (the executor reuses the same key), WRITE never;
    only transient errors (``is_transient``); at most ``MAX_EXECUTIONS`` runs in all.
    Retries are immediate: a tool's transient failures are local, not rate limits.
    """
    if effect is Effect.WRITE or executions >= MAX_EXECUTIONS:
        return False
    return is_transient(error)


# ------------------------------------------------------------------ the executor

class ToolExecutor:
    """Runs model tool calls under the workspace, the policy and the approver.

    Args:
        workspace: The folder the tools act on.
        policy: The permission policy.
        approver: Who decides ``ask`` verdicts; ``None`` refuses them with a hint.
        tools: Every tool the model may call (names must be unique).
        run_id: Passed to events and tool contexts.
        on_event: Called (sync or async) with ``tool_call``, ``refused``,
            ``approval_requested`` and ``approval_decided`` events; its failures are
            logged and ignored, because the trace, not the events, is authoritative.
        command_timeout_s: The ``run_command`` timeout.
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        policy: Policy,
        approver: Approver | None,
        tools: Sequence[Tool],
        run_id: str | None = None,
        on_event: EventSink | None = None,
        command_timeout_s: float = 30.0,
    ) -> None:
        self.workspace = workspace
        self.policy = policy
        self.approver = approver
        self.run_id = run_id
        self.on_event = on_event
        self.gate = Gate(policy, approver, run_id=run_id, on_event=on_event)
        self.command_timeout_s = command_timeout_s
        self._tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self._tools:
                raise ConfigError(f"two tools are named {t.name!r}")
            self._tools[t.name] = t

    def specs(self) -> list[dict[str, Any]]:
        """The specs of every tool, for the provider request."""
        return [t.spec() for t in self._tools.values()]

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    async def execute(
        self,
        call: ToolCall,
        *,
        idempotency_key: str,
        before_run: Callable[[], Awaitable[None]] | None = None,
    ) -> ToolResult:
        """Run one tool call end to end; every failure comes back as a result."""
        result = await self._execute(call, idempotency_key, before_run)
        await self.gate.emit(
            "tool_call",
            {
                "call_id": call.id,
                "tool": call.name,
                "args": call.arguments,
                "status": result.status,
                "ok": result.ok,
                "changed_workspace": result.changed_workspace,
                "executions": result.executions,
                "error": result.error,
            },
        )
        return result

    async def _execute(
        self,
        call: ToolCall,
        idempotency_key: str,
        before_run: Callable[[], Awaitable[None]] | None,
    ) -> ToolResult:
        tool_ = self._tools.get(call.name)
        if tool_ is None:
            known = ", ".join(sorted(self._tools)) or "none"
            message = f"unknown tool {call.name!r}; tools: {known}"
            return _failure(ToolError(message, code="TOOL_UNKNOWN"))
        problems = validate_args(tool_.parameters, call.arguments)
        if problems:
            message = f"invalid arguments for {tool_.name}: " + "; ".join(problems)
            return _failure(ToolError(message, code="TOOL_ARGS"))
        args = dict(call.arguments)
        gate = await self._gate(call, tool_, args)
        if gate is not None:
            return gate
        if before_run is not None:
            await before_run()
        return await self._run(tool_, args, call, idempotency_key)

    async def _gate(self, call: ToolCall, tool_: Tool, args: dict[str, Any]) -> ToolResult | None:
        """Containment, then the gate (policy, approver); a result means the call stops here."""
        try:
            act_target = tool_.resolve_target(args, self.workspace)
        except RefusedError as err:
            refused = await self.gate.refuse("containment", err, call.name, call.id)
            return _failure(refused.error, status="refused")
        except Exception as exc:  # an unreadable path component, say: not retried
            return _failure(wrap_unknown(exc))
        if act_target is None:
            return None
        stop = await self.gate.check(
            *act_target,
            tool=tool_.name,
            preview=lambda: _safe_preview(tool_, args, self.workspace),
            args=args,
            call_id=call.id,
        )
        if stop is None:
            return None
        if stop.kind == "deferred":
            deferred = _failure(stop.error, status="deferred")
            return dataclasses.replace(deferred, approval=stop.request)
        return _failure(stop.error, status="refused")

    async def _run(
        self, tool_: Tool, args: dict[str, Any], call: ToolCall, idempotency_key: str
    ) -> ToolResult:
        """Execute with per-effect retry; the same key on every attempt."""
        executions = 0
        while True:
            executions += 1
            ctx = ToolContext(
                workspace=self.workspace,
                idempotency_key=idempotency_key,
                command_timeout_s=self.command_timeout_s,
                policy=self.policy,
                run_id=self.run_id,
                call_id=call.id,
                attempt=executions,
            )
            try:
                output = await tool_.invoke(args, ctx)
            except Exception as exc:
                if retry_decision(tool_.effect, executions, exc):
                    log.debug("retrying %s after %r (execution %d)", tool_.name, exc, executions)
                    continue
                return _failure(wrap_unknown(exc), executions=executions)
            return ToolResult(
                ok=True,
                output=bound_output(output.text),
                changed_workspace=output.changed_workspace,
                executions=executions,
            )

    def __repr__(self) -> str:
        return f"ToolExecutor(tools={list(self._tools)}, policy={self.policy!r})"


def _failure(err: HarnessError, *, status: str = "error", executions: int = 0) -> ToolResult:
    return ToolResult(
        ok=False,
        output=bound_output(err.message),
        error=err.to_dict(),
        status=status,
        executions=executions,
    )


def _safe_preview(tool_: Tool, args: Mapping[str, Any], workspace: Workspace) -> str:
    try:
        return bound_output(tool_.preview(args, workspace), _PREVIEW_LIMIT)
    except Exception as exc:  # a preview is a courtesy; never let it block the decision
        return f"(no preview: {type(exc).__name__}: {exc})"


def builtin_tools() -> list[Tool]:
    """The workspace tools with their recorded model-facing names."""
    from ._workspace import workspace_tools

    return workspace_tools()
