"""Coding-agent CLI drivers against stand-in CLIs on PATH (tests/agents/standin.py).

Each stand-in speaks its CLI's structured stream and plays the scenario in
$HOME/scenario.json; it logs its argv, stdin, environment and cwd to $HOME/calls.jsonl.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from agent_helpers import CLIs

import harnessnb as hn
from harnessnb.agents._cause import Cause
from harnessnb.agents._turn import Turn
from harnessnb.events import AnyEvent, FinishedEvent, RefusedEvent, RetryEvent, ToolCallEvent
from harnessnb.rules._secrets import is_secret_name
from harnessnb.store._writer import store_writer
from harnessnb.tools import _process  # the one runner owns the kill grace

AGENTS = ["claude", "codex", "copilot"]
ag = hn.agents


def run(clis: CLIs, name: str, task: str = "read a.txt", **options: Any) -> ag.AgentResult:
    kw = {k: options.pop(k) for k in ("session", "on_event") if k in options}
    return ag.run_sync(ag.driver(name, **options), task, clis.ws, store=clis.store, **kw)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (dead, not yet reaped by its parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


# ------------------------------------------------------------------ success


@pytest.mark.parametrize("name", AGENTS)
def test_a_good_run_returns_the_answer_usage_session_and_exit_code(clis: CLIs, name: str) -> None:
    clis.scenario(mode="ok", text="a.txt says hello")
    result = run(clis, name)
    assert result.ok and result.outcome is hn.RunOutcome.FINISHED and result.error is None
    assert result.text == "a.txt says hello"
    assert result.exit_code == 0
    assert result.session_id and len(result.session_id) == 36
    assert result.usage.output_tokens == 40 and result.usage.cached_input_tokens == 300
    assert result.tool_calls == 1


def test_claude_usage_counts_cache_reads_and_writes_as_input(clis: CLIs) -> None:
    clis.scenario(mode="ok")
    result = run(clis, "claude")
    # Anthropic's input_tokens exclude the cache: 100 fresh + 20 written + 300 read.
    assert result.usage == hn.Usage(input_tokens=420, output_tokens=40, cached_input_tokens=300)
    assert result.cost_usd == 0.0123


def test_codex_usage_input_already_includes_the_cached_tokens(clis: CLIs) -> None:
    clis.scenario(mode="ok")
    usage = run(clis, "codex").usage
    assert (usage.input_tokens, usage.cached_input_tokens) == (420, 300)


@pytest.mark.parametrize("name", AGENTS)
def test_the_run_lands_in_the_store_with_the_cli_as_provider(clis: CLIs, name: str) -> None:
    clis.scenario(mode="ok")
    result = run(clis, name, model="m-1")
    runs = clis.store.runs(result.run_id).to_dict("records")
    agent = ag.driver(name).name
    assert [(r["provider"], r["outcome"], r["steps"], r["tokens"]) for r in runs] == [
        (agent, "finished", 1, 460)]  # fmt: skip
    attempts = clis.store.attempts(result.run_id).to_dict("records")
    # codex's stand-in reports one retry that recovered: an attempt row of its own
    retried = [(r["attempt"], r["kind"]) for r in attempts[:-1]]
    assert retried == ([(1, "transport")] if name == "codex" else [])
    a = attempts[-1]
    assert a["attempt"] == len(attempts)
    assert (a["provider"], a["input_tokens"], a["output_tokens"], a["request_id"]) == (
        agent, 420, 40, result.session_id)  # fmt: skip
    assert a["kind"] is None or a["kind"] != a["kind"]  # NULL (NaN in pandas) on success
    # Claude Code reports what the invocation cost: the attempt and the run carry it;
    # the others report tokens only, so their cost is unknown (NULL), not zero.
    reported = {"claude": 0.0123}.get(name)
    cost = clis.store.runs(result.run_id)["cost_usd"].iloc[0]
    if reported is None:
        assert pd.isna(a["cost_usd"]) and pd.isna(cost)
    else:
        assert a["cost_usd"] == pytest.approx(reported) and cost == pytest.approx(reported)
    tools = clis.store.tool_calls(result.run_id).to_dict("records")
    assert [(t["tool"], t["status"], t["effect"]) for t in tools] == [
        ({"claude": "Read", "codex": "shell", "copilot": "view"}[name], "ok", "agent")
    ]
    steps = clis.store.steps(result.run_id).to_dict("records")
    assert [(s["decision"], s["tool_calls"], s["changed_workspace"]) for s in steps] == [
        ("answer", 1, False)]  # fmt: skip


def test_events_arrive_in_order_like_the_loops(clis: CLIs) -> None:
    clis.scenario(mode="ok")
    seen: list[AnyEvent] = []
    result = run(clis, "claude", on_event=seen.append)
    kinds = [e.kind for e in seen]
    assert kinds[0] == "started" and kinds[-1] == "finished"
    assert kinds.count("step") == 2
    assert [e.status for e in seen if isinstance(e, ToolCallEvent)] == ["started", "ok"]
    finished = seen[-1]
    assert isinstance(finished, FinishedEvent)
    assert finished.outcome == "finished" and finished.tokens == result.tokens


@pytest.mark.parametrize("name", AGENTS)
def test_a_tool_call_the_clis_permissions_refuse_is_a_refused_row_and_event(
    clis: CLIs, name: str
) -> None:
    clis.scenario(mode="denied", text="could not touch x")
    seen: list[Any] = []
    result = run(clis, name, on_event=seen.append)
    assert result.ok and result.text == "could not touch x"
    refused = [e for e in seen if isinstance(e, RefusedEvent)]
    assert len(refused) == 1 and "touch x" in refused[0].target
    assert refused[0].layer == "agent"
    tools = clis.store.tool_calls(result.run_id)
    assert tools["status"].tolist() == ["refused"]


def test_a_raising_event_callback_does_not_fail_the_run(clis: CLIs) -> None:
    clis.scenario(mode="ok")

    def boom(event: Any) -> None:
        raise RuntimeError("listener bug")

    assert run(clis, "codex", on_event=boom).ok


# ------------------------------------------------------------- invocation


def test_each_cli_gets_its_documented_headless_argv(clis: CLIs) -> None:
    clis.scenario(mode="ok")
    for name in AGENTS:
        run(clis, name, model="m-1")
    claude, codex, copilot = (c["argv"] for c in clis.calls())
    assert claude[:8] == ["-p", "--output-format", "stream-json", "--verbose",
                          "--permission-mode", "dontAsk",
                          "--disallowedTools", "Bash,Edit,Write,NotebookEdit"]  # fmt: skip
    assert claude[-2:] == ["--", "read a.txt"] and "--session-id" in claude
    assert claude[claude.index("--model") + 1] == "m-1"
    assert codex == ["exec", "--json", "--skip-git-repo-check", "--sandbox", "read-only",
                     "--model", "m-1", "read a.txt"]  # fmt: skip
    assert copilot[:6] == ["--output-format", "json", "--allow-all-tools", "--no-ask-user",
                           "--deny-tool=shell", "--deny-tool=write"]  # fmt: skip
    assert copilot[-1] == "--prompt=read a.txt" and "--usage-output-file" in copilot
    for call in clis.calls():
        assert call["stdin"] == ""  # stdin closed when the prompt is an argument


@pytest.mark.parametrize(
    ("name", "permission", "expected"),
    [
        ("claude", "edit", ["--permission-mode", "acceptEdits"]),
        ("claude", "bypass", ["--dangerously-skip-permissions"]),
        ("codex", "edit", ["--sandbox", "workspace-write"]),
        ("codex", "bypass", ["--dangerously-bypass-approvals-and-sandbox"]),
        ("copilot", "edit", ["--no-ask-user", "--deny-tool=shell", "--session-id"]),
        ("copilot", "bypass", ["--no-ask-user", "--allow-all-paths"]),
    ],
)
def test_permission_maps_to_each_clis_own_flags(
    clis: CLIs, name: str, permission: str, expected: list[str]
) -> None:
    clis.scenario(mode="ok")
    run(clis, name, permission=permission)
    argv = clis.calls()[-1]["argv"]
    start = argv.index(expected[0])
    assert argv[start : start + len(expected)] == expected


def test_the_cli_runs_in_the_workspace_with_a_minimal_environment(
    clis: CLIs, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = ag.ClaudeCode().environment() | ag.Codex().environment()
    for key in set(own) - {"PATH", "HOME"}:  # what the host has of the CLIs' own variables
        monkeypatch.delenv(key)
    monkeypatch.setenv("SOME_HOST_SECRET", "do-not-pass-me")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-123456")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test-key-123456")
    clis.scenario(mode="ok")
    run(clis, "claude")
    run(clis, "codex", env={"HTTPS_PROXY": "http://chosen:2"})
    claude_call, codex_call = clis.calls()
    assert Path(claude_call["cwd"]) == clis.ws.resolve()
    claude_env, codex_env = claude_call["env"], codex_call["env"]
    assert set(claude_env) - {"LC_CTYPE"} == {"PATH", "HOME", "ANTHROPIC_API_KEY"}
    assert set(codex_env) - {"LC_CTYPE"} == {"PATH", "HOME", "OPENAI_API_KEY", "HTTPS_PROXY"}
    assert codex_env["HTTPS_PROXY"] == "http://chosen:2"  # only what the caller gave


def test_a_prompt_too_large_for_the_command_line_goes_to_stdin(clis: CLIs) -> None:
    clis.scenario(mode="ok")
    big = "x" * (200 * 1024)
    for name in AGENTS:
        assert run(clis, name, task=big).ok
    claude_call, codex_call, copilot_call = clis.calls()
    for call in clis.calls():
        assert call["stdin"] == big and not any(big in a for a in call["argv"])
    assert claude_call["argv"][-1] != "--"
    assert codex_call["argv"][-1] == "-"
    assert not any(a.startswith("--prompt") or a == "-p" for a in copilot_call["argv"])


def test_an_argument_too_large_for_the_command_line_is_refused_before_spawning(
    clis: CLIs,
) -> None:
    result = run(clis, "copilot", extra_args=["--add-dir=" + "d" * (200 * 1024)])
    err = result.error
    assert isinstance(err, ag.CommandLineTooLarge)
    assert (err.what, err.limit) == ("argument", 128 * 1024 - 1) and err.size > 200 * 1024
    assert clis.calls() == [] and result.outcome is hn.RunOutcome.ESCALATED_TERMINAL


def test_a_prompt_starting_with_a_dash_is_never_taken_for_an_option(clis: CLIs) -> None:
    clis.scenario(mode="ok")
    run(clis, "claude", task="--help me")
    run(clis, "codex", task="--help me")
    claude_call, codex_call = clis.calls()
    assert claude_call["argv"][-2:] == ["--", "--help me"]
    assert codex_call["argv"][-1] == "-" and codex_call["stdin"] == "--help me"


@pytest.mark.parametrize("name", ["codex", "copilot"])
def test_max_turns_on_a_cli_without_one_is_unsupported_not_ignored(clis: CLIs, name: str) -> None:
    result = run(clis, name, max_turns=3)
    assert isinstance(result.error, ag.Unsupported) and "max_turns" in result.error.what
    assert clis.calls() == []


def test_claude_max_turns_is_passed_on(clis: CLIs) -> None:
    clis.scenario(mode="ok")
    run(clis, "claude", max_turns=3)
    argv = clis.calls()[0]["argv"]
    assert argv[argv.index("--max-turns") + 1] == "3"


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(hn.ConfigError, match="permission"):
        ag.ClaudeCode(permission="yolo")  # type: ignore[arg-type]
    with pytest.raises(hn.ConfigError, match="timeout"):
        ag.Codex(timeout_s=0)
    with pytest.raises(hn.ConfigError, match="unknown agent 'gemini'"):
        ag.driver("gemini")


def test_a_missing_workspace_is_a_config_error(clis: CLIs) -> None:
    with pytest.raises(hn.ConfigError, match="not a folder"):
        ag.run_sync(ag.ClaudeCode(), "x", clis.ws / "nope", store=clis.store)


# ---------------------------------------------------------------- failures


def test_not_installed_names_the_install_command(clis: CLIs) -> None:
    result = run(clis, "claude", bin="claude-not-here")
    err = result.error
    assert isinstance(err, ag.NotInstalled)
    assert err.hint == "npm install -g @anthropic-ai/claude-code"
    assert "install it with" in err._render_traceback_()[1]
    assert not err.retryable and result.outcome is hn.RunOutcome.ESCALATED_TERMINAL
    # Recorded: the run and its error, no attempt (nothing was started).
    row = clis.store.get_run(result.run_id)
    assert row is not None and row["error"]["code"] == "AGENT_NOT_INSTALLED"
    assert clis.store.attempts(result.run_id).empty


def test_a_program_the_os_cannot_execute_is_a_spawn_error(clis: CLIs) -> None:
    (clis.bin / "codex").write_bytes(b"\x00\x01 not a program")
    result = run(clis, "codex")
    err = result.error
    assert isinstance(err, ag.Spawn) and err.reason == "ENOEXEC"
    assert "could not be started" in err.message
    assert clis.store.attempts(result.run_id).empty  # nothing ran


def test_a_missing_interpreter_is_a_spawn_error_that_says_so(clis: CLIs) -> None:
    (clis.bin / "claude").write_text("#!/nonexistent/node\nconsole.log(1)\n")
    err = run(clis, "claude").error
    assert isinstance(err, ag.Spawn) and err.reason == "interpreter_missing"
    assert "need node" in err.message


@pytest.mark.parametrize("name", AGENTS)
def test_not_logged_in_is_an_auth_failure_with_the_login_command(clis: CLIs, name: str) -> None:
    clis.scenario(mode="not_logged_in")
    result = run(clis, name)
    err = result.error
    assert isinstance(err, ag.NotAuthenticated) and err.is_auth_failure()
    assert err.detail == "Error: No authentication information found."
    assert err.hint == ag.driver(name).login_hint
    assert clis.store.attempts(result.run_id)["kind"].tolist() == ["auth"]


@pytest.mark.parametrize("name", ["claude", "copilot"])
def test_an_auth_failure_reported_in_the_stream_is_an_auth_failure(clis: CLIs, name: str) -> None:
    clis.scenario(mode="auth_in_stream")
    result = run(clis, name)
    err = result.error
    assert isinstance(err, ag.NotAuthenticated)
    assert err.detail == "Not logged in · Please run /login"
    assert clis.store.attempts(result.run_id)["kind"].tolist() == ["auth"]


@pytest.mark.parametrize("name", AGENTS)
def test_401_inside_a_uuid_is_not_an_auth_failure(clis: CLIs, name: str) -> None:
    clis.scenario(mode="uuid401")
    err = run(clis, name).error
    assert isinstance(err, ag.Failed) and not err.is_auth_failure()
    assert err.exit_code == 2 and "6a1f-401b-9c2e" in err.message


@pytest.mark.parametrize("name", AGENTS)
def test_a_quota_is_rate_limited_in_the_clis_words_and_not_retried(clis: CLIs, name: str) -> None:
    clis.scenario(mode="rate_limit")
    result = run(clis, name)
    err = result.error
    assert isinstance(err, ag.RateLimited) and err.retryable
    assert err.detail == "You've hit your usage limit. Upgrade to Pro or try again at 5pm."
    assert len(clis.calls()) == 1  # never retried on its own
    assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE


def test_a_structured_rate_limit_event_keeps_its_reset_time(clis: CLIs) -> None:
    clis.scenario(mode="rate_limit_event")
    err = run(clis, "claude").error
    assert isinstance(err, ag.RateLimited) and err.resets_at == 1900000000.0
    assert "usage limit reached" in err.detail


@pytest.mark.parametrize("name", AGENTS)
def test_a_429_after_the_clis_own_retries_is_rate_limited(clis: CLIs, name: str) -> None:
    clis.scenario(mode="rate_limit_in_stream")
    seen: list[Any] = []
    result = run(clis, name, on_event=seen.append)
    assert isinstance(result.error, ag.RateLimited), result.error
    assert "429" in result.error.detail
    retries = [e for e in seen if isinstance(e, RetryEvent)]
    if name != "codex":  # codex reports its retries as error lines, seen as retries too
        assert retries and retries[0].status == 429


def test_codex_retry_lines_become_retry_events_and_do_not_fail_the_run(clis: CLIs) -> None:
    clis.scenario(mode="ok")
    seen: list[Any] = []
    result = run(clis, "codex", on_event=seen.append)
    assert result.ok
    assert [(e.detail, e.error_kind, e.attempt, e.max_attempts)
            for e in seen if isinstance(e, RetryEvent)] == [
        ("stream disconnected before completion", "transport", 1, 5)
    ]  # fmt: skip


@pytest.mark.parametrize("name", AGENTS)
def test_exit_0_with_a_failed_turn_is_an_agent_error_never_success(clis: CLIs, name: str) -> None:
    clis.scenario(mode="agent_error")
    result = run(clis, name)
    err = result.error
    assert isinstance(err, ag.AgentError) and not result.ok
    assert err.status == 404 and "claude-nonexistent not found" in err.detail
    assert result.exit_code in (0, None) or name == "claude"
    assert clis.store.attempts(result.run_id)[["kind", "status"]].values.tolist() == [
        ["request", 404]]  # fmt: skip


@pytest.mark.parametrize("name", AGENTS)
def test_a_rejected_flag_is_flag_rejected(clis: CLIs, name: str) -> None:
    clis.scenario(mode="flag")
    err = run(clis, name).error
    assert isinstance(err, ag.FlagRejected) and "unexpected argument" in err.detail


def test_a_crash_is_failed_with_the_most_explanatory_stderr_line(clis: CLIs) -> None:
    clis.scenario(mode="crash")
    err = run(clis, "claude").error
    assert isinstance(err, ag.Failed) and err.exit_code == 3
    assert err.message == (
        "claude exited with code 3: TypeError: cannot read properties of undefined"
    )
    assert "progress 100%" in err.stderr


@pytest.mark.parametrize("mode", ["garbage", "no_result"])
@pytest.mark.parametrize("name", AGENTS)
def test_unreadable_structured_output_is_a_parse_error(clis: CLIs, name: str, mode: str) -> None:
    clis.scenario(mode=mode)
    result = run(clis, name)
    err = result.error
    assert isinstance(err, ag.Parse) and result.text == ""
    if mode == "garbage":
        assert "2 line(s) were not JSON" in err.detail and "plain text" in err.detail
    assert clis.store.attempts(result.run_id)["kind"].tolist() == ["malformed"]


@pytest.mark.parametrize("name", AGENTS)
def test_events_of_unexpected_shapes_are_counted_never_fatal(clis: CLIs, name: str) -> None:
    clis.scenario(mode="odd_events", text="fine")
    result = run(clis, name)
    assert result.ok and result.text == "fine", result.error
    checkpoint = store_writer(clis.store).last_checkpoint(result.run_id)
    assert checkpoint is not None and checkpoint["state"]["unparsed"] >= 3


def test_a_secret_echoed_by_the_cli_is_redacted_everywhere(
    clis: CLIs, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "my-anthropic-secret-value-42"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    clis.scenario(mode="crash", echo_env="ANTHROPIC_API_KEY")
    result = run(clis, "claude")
    assert isinstance(result.error, ag.Failed)
    shown = result.error.message + repr(result.error.to_dict()) + result.error._card_html()
    assert secret not in shown and "[redacted]" in shown
    stored = clis.store.sql("SELECT error FROM runs").to_string()
    assert secret not in stored


@pytest.mark.parametrize(
    ("name", "secret"),
    [("AWS_BEARER_TOKEN_BEDROCK", True), ("NPM_CONFIG__AUTH", True),
     ("KEYBOARD_LAYOUT", False), ("SSH_AUTH_SOCK", False)],
)  # fmt: skip
def test_the_childs_secret_variables_follow_the_scrubbers_one_rule(
    clis: CLIs, name: str, secret: bool
) -> None:
    value = "value-of-the-variable-42"
    clis.scenario(mode="crash", echo_env=name)
    result = run(clis, "claude", env={name: value})
    assert isinstance(result.error, ag.Failed)
    assert is_secret_name(name) is secret
    shown = "[redacted]" if secret else value
    assert f"error: key {shown} refused" in result.error.stderr


# --------------------------------------------------------- timeout, cancel


@pytest.mark.parametrize("name", AGENTS)
def test_timeout_kills_the_whole_process_group_and_keeps_partial_output(
    clis: CLIs, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_process, "TERM_GRACE_S", 0.2)
    clis.scenario(mode="hang", grandchild=True)
    started = time.monotonic()
    result = run(clis, name, timeout_s=1.0)
    assert time.monotonic() - started < 10
    err = result.error
    assert isinstance(err, ag.Timeout) and err.retryable
    assert err.timeout_s == 1.0 and "partial thoughts" in err.partial
    assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE and result.exit_code is None
    assert wait_gone(clis.grandchild_pid()), "the grandchild outlived the timeout"
    assert clis.store.attempts(result.run_id)["kind"].tolist() == ["timeout"]


def test_cancel_kills_the_whole_process_group_and_records_cancelled(clis: CLIs) -> None:
    clis.scenario(mode="hang", grandchild=True)

    async def main() -> None:
        task = asyncio.create_task(ag.run(ag.ClaudeCode(), "x", clis.ws, store=clis.store,
                                          run_id="run_cancel"))  # fmt: skip
        while not (clis.home / "grandchild.pid").exists():
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert wait_gone(clis.grandchild_pid()), "the grandchild outlived the cancel"
    row = clis.store.get_run("run_cancel")
    assert row is not None and row["outcome"] == "cancelled"
    assert row["error"]["code"] == "AGENT_CANCELLED"
    # The step is kept (with what the stream said); the request the cancel cut off is a
    # row marked cancelled, with no kind: a cancel is no provider outcome.
    assert clis.store.steps("run_cancel")["decision"].tolist() == ["cancelled"]
    rows = clis.store.attempts("run_cancel")
    assert rows["cancelled"].tolist() == [True] and rows["kind"].isna().all()
    assert rows["provider"].tolist() == ["claude-code"]
    assert clis.store.failure_rates(by="provider").empty


def test_a_grandchild_left_running_after_a_good_answer_is_killed(clis: CLIs) -> None:
    clis.scenario(mode="ok", grandchild=True)
    assert run(clis, "codex").ok
    assert wait_gone(clis.grandchild_pid())


# ---------------------------------------------------------- bounded capture


def test_an_endless_stream_and_an_endless_line_do_not_exhaust_memory(clis: CLIs) -> None:
    # 20,000 events of 1 kB, then one 30 MB line with no newline until its end.
    clis.scenario(mode="endless", lines=20000, long_line=30_000_000, text="the end")
    limits = ag.Limits(capture_bytes=64 * 1024, line_bytes=256 * 1024, event_bytes=4096)
    tracemalloc.start()
    try:
        result = run(clis, "claude", limits=limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.ok and result.text == "the end"
    assert peak < 8 * 1024 * 1024, f"peak {peak} bytes for a 50 MB stream"


def test_one_event_is_bounded_by_event_bytes(clis: CLIs) -> None:
    turn = ag._turn.Turn(ag.Limits(event_bytes=100))  # type: ignore[attr-defined]
    turn.tool_started("t", "Write", {"content": "z" * 10_000 + "END"})
    args = turn.tool_calls[0]["args"]
    assert len(args) < 150 and "chars elided]" in args  # head and tail, the cut counted
    assert args.startswith('{"content": "zz') and args.endswith('END"}')


KEY = "hn-run-secret-0123456789abcdef"  # a CLI's key, given only to the child


def _around(key: str, cut: int) -> str:
    """A long text with ``key`` lying across position ``cut``."""
    return "a" * (cut - 10) + key + "b" * 5000


@pytest.mark.parametrize("source", ["environment", "run"])
def test_a_key_across_a_cut_of_the_clis_stream_is_scrubbed_before_the_cut(
    monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    # Every text a turn keeps is scrubbed, then cut: a key lying across the cut would
    # otherwise leave a fragment no scrubber recognises. Both kinds of secret: one read
    # from the environment, one known only to this run (the child's variables).
    key = "hn-env-secret-0123456789abcdef" if source == "environment" else KEY
    monkeypatch.setenv("HN_TEST_API_KEY", "hn-env-secret-0123456789abcdef")
    turn = Turn(ag.Limits(capture_bytes=1000, event_bytes=200), secrets=[KEY])
    turn.say(_around(key, 990))  # the old cut kept the first 988 characters
    turn.answer(_around(key, 990))
    turn.tool_started("t", "Write", {"content": _around(key, 190)})
    turn.tool_refused("t", _around(key, 290))
    turn.unreadable(_around(key, 290))
    turn.retry(Cause(hn.ProviderErrorKind.SERVER, detail=_around(key, 290)))
    kept = [turn.text, turn.partial_text(), turn.first_unparsed,
            *(str(c) for c in turn.tool_calls), *(str(e) for e in turn.events)]  # fmt: skip
    for text in kept:
        assert key[:8] not in text and key[-8:] not in text, text[:120]
    assert all(len(t) < 6000 and "chars elided]" in t for t in kept)


def test_a_run_keeps_no_fragment_of_the_childs_key_cut_from_a_long_answer(clis: CLIs) -> None:
    answer = "a" * 980 + KEY + "b" * 3000  # the key across the answer's old cut (988)
    clis.scenario(mode="ok", text=answer)
    limits = ag.Limits(capture_bytes=1000)
    result = ag.run_sync(ag.ClaudeCode(env={"ANTHROPIC_API_KEY": KEY}, limits=limits),
                         "read a.txt", clis.ws, store=clis.store)  # fmt: skip
    assert result.ok, result.error
    assert KEY[:8] not in result.text and "[redacted]" not in result.text  # cut away whole
    assert result.text.startswith("aaa") and result.text.endswith("bbb")
    assert "chars elided]" in result.text


# ---------------------------------------------------------------- sessions


@pytest.mark.parametrize("name", AGENTS)
def test_a_named_session_is_bound_then_continued(clis: CLIs, name: str) -> None:
    clis.scenario(mode="ok")
    first = run(clis, name, session="refactor")
    second = run(clis, name, task="and now the tests", session="refactor")
    assert first.ok and second.ok and first.session_id == second.session_id
    calls = clis.calls()
    assert len(calls) == 2
    resumed = calls[1]["argv"]
    if name == "codex":
        assert resumed[:2] == ["exec", "resume"] and resumed[-2] == first.session_id
        assert 'sandbox_mode="read-only"' in resumed and "--sandbox" not in resumed
    elif name == "claude":
        assert resumed[resumed.index("--resume") + 1] == first.session_id
    else:
        assert resumed[resumed.index("--session-id") + 1] == first.session_id
    bound = store_writer(clis.store).agent_session(str(clis.ws.resolve()), "refactor")
    assert bound is not None
    assert (bound["agent"], bound["session_id"], bound["run_id"]) == (
        ag.driver(name).name, first.session_id, second.run_id)  # fmt: skip


@pytest.mark.parametrize("name", ["codex", "copilot"])
def test_a_resumed_session_is_charged_only_this_runs_usage(clis: CLIs, name: str) -> None:
    # codex and copilot report the session's totals; each run gets its own share.
    clis.scenario(mode="ok")
    first = run(clis, name, session="long")
    second = run(clis, name, session="long")
    third = run(clis, name)  # a new session starts from zero
    for result in (first, second, third):
        assert result.usage.input_tokens == 420 and result.usage.output_tokens == 40
    tokens = clis.store.runs()[["run_id", "tokens"]].set_index("run_id")["tokens"].to_dict()
    assert [tokens[r.run_id] for r in (first, second, third)] == [460, 460, 460]


def test_a_session_the_cli_lost_says_to_use_a_new_name(clis: CLIs) -> None:
    clis.scenario(mode="lost_session")
    assert run(clis, "claude", session="gone").ok
    err = run(clis, "claude", session="gone").error
    assert isinstance(err, ag.AgentError)
    assert "No conversation found" in err.detail and "use a new session name" in err.message


def test_a_session_name_bound_to_one_cli_is_a_conflict_for_another(clis: CLIs) -> None:
    clis.scenario(mode="ok")
    assert run(clis, "claude", session="shared").ok
    result = run(clis, "codex", session="shared")
    err = result.error
    assert isinstance(err, ag.SessionConflict)
    assert (err.name, err.bound, err.requested) == ("shared", "claude-code", "codex")
    assert len(clis.calls()) == 1  # codex was never started
    # The lease was given back: the right CLI continues the session at once.
    assert run(clis, "claude", session="shared").ok


def test_sessions_are_per_workspace(clis: CLIs, tmp_path: Path) -> None:
    clis.scenario(mode="ok")
    other = tmp_path / "other"
    other.mkdir()
    assert run(clis, "claude", session="s").ok
    result = ag.run_sync(ag.Codex(), "x", other, store=clis.store, session="s")
    assert result.ok


_HOLDER = textwrap.dedent(
    """
    import sys
    import harnessnb as hn
    r = hn.agents.run_sync(hn.agents.ClaudeCode(), "hold", sys.argv[1], store=sys.argv[2],
                           session="busy")
    print(r.outcome.value)
    """
)


def test_a_session_driven_by_another_process_is_busy_until_that_process_dies(
    clis: CLIs, tmp_path: Path
) -> None:
    clis.store.close()
    store_path = str(tmp_path / "runs.duckdb")
    clis.scenario(mode="hang")
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(clis.ws), store_path],
                              env=dict(os.environ), start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not clis.calls() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert clis.calls(), "the holder never started its CLI"
        with hn.Store(store_path) as store:
            result = ag.run_sync(ag.ClaudeCode(), "x", clis.ws, store=store, session="busy")
            err = result.error
            assert isinstance(err, ag.SessionBusy) and err.retryable
            assert err.name == "busy" and str(holder.pid) in str(err.holder)
            assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
            assert len(clis.calls()) == 1
            # The holder dies (kernel killed): its session lease is taken over at once.
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait(10)
            clis.scenario(mode="ok")
            again = ag.run_sync(ag.ClaudeCode(), "x", clis.ws, store=store, session="busy")
            assert again.ok, again.error
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait(10)
        _kill_standins(clis.bin)  # the holder's orphaned stand-in


def _kill_standins(bin_dir: Path) -> None:
    """Kill this test's own stand-ins (their path is under its tmp folder), no other
    process: a suite running beside this one must not lose its CLIs."""
    out = subprocess.run(["pgrep", "-f", str(bin_dir)], capture_output=True, text=True)
    for pid in out.stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


# ------------------------------------------------------------------ helpers


def test_retryable_follows_the_cause() -> None:
    kw = {"agent": "codex", "bin": "codex"}
    transient = [ag.RateLimited("q", detail="q", **kw), ag.Timeout("t", timeout_s=1, **kw),
                 ag.SessionBusy("b", name="n", **kw)]  # fmt: skip
    others = [ag.Failed("f", exit_code=1, **kw), ag.NotAuthenticated("a", detail="", hint="", **kw),
              ag.AgentError("e", detail="", status=400, **kw), ag.Cancelled("c", **kw),
              ag.Parse("p", detail="", **kw), ag.NotInstalled("n", hint="", **kw)]  # fmt: skip
    assert all(e.retryable for e in transient)
    assert not any(e.retryable for e in others)
    assert [e.is_cancelled() for e in others] == [False, False, False, True, False, False]
    assert all(isinstance(e, hn.HarnessError) for e in transient + others)
    assert [e.to_dict()["retryable"] for e in transient + others] == [True] * 3 + [False] * 6


def test_is_transient_is_a_deprecated_alias_of_retryable() -> None:
    kw = {"agent": "codex", "bin": "codex"}
    for err in (ag.Timeout("t", timeout_s=1, **kw), ag.Failed("f", exit_code=1, **kw)):
        with pytest.warns(DeprecationWarning, match="retryable"):
            assert err.is_transient() is err.retryable
    with pytest.warns(DeprecationWarning, match="RETRYABLE"):
        assert ag.RateLimited.TRANSIENT is True
    with pytest.warns(DeprecationWarning, match="RETRYABLE"):

        class Flaky(ag.Failed):  # a subclass written against the old name still works
            TRANSIENT = True

    assert Flaky("f", exit_code=1, **kw).retryable is True


def test_an_agent_run_cannot_be_resumed_by_the_loop(clis: CLIs) -> None:
    clis.scenario(mode="rate_limit")
    result = run(clis, "claude")
    with pytest.raises(hn.ResumeError) as info:
        hn.resume_sync(result.run_id, hn.ScriptedProvider(["x"]), store=clis.store)
    assert info.value.reason == "agent_run"


def test_failure_rates_cover_cli_runs(clis: CLIs) -> None:
    for mode in ("ok", "rate_limit", "ok", "not_logged_in"):
        clis.scenario(mode=mode)
        run(clis, "claude")
    rates = clis.store.failure_rates(by=("provider", "kind"))
    rows = {(r["kind"] if isinstance(r["kind"], str) else None): (r["attempts"], r["failures"])
            for r in rates.to_dict("records")}  # fmt: skip
    assert rows == {"rate_limited": (4, 1), "auth": (4, 1)}


def test_the_result_card_escapes_the_answer(clis: CLIs) -> None:
    clis.scenario(mode="ok", text="<script>alert(1)</script>")
    result = run(clis, "claude")
    bundle = result._repr_mimebundle_()
    assert "<script>" not in bundle["text/html"] and "&lt;script&gt;" in bundle["text/html"]
    assert "claude-code run" in bundle["text/plain"]


@pytest.mark.parametrize("mode", ["flood", "flood_in_stream"])
def test_failure_text_of_megabytes_is_kept_to_a_few_kilobytes(
    clis: CLIs, mode: str
) -> None:
    clis.scenario(mode=mode)
    result = run(clis, "claude")
    err = result.error
    assert isinstance(err, ag.CLIError)
    assert len(err.message) < 4200 and "chars elided]" in err.message
    if mode == "flood_in_stream":  # one whole detail: its head and tail kept, the cut marked
        assert err.message.endswith(" END")
    assert len(str(err.to_dict())) < 16384 and len(repr(err)) < 16384
    assert all(len(v) < 32768 for v in err._repr_mimebundle_().values())
    assert all(len(v) < 32768 for v in result._repr_mimebundle_().values())
    (stored,) = clis.store.runs(result.run_id)["error"].tolist()
    assert len(stored) < 16384 and "chars elided]" in stored
