"""@tool schemas, argument validation, per-effect retry and the ToolExecutor."""

from __future__ import annotations

import enum
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import pytest

import harnessnb as hn
from harnessnb import (
    ApprovalRequest,
    ApproveAll,
    ConfigError,
    Decision,
    DenyAll,
    Effect,
    HarnessError,
    Policy,
    ProviderError,
    ProviderErrorKind,
    RefusedError,
    SandboxError,
    StoreError,
    Tool,
    ToolCall,
    ToolError,
    ToolResult,
    tool,
)
from harnessnb.events import ApprovalDecidedEvent, RefusedEvent, ToolEvent
from harnessnb.tools._builtin import MAX_READ_BYTES, builtin_tools
from harnessnb.tools._executor import MAX_EXECUTIONS, ToolExecutor, retry_decision
from harnessnb.tools._protocol import ToolContext, ToolOutput, bound_output
from harnessnb.tools._schema import schema_problems, validate_args
from harnessnb.tools._workspace import Workspace

# ---------------------------------------------------------------- @tool schemas


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


def publish(
    title: str,
    count: int,
    ratio: float = 0.5,
    draft: bool = False,
    tags: list[str] | None = None,
    meta: dict[str, Any] | None = None,
    mode: Literal["fast", "slow"] = "fast",
    colour: Colour = Colour.RED,
    note: Optional[str] = None,  # noqa: UP045 - the old spelling must work too
    idempotency_key: str | None = None,
) -> str:
    """Publish a post to the blog.

    Longer explanation on a second paragraph.

    Args:
        title: The post title.
        count (int): How many copies; continues
            on a second line.
        ratio: Mix ratio.

    Returns:
        The post URL.
    """
    return title


def test_schema_from_signature_and_docstring() -> None:
    t = tool(effect=Effect.WRITE)(publish)
    assert t.name == "publish"
    assert t.effect is Effect.WRITE
    assert (
        t.description == "Publish a post to the blog.\n\nLonger explanation on a second paragraph."
    )
    assert t.parameters == {
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "The post title."},
            "count": {
                "type": "integer",
                "description": "How many copies; continues on a second line.",
            },
            "ratio": {"type": "number", "description": "Mix ratio.", "default": 0.5},
            "draft": {"type": "boolean", "default": False},
            "tags": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "default": None,
            },
            "meta": {"anyOf": [{"type": "object"}, {"type": "null"}], "default": None},
            "mode": {"enum": ["fast", "slow"], "type": "string", "default": "fast"},
            "colour": {"enum": ["red", "blue"], "type": "string"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["title", "count"],
        "additionalProperties": False,
    }
    assert t.spec() == {"name": "publish", "description": t.description, "parameters": t.parameters}


def test_bare_decorator_on_an_async_function() -> None:
    @tool
    async def lookup(query: str) -> str:
        """Look something up."""
        return query

    assert isinstance(lookup, Tool)
    assert (lookup.name, lookup.effect, lookup.description) == (
        "lookup",
        Effect.READ,
        "Look something up.",
    )
    assert lookup.parameters["required"] == ["query"]
    assert lookup.target({"query": "x"}) is None  # READ user tools are not policy-checked


def test_name_and_description_overrides_and_public_decorator() -> None:
    @hn.tool(effect=hn.Effect.IDEMPOTENT, name="save", description="Save it.")
    def f(x: int) -> None:
        pass

    assert (f.name, f.description, f.effect) == ("save", "Save it.", Effect.IDEMPOTENT)
    assert f.target({"x": 1}) == ("exec", "tool:save")


@pytest.mark.parametrize(
    "fn",
    [lambda *args: None, lambda **kw: None, lambda x, /: None],
)
def test_unnamed_parameters_are_refused(fn: Any) -> None:
    with pytest.raises(ConfigError):
        tool(fn)


def test_unsupported_types_are_refused() -> None:
    def f(x: complex) -> None:
        pass

    with pytest.raises(ConfigError, match="unsupported type"):
        tool(f)


def test_a_tool_can_still_be_called_directly() -> None:
    assert tool(publish)("T", 1) == "T"


# ---------------------------------------------------------------- validation

SCHEMA = tool(publish).parameters


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"title": "t", "count": 1}, None),
        ({"title": "t", "count": 1, "tags": ["a"], "note": None, "mode": "slow"}, None),
        ({"title": "t"}, "missing required 'count'"),
        ({"title": "t", "count": "1"}, "count: expected integer, got string"),
        ({"title": "t", "count": True}, "count: expected integer, got boolean"),
        ({"title": "t", "count": 1.5}, "count: expected integer, got number"),
        ({"title": "t", "count": 1, "ratio": 1}, None),  # an integer is a number
        ({"title": "t", "count": 1, "mode": "medium"}, "'medium' is not one of"),
        ({"title": "t", "count": 1, "tags": [1]}, "matches none of the allowed forms"),
        ({"title": "t", "count": 1, "extra": 1}, "unexpected 'extra'"),
        ("not an object", "expected object, got string"),
    ],
)
def test_validate_args(args: Any, problem: str | None) -> None:
    problems = validate_args(SCHEMA, args)
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


class Ticket(Tool):
    """A user tool with a hand-written schema using pattern, minimum and enum."""

    name = "file_ticket"
    description = "File a ticket."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "key": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"},
            "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            "queue": {"enum": ["ops", "dev"]},
        },
        "required": ["key", "priority", "queue"],
        "additionalProperties": False,
    }

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(f"filed {args['key']} p{args['priority']} in {args['queue']}")


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"key": "abc", "priority": 1, "queue": "ops"}, "key: 'abc' does not match the pattern"),
        ({"key": "OPS-1", "priority": 0, "queue": "ops"}, "priority: 0 is less than the minimum"),
        ({"key": "OPS-1", "priority": 9, "queue": "ops"}, "priority: 9 is greater than the max"),
        ({"key": "OPS-1", "priority": 1, "queue": "qa"}, "queue: 'qa' is not one of ['ops', "),
    ],
)
async def test_a_schema_pattern_minimum_or_enum_violation_is_a_tool_args_error(
    ws: Workspace, args: dict[str, Any], problem: str
) -> None:
    result = await run(make(ws, Ticket()), "file_ticket", **args)
    assert (result.ok, result.status, result.executions) == (False, "error", 0)
    assert result.error is not None and result.error["code"] == "TOOL_ARGS"
    assert result.output.startswith("invalid arguments for file_ticket: ")
    assert problem in result.output


async def test_arguments_that_satisfy_the_schema_run_the_tool(ws: Workspace) -> None:
    result = await run(make(ws, Ticket()), "file_ticket", key="OPS-12", priority=5, queue="dev")
    assert (result.ok, result.output, result.executions) == (True, "filed OPS-12 p5 in dev", 1)


async def test_every_violation_is_reported_at_once(ws: Workspace) -> None:
    result = await run(make(ws, Ticket()), "file_ticket", key="x", priority=0, colour="red")
    for problem in (
        "key: 'x' does not match",
        "priority: 0 is less than",
        "missing required 'queue'",
        "unexpected 'colour' (allowed: key, priority, queue)",
    ):
        assert problem in result.output, result.output


async def test_derived_literal_and_annotated_keywords_are_enforced(ws: Workspace) -> None:
    ran: list[tuple[str, int, str]] = []

    @tool
    def label(
        tag: Annotated[str, {"pattern": "^[a-z]+$", "maxLength": 8}],
        weight: Annotated[int, {"minimum": 1}],
        shade: Literal["light", "dark"] = "light",
    ) -> str:
        """Label a thing."""
        ran.append((tag, weight, shade))
        return "ok"

    assert label.parameters["properties"]["tag"] == {
        "type": "string",
        "pattern": "^[a-z]+$",
        "maxLength": 8,
    }
    executor = make(ws, label)
    bad = await run(executor, "label", tag="Bad Name", weight=0, shade="pink")
    assert bad.error is not None and bad.error["code"] == "TOOL_ARGS"
    for problem in ("tag: 'Bad Name' does not match the pattern '^[a-z]+$'",
                    "weight: 0 is less than the minimum of 1",
                    "shade: 'pink' is not one of ['light', 'dark']"):  # fmt: skip
        assert problem in bad.output, bad.output
    too_long = await run(executor, "label", tag="abcdefghij", weight=1)
    assert "tag: must be at most 8 character(s), got 10" in too_long.output
    good = await run(executor, "label", tag="box", weight=2, shade="dark")
    assert good.ok and ran == [("box", 2, "dark")]


def test_a_tool_whose_schema_is_not_json_schema_is_refused_up_front(ws: Workspace) -> None:
    class Broken(Ticket):
        name = "broken"
        parameters = {"type": "object", "properties": {"n": {"type": "integr"}}}  # noqa: RUF012

    with pytest.raises(ConfigError, match=r"tool 'broken'.*not a valid JSON Schema"):
        make(ws, Broken())
    with pytest.raises(ConfigError, match="not a valid JSON Schema"):

        @tool
        def f(n: Annotated[int, {"minimum": "one"}]) -> None:
            pass


def test_every_built_in_schema_passes_the_check_the_first_run_skips() -> None:
    # The built-in schemas are trusted at run time (``shipped``: a first run compiles
    # no meta-schema); this is the check they would get.
    for t in builtin_tools():
        assert schema_problems(t.parameters) == [], t.name


def test_a_later_drafts_assertion_is_refused_not_skipped(ws: Workspace) -> None:
    # fastjsonschema enforces drafts 4 to 7: prefixItems would silently check nothing.
    class Pairs(Ticket):
        name = "pairs"
        parameters = {  # noqa: RUF012
            "type": "object",
            "properties": {"pair": {"type": "array", "prefixItems": [{"type": "string"}]}},
        }

    with pytest.raises(ConfigError, match=r"tool 'pairs'.*'prefixItems' is a keyword of a later"):
        make(ws, Pairs())


def test_a_ref_to_another_document_is_refused_unfetched(ws: Workspace) -> None:
    from harnessnb.chaos import ChaosServer

    with ChaosServer() as srv:

        class Remote(Ticket):
            name = "remote"
            parameters = {  # noqa: RUF012
                "type": "object",
                "properties": {"n": {"$ref": f"{srv.url}/schema.json"}},
            }

        with pytest.raises(ConfigError, match=r"tool 'remote'.*names another document"):
            make(ws, Remote())
        assert srv.requests == []


def test_format_stays_an_annotation() -> None:
    schema = {"type": "object", "properties": {"to": {"type": "string", "format": "email"}}}
    assert validate_args(schema, {"to": "not an address"}) == []


# ---------------------------------------------------------------- bounding and results


def test_bound_output_keeps_head_and_tail() -> None:
    text = "A" * 100 + "B" * 100
    out = bound_output(text, limit=20)
    assert out == "A" * 10 + "\n... [180 chars elided] ...\n" + "B" * 10
    assert bound_output("short", limit=20) == "short"


def test_message_content_for_errors_names_the_code() -> None:
    result = ToolResult(ok=False, output="no such file: x", error={"code": "FILE_NOT_FOUND"})
    assert result.to_message_content() == "ERROR [FILE_NOT_FOUND] no such file: x"
    assert ToolResult(ok=True, output="").to_message_content() == "(no output)"


# ---------------------------------------------------------------- retry decision

TRANSIENT = [
    TimeoutError("slow"),
    ConnectionResetError("reset"),
    SandboxError("t", reason="timeout"),
    ProviderError("busy", kind=ProviderErrorKind.SERVER),
    StoreError("locked", kind="busy"),
]
PERMANENT = [
    ValueError("bad"),
    FileNotFoundError("x"),
    RefusedError("no", act="write", target="x"),
    ToolError("args", code="TOOL_ARGS"),
    ToolError("no match", code="EDIT_NO_MATCH"),
    SandboxError("b", reason="binary"),
    SandboxError("b", reason="too_large"),
    ProviderError("auth", kind=ProviderErrorKind.AUTH),
    HarnessError("wrapped", code="UNKNOWN"),
]


@pytest.mark.parametrize("error", TRANSIENT, ids=repr)
def test_transient_errors_retry_for_read_and_idempotent_only(error: BaseException) -> None:
    assert retry_decision(Effect.READ, 1, error)
    assert retry_decision(Effect.IDEMPOTENT, 2, error)
    assert not retry_decision(Effect.WRITE, 1, error)
    assert not retry_decision(Effect.READ, MAX_EXECUTIONS, error)


@pytest.mark.parametrize("error", PERMANENT, ids=repr)
@pytest.mark.parametrize("effect", list(Effect))
def test_permanent_errors_never_retry(effect: Effect, error: BaseException) -> None:
    assert not retry_decision(effect, 1, error)


# ---------------------------------------------------------------- executor fixtures


class Recorder:
    def __init__(self) -> None:
        self.events: list[ToolEvent] = []

    async def __call__(self, event: ToolEvent) -> None:
        self.events.append(event)

    def names(self) -> list[str]:
        return [event.kind for event in self.events]


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    (tmp_path / "README.md").write_text("# Title\nhello\n")
    (tmp_path / "dup.txt").write_text("a a\n")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01")
    (tmp_path / "big.txt").write_bytes(b"x" * (MAX_READ_BYTES + 1))
    return Workspace(tmp_path)


def make(
    ws: Workspace,
    *extra: Tool,
    policy: Policy | None = None,
    approver: Any = None,
    recorder: Recorder | None = None,
    timeout: float = 5.0,
) -> ToolExecutor:
    return ToolExecutor(
        ws,
        policy=policy or Policy.permissive(),
        approver=approver,
        tools=[*builtin_tools(), *extra],
        run_id="run-1",
        on_event=recorder,
        command_timeout_s=timeout,
    )


async def run(executor: ToolExecutor, name: str, **args: Any) -> ToolResult:
    return await executor.execute(ToolCall("c1", name, args), idempotency_key="key-1")


def flaky(effect: Effect, failures: int, error: Exception) -> tuple[Tool, list[str | None]]:
    """A tool failing ``failures`` times, recording the key each execution saw."""
    seen: list[str | None] = []

    @tool(effect=effect, name=f"flaky_{effect.value}")
    async def body(idempotency_key: str | None = None) -> str:
        seen.append(idempotency_key)
        if len(seen) <= failures:
            raise error
        return "done"

    return body, seen


# ---------------------------------------------------------------- per-effect retry


async def test_read_tool_failing_twice_then_succeeding_runs_three_times(ws: Workspace) -> None:
    t, seen = flaky(Effect.READ, 2, ConnectionError("blip"))
    result = await run(make(ws, t), t.name)
    assert (result.ok, result.output, result.executions, len(seen)) == (True, "done", 3, 3)


async def test_read_tool_failing_always_stops_after_three(ws: Workspace) -> None:
    t, seen = flaky(Effect.READ, 99, TimeoutError("slow"))
    result = await run(make(ws, t), t.name)
    assert (result.ok, result.executions, len(seen)) == (False, 3, 3)
    assert result.error is not None and result.error["code"] == "UNKNOWN"


async def test_idempotent_tool_sees_the_same_key_on_every_attempt(ws: Workspace) -> None:
    t, seen = flaky(Effect.IDEMPOTENT, 2, ConnectionError("blip"))
    result = await run(make(ws, t), t.name)
    assert result.ok and result.executions == 3
    assert seen == ["key-1", "key-1", "key-1"]


async def test_write_tool_runs_exactly_once_even_when_it_fails(ws: Workspace) -> None:
    t, seen = flaky(Effect.WRITE, 1, ConnectionError("blip"))
    result = await run(make(ws, t), t.name)
    assert (result.ok, result.executions, len(seen)) == (False, 1, 1)


async def test_non_transient_failure_of_a_read_tool_is_not_retried(ws: Workspace) -> None:
    t, seen = flaky(Effect.READ, 1, ValueError("bad input"))
    result = await run(make(ws, t), t.name)
    assert (result.ok, result.executions, len(seen)) == (False, 1, 1)


async def test_before_run_is_awaited_once_before_the_first_execution(ws: Workspace) -> None:
    t, seen = flaky(Effect.IDEMPOTENT, 2, ConnectionError("blip"))
    calls: list[int] = []

    async def before_run() -> None:
        calls.append(len(seen))

    await make(ws, t).execute(ToolCall("c", t.name, {}), idempotency_key="k", before_run=before_run)
    assert calls == [0]


# ---------------------------------------------------------------- failure paths carry {name, code}

FAILURES = [
    # (tool, args, status, name, code)
    ("read_file", {"path": 3}, "error", "ToolError", "TOOL_ARGS"),
    ("read_file", {}, "error", "ToolError", "TOOL_ARGS"),
    ("read_file", {"path": "nope.txt"}, "error", "ToolError", "FILE_NOT_FOUND"),
    (
        "edit_file",
        {"path": "dup.txt", "old": "a", "new": "b"},
        "error",
        "ToolError",
        "EDIT_NOT_UNIQUE",
    ),
    (
        "edit_file",
        {"path": "dup.txt", "old": "zz", "new": "b"},
        "error",
        "ToolError",
        "EDIT_NO_MATCH",
    ),
    ("read_file", {"path": "blob.bin"}, "error", "SandboxError", "SANDBOX_BINARY"),
    ("read_file", {"path": "big.txt"}, "error", "SandboxError", "SANDBOX_TOO_LARGE"),
    ("read_file", {"path": "../etc/passwd"}, "refused", "RefusedError", "REFUSED"),
    ("read_file", {"path": ".env"}, "refused", "RefusedError", "REFUSED"),
    ("no_such_tool", {}, "error", "ToolError", "TOOL_UNKNOWN"),
    ("grep", {"pattern": "("}, "error", "ToolError", "TOOL_ARGS"),
    ("run_command", {"argv": []}, "error", "ToolError", "TOOL_ARGS"),
]


@pytest.mark.parametrize(("name", "args", "status", "error_name", "code"), FAILURES)
async def test_every_failure_is_a_result_with_name_and_code(
    ws: Workspace, name: str, args: dict[str, Any], status: str, error_name: str, code: str
) -> None:
    result = await run(make(ws), name, **args)
    assert (result.ok, result.status) == (False, status)
    assert result.error is not None
    assert (result.error["name"], result.error["code"]) == (error_name, code)
    assert result.to_message_content().startswith(f"ERROR [{code}] ")


async def test_timeout_result_keeps_partial_output(ws: Workspace) -> None:
    argv = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"]
    result = await run(make(ws, timeout=0.5), "run_command", argv=argv)
    assert result.error is not None
    assert (result.status, result.error["name"], result.error["code"]) == (
        "error",
        "SandboxError",
        "SANDBOX_TIMEOUT",
    )
    assert "started" in result.output
    assert result.executions == 1  # run_command is WRITE: never repeated


async def test_user_tool_raising_value_error_is_wrapped_as_unknown(ws: Workspace) -> None:
    @tool
    def explode() -> str:
        raise ValueError("kaput")

    result = await run(make(ws, explode), "explode")
    assert result.error is not None
    assert (result.error["name"], result.error["code"]) == ("HarnessError", "UNKNOWN")
    assert result.to_message_content() == "ERROR [UNKNOWN] ValueError: kaput"


async def test_user_tool_output_shapes(ws: Workspace) -> None:
    @tool
    def shapes(kind: str) -> Any:
        return {"dict": {"a": 1}, "none": None, "out": ToolOutput("x", changed_workspace=True)}[
            kind
        ]

    ex = make(ws, shapes)
    assert (await run(ex, "shapes", kind="dict")).output == '{"a": 1}'
    assert (await run(ex, "shapes", kind="none")).to_message_content() == "(no output)"
    assert (await run(ex, "shapes", kind="out")).changed_workspace is True


async def test_outputs_are_bounded(ws: Workspace) -> None:
    (ws.root / "long.txt").write_text("x" * 50_000)
    result = await run(make(ws), "read_file", path="long.txt")
    assert len(result.output) < 16_100 and "chars elided" in result.output


# ---------------------------------------------------------------- changed_workspace


async def test_changed_workspace_through_the_executor(ws: Workspace) -> None:
    ex = make(ws)
    same = await run(ex, "write_file", path="README.md", content="# Title\nhello\n")
    new = await run(ex, "write_file", path="README.md", content="# New\n")
    edit = await run(ex, "edit_file", path="README.md", old="New", new="Newer")
    read = await run(ex, "read_file", path="README.md")
    assert [r.changed_workspace for r in (same, new, edit, read)] == [False, True, True, False]


# ---------------------------------------------------------------- policy and approval


async def test_containment_refusal_does_no_io_and_skips_everything_after(ws: Workspace) -> None:
    rec = Recorder()
    calls: list[str] = []

    async def before_run() -> None:
        calls.append("before_run")

    result = await make(ws, approver=lambda r: calls.append("approver"), recorder=rec).execute(
        ToolCall("c1", "write_file", {"path": "../escape.txt", "content": "x"}),
        idempotency_key="k",
        before_run=before_run,
    )
    assert result.status == "refused" and result.executions == 0
    assert result.error is not None
    assert (result.error["rule"], result.error["layer"]) == ("containment", "workspace")
    assert not (ws.root.parent / "escape.txt").exists()
    assert calls == []
    assert rec.names() == ["refused", "tool_call"]
    assert isinstance(rec.events[0], RefusedEvent) and rec.events[0].source == "containment"


async def test_policy_deny_names_rule_and_layer_and_never_asks(ws: Workspace) -> None:
    asked: list[ApprovalRequest] = []
    policy = Policy.default().layer("app").deny_write("README.md")
    ex = make(ws, policy=policy, approver=lambda r: asked.append(r) or True)
    result = await run(ex, "write_file", path="./README.md", content="x")
    assert result.status == "refused" and asked == []
    assert result.error is not None
    assert (result.error["act"], result.error["target"]) == ("write", "README.md")
    assert (result.error["rule"], result.error["layer"]) == ("deny write README.md", "app")
    assert "deny write README.md" in result.output
    assert (ws.root / "README.md").read_text() == "# Title\nhello\n"


async def test_symlink_to_a_secret_is_judged_by_what_it_points_to(ws: Workspace) -> None:
    (ws.root / ".env").write_text("KEY=1")
    (ws.root / "notes.txt").symlink_to(".env")
    result = await run(make(ws, policy=Policy.default()), "read_file", path="notes.txt")
    assert result.status == "refused"
    assert result.error is not None and result.error["target"] == ".env"


async def test_ask_goes_to_the_approver_with_a_diff_preview(ws: Workspace) -> None:
    rec = Recorder()
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> Decision:
        asked.append(request)
        return Decision.approve()

    ex = make(ws, policy=Policy.default(), approver=approver, recorder=rec)
    result = await run(ex, "edit_file", path="README.md", old="hello", new="bye")
    assert result.ok
    (request,) = asked
    assert (request.act, request.target, request.tool, request.rule) == (
        "write",
        "README.md",
        "edit_file",
        None,
    )
    assert "-hello\n+bye\n" in request.preview
    assert rec.names() == ["approval_requested", "approval_decided", "tool_call"]
    assert isinstance(rec.events[1], ApprovalDecidedEvent)
    assert rec.events[1].decision == "approve"
    assert rec.events[0].run_id == "run-1"


async def test_approver_deny_reason_reaches_the_model(ws: Workspace) -> None:
    ex = make(ws, policy=Policy.default(), approver=DenyAll(reason="not on Fridays"))
    result = await run(ex, "run_command", argv=["echo", "hi"])
    assert result.status == "refused"
    assert "not on Fridays" in result.to_message_content()
    assert result.error is not None and result.error["target"] == "echo hi"


async def test_approver_defer_gives_a_deferred_result_with_the_request(ws: Workspace) -> None:
    ran: list[str] = []

    async def before_run() -> None:
        ran.append("x")

    ex = make(ws, policy=Policy.default(), approver=lambda r: Decision.defer())
    result = await ex.execute(
        ToolCall("c9", "write_file", {"path": "N.md", "content": "x"}),
        idempotency_key="k",
        before_run=before_run,
    )
    assert (result.ok, result.status, result.executions) == (False, "deferred", 0)
    assert result.error is not None and result.error["code"] == "APPROVAL_DEFERRED"
    assert result.approval is not None and result.approval.call_id == "c9"
    assert ran == [] and not (ws.root / "N.md").exists()


async def test_no_approver_refuses_with_a_hint_how_to_allow(ws: Workspace) -> None:
    result = await run(make(ws, policy=Policy.default()), "write_file", path="N.md", content="x")
    assert result.status == "refused"
    assert "--allow-write GLOB" in result.output
    assert 'policy=hn.Policy.default().layer("app").allow_write("GLOB")' in result.output


async def test_user_write_tool_is_checked_as_exec_of_its_name(ws: Workspace) -> None:
    @tool(effect=Effect.WRITE)
    def publish_it(title: str) -> str:
        return "published"

    refused = await run(make(ws, publish_it, policy=Policy.default()), "publish_it", title="t")
    assert refused.error is not None and refused.error["target"] == "tool:publish_it"
    allowed = Policy.default().layer("app").allow_exec("tool:publish_it")
    assert (await run(make(ws, publish_it, policy=allowed), "publish_it", title="t")).ok


async def test_approve_all_lets_asks_through(ws: Workspace) -> None:
    ex = make(ws, policy=Policy.default(), approver=ApproveAll())
    assert (await run(ex, "write_file", path="N.md", content="x")).ok


async def test_a_failing_event_listener_does_not_change_the_result(ws: Workspace) -> None:
    def broken(event: ToolEvent) -> None:
        raise RuntimeError("listener bug")

    ex = ToolExecutor(
        ws, policy=Policy.permissive(), approver=None, tools=builtin_tools(), on_event=broken
    )
    assert (await run(ex, "read_file", path="README.md")).ok


def test_duplicate_tool_names_are_a_config_error(ws: Workspace) -> None:
    with pytest.raises(ConfigError):
        ToolExecutor(ws, policy=Policy(), approver=None, tools=[*builtin_tools(), *builtin_tools()])


def test_specs_and_get(ws: Workspace) -> None:
    ex = make(ws)
    assert [s["name"] for s in ex.specs()] == [
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "find_files",
        "grep",
        "run_command",
    ]
    assert ex.get("grep") is not None and ex.get("nope") is None


def test_context_may_read_follows_the_policy(ws: Workspace) -> None:
    ctx = ToolContext(workspace=ws, policy=Policy.default())
    assert ctx.may_read("README.md") and not ctx.may_read("a/.env")


def test_public_names() -> None:
    assert (hn.Effect, hn.Tool, hn.ToolResult, hn.tool) == (Effect, Tool, ToolResult, tool)
