# ruff: noqa: E501  (the stand-in streams are JSON fixtures, kept one event a line)
"""A stand-in for the claude, codex and copilot CLIs, for the agent driver tests.

Installed by the tests under each CLI's name in a folder put first on PATH. It speaks
the dialect its name says (argv[0]) and plays the scenario in $HOME/scenario.json
(HOME is one of the few variables a driver passes on). Every call is logged to
$HOME/calls.jsonl: argv, stdin, environment and working directory.

Scenario keys: mode (see MODES), sleep (seconds before answering), grandchild (spawn a
long-lived grandchild and write its pid to $HOME/grandchild.pid), exit (exit code
override), text (the answer), echo_env (print that variable's value to stderr).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

HOME = Path(os.environ.get("HOME", "."))
NAME = Path(sys.argv[0]).name
ARGS = sys.argv[1:]


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def opt(flag: str) -> str | None:
    for i, arg in enumerate(ARGS):
        if arg == flag and i + 1 < len(ARGS):
            return ARGS[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def log_call(stdin: str) -> None:
    with (HOME / "calls.jsonl").open("a") as f:
        f.write(json.dumps({"name": NAME, "argv": ARGS, "stdin": stdin, "env": dict(os.environ),
                            "cwd": os.getcwd()}) + "\n")


def session_id() -> str:
    if NAME == "codex":
        if "resume" in ARGS:
            return ARGS[ARGS.index("resume") + 1 :][-2]
        return str(uuid.uuid4())
    return opt("--resume") or opt("--session-id") or str(uuid.uuid4())


# ------------------------------------------------------------------ dialects
# Shapes as the real CLIs print them (claude 2.1.197, codex-cli 0.171.0, copilot 1.0.102,
# seen against a local mock model server), trimmed to the fields that matter.


def totals(sid: str, add: dict) -> dict:
    """Session-cumulative usage, as codex and copilot report it across resumes."""
    path = HOME / f"usage-{sid}.json"
    total = json.loads(path.read_text()) if path.exists() else {}
    total = {k: total.get(k, 0) + v for k, v in add.items()}
    path.write_text(json.dumps(total))
    return total


def ok(sid: str, text: str) -> None:
    if NAME == "claude":
        emit({"type": "system", "subtype": "init", "session_id": sid, "model": "claude-test",
              "cwd": os.getcwd(), "tools": ["Read", "Write"], "permissionMode": "dontAsk"})
        emit({"type": "assistant", "session_id": sid, "message": {"role": "assistant", "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a.txt"}}],
            "usage": {"input_tokens": 3, "output_tokens": 9}}})
        emit({"type": "user", "session_id": sid, "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello", "is_error": False}]}})
        emit({"type": "assistant", "session_id": sid, "message": {"role": "assistant", "content": [
            {"type": "text", "text": text}], "usage": {"input_tokens": 5, "output_tokens": 1}}})
        emit({"type": "result", "subtype": "success", "is_error": False, "api_error_status": None,
              "result": text, "session_id": sid, "num_turns": 2, "total_cost_usd": 0.0123,
              "usage": {"input_tokens": 100, "cache_creation_input_tokens": 20,
                        "cache_read_input_tokens": 300, "output_tokens": 40}})
    elif NAME == "codex":
        emit({"type": "thread.started", "thread_id": sid})
        emit({"type": "turn.started"})
        emit({"type": "error", "message": "Reconnecting... 1/5 (stream disconnected before completion)"})
        emit({"type": "item.started", "item": {"id": "item_0", "type": "command_execution",
              "command": "/bin/bash -lc 'cat a.txt'", "aggregated_output": "", "exit_code": None,
              "status": "in_progress"}})
        emit({"type": "item.completed", "item": {"id": "item_0", "type": "command_execution",
              "command": "/bin/bash -lc 'cat a.txt'", "aggregated_output": "hello\n", "exit_code": 0,
              "status": "completed"}})
        emit({"type": "item.completed", "item": {"id": "item_1", "type": "reasoning", "text": "hm"}})
        emit({"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": text}})
        usage = totals(sid, {"input_tokens": 420, "cached_input_tokens": 300, "output_tokens": 40})
        emit({"type": "turn.completed", "usage": {**usage, "cache_write_input_tokens": 0,
                                                  "reasoning_output_tokens": 8}})
    else:  # copilot: the session id only in the last line; tokens only in the usage file
        emit({"type": "session.tools_updated", "data": {"model": "gpt-test"}, "ephemeral": True})
        emit({"type": "user.message", "data": {"content": "task"}})
        emit({"type": "assistant.message", "data": {"model": "gpt-test", "content": "", "toolRequests": [
            {"toolCallId": "c1", "name": "view", "arguments": {"path": "a.txt"}, "type": "function"}]}})
        emit({"type": "tool.execution_start", "data": {"toolCallId": "c1", "toolName": "view",
              "arguments": {"path": "a.txt"}}})
        emit({"type": "tool.execution_complete", "data": {"toolCallId": "c1", "success": True,
              "result": {"content": "hello"}}})
        emit({"type": "assistant.message", "data": {"model": "gpt-test", "content": text, "toolRequests": []}})
        emit({"type": "assistant.idle", "data": {}, "ephemeral": True})
        usage = totals(sid, {"inputTokens": 420, "outputTokens": 40, "cacheReadTokens": 300})
        if opt("--usage-output-file"):
            Path(opt("--usage-output-file")).write_text(json.dumps({
                "totalPremiumRequestCost": 1, "modelMetrics": {"gpt-test": {
                    "requests": {"count": 2, "cost": 1}, "usage": {**usage, "cacheWriteTokens": 0}}}}))
        emit({"type": "result", "sessionId": sid, "exitCode": 0,
              "usage": {"premiumRequests": 1, "totalApiDurationMs": 16}})


def turn_failed(sid: str, message: str, kind: str = "unknown", status: int | None = None) -> None:
    if NAME == "claude":
        emit({"type": "system", "subtype": "init", "session_id": sid, "model": "claude-test"})
        emit({"type": "assistant", "session_id": sid, "error": kind, "message": {
            "model": "<synthetic>", "role": "assistant", "content": [{"type": "text", "text": message}]}})
        emit({"type": "result", "subtype": "success", "is_error": True, "api_error_status": status,
              "result": message, "session_id": sid, "usage": {"input_tokens": 0, "output_tokens": 0}})
    elif NAME == "codex":
        emit({"type": "thread.started", "thread_id": sid})
        emit({"type": "turn.started"})
        emit({"type": "error", "message": message})
        emit({"type": "turn.failed", "error": {"message": message}})
    else:
        emit({"type": "session.tools_updated", "data": {"model": "gpt-test"}})
        emit({"type": "model.call_failure", "data": {"statusCode": status, "retryAttempt": 1,
              "failureKind": "api", "errorMessage": json.dumps({"message": message})}})
        emit({"type": "session.error", "data": {"errorType": kind, "message": message,
              "statusCode": status}})
        emit({"type": "result", "sessionId": sid, "exitCode": 1, "usage": {"premiumRequests": 0}})


def spawn_grandchild() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    (HOME / "grandchild.pid").write_text(str(child.pid))


def main() -> int:
    scenario = json.loads((HOME / "scenario.json").read_text()) if (HOME / "scenario.json").exists() else {}
    stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    log_call(stdin)
    mode = scenario.get("mode", "ok")
    text = scenario.get("text", "Done: a.txt says hello.")
    sid = session_id()
    if scenario.get("echo_env"):  # a CLI that prints its key in an error
        sys.stderr.write(f"error: key {os.environ.get(scenario['echo_env'])} refused\n")
    if scenario.get("grandchild"):
        spawn_grandchild()
    if scenario.get("sleep"):
        time.sleep(float(scenario["sleep"]))
    code = 0
    if mode == "ok":
        ok(sid, text)
    elif mode == "not_logged_in":  # copilot's wording: stderr only, no JSON at all
        sys.stderr.write("Error: No authentication information found.\n\nCopilot can be "
                         "authenticated with GitHub using an OAuth Token.\n")
        code = 1
    elif mode == "auth_in_stream":  # claude's own wording, as it prints it when logged out
        turn_failed(sid, "Not logged in · Please run /login", kind="authentication_failed")
        code = 1
    elif mode == "uuid401":  # a failure whose text holds a UUID with 401 in it
        sys.stderr.write(f"error: request 6a1f-401b-9c2e-{sid} failed: upstream closed\n")
        code = 2
    elif mode == "rate_limit":
        sys.stderr.write("You've hit your usage limit. Upgrade to Pro or try again at 5pm.\n")
        code = 1
    elif mode == "rate_limit_in_stream":  # a 429 after the CLI's own retries
        if NAME == "claude":
            emit({"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 1,
                  "retry_delay_ms": 1000, "error_status": 429, "error": "rate_limit",
                  "session_id": sid})
        turn_failed(sid, "API Error: Request rejected (429) · slow down", kind="rate_limit",
                    status=429)
        code = 1
    elif mode == "rate_limit_event":
        emit({"type": "system", "subtype": "init", "session_id": sid, "model": "claude-test"})
        emit({"type": "rate_limit_event", "rate_limit_info": {"status": "rejected",
              "resetsAt": 1900000000, "rateLimitType": "five_hour"}, "session_id": sid})
        emit({"type": "result", "subtype": "success", "is_error": True,
              "result": "Claude AI usage limit reached|1900000000", "session_id": sid})
        code = 1
    elif mode == "agent_error":  # exit 0, but the turn failed: unknown model
        turn_failed(sid, "API Error: 404 model: claude-nonexistent not found",
                    kind="model_not_found", status=404)
        code = 0
    elif mode == "flag":
        sys.stderr.write(f"error: unexpected argument '{ARGS[0]}' found\n\nUsage: {NAME} [OPTIONS]\n")
        code = 2
    elif mode == "crash":
        sys.stderr.write("loading config\nstarting session\nTypeError: cannot read properties of undefined\n    at main (cli.js:1:1)\nprogress 100%\n")
        code = 3
    elif mode == "flood":  # 5 MB on stderr, most of it one line, then a crash
        sys.stderr.write("starting\nError: " + "F" * 5_000_000 + " END\n")
        code = 3
    elif mode == "flood_in_stream":  # a failed turn whose detail is 400 KB (a line parsed)
        turn_failed(sid, "API Error: " + "D" * 400_000 + " END")
        code = 1
    elif mode == "garbage":  # exit 0 with output that is not the structured stream
        sys.stdout.write("Here is your answer in plain text.\nNo JSON at all.\n")
    elif mode == "no_result":  # valid JSON, but the stream stops before the end of the turn
        emit({"type": "system", "subtype": "init", "session_id": sid})
        emit({"type": "thread.started", "thread_id": sid})
    elif mode == "lost_session":  # resuming an id the CLI no longer has
        if "--resume" in ARGS:
            turn_failed(sid, f"No conversation found with session ID: {sid}")
            code = 1
        else:
            ok(sid, text)
    elif mode == "odd_events":  # events of unexpected shapes, then a normal turn
        for odd in ({"type": "assistant", "message": "not an object"},
                    {"type": "assistant", "message": {"content": 7}},
                    {"type": "result_partial", "usage": "lots"},
                    {"type": "item.completed", "item": ["a", "list"]},
                    {"type": "assistant.message", "data": "text", "toolRequests": 3},
                    {"type": "rate_limit_event", "rate_limit_info": "rejected"},
                    {"type": "system", "subtype": "api_retry", "attempt": "x"},
                    [1, 2, 3], 42, "just a string"):
            emit(odd)  # type: ignore[arg-type]
        ok(sid, text)
    elif mode == "denied":  # the CLI's permission rules refuse one tool call
        if NAME == "claude":
            emit({"type": "system", "subtype": "init", "session_id": sid, "model": "claude-test"})
            emit({"type": "assistant", "session_id": sid, "message": {"content": [
                {"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "touch x"}}]}})
            emit({"type": "user", "session_id": sid, "message": {"content": [
                {"type": "tool_result", "tool_use_id": "toolu_9", "is_error": True,
                 "content": "touch in 'x' was blocked. For security, ..."}]}})
            emit({"type": "assistant", "session_id": sid, "message": {"content": [{"type": "text", "text": text}]}})
            emit({"type": "result", "subtype": "success", "is_error": False, "result": text,
                  "session_id": sid, "usage": {"input_tokens": 1, "output_tokens": 1},
                  "permission_denials": [{"tool_name": "Bash", "tool_use_id": "toolu_9",
                                          "tool_input": {"command": "touch x"}}]})
        elif NAME == "codex":
            emit({"type": "thread.started", "thread_id": sid})
            emit({"type": "item.started", "item": {"id": "item_0", "type": "command_execution",
                  "command": "touch x", "status": "in_progress"}})
            emit({"type": "item.completed", "item": {"id": "item_0", "type": "command_execution",
                  "command": "touch x", "status": "declined", "exit_code": None}})
            emit({"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": text}})
            emit({"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}})
        else:
            emit({"type": "assistant.message", "data": {"content": "", "toolRequests": [
                {"toolCallId": "c9", "name": "bash", "arguments": {"command": "touch x"}}]}})
            emit({"type": "tool.execution_complete", "data": {"toolCallId": "c9", "success": False,
                  "error": {"message": "Permission denied because no interactive user response was available.",
                            "code": "denied"}}})
            emit({"type": "assistant.message", "data": {"content": text, "toolRequests": []}})
            emit({"type": "result", "sessionId": sid, "exitCode": 0})
    elif mode == "retry_hang":  # a 503 being retried (then, with recovered, an answer), then silence
        emit({"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10,
              "retry_delay_ms": 512.5, "error_status": 503, "error": "server_error", "session_id": sid})
        emit({"type": "error", "message": "Reconnecting... 1/5 (unexpected status 503 Service Unavailable: busy)"})
        emit({"type": "model.call_failure", "data": {"statusCode": 503, "retryAttempt": 0,
              "failureKind": "api", "errorMessage": json.dumps({"message": "busy"})}})
        if scenario.get("recovered"):
            emit({"type": "assistant", "session_id": sid, "message": {"content": [{"type": "text", "text": "partial"}]}})
            emit({"type": "item.completed", "item": {"id": "i", "type": "agent_message", "text": "partial"}})
            emit({"type": "assistant.message", "data": {"content": "partial"}})
        time.sleep(300)
    elif mode == "hang":
        sys.stdout.write(json.dumps({"type": "assistant", "session_id": sid, "message": {
            "content": [{"type": "text", "text": "partial thoughts"}]}}) + "\n")
        sys.stdout.write(json.dumps({"type": "item.completed", "item": {"id": "i", "type": "agent_message", "text": "partial thoughts"}}) + "\n")
        sys.stdout.write(json.dumps({"type": "assistant.message", "data": {"content": "partial thoughts"}}) + "\n")
        sys.stdout.flush()
        time.sleep(300)
    elif mode == "endless":  # an endless stream of events, then an endless line
        line = json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "x" * 1000}]}})
        for _ in range(int(scenario.get("lines", 20000))):
            sys.stdout.write(line + "\n")
        sys.stdout.write("y" * int(scenario.get("long_line", 3_000_000)) + "\n")
        sys.stdout.flush()
        ok(sid, text)
    code = int(scenario.get("exit", code))
    return code


if __name__ == "__main__":
    sys.exit(main())
