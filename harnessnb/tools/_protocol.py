"""The tool protocol: what the model can call and what each call may do.

A tool declares an ``Effect``:

* ``READ``: no side effect; a failed execution may be repeated freely;
* ``IDEMPOTENT``: repeats collapse given the same idempotency key; a retry reuses the
  call's key (drawn once per call by the loop, reused on resume);
* ``WRITE``: may land once; never repeated on a guess.

A tool is a ``Tool`` subclass, or a typed function under ``@tool`` (its schema comes
from the signature, see ``_schema``). Its body gets a ``ToolContext`` and returns a
``ToolOutput``; the executor (``_executor``) turns every outcome into a ``ToolResult``.

Policy targets of user tools (``@tool``): a READ tool is not checked (like reading a
file, it changes nothing); an IDEMPOTENT or WRITE tool is checked as
``("exec", "tool:NAME")``, so ``Policy.default()`` asks before a side effect and
``allow_exec("tool:publish")`` lets one through.

A tool may be judged even when READ (``Tool.read_only``: an MCP server's tool, whose
``mcp:SERVER/TOOL`` target a deny or ask rule can name): the act's default verdict
then allows it, a rule that matches decides. ``Tool.also_judged`` names further
(act, target) pairs a call needs (an MCP tool that reaches the open world: ``net *``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, overload

from ..rules._policy import Policy
from ..rules._text import clip
from ._approval import ApprovalRequest
from ._blocking import run_blocking
from ._schema import parse_docstring, schema_from_signature

if TYPE_CHECKING:
    from ._workspace import Workspace

__all__ = [
    "OUTPUT_LIMIT",
    "PREVIEW_LIMIT",
    "Effect",
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolResult",
    "bound_output",
    "tool",
]

OUTPUT_LIMIT = 16_000
PREVIEW_LIMIT = 4_000


class Effect(enum.Enum):
    """What a tool does to the world, which decides whether a failure may be retried."""

    READ = "read"
    IDEMPOTENT = "idempotent"
    WRITE = "write"


# ------------------------------------------------------------------ results


def bound_output(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, head and tail kept, the elision marked
    (``rules._text.clip``: the marker is part of recorded requests)."""
    return clip(text, limit)


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
    pending request of a deferred call; ``sandbox`` is the backend a command ran in
    (``bubblewrap``, ``none``...; None for a tool that runs no command), for the tool
    row only: the model's text never names it, so a recording replays on any backend.
    ``server`` is the MCP server that serves the tool (None for the others); a failed
    MCP call's ``error`` carries its ``kind``.
    """

    ok: bool
    output: str
    changed_workspace: bool = False
    error: dict[str, Any] | None = None
    status: str = "ok"
    executions: int = 0
    approval: ApprovalRequest | None = None
    sandbox: str | None = None
    server: str | None = None

    def to_message_content(self) -> str:
        """The tool message text: the output, or ``ERROR [code] message`` on failure."""
        if self.ok:
            return self.output or "(no output)"
        code = (self.error or {}).get("code", "UNKNOWN")
        return f"ERROR [{code}] {self.output}"


@dataclasses.dataclass
class ToolContext:
    """What a tool body may use besides its arguments.

    ``judged`` is the (act, target) the gate passed for this call, so a file tool can
    tell the path it actually walked from the one a person approved. ``sandbox`` is
    set by a tool body that ran a command: the backend it ran in, for the tool row.
    """

    workspace: Workspace
    idempotency_key: str | None = None
    command_timeout_s: float = 30.0
    policy: Policy | None = None
    run_id: str | None = None
    call_id: str | None = None
    attempt: int = 1
    judged: tuple[str, str] | None = None
    sandbox: str | None = None

    def may_read(self, relative_path: str) -> bool:
        """True when the policy outright allows reading this path (grep skips the rest)."""
        return self.policy is None or self.policy.explain("read", relative_path).allowed

    def hides(self, relative_path: str) -> bool:
        """True when the policy denies reading this path: listings leave its name out."""
        return self.policy is not None and self.policy.explain("read", relative_path).denied


# ------------------------------------------------------------------ the protocol


class Tool:
    """A tool the model can call. Subclass it, or use ``@tool`` on a function.

    Attributes:
        name: The model-facing name.
        description: What the tool does, for the model.
        parameters: A JSON schema of type object for the arguments.
        effect: READ, IDEMPOTENT or WRITE.
        read_only: True when the tool is judged although it changes nothing: a
            verdict from the act's default allows it, a matching rule decides.
        server: The MCP server serving the tool (None: not an MCP tool).
    """

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012
    effect: Effect = Effect.READ
    read_only: bool = False
    server: str | None = None

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

    def argument_schema(self) -> dict[str, Any]:
        """The schema a call's arguments are checked against (``parameters``)."""
        return self.parameters

    def also_judged(self, args: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        """More (act, target) pairs the gate judges before the call runs (none here)."""
        return ()

    async def before_retry(self, error: BaseException) -> bool:
        """Called before the executor runs the tool again after ``error`` (a retry its
        effect allows); False: no retry, the call fails with ``error``."""
        return True

    def preview(self, args: Mapping[str, Any], workspace: Workspace) -> str:
        """What an approver is shown; the arguments unless a tool knows better."""
        return bound_output(json.dumps(dict(args), ensure_ascii=False, default=str), PREVIEW_LIMIT)

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
            # A sync body may block (HTTP, disk): keep it off the loop thread, on a
            # daemon thread, so one abandoned at the run's deadline cannot hold exit.
            value = await run_blocking(self.fn, **kwargs)
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
    dict, Optional, Literal, Enum; defaults make a parameter optional;
    ``Annotated[str, {"pattern": "^[a-z]+$"}]`` adds JSON Schema keywords) and the
    Google-style docstring (summary and ``Args:``). Arguments are checked against
    it before the body runs; a violation is a ``TOOL_ARGS`` error the model sees.
    A parameter named ``idempotency_key`` is not shown to the model; it receives
    the call's key.
    """
    if fn is None:
        return lambda f: FunctionTool(f, effect=effect, name=name, description=description)
    return FunctionTool(fn, effect=effect, name=name, description=description)
