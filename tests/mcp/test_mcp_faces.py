"""``--mcp SPEC`` and ``--mcp-trust NAME`` on both faces (``harnessnb run``/``resume``/
``sweep`` and ``%harness run``/``resume``/``%%harness sweep``): parsed by
``MCPServer.parse``, a bad one a usage error naming the option, and the servers reach
the run (the tools offered to the model, the rows)."""

from __future__ import annotations

import inspect
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import harnessnb as hn
from harnessnb import cli
from harnessnb.chaos import ChaosRequest, ChaosServer, Reply
from harnessnb.launch._mcp_spec import mcp_from
from harnessnb.launch._sweep_options import sweep_kwargs
from harnessnb.notebook import _args, _magics

TIME = f"{shlex.quote(sys.executable)} -m mcp_server_time"
ROOT = Path(__file__).parents[2]


@pytest.fixture
def shell(shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> InteractiveShell:
    """The suite's notebook shell, with text progress instead of widgets."""
    monkeypatch.setenv("HARNESSNB_NO_WIDGETS", "1")
    return shell


def _loop_takes_mcp() -> None:
    if "mcp" not in inspect.signature(hn.run).parameters:
        pytest.skip("hn.run has no mcp= yet (the loop helper's part)")


# ------------------------------------------------------------------ parsing


def test_both_faces_parse_mcp_into_servers_and_trust_marks_the_named_one(
    tmp_path: Path,
) -> None:
    words = ["--mcp", TIME, "--mcp", "web=https://mcp.example/mcp?k=1", "--mcp-trust", "time",
             "--workspace", str(tmp_path)]  # fmt: skip
    command = cli.build_parser().parse_args(["run", "task", *words])
    _, notebook = _args.parse("run " + shlex.join(["task", *words]))
    for args in (command, notebook):
        time, web = mcp_from(args)
        assert (time.transport, time.name, time.args, time.trusted) == (
            "stdio", "time", ("-m", "mcp_server_time"), True
        )  # fmt: skip
        assert (web.transport, web.name, web.trusted) == ("http", "web", False)
        assert web.describe() == "https://mcp.example/mcp"
    resumed = cli.build_parser().parse_args(["resume", "run_x", "--mcp", TIME])
    assert [s.name for s in mcp_from(resumed)] == ["time"]
    swept = cli.build_parser().parse_args(
        ["sweep", "a", "--providers", "demo", "--workspace", str(tmp_path), "--mcp", TIME]
    )
    assert [s.name for s in sweep_kwargs(swept, "cli")["mcp"]] == ["time"]
    plain = cli.build_parser().parse_args(["run", "task", "--workspace", str(tmp_path)])
    bare = cli.build_parser().parse_args(["sweep", "a", "--providers", "demo",
                                          "--workspace", str(tmp_path)])  # fmt: skip
    assert mcp_from(plain) == () and sweep_kwargs(bare, "cli")["mcp"] == ()


BAD = [
    (["--mcp", "a="], "argument --mcp: MCP server 'a=': expected a command or an http(s) URL"),
    (["--mcp", "python 'unclosed"], "argument --mcp: MCP server \"python 'unclosed\""),
    (["--mcp", TIME, "--mcp-trust", "git"], "--mcp-trust 'git' names no --mcp server"),
    (["--mcp", TIME, "--mcp", "time=python -m x"], "two MCP servers are named 'time'"),
    (["--agent", "codex", "--mcp", TIME], "--mcp applies to harnessnb's own loop"),
]


@pytest.mark.parametrize(("options", "message"), BAD)
def test_a_bad_mcp_option_is_a_usage_error_naming_it_in_the_command(
    options: list[str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "harnessnb", "run", "task", "--workspace", str(tmp_path / "ws"),
         "--store", str(tmp_path / "s.duckdb"), *options],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert message in " ".join(out.stderr.split()) and "Traceback" not in out.stderr
    assert not (tmp_path / "s.duckdb").exists()  # nothing started


@pytest.mark.parametrize(("options", "message"), BAD)
def test_a_bad_mcp_option_is_a_usage_error_naming_it_in_the_magic(
    shell: InteractiveShell, options: list[str], message: str, tmp_path: Path
) -> None:
    with pytest.raises(UsageError) as err:
        shell.run_cell_magic(
            "harness", "run " + shlex.join(["--workspace", str(tmp_path), *options]), "task"
        )
    assert message in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------ reaching the run


def _asks_the_time(request: ChaosRequest) -> Reply:
    if any(isinstance(m, dict) and m.get("role") == "tool" for m in request.messages):
        return Reply(text="it is late")
    return Reply(tool_calls=[{"name": "get_current_time", "arguments": {"timezone": "UTC"}}])


def _the_time_was_asked(srv: ChaosServer, store: hn.Store) -> None:
    assert "get_current_time" in srv.requests[0].tools  # offered to the model
    runs = store.runs()
    assert runs["outcome"].tolist() == ["finished"]
    run_id = runs["run_id"].iloc[0]
    calls = store.tool_calls(run_id)
    assert calls["server"].tolist() == ["time"]
    assert calls["error_kind"].isna().all()
    assert store.mcp_servers(run_id)["server"].tolist() == ["time"]


def test_the_command_hands_its_mcp_server_to_the_run(tmp_path: Path) -> None:
    _loop_takes_mcp()
    ws = tmp_path / "ws"
    ws.mkdir()
    path = tmp_path / "s.duckdb"
    with ChaosServer(responder=_asks_the_time) as srv:
        out = subprocess.run(
            [sys.executable, "-m", "harnessnb", "run", "what time is it?", "--provider",
             "local", "--base-url", srv.openai_url, "--workspace", str(ws), "--store",
             str(path), "--mcp", TIME, "--mcp-trust", "time"],
            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        with hn.Store(path) as store:
            _the_time_was_asked(srv, store)


def test_the_magic_hands_its_mcp_server_to_the_run(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    _loop_takes_mcp()
    ws = tmp_path / "ws"
    ws.mkdir()
    path = tmp_path / "m.duckdb"
    with ChaosServer(responder=_asks_the_time) as srv:
        argv = ["--provider", "local", "--base-url", srv.openai_url, "--workspace", str(ws),
                "--store", str(path), "--mcp", TIME, "--mcp-trust", "time",
                "--out", "R"]  # fmt: skip
        with capture_output():
            shell.run_cell_magic("harness", "run " + shlex.join(argv), "what time is it?")
        result: Any = shell.user_ns["R"]
        assert result.outcome.value == "finished"
        _the_time_was_asked(srv, _magics._store(str(path)))


# ------------------------------------------------------------------ the approval panel

KEY = "sk-proj-" + "A1b2C3d4" * 5


def _mcp_request() -> hn.ApprovalRequest:
    args = {"message": f"<script>alert('x')</script> key={KEY}", "<b>amend</b>": True}
    shown = f"MCP server git, tool git_commit\narguments: {args}"
    return hn.ApprovalRequest("exec", "mcp:git/git_commit", shown, None, None, "git_commit",
                              args)  # fmt: skip


def test_the_approval_panel_shows_an_mcp_calls_server_tool_and_arguments_escaped() -> None:
    from harnessnb.notebook._approver import ApprovalPanel, ApprovalRecord

    request = _mcp_request()
    panel = ApprovalPanel(request, lambda decision: None)
    record = ApprovalRecord(request, hn.Decision.deny("no"))
    bundle = record._repr_mimebundle_()
    for page in (str(panel.summary.value), bundle["text/html"]):
        assert "call the MCP tool" in page and "of server" in page
        assert "<code" in page and ">git_commit</code>" in page and ">git</code>" in page
        assert "<script>" not in page and "<b>amend" not in page  # escaped, never markup
        assert "&lt;script&gt;" in page and "&lt;b&gt;amend&lt;/b&gt;</th>" in page  # a row
        assert KEY not in page and "[redacted]" in page
    assert "asked to call the MCP tool git_commit of server git" in bundle["text/plain"]
    assert KEY not in bundle["text/plain"]
    panel.close()


def test_another_requests_panel_is_as_before() -> None:
    from harnessnb.notebook._approver import ApprovalPanel, mcp_call

    request = hn.ApprovalRequest("exec", "mcp-tool --x", "mcp-tool --x", None, None, "run")
    assert mcp_call(request) is None and mcp_call(_mcp_request()) == ("git", "git_commit")
    page = str(ApprovalPanel(request, lambda decision: None).summary.value)
    assert "approve exec" in page and "MCP tool" not in page and "<table" not in page


@pytest.mark.parametrize(
    "line",
    [
        ["resume", "run_x"],
        ["sweep", "a", "--providers", "demo", "--workspace", "."],
    ],
)
@pytest.mark.parametrize(("options", "message"), BAD[:4])
def test_resume_and_sweep_refuse_a_bad_mcp_option_too(
    line: list[str], options: list[str], message: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    store = str(tmp_path / "s.duckdb")
    try:
        code = cli.main([*line, "--store", store, *options])
    except SystemExit as exc:  # argparse's usage error
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not Path(store).exists()


def test_the_sweep_magic_parses_mcp_as_the_command_does(tmp_path: Path) -> None:
    _, args = _args.parse(
        "sweep " + shlex.join(["--providers", "demo", "--workspace", str(tmp_path),
                               "--mcp", f"clock={TIME}", "--mcp-trust", "clock"])
    )  # fmt: skip
    (clock,) = sweep_kwargs(args, "notebook", {})["mcp"]
    assert (clock.name, clock.trusted, clock.command) == ("clock", True, sys.executable)
