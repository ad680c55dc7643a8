"""``Connection`` against real stdio servers: the hostile server of these tests (each
failure mode ends as its kind, within its timeout, the stderr tail on the error), the
sandbox around a server, and real servers (mcp-server-time, mcp-server-git)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb.mcp._connection import Connection
from harnessnb.rules._errors import MCPErrorKind
from harnessnb.tools._protocol import OUTPUT_LIMIT

# ``mcp.client``, not ``mcp``: without the SDK, ``tests/mcp`` itself imports as ``mcp``.
pytest.importorskip("mcp.client", reason="the mcp SDK (harnessnb[mcp]) is not installed")

Connect = Callable[..., Connection]
Hostile = Callable[..., hn.MCPServer]


def _gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_server_lists_calls_and_closes_leaving_no_process(
    connect: Connect, hostile: Hostile
) -> None:
    conn = connect(hostile("ok"))
    tools = {t.name: t for t in await conn.list_tools()}
    assert {"echo", "fail"} <= tools.keys()
    assert tools["echo"].input_schema["properties"]["text"]["type"] == "string"
    assert set(tools["echo"].annotations) == {
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "openWorldHint",
    }
    assert await conn.call("echo", {"text": "hi"}) == hn_called("hi", False)
    assert conn.sandbox is not None and conn.pid is not None
    pgid = conn.pid
    await conn.aclose()
    assert _gone(pgid)


def hn_called(text: str, is_error: bool) -> object:
    from harnessnb.mcp._connection import Called

    return Called(text=text, is_error=is_error)


async def test_a_tool_error_is_a_flag_with_its_text(connect: Connect, hostile: Hostile) -> None:
    called = await connect(hostile("ok")).call("fail", {"why": "nope"})
    assert called.is_error and "fail" in called.text
    with pytest.raises(hn.MCPError) as caught:  # for a caller that asks for an exception
        called.raise_for_error(server="hostile", tool="fail")
    assert caught.value.kind is MCPErrorKind.TOOL_ERROR and called.text in str(caught.value)
    assert not caught.value.retryable


async def test_unknown_tool(connect: Connect, hostile: Hostile) -> None:
    with pytest.raises(hn.MCPError) as caught:
        await connect(hostile("ok")).call("no_such_tool", {})
    assert caught.value.kind is MCPErrorKind.UNKNOWN_TOOL and not caught.value.retryable


async def test_a_missing_program_is_spawn_naming_it(connect: Connect) -> None:
    with pytest.raises(hn.MCPError) as caught:
        await connect(hn.MCPServer.stdio("no-such-mcp-program-xyz")).start()
    assert caught.value.kind is MCPErrorKind.SPAWN
    assert "no-such-mcp-program-xyz" in str(caught.value)


async def test_exit_at_start_is_exited_with_code_and_stderr(
    connect: Connect, hostile: Hostile
) -> None:
    # It exits in well under a second; the generous start limit keeps a machine stalled
    # for seconds (a loaded CI) from turning the exit this test is about into a timeout.
    with pytest.raises(hn.MCPError) as caught:
        await connect(hostile("exit-at-start", timeout_s=60.0)).start()
    err = caught.value
    assert err.kind is MCPErrorKind.EXITED and err.exit_code == 3
    assert "bad config: no such table" in (err.stderr or "")
    assert "harnessnb-exit" not in (err.stderr or "")  # the watcher's marker taken out


def test_server_stderr_never_reaches_the_hosts_stderr(tmp_path: Path) -> None:
    """What the kernel's terminal would show (this process's fd 2) gets nothing of it."""
    script = (
        "import asyncio, sys\n"
        "import harnessnb as hn\n"
        "from harnessnb.mcp._connection import Connection\n"
        "async def main():\n"
        "    server = hn.MCPServer.stdio(sys.executable, args=[sys.argv[1], 'exit-at-start'])\n"
        "    conn = Connection(server, workspace=__import__('pathlib').Path(sys.argv[2]),\n"
        "                      policy=hn.Policy.default())\n"
        "    try:\n"
        "        await conn.start()\n"
        "    except hn.MCPError as err:\n"
        "        print('stderr on the error:', 'bad config' in (err.stderr or ''))\n"
        "asyncio.run(main())\n"
    )
    hostile_py = str(Path(__file__).with_name("hostile_server.py"))
    done = subprocess.run(
        [sys.executable, "-c", script, hostile_py, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "stderr on the error: True" in done.stdout
    assert "bad config" not in done.stderr


async def test_a_server_that_never_answers_times_out_and_is_ended(
    connect: Connect,
    hostile: Hostile,
) -> None:
    conn = connect(hostile("hang", timeout_s=2.0))
    with pytest.raises(hn.MCPError) as caught:
        await conn.start()
    assert caught.value.kind is MCPErrorKind.TIMEOUT and caught.value.retryable
    assert conn.pid is not None and _gone(conn.pid)  # the failed start left no process


async def test_the_runs_remaining_time_bounds_start(connect: Connect, hostile: Hostile) -> None:
    with pytest.raises(hn.MCPError) as caught:
        await connect(hostile("hang", timeout_s=30.0), remaining=lambda: 1.0).start()
    assert caught.value.kind is MCPErrorKind.TIMEOUT


async def test_garbage_on_stdout_is_protocol(connect: Connect, hostile: Hostile) -> None:
    with pytest.raises(hn.MCPError) as caught:
        await connect(hostile("garbage", timeout_s=2.0)).start()
    assert caught.value.kind is MCPErrorKind.PROTOCOL


async def test_a_protocol_version_mismatch_is_protocol_and_ends_the_server(
    connect: Connect, hostile: Hostile
) -> None:
    conn = connect(hostile("old-version", timeout_s=10.0))
    with pytest.raises(hn.MCPError) as caught:
        await conn.start()
    assert caught.value.kind is MCPErrorKind.PROTOCOL and not caught.value.retryable
    assert "1999-01-01" in str(caught.value)
    assert conn.pid is not None and _gone(conn.pid)


async def test_a_slow_tool_times_out_and_the_connection_stays_usable(
    connect: Connect, hostile: Hostile
) -> None:
    conn = connect(hostile("slow"))
    await conn.start()
    with pytest.raises(hn.MCPError) as caught:
        await conn.call("slow", {}, timeout_s=1.0)
    assert caught.value.kind is MCPErrorKind.TIMEOUT and caught.value.tool == "slow"
    assert (await conn.call("echo", {"text": "still here"})).text == "still here"
    pgid = conn.pid
    assert pgid is not None
    slow = asyncio.create_task(conn.call("slow", {}))  # busy when closed
    await asyncio.sleep(0.3)
    await conn.aclose()
    assert _gone(pgid)
    with pytest.raises(hn.MCPError):
        await slow


async def test_cancelling_the_caller_cancels_its_request_only(
    connect: Connect, hostile: Hostile
) -> None:
    conn = connect(hostile("slow"))
    await conn.start()
    call = asyncio.create_task(conn.call("slow", {}))
    await asyncio.sleep(0.3)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert (await conn.call("echo", {"text": "after"})).text == "after"


async def test_a_server_dying_mid_call_is_exited_then_restart_revives_it(
    connect: Connect,
    hostile: Hostile,
) -> None:
    conn = connect(hostile("die-mid-call"))
    with pytest.raises(hn.MCPError) as caught:
        await conn.call("die", {})
    err = caught.value
    assert err.kind is MCPErrorKind.EXITED and err.exit_code == 9 and err.retryable
    assert "dying now" in (err.stderr or "")
    with pytest.raises(hn.MCPError) as again:  # every later call says the same
        await conn.call("echo", {"text": "x"})
    assert again.value.kind is MCPErrorKind.EXITED
    await conn.restart()
    assert (await conn.call("echo", {"text": "back"})).text == "back"


async def test_a_stderr_flood_is_drained_and_bounded(connect: Connect, hostile: Hostile) -> None:
    conn = connect(hostile("flood-stderr", timeout_s=20.0))
    assert (await conn.call("echo", {"text": "served"})).text == "served"
    tail = conn.stderr_tail
    assert "flood done" in tail and len(tail) <= 64 * 1024


async def test_a_ten_megabyte_answer_is_cut_to_the_output_limit(
    connect: Connect, hostile: Hostile
) -> None:
    called = await connect(hostile("big", timeout_s=20.0)).call("big", {})
    assert len(called.text) <= OUTPUT_LIMIT + 200 and called.text.startswith("BBBB")


async def test_a_closed_server_leaves_no_scratch_folder_though_its_child_still_writes(
    connect: Connect, hostile: Hostile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server's helper still writing into its HOME or TMPDIR (npx writes its log there on
    # the way out) must be ended before the scratch folder holding both is removed: a
    # removal racing a writer leaves the folder behind.
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    conn = connect(hostile("linger", timeout_s=20.0))
    assert (await conn.call("echo", {"text": "up"})).text == "up"
    assert list(temp.glob("harnessnb-cmd-*"))  # the scratch folder, written into
    await conn.aclose()
    assert not list(temp.glob("harnessnb-cmd-*"))


async def test_tool_lists_that_differ(connect: Connect, hostile: Hostile) -> None:
    one = [t.name for t in await connect(hostile("tools-v1")).list_tools()]
    two = [t.name for t in await connect(hostile("tools-v2")).list_tools()]
    assert "alpha" in one and "beta" not in one and "beta" in two and "alpha" not in two


async def test_lying_annotations_are_reported_as_said(
    connect: Connect, hostile: Hostile, workspace: Path
) -> None:
    conn = connect(hostile("lies"))
    (tool,) = [t for t in await conn.list_tools() if t.name == "harmless"]
    assert tool.annotations["readOnlyHint"] is True  # what it claims; trust is the caller's
    await conn.call("harmless", {"name": "w.txt"})
    assert (workspace / "w.txt").exists()  # and what it did, inside the workspace only


@pytest.fixture
def listener() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    yield sock, sock.getsockname()[1]  # type: ignore[misc]
    sock.close()


@pytest.mark.skipif(hn.sandbox_backend() == "none", reason="no sandbox backend here")
async def test_a_sandboxed_server_cannot_read_secrets_write_outside_or_connect(
    connect: Connect,
    hostile: Hostile,
    workspace: Path,
    tmp_path: Path,
    listener: tuple[socket.socket, int],
) -> None:
    (workspace / ".env").write_text("OPENAI_API_KEY=sk-test-secret-value-123\n")
    # Beside the workspace (the sandbox's /tmp is its own: a write there lands in it)
    # and on the host's root filesystem (read-only in the sandbox).
    outside = [tmp_path / "outside.txt", Path(f"/var/tmp/harnessnb-mcp-probe-{os.getpid()}")]
    port = listener[1]
    # The policy allows the network; the server was not given it (network=False): none.
    policy = hn.Policy.default().allow_net("*")
    called = await connect(hostile("probe", timeout_s=15.0), policy=policy).call(
        "probe", {"outside": [str(p) for p in outside], "port": port}
    )
    report = called.text
    assert "sk-test-secret-value" not in report and "env:" in report
    assert not any(p.exists() for p in outside)
    assert "outside:denied" in report
    assert "net:denied" in report
    assert "inside:written" in report and (workspace / "inside.txt").exists()
    assert f"cwd:{workspace.resolve()}" in report
    # network=True under the default policy (no network): still none.
    asked = connect(hostile("probe", timeout_s=15.0, network=True))
    assert "net:denied" in (await asked.call("probe", {"outside": [], "port": port})).text
    # With network=True and a policy that allows it, the same listener is reachable.
    opened = connect(hostile("probe", timeout_s=15.0, network=True), policy=policy)
    again = await opened.call("probe", {"outside": [], "port": port})
    assert "net:connected" in again.text


async def test_the_provider_key_never_reaches_the_server(
    connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-given-to-a-server-1")
    server = hn.MCPServer.stdio(
        sys.executable,
        args=["-c", "import os,sys; sys.stderr.write(repr(dict(os.environ))); sys.exit(4)"],
        env={"MY_SETTING": "given-value-777", "X_API_KEY": "dropped-secret-1"},
        timeout_s=10.0,
    )
    with pytest.raises(hn.MCPError) as caught:
        await connect(server).start()
    shown = caught.value.stderr or ""
    assert "OPENAI_API_KEY" not in shown and "X_API_KEY" not in shown
    assert "MY_SETTING" in shown  # its value registered as a secret: scrubbed when shown


# ------------------------------------------------------------------ real servers


async def test_mcp_server_time(connect: Connect) -> None:
    conn = connect(hn.MCPServer.stdio(sys.executable, args=["-m", "mcp_server_time"], timeout_s=20))
    assert conn.server.name == "time"
    names = {t.name for t in await conn.list_tools()}
    assert "get_current_time" in names
    called = await conn.call("get_current_time", {"timezone": "UTC"})
    assert not called.is_error and '"timezone": "UTC"' in called.text


async def test_mcp_server_git_status_in_the_workspace(connect: Connect, workspace: Path) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "new.txt").write_text("x")
    server = hn.MCPServer.stdio(
        sys.executable,
        args=["-m", "mcp_server_git", "--repository", str(workspace)],
        timeout_s=20,
    )
    conn = connect(server)
    tools = {t.name: t for t in await conn.list_tools()}
    assert tools["git_status"].annotations["readOnlyHint"] is True
    called = await conn.call("git_status", {"repo_path": str(workspace)})
    assert not called.is_error and "new.txt" in called.text


# ------------------------------------------------------------------ Streamable HTTP


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _listening(port: int) -> None:
    for _ in range(150):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


@pytest.fixture
async def everything_http(npm_server: Callable[[str], str]) -> AsyncIterator[tuple[str, int]]:
    """``mcp-server-everything streamableHttp`` on a free port: (url, its pid)."""
    port = _free_port()
    proc = subprocess.Popen(
        [npm_server("mcp-server-everything"), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        await _listening(port)
        yield f"http://127.0.0.1:{port}/mcp", proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()


async def test_everything_over_streamable_http(
    connect: Connect, everything_http: tuple[str, int], workspace: Path
) -> None:
    url, _ = everything_http
    conn = connect(hn.MCPServer.http(url, timeout_s=10.0, headers={"X-Team": "a-team-value"}))
    assert conn.server.name == "127_0_0_1" and conn.sandbox is None
    names = {t.name for t in await conn.list_tools()}
    assert {"echo", "get-tiny-image", "trigger-long-running-operation"} <= names
    assert (await conn.call("echo", {"message": "hi"})).text == "Echo: hi"
    image = await conn.call("get-tiny-image", {})
    assert re_search(r"\[image/png, \d+ bytes\]", image.text)
    roots = await conn.call("get-roots-list", {})
    assert workspace.resolve().as_uri() in roots.text
    structured = await conn.call("get-structured-content", {"location": "New York"})
    assert '"temperature"' in structured.text


def re_search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None


async def test_an_http_server_killed_mid_call_is_typed_never_a_cancel(
    connect: Connect, everything_http: tuple[str, int]
) -> None:
    url, pid = everything_http
    conn = connect(hn.MCPServer.http(url, timeout_s=10.0))
    await conn.start()
    call = asyncio.create_task(
        conn.call("trigger-long-running-operation", {"duration": 10, "steps": 5})
    )
    await asyncio.sleep(0.5)
    os.killpg(pid, 9)
    with pytest.raises(hn.MCPError) as caught:
        await call
    assert caught.value.kind in (MCPErrorKind.TRANSPORT, MCPErrorKind.CONNECTION_CLOSED)
    assert caught.value.retryable


async def test_an_http_server_down_at_connect_is_transport(connect: Connect) -> None:
    conn = connect(hn.MCPServer.http(f"http://127.0.0.1:{_free_port()}/mcp", timeout_s=5.0))
    with pytest.raises(hn.MCPError) as caught:
        await conn.start()
    assert caught.value.kind is MCPErrorKind.TRANSPORT and caught.value.retryable


async def test_an_http_error_status_carries_status_retry_after_and_headers_are_sent(
    connect: Connect,
) -> None:
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head)
        length = re_int(rb"(?i)content-length: *(\d+)", head)
        if length:
            await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\n"
            b"Content-Type: text/plain\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy"
        )
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    async with listener:
        server = hn.MCPServer.http(
            f"http://127.0.0.1:{port}/mcp",
            headers={"Authorization": "Bearer tok-secret-abcdef123"},
            timeout_s=5.0,
        )
        with pytest.raises(hn.MCPError) as caught:
            await connect(server).start()
    err = caught.value
    assert (err.kind, err.status, err.retry_after_s, err.retryable) == (
        MCPErrorKind.TRANSPORT,
        503,
        7.0,
        True,
    )
    assert any(b"Bearer tok-secret-abcdef123" in head for head in seen)
    assert "tok-secret-abcdef123" not in repr(err.to_dict())


def re_int(pattern: bytes, data: bytes) -> int:
    import re

    found = re.search(pattern, data)
    return int(found.group(1)) if found else 0


# ------------------------------------------------------------------ npm servers, stdio


async def test_everything_over_stdio_sandboxed(
    connect: Connect, npm_server: Callable[[str], str], workspace: Path
) -> None:
    conn = connect(hn.MCPServer.stdio(npm_server("mcp-server-everything"), timeout_s=15.0))
    assert conn.server.name == "everything"
    assert (await conn.call("echo", {"message": "over stdio"})).text == "Echo: over stdio"
    roots = await conn.call("get-roots-list", {})
    assert workspace.resolve().as_uri() in roots.text


async def test_filesystem_server_with_the_workspace_as_root(
    connect: Connect, npm_server: Callable[[str], str], workspace: Path, tmp_path: Path
) -> None:
    (workspace / "note.txt").write_text("hello from the workspace")
    (tmp_path / "beside.txt").write_text("not yours")
    server = hn.MCPServer.stdio(
        npm_server("mcp-server-filesystem"), args=[str(workspace)], timeout_s=15.0
    )
    conn = connect(server)
    tools = {t.name: t for t in await conn.list_tools()}
    assert tools["read_text_file"].annotations["readOnlyHint"] is True
    read = await conn.call("read_text_file", {"path": str(workspace / "note.txt")})
    assert read.text == "hello from the workspace"
    outside = await conn.call("read_text_file", {"path": str(tmp_path / "beside.txt")})
    assert outside.is_error and "not yours" not in outside.text


# ------------------------------------------------------------------ as an ordinary user

_AS_NOBODY_SCRIPT = """
import asyncio, json, sys
from pathlib import Path
import harnessnb as hn
from harnessnb.mcp._connection import Connection

async def main() -> None:
    ws, outside, port = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    server = hn.MCPServer.stdio(
        sys.executable, args=[sys.argv[4], "probe"], timeout_s=20,
        env={"PYTHONPATH": sys.argv[5]},
    )
    conn = Connection(server, workspace=ws, policy=hn.Policy.default().allow_net("*"))
    try:
        called = await conn.call("probe", {"outside": [outside], "port": port})
        print(json.dumps({"text": called.text, "sandbox": conn.sandbox}))
    finally:
        await conn.aclose()

asyncio.run(main())
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or hn.sandbox_backend() == "none",
    reason="needs root, setpriv and a sandbox backend to run the harness as nobody",
)
def test_as_an_ordinary_user_the_sandboxed_server_is_held_the_same(
    listener: tuple[socket.socket, int],
) -> None:
    import json
    import tempfile

    hostile_py = str(Path(__file__).with_name("hostile_server.py"))
    nobody = 65534
    base = Path(tempfile.mkdtemp(prefix="harnessnb-mcp-nobody-", dir="/tmp"))
    try:
        ws, home = base / "ws", base / "home"
        ws.mkdir()
        home.mkdir()
        (ws / ".env").write_text("OPENAI_API_KEY=sk-nobody-secret-value-1\n")
        # World-writable outside the sandbox (nobody could write it), read-only inside.
        outside = Path(f"/var/tmp/harnessnb-mcp-nobody-{os.getpid()}")
        for path in (base, ws, home, ws / ".env"):
            os.chown(path, nobody, nobody)
        repo = str(Path(__file__).resolve().parents[2])
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "TMPDIR": str(base),
            "PYTHONPATH": repo,
        }
        as_nobody = ["setpriv", "--reuid", str(nobody), "--regid", str(nobody), "--clear-groups"]
        # An interpreter nobody can run: this one, or the system's of the same version
        # (a pyenv build under /root is not), with this environment's packages.
        site = sysconfig.get_paths()["purelib"]
        env["PYTHONPATH"] = f"{repo}:{site}"
        python = _runnable_by(as_nobody, env)
        done = subprocess.run(
            [
                *as_nobody,
                "--",
                python,
                "-c",
                _AS_NOBODY_SCRIPT,
                str(ws),
                str(outside),
                str(listener[1]),
                hostile_py,
                site,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert "nobody-secret" not in report["text"]
        assert "outside:denied" in report["text"] and not outside.exists()
        assert "net:denied" in report["text"] and "inside:written" in report["text"]
        assert "bubblewrap" in report["sandbox"] or "landlock" in report["sandbox"]
    finally:
        shutil.rmtree(base, ignore_errors=True)
        Path(f"/var/tmp/harnessnb-mcp-nobody-{os.getpid()}").unlink(missing_ok=True)


def _runnable_by(as_user: list[str], env: dict[str, str]) -> str:
    """This interpreter if ``as_user`` can see it, else the system's of this version."""
    look = "import os, sys; print(os.path.exists(os.path.realpath(sys.executable)))"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, f"/usr/bin/{version}"):
        seen = subprocess.run(
            [*as_user, "--", python, "-c", look],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if seen.stdout.strip() == "True":
            return python
    pytest.skip(f"no {version} here that nobody can run (a pyenv build under /root is not)")


async def test_a_server_script_in_a_temporary_folder_starts_in_the_sandbox(
    connect: Connect, tmp_path: Path
) -> None:
    # pytest's tmp_path lies under the host's /tmp, which the sandbox replaces with a
    # private one: the script's folder (outside the workspace) is bound back read-only,
    # as a CI clone or a notebook's temporary folder needs. Without it the server's
    # interpreter could not open the script and exited 2 at start.
    kept = tmp_path / "servers"
    kept.mkdir()
    script = kept / "server.py"
    shutil.copy(Path(__file__).with_name("hostile_server.py"), script)
    conn = connect(hn.MCPServer.stdio(sys.executable, args=[str(script), "ok"], name="kept"))
    assert await conn.call("echo", {"text": "hi"}) == hn_called("hi", False)
    assert conn.sandbox is not None


def test_only_folders_outside_the_workspace_under_tmp_are_named(tmp_path: Path) -> None:
    from harnessnb.tools._host_paths import argv_folders

    ws, kept = tmp_path / "ws", tmp_path / "kept"
    ws.mkdir()
    kept.mkdir()
    (kept / "s.py").write_text("")
    (ws / "in.py").write_text("")
    argv = ["python", str(kept / "s.py"), str(ws / "in.py"), "/tmp", "/usr/bin", "rel/x"]
    assert argv_folders(argv, ws.resolve()) == [str(kept.resolve())]


async def test_the_sdks_loggers_are_scrubbed_once_a_server_is_used(
    connect: Connect, hostile: Hostile, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from harnessnb.rules._secrets import register

    canary = "sk-mcplogQZWX7f3c9d1e5b7a2c4e6f8"
    register(canary)
    await connect(hostile("ok")).call("echo", {"text": "hi"})
    names = [n for n in logging.Logger.manager.loggerDict if n == "mcp" or n.startswith("mcp.")]
    assert "mcp.client.stdio" in names
    with caplog.at_level(logging.WARNING):
        for name in names:
            logging.getLogger(name).warning("server said %s", canary)
    assert caplog.records and canary not in caplog.text


async def test_a_server_found_through_its_env_pythonpath_under_tmp_starts(
    connect: Connect, tmp_path: Path
) -> None:
    # The server's own env= names a folder under the host's /tmp (a CI virtual
    # environment's site-packages, a notebook's temporary folder): it is bound back
    # read-only as its command line's paths are. Without it, `python -m` found no module.
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(Path(__file__).with_name("hostile_server.py"), lib / "hostile_mod.py")
    server = hn.MCPServer.stdio(
        sys.executable, args=["-m", "hostile_mod", "ok"], env={"PYTHONPATH": str(lib)}, name="m"
    )
    conn = connect(server)
    assert await conn.call("echo", {"text": "hi"}) == hn_called("hi", False)
