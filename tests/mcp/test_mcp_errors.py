"""``hn.MCPError`` (its kinds, code, retryability, card) and ``hn.MCPServer`` (its
constructors, names, ``parse``, ``describe``, secrets never shown)."""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys

import pytest

import harnessnb as hn
from harnessnb.rules._errors import MCPErrorKind
from harnessnb.rules._secrets import scrub


@pytest.mark.parametrize(
    ("kind", "status", "retryable"),
    [
        ("timeout", None, True),
        ("connection_closed", None, True),
        ("exited", None, True),
        ("transport", None, True),
        ("transport", 503, True),
        ("transport", 429, True),
        ("transport", 401, False),
        ("transport", 404, False),
        ("spawn", None, False),
        ("protocol", None, False),
        ("tool_error", None, False),
        ("unknown_tool", None, False),
    ],
)
def test_retryable_by_kind_and_status(kind: str, status: int | None, retryable: bool) -> None:
    err = hn.MCPError("x", kind=MCPErrorKind(kind), server="git", status=status)
    assert err.retryable is retryable
    assert err.code == f"MCP_{kind.upper()}"


def test_to_dict_carries_kind_server_and_stderr_and_pickles() -> None:
    err = hn.MCPError(
        "it died", kind=MCPErrorKind.EXITED, server="git", exit_code=3, stderr="bad config"
    )
    data = err.to_dict()
    assert (data["kind"], data["server"], data["exit_code"]) == ("exited", "git", 3)
    assert data["stderr"] == "bad config"
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, hn.MCPError) and back.kind is MCPErrorKind.EXITED
    assert back.stderr == "bad config"


def test_card_shows_the_stderr_tail_escaped_in_a_pre() -> None:
    err = hn.MCPError("boom", kind="exited", server="s", stderr="<script>alert(1)</script>")  # type: ignore[arg-type]
    html = err._repr_mimebundle_()["text/html"]
    assert "<pre" in html and "&lt;script&gt;" in html and "<script>" not in html
    assert "stderr" in err._repr_mimebundle_()["text/plain"]


def test_stderr_is_scrubbed_and_bounded() -> None:
    hn.MCPServer.stdio("x", env={"TOKEN_FOR_TEST": "s3cr3t-value-123"})
    err = hn.MCPError("m", kind=MCPErrorKind.EXITED, stderr="key s3cr3t-value-123 " + "y" * 20000)
    assert "s3cr3t-value-123" not in (err.stderr or "")
    assert len(err.stderr or "") < 5000


def test_stdio_names_from_the_command() -> None:
    assert hn.MCPServer.stdio("/usr/bin/mcp-server-everything").name == "everything"
    assert hn.MCPServer.stdio("server-filesystem", args=["/w"]).name == "filesystem"
    git = hn.MCPServer.stdio("python", args=["-m", "mcp_server_git", "--repository", "."])
    assert git.name == "git"
    assert hn.MCPServer.stdio("tool", name="my_tool-1").name == "my_tool-1"
    npx = hn.MCPServer.stdio("npx", args=["-y", "@modelcontextprotocol/server-filesystem", "/w"])
    assert npx.name == "filesystem"
    assert hn.MCPServer.stdio("uvx", args=["mcp-server-fetch@1.2"]).name == "fetch"
    assert hn.MCPServer.stdio("node", args=["dist/index.js"]).name == "index"
    assert git.transport == "stdio" and git.args == ("-m", "mcp_server_git", "--repository", ".")


@pytest.mark.parametrize("bad", ["", "a b", "x" * 41, "é", "a/b"])
def test_a_bad_name_is_a_config_error(bad: str) -> None:
    with pytest.raises(hn.ConfigError, match="MCP server name"):
        hn.MCPServer.stdio("tool", name=bad)


def test_bad_constructor_values_are_config_errors() -> None:
    with pytest.raises(hn.ConfigError):
        hn.MCPServer.stdio("")
    with pytest.raises(hn.ConfigError):
        hn.MCPServer.stdio("x", args="--flag")  # type: ignore[arg-type]
    with pytest.raises(hn.ConfigError):
        hn.MCPServer.stdio("x", timeout_s=0)
    with pytest.raises(hn.ConfigError):
        hn.MCPServer.http("ftp://host/x")
    with pytest.raises(hn.ConfigError):
        hn.MCPServer.stdio("x", effects={"t": "read"})  # type: ignore[dict-item]


def test_http_name_is_the_host_and_describe_drops_userinfo_and_query() -> None:
    server = hn.MCPServer.http(
        "https://user:pa55word-xyz@mcp.example.com:8443/mcp?api_key=qqqqqqqqqq",
        headers={"Authorization": "Bearer tok-abcdefgh12345", "X-Team": "team-value-777"},
    )
    assert server.name == "mcp_example_com"
    assert server.describe() == "https://mcp.example.com:8443/mcp"
    assert server.transport == "http" and server.timeout_s == 30.0
    for secret in ("pa55word-xyz", "tok-abcdefgh12345", "team-value-777"):
        assert secret not in scrub(f"said {secret}")
    assert "tok-abcdefgh12345" not in repr(server) and "team-value-777" not in repr(server)


def test_parse_the_faces_words() -> None:
    git = hn.MCPServer.parse("g=python -m mcp_server_git --repository '/a b'")
    assert (git.name, git.command, git.args) == (
        "g",
        "python",
        ("-m", "mcp_server_git", "--repository", "/a b"),
    )
    assert git.describe() == "python -m mcp_server_git --repository '/a b'"
    web = hn.MCPServer.parse("web=http://127.0.0.1:3001/mcp")
    assert (web.transport, web.name, web.url) == ("http", "web", "http://127.0.0.1:3001/mcp")
    assert hn.MCPServer.parse("https://h.example/mcp").name == "h_example"
    assert hn.MCPServer.parse("mcp-server-time").name == "time"
    with pytest.raises(hn.ConfigError):
        hn.MCPServer.parse("   ")
    with pytest.raises(hn.ConfigError):
        hn.MCPServer.parse("x=cmd 'unclosed")


def test_env_values_are_secrets_and_describe_never_shows_them() -> None:
    server = hn.MCPServer.stdio("tool", args=["--v"], env={"PLAIN": "plain-env-value-42"})
    assert "plain-env-value-42" not in scrub("x plain-env-value-42")
    assert server.describe() == "tool --v"
    assert "plain-env-value-42" not in repr(server)


def test_import_harnessnb_never_imports_the_sdk() -> None:
    code = "import sys, harnessnb as hn; hn.MCPServer; hn.MCPError; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_missing_sdk_is_a_config_error_naming_the_extra() -> None:
    # A real interpreter where ``mcp`` cannot be imported (a None entry in sys.modules).
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "from harnessnb.mcp._server import require_sdk\n"
        "import harnessnb as hn\n"
        "try:\n    require_sdk()\nexcept hn.ConfigError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'harnessnb[mcp]'" in out.stdout


# ------------------------------------------------------------ classification (pure)


def _ctx(**kw: object) -> object:
    from harnessnb.mcp._failures import Context

    base: dict[str, object] = {"server": "s", "transport": "stdio", "command": "prog"}
    return Context(**{**base, **kw})  # type: ignore[arg-type]


def _sdk_error(code: int, message: str) -> BaseException:
    pytest.importorskip("mcp.client", reason="the mcp SDK (harnessnb[mcp]) is not installed")
    from mcp import MCPError as SDKError

    return SDKError(code, message)


class _HTTPStatusError(Exception):  # the shape of httpx2's, matched by module and name
    __module__ = "httpx2._exceptions"

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        super().__init__(f"status {status}")
        self.response = type("R", (), {"status_code": status, "headers": headers})()


class _ConnectError(Exception):
    __module__ = "httpx2._exceptions"


@pytest.mark.parametrize(
    ("make", "ctx", "kind"),
    [
        (lambda: FileNotFoundError("prog"), {"what": "start"}, "spawn"),
        (lambda: PermissionError("prog"), {"what": "start"}, "spawn"),
        (lambda: _sdk_error(-32000, "Connection closed"), {}, "connection_closed"),
        (
            lambda: _sdk_error(-32000, "Connection closed"),
            {"exited": True, "exit_code": 3},
            "exited",
        ),
        (lambda: _sdk_error(-32000, "Connection closed"), {"transport": "http"}, "transport"),
        (lambda: _sdk_error(-32001, "Request 'initialize' timed out"), {}, "timeout"),
        (lambda: TimeoutError(), {}, "timeout"),
        (lambda: _sdk_error(-32700, "Parse error"), {}, "protocol"),
        (lambda: _sdk_error(-32600, "Invalid request"), {}, "protocol"),
        (lambda: _sdk_error(-32602, "Unsupported protocol version 1999"), {}, "protocol"),
        (lambda: _sdk_error(-32602, "Unknown tool: nope"), {}, "unknown_tool"),
        (lambda: ValueError("Invalid JSON: expected value"), {}, "protocol"),
        (
            lambda: RuntimeError("Unsupported protocol version from the server: 1999-01-01"),
            {"transport": "http"},
            "protocol",
        ),
        (lambda: _ConnectError("refused"), {"transport": "http"}, "transport"),
        (lambda: asyncio.CancelledError(), {}, "connection_closed"),
        (lambda: asyncio.CancelledError(), {"transport": "http"}, "transport"),
        # nested groups, a CancelledError leaf beside the real one
        (
            lambda: BaseExceptionGroup(
                "g",
                [
                    asyncio.CancelledError(),
                    ExceptionGroup("h", [_sdk_error(-32000, "Connection closed")]),
                ],
            ),
            {},
            "connection_closed",
        ),
    ],
)
def test_classification_table(make: object, ctx: dict[str, object], kind: str) -> None:
    from harnessnb.mcp._failures import classify

    err = classify(make(), _ctx(**ctx))  # type: ignore[operator, arg-type]
    assert err.kind is MCPErrorKind(kind)
    assert err.server == "s"


def test_an_http_status_and_retry_after_are_read() -> None:
    from harnessnb.mcp._failures import classify

    busy = classify(
        _HTTPStatusError(503, {"Retry-After": "7"}),
        _ctx(transport="http"),  # type: ignore[arg-type]
    )
    assert (busy.kind, busy.status, busy.retry_after_s, busy.retryable) == (
        MCPErrorKind.TRANSPORT,
        503,
        7.0,
        True,
    )
    denied = classify(_HTTPStatusError(401, {}), _ctx(transport="http"))  # type: ignore[arg-type]
    assert denied.status == 401 and not denied.retryable


def test_an_exited_error_names_the_exit_code_and_carries_stderr() -> None:
    from harnessnb.mcp._failures import classify

    err = classify(
        _sdk_error(-32000, "Connection closed"),
        _ctx(exited=True, exit_code=9, stderr="it broke"),  # type: ignore[arg-type]
    )
    assert err.exit_code == 9 and "exit code 9" in str(err) and err.stderr == "it broke"
