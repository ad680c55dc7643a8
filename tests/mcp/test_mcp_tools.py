"""MCP tools under the policy: effects from annotations only where trusted, the gate,
calls, a dead server's restart, and the tool set (names, skipped schemas, snapshot).

The behaviour tests call real MCP servers: the SDK's in-process ``MCPServer`` and
``mcp-server-git`` over stdio, each reached through ``mcp.Client`` by ``SDKSource``, a
test adapter to the ``Connection`` shape (an owner task holds the session, as the
SDK's cancel scopes need)."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from harnessnb import (
    ApprovalRequest,
    ApproveAll,
    ConfigError,
    DenyAll,
    Effect,
    HarnessError,
    Policy,
    ToolCall,
    ToolResult,
)
from harnessnb.mcp._tools import MCPTool, effect_of, unpatterned
from harnessnb.mcp._toolset import ToolServers
from harnessnb.tools._executor import ToolExecutor
from harnessnb.tools._gate import Gate
from harnessnb.tools._workspace import Workspace

# ------------------------------------------------------------------ test adapters


class StandInMCPError(HarnessError):
    """What ``Connection`` raises (``MCPError``): a kind and whether a retry may help."""

    CODE = "MCP"

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message, code=f"MCP_{kind.upper()}")
        self.kind = kind

    @property
    def retryable(self) -> bool:
        return self.kind in ("exited", "connection_closed", "timeout")

    def _fields(self) -> dict[str, Any]:
        return {"kind": self.kind}


@dataclasses.dataclass(frozen=True)
class Offered:
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, bool | None]


@dataclasses.dataclass(frozen=True)
class Called:
    text: str
    is_error: bool


@dataclasses.dataclass(frozen=True)
class Settings:
    """The fields of ``MCPServer`` the tool set reads."""

    name: str
    trusted: bool = False
    effects: Mapping[str, Effect] = dataclasses.field(default_factory=dict)
    transport: str = "stdio"

    def describe(self) -> str:
        return f"python -m {self.name}"


class SDKSource:
    """A real MCP session through ``mcp.Client``, shaped like ``Connection``."""

    def __init__(self, target: Callable[[], Any]) -> None:
        self._target = target
        self._client: Any = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sandbox: str | None = "none"

    async def start(self) -> None:
        ready = asyncio.Event()
        self._task = asyncio.create_task(self._own(ready))
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({self._task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if self._task.done():
            self._task.result()

    async def _own(self, ready: asyncio.Event) -> None:
        import mcp

        async with mcp.Client(self._target(), read_timeout_seconds=30) as client:
            self._client = client
            ready.set()
            await self._stop.wait()

    async def list_tools(self) -> list[Offered]:
        listed = await self._client.list_tools()
        return [
            Offered(
                t.name,
                t.description or "",
                dict(t.input_schema),
                (t.annotations.model_dump(by_alias=True) if t.annotations else {}),
            )
            for t in listed.tools
        ]

    async def call(
        self, tool: str, args: dict[str, Any], *, timeout_s: float | None = None
    ) -> Called:
        try:
            result = await self._client.call_tool(tool, dict(args))
        except Exception as exc:
            raise StandInMCPError(f"{type(exc).__name__}: {exc}", kind="connection_closed") from exc
        text = "\n".join(getattr(c, "text", "") for c in result.content)
        return Called(text, bool(result.is_error))

    async def end_session(self) -> None:
        """The session ends under the tool set's feet (a server that died)."""
        await self.aclose()

    async def aclose(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


def sdk_connect(target: Callable[[], Any], made: list[SDKSource]) -> Callable[..., SDKSource]:
    def connect(server: Any, **_: Any) -> SDKSource:
        source = SDKSource(target)
        made.append(source)
        return source

    return connect


def in_process_server() -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    server = MCPServer("fixture")
    calls: dict[str, int] = {}

    def counted(name: str) -> str:
        calls[name] = calls.get(name, 0) + 1
        return f"{name} #{calls[name]}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def look(path: str) -> str:
        """Look at a thing."""
        return counted("look") + f" at {path}"

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True))
    def put(key: str) -> str:
        """Store a key."""
        return counted("put")

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def wipe() -> str:
        """Wipe everything."""
        return counted("wipe")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
    def browse(url: str) -> str:
        """Read a web page."""
        return counted("browse")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def boom() -> str:
        """Always fails."""
        raise ValueError("kaboom")

    server.calls = calls  # type: ignore[attr-defined]
    return server


async def executor_for(
    tmp_path: Path,
    servers: ToolServers,
    *,
    policy: Policy | None = None,
    approver: Any = None,
    reserved: set[str] | None = None,
    requests: list[ApprovalRequest] | None = None,
) -> ToolExecutor:
    tools = await servers.open(reserved or set())

    def asked(request: ApprovalRequest) -> Any:
        if requests is not None:
            requests.append(request)
        return approver(request)

    return ToolExecutor(
        Workspace(tmp_path),
        policy=policy or Policy.default(),
        approver=None if approver is None else asked,
        tools=tools,
    )


async def call(executor: ToolExecutor, name: str, **args: Any) -> ToolResult:
    return await executor.execute(ToolCall("c1", name, args), idempotency_key="k1")


@pytest.fixture
async def fixture_servers(tmp_path: Path) -> Any:
    server = in_process_server()
    made: list[SDKSource] = []
    opened: list[ToolServers] = []

    def servers(settings: Settings) -> ToolServers:
        toolset = ToolServers(
            [settings],
            workspace=tmp_path,
            policy=Policy.default(),
            connect=sdk_connect(lambda: server, made),
        )
        opened.append(toolset)
        return toolset

    yield servers, server, made
    for toolset in opened:
        await toolset.aclose()


# ------------------------------------------------------------------ the mapping (unit)


def test_effects_come_from_hints_only_when_trusted() -> None:
    read = {"readOnlyHint": True}
    idem = {"idempotentHint": True, "readOnlyHint": False}
    assert effect_of(read, trusted=True) is Effect.READ
    assert effect_of(idem, trusted=True) is Effect.IDEMPOTENT
    assert effect_of({}, trusted=True) is Effect.WRITE
    assert effect_of({"destructiveHint": True}, trusted=True) is Effect.WRITE
    # Untrusted: WRITE whatever it claims; an override wins either way.
    assert effect_of(read, trusted=False) is Effect.WRITE
    assert effect_of(idem, trusted=False) is Effect.WRITE
    assert effect_of({}, trusted=False, override=Effect.READ) is Effect.READ
    assert effect_of(read, trusted=True, override=Effect.WRITE) is Effect.WRITE


class _Nowhere:
    sandbox = None

    async def call(
        self, tool: str, args: dict[str, Any], *, timeout_s: float | None = None
    ) -> Called:
        raise AssertionError("not called")

    async def restart(self, error: BaseException | None = None) -> bool:
        return False


def test_open_world_counts_only_when_said_and_trusted() -> None:
    def built(annotations: dict[str, bool | None], trusted: bool) -> MCPTool:
        offered = Offered("t", "", {"type": "object"}, annotations)
        return MCPTool(offered, server="s", source=_Nowhere(), trusted=trusted)

    said = {"readOnlyHint": True, "openWorldHint": True}
    assert built(said, True).also_judged({}) == (("net", "*"),)
    # The spec's default (absent means true) does not count: see the module docstring.
    assert built({"readOnlyHint": True}, True).also_judged({}) == ()
    assert built(said, False).also_judged({}) == ()  # asked anyway: WRITE
    assert built(said, True).target({}) == ("exec", "mcp:s/t")


def test_unpatterned_drops_regular_expressions_but_not_property_names() -> None:
    schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "pattern": "^(a+)+$"},
            "x": {"type": "object", "patternProperties": {"^a": {}}, "additionalProperties": False},
        },
        "required": ["pattern"],
    }
    assert unpatterned(schema) == {
        "type": "object",
        "properties": {"pattern": {"type": "string"}, "x": {"type": "object"}},
        "required": ["pattern"],
    }


# ------------------------------------------------------------------ the gate (unit)


async def test_a_read_only_check_takes_the_default_as_allow_but_rules_still_apply() -> None:
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> bool:
        asked.append(request)
        return False

    async def check(policy: Policy, *, read_only: bool) -> str | None:
        gate = Gate(policy, approver)
        stop = await gate.check("exec", "mcp:s/t", tool="t", preview=str, read_only=read_only)
        return None if stop is None else stop.kind

    default = Policy.default()
    assert await check(default, read_only=True) is None  # the exec default (ask): allowed
    assert await check(default, read_only=False) == "approver_denied"  # asked
    assert await check(default.deny_exec("mcp:s/*"), read_only=True) == "denied"
    assert await check(default.ask_exec("mcp:*"), read_only=True) == "approver_denied"
    assert [r.rule for r in asked] == [None, "ask exec mcp:*"]
    # A default deny is a default too: a read-only act passes it.
    assert await check(default.with_default("exec", "deny"), read_only=True) is None


# ------------------------------------------------------------------ behaviour: in-process server


async def test_trusted_read_runs_write_is_asked(tmp_path: Path, fixture_servers: Any) -> None:
    servers, server, _ = fixture_servers
    requests: list[ApprovalRequest] = []
    ex = await executor_for(
        tmp_path, servers(Settings("fx", trusted=True)), approver=DenyAll(), requests=requests
    )
    looked = await call(ex, "look", path="a<b>")
    assert looked.ok, looked
    assert looked.output == "look #1 at a<b>"
    assert looked.server == "fx"
    assert looked.sandbox == "none"
    for name in ("put", "wipe"):
        refused = await call(ex, name, **({"key": "k"} if name == "put" else {}))
        assert refused.status == "refused"
        assert refused.server == "fx"
    assert [(r.act, r.target, r.tool) for r in requests] == [
        ("exec", "mcp:fx/put", "put"),
        ("exec", "mcp:fx/wipe", "wipe"),
    ]
    assert "MCP server fx, tool put" in requests[0].preview
    assert '"key": "k"' in requests[0].preview
    assert "(destructive)" in requests[1].preview and "(destructive)" not in requests[0].preview
    assert server.calls == {"look": 1}  # nothing asked ran


async def test_the_approver_sees_arguments_scrubbed(tmp_path: Path, fixture_servers: Any) -> None:
    from harnessnb.rules._secrets import register

    key = "sk-mcp-" + "q7Zx" * 6
    register(key)
    servers, _, _ = fixture_servers
    requests: list[ApprovalRequest] = []
    ex = await executor_for(
        tmp_path, servers(Settings("fx")), approver=DenyAll(), requests=requests
    )
    await call(ex, "look", path=f"<b>{key}</b>")
    (request,) = requests
    assert key not in request.preview and "[redacted]" in request.preview
    assert "MCP server fx, tool look" in request.preview


async def test_untrusted_tools_are_all_asked_and_overrides_honoured(
    tmp_path: Path, fixture_servers: Any
) -> None:
    servers, server, _ = fixture_servers
    requests: list[ApprovalRequest] = []
    ex = await executor_for(
        tmp_path,
        servers(Settings("fx", effects={"put": Effect.READ})),
        approver=ApproveAll(),
        requests=requests,
    )
    assert {t: ex.get(t).effect for t in ("look", "put", "wipe")} == {  # type: ignore[union-attr]
        "look": Effect.WRITE,
        "put": Effect.READ,
        "wipe": Effect.WRITE,
    }
    assert (await call(ex, "look", path="p")).ok
    assert (await call(ex, "put", key="k")).ok
    assert [r.target for r in requests] == ["mcp:fx/look"]  # the override was not asked
    assert server.calls == {"look": 1, "put": 1}


async def test_an_effects_name_the_server_does_not_offer_is_a_config_error(
    tmp_path: Path, fixture_servers: Any
) -> None:
    servers, _, _ = fixture_servers
    toolset = servers(Settings("fx", effects={"nope": Effect.READ}))
    with pytest.raises(ConfigError, match="'nope'"):
        await toolset.open(set())


async def test_a_deny_rule_refuses_a_read_tool(tmp_path: Path, fixture_servers: Any) -> None:
    servers, server, _ = fixture_servers
    ex = await executor_for(
        tmp_path,
        servers(Settings("fx", trusted=True)),
        policy=Policy.default().deny_exec("mcp:*/look"),
        approver=ApproveAll(),
    )
    refused = await call(ex, "look", path="p")
    assert refused.status == "refused"
    assert refused.error is not None and "deny exec mcp:*/look" in refused.error["message"]
    assert server.calls == {}


async def test_open_world_needs_the_net_verdict(tmp_path: Path, fixture_servers: Any) -> None:
    servers, server, _ = fixture_servers
    ex = await executor_for(tmp_path, servers(Settings("fx", trusted=True)), approver=ApproveAll())
    refused = await call(ex, "browse", url="http://x")
    assert refused.status == "refused"
    assert refused.error is not None and refused.error["act"] == "net"
    ex2 = await executor_for(
        tmp_path,
        servers(Settings("fx", trusted=True)),
        policy=Policy.default().allow_net("*"),
        approver=ApproveAll(),
    )
    assert (await call(ex2, "browse", url="http://x")).ok
    assert server.calls == {"browse": 1}


async def test_a_tool_error_is_the_result_the_model_sees(
    tmp_path: Path, fixture_servers: Any
) -> None:
    servers, _, _ = fixture_servers
    ex = await executor_for(tmp_path, servers(Settings("fx", trusted=True)))
    failed = await call(ex, "boom")
    assert (failed.ok, failed.status, failed.executions) == (False, "error", 1)  # not retried
    assert failed.error is not None and failed.error["code"] == "MCP_TOOL_ERROR"
    assert "Error executing tool boom" in failed.output
    assert failed.server == "fx"


async def test_a_dead_server_is_restarted_once_for_a_read_never_for_a_write(
    tmp_path: Path, fixture_servers: Any
) -> None:
    servers, server, made = fixture_servers
    ex = await executor_for(
        tmp_path,
        servers(Settings("fx", trusted=True, effects={"wipe": Effect.WRITE})),
        approver=ApproveAll(),
    )
    # WRITE: the session died; never retried, so never restarted.
    await made[-1].end_session()
    wiped = await call(ex, "wipe")
    assert (wiped.ok, wiped.executions) == (False, 1)
    assert wiped.error is not None and wiped.error["code"] == "MCP_CONNECTION_CLOSED"
    assert (wiped.error["kind"], wiped.server) == ("connection_closed", "fx")
    assert len(made) == 1 and server.calls == {}
    # READ: restarted, then run again on the new session.
    looked = await call(ex, "look", path="p")
    assert (looked.ok, looked.executions) == (True, 2), looked
    assert len(made) == 2
    # Once per run: the second death is the call's failure.
    await made[-1].end_session()
    again = await call(ex, "look", path="p")
    assert (again.ok, again.executions) == (False, 1)
    assert len(made) == 2


async def test_calls_that_failed_together_share_one_restart(
    tmp_path: Path, fixture_servers: Any
) -> None:
    servers, _, made = fixture_servers
    ex = await executor_for(tmp_path, servers(Settings("fx", trusted=True)))
    await made[-1].end_session()
    first, second = await asyncio.gather(
        *(ex.execute(ToolCall(f"c{i}", "look", {"path": str(i)}), idempotency_key=f"k{i}")
          for i in (1, 2))
    )  # fmt: skip
    assert (first.ok, second.ok) == (True, True), (first, second)
    assert (first.executions, second.executions) == (2, 2)
    assert len(made) == 2  # one restart served both


# ------------------------------------------------------------------ the tool set


async def test_names_prefixed_only_where_they_clash(tmp_path: Path) -> None:
    server = in_process_server()
    made: list[SDKSource] = []
    toolset = ToolServers(
        [Settings("one", trusted=True), Settings("two")],
        workspace=tmp_path,
        policy=Policy.default(),
        connect=sdk_connect(lambda: server, made),
    )
    try:
        tools = await toolset.open({"look"})
        names = sorted(t.name for t in tools)
        assert "look" not in names
        assert {"one__look", "two__look", "one__wipe", "two__wipe"} <= set(names)
        snap = {s["server"]: s for s in toolset.snapshot()}
        assert snap["one"]["target"] == "python -m one"
        assert snap["one"]["sandbox"] == "none"
        assert snap["one"]["tools_hash"] == snap["two"]["tools_hash"]  # the same tools
        row = next(t for t in snap["one"]["tools"] if t["name"] == "look")
        assert row["offered_as"] == "one__look"
        assert row["effect"] == "read" and row["annotations"]["readOnlyHint"] is True
        untrusted = next(t for t in snap["two"]["tools"] if t["name"] == "look")
        assert untrusted["effect"] == "write"
    finally:
        await toolset.aclose()


def test_two_servers_with_one_name_are_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'git'"):
        ToolServers([Settings("git"), Settings("git")], workspace=tmp_path, policy=Policy())


class _Listing:
    """A server that lists what a test hands it (hostile schemas)."""

    sandbox = None

    def __init__(self, offered: list[Offered]) -> None:
        self.offered = offered
        self.closed = False

    async def start(self) -> None:
        return None

    async def list_tools(self) -> list[Offered]:
        return self.offered

    async def call(
        self, tool: str, args: dict[str, Any], *, timeout_s: float | None = None
    ) -> Called:
        return Called(f"{tool} ran", False)

    async def restart(self, error: BaseException | None = None) -> bool:
        return False

    async def aclose(self) -> None:
        self.closed = True


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


async def test_hostile_schemas_are_skipped_or_defused(tmp_path: Path) -> None:
    ok = {"type": "object", "properties": {}}
    redos = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(20_000)}}
    hostile = [
        Offered("fine", "", ok, {}),
        Offered("deep", "", _nested(2_000), {}),
        Offered("remote", "", {"type": "object", "$ref": "http://127.0.0.1:9/s.json"}, {}),
        Offered("redos", "", redos, {}),
        Offered("huge", "", huge, {}),
        Offered("bad.name", "", ok, {}),
        Offered("later", "", {"type": "object", "prefixItems": []}, {}),
    ]
    listing = _Listing(hostile)
    toolset = ToolServers(
        [Settings("h", effects={"redos": Effect.READ})],
        workspace=tmp_path,
        policy=Policy(),
        connect=lambda *_, **__: listing,
    )
    began = time.monotonic()
    tools = await toolset.open(set())
    assert sorted(t.name for t in tools) == ["fine", "redos"]
    skipped = {name: why for _, name, why in toolset.skipped}
    assert sorted(skipped) == ["bad.name", "deep", "huge", "later", "remote"]
    # Python 3.11's JSON encoder refuses 2,000 levels; 3.13's encodes them, too large.
    assert "nested too deeply" in skipped["deep"] or "characters of JSON" in skipped["deep"]
    assert "characters of JSON" in skipped["huge"]
    assert "another document" in skipped["remote"]
    # The snapshot holds every offered tool, the skipped ones too (offered_as None).
    (snap,) = toolset.snapshot()
    rows = {row["name"]: row for row in snap["tools"]}
    assert rows["deep"]["offered_as"] is None
    assert set(rows["deep"]["input_schema"]) == {"x-harnessnb"}  # no schema kept
    assert "too large to store" in rows["huge"]["input_schema"]["x-harnessnb"]
    assert rows["redos"]["effect"] == "read" and len(snap["tools_hash"]) == 64
    ex = ToolExecutor(Workspace(tmp_path), policy=Policy(), approver=None, tools=tools)
    # The backtracking pattern is not run here: the server checks its own patterns.
    ran = await call(ex, "redos", s="a" * 40 + "!")
    assert ran.ok and ran.output == "redos ran"
    assert time.monotonic() - began < 60  # a hang would never get here (not a timing claim)
    await toolset.aclose()
    assert listing.closed


async def test_aclose_after_a_failed_open_closes_the_started(tmp_path: Path) -> None:
    good = _Listing([])

    class Broken(_Listing):
        async def start(self) -> None:
            raise StandInMCPError("no such program", kind="spawn")

    made = iter([good, Broken([])])
    toolset = ToolServers(
        [Settings("a"), Settings("b")],
        workspace=tmp_path,
        policy=Policy(),
        connect=lambda *_, **__: next(made),
    )
    with pytest.raises(StandInMCPError, match="no such program"):
        await toolset.open(set())
    await toolset.aclose()
    assert good.closed


# ------------------------------------------------------------------ behaviour: mcp-server-git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    (folder / "a.txt").write_text("a\n")
    return folder


async def test_mcp_server_git_real_annotations(tmp_path: Path, repo: Path) -> None:
    from mcp import StdioServerParameters

    target = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server_git", "--repository", str(repo)]
    )
    made: list[SDKSource] = []
    toolset = ToolServers(
        [Settings("git", trusted=True)],
        workspace=tmp_path,
        policy=Policy.default(),
        connect=sdk_connect(lambda: target, made),
    )
    requests: list[ApprovalRequest] = []
    try:
        ex = await executor_for(tmp_path, toolset, approver=DenyAll(), requests=requests)
        effects = {t: ex.get(t).effect for t in ("git_status", "git_add", "git_reset")}  # type: ignore[union-attr]
        assert effects == {
            "git_status": Effect.READ,
            "git_add": Effect.IDEMPOTENT,
            "git_reset": Effect.IDEMPOTENT,  # it says idempotentHint too (and destructive)
        }
        status = await call(ex, "git_status", repo_path=str(repo))
        assert status.ok, status
        assert "a.txt" in status.output
        added = await call(ex, "git_add", repo_path=str(repo), files=["a.txt"])
        reset = await call(ex, "git_reset", repo_path=str(repo))
        assert (added.status, reset.status) == ("refused", "refused")
        assert [r.target for r in requests] == ["mcp:git/git_add", "mcp:git/git_reset"]
        assert "(destructive)" in requests[1].preview
        # Nothing was staged: the asked calls never ran.
        staged = subprocess.run(
            ["git", "-C", str(repo), "diff", "--cached", "--name-only"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert staged.stdout == ""
    finally:
        await toolset.aclose()


async def test_mcp_server_git_untrusted_asks_even_for_status(tmp_path: Path, repo: Path) -> None:
    from mcp import StdioServerParameters

    target = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server_git", "--repository", str(repo)]
    )
    toolset = ToolServers(
        [Settings("git")],
        workspace=tmp_path,
        policy=Policy.default(),
        connect=sdk_connect(lambda: target, []),
    )
    try:
        ex = await executor_for(tmp_path, toolset, approver=DenyAll())
        status = await call(ex, "git_status", repo_path=str(repo))
        assert status.status == "refused"
    finally:
        await toolset.aclose()


def _kill_server(repo: Path) -> None:
    """SIGKILL the mcp_server_git process this test started (found by its repository)."""
    import psutil

    mine = [
        p
        for p in psutil.Process().children(recursive=True)
        if "mcp_server_git" in " ".join(p.cmdline()) and str(repo) in p.cmdline()
    ]
    assert len(mine) == 1, mine
    mine[0].kill()
    mine[0].wait(10)


async def test_mcp_server_git_killed_write_not_retried_read_restarted_once(
    tmp_path: Path, repo: Path
) -> None:
    from mcp import StdioServerParameters

    target = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server_git", "--repository", str(repo)]
    )
    made: list[SDKSource] = []
    toolset = ToolServers(
        [Settings("git", trusted=True)],
        workspace=tmp_path,
        policy=Policy.default(),
        connect=sdk_connect(lambda: target, made),
    )
    try:
        ex = await executor_for(tmp_path, toolset, approver=ApproveAll())
        assert ex.get("git_commit").effect is Effect.WRITE  # type: ignore[union-attr]
        _kill_server(repo)
        committed = await call(ex, "git_commit", repo_path=str(repo), message="m")
        assert (committed.ok, committed.executions) == (False, 1)
        assert committed.error is not None and committed.error["kind"] == "connection_closed"
        assert len(made) == 1  # a WRITE is never retried: no restart
        status = await call(ex, "git_status", repo_path=str(repo))
        assert (status.ok, status.executions) == (True, 2), status
        assert "a.txt" in status.output and len(made) == 2
        _kill_server(repo)
        again = await call(ex, "git_status", repo_path=str(repo))
        assert (again.ok, again.executions) == (False, 1)  # restarted once per run
        assert len(made) == 2
    finally:
        await toolset.aclose()


async def test_a_refusal_with_no_approver_names_the_mcp_tool_to_allow(
    tmp_path: Path, fixture_servers: Any
) -> None:
    servers, server, _ = fixture_servers
    ex = await executor_for(tmp_path, servers(Settings("fx")), approver=None)
    refused = await call(ex, "look", path="p")
    assert refused.status == "refused" and server.calls == {}
    assert 'allow_exec("mcp:fx/look")' in refused.output


async def test_a_server_cannot_make_every_request_dearer(tmp_path: Path) -> None:
    from harnessnb.mcp._tools import DESCRIPTION_LIMIT
    from harnessnb.mcp._toolset import MAX_TOOLS_PER_SERVER

    ok = {"type": "object", "properties": {}}
    wordy = Offered("wordy", "x" * 1_000_000, ok, {})
    many = [Offered(f"t{i}", "", ok, {}) for i in range(MAX_TOOLS_PER_SERVER + 20)]
    toolset = ToolServers(
        [Settings("h")],
        workspace=tmp_path,
        policy=Policy(),
        connect=lambda *_, **__: _Listing([wordy, *many]),
    )
    tools = await toolset.open(set())
    assert len(tools) == MAX_TOOLS_PER_SERVER
    spec = next(t for t in tools if t.name == "wordy").spec()
    assert len(spec["description"]) <= DESCRIPTION_LIMIT + 100  # the cut's marker
    assert len([why for _, _, why in toolset.skipped if "more than" in why]) == 21
    stored = toolset.snapshot()[0]["tools"]
    assert max(len(t["description"]) for t in stored) <= DESCRIPTION_LIMIT + 100
