"""What a person is shown is what happens: control characters and escape sequences in
argv, file names, model and server text are shown escaped in the terminal approver,
the command's output and widget HTML, never obeyed."""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.events import StalledEvent, ToolCallEvent
from harnessnb.launch._words import event_words
from harnessnb.rules._html import escape
from harnessnb.rules._text import printable

# Clear the screen, move up a line, return to column 0 and print a harmless command
# over the real one: what a raw terminal would show instead of the argv.
TRICK = "\x1b[2J\x1b[1A\rapproved: ls -la"
OSC = "\x1b]0;owned\x07"  # sets the terminal's title
# Every byte a terminal may obey (C0 but newline, DEL, the C1 controls).
RAW = [bytes([b]) for b in [*range(0x00, 0x0A), *range(0x0B, 0x20), 0x7F]] + [
    chr(c).encode() for c in range(0x80, 0xA0)
]


@pytest.mark.parametrize(
    ("text", "one_line", "lines"),
    [("ls -la", "ls -la", "ls -la"),
     ("\x1b[2J", "\\x1b[2J", "\\x1b[2J"),
     (OSC, "\\x1b]0;owned\\x07", "\\x1b]0;owned\\x07"),
     ("a\rb", "a\\rb", "a\\rb"),
     ("a\r\nb", "a\\r\\nb", "a\r\nb"),
     ("a\nb\tc", "a\\nb\\tc", "a\nb\tc"),
     ("back\x08space\x7f", "back\\x08space\\x7f", "back\\x08space\\x7f"),
     ("c1 \x9b31m", "c1 \\x9b31m", "c1 \\x9b31m"),
     ("gpj.\u202eexe", "gpj.\\u202eexe", "gpj.\\u202eexe"),
     ("naïve café ✓", "naïve café ✓", "naïve café ✓")],
)  # fmt: skip
def test_printable_shows_control_characters_as_their_escapes(
    text: str, one_line: str, lines: str
) -> None:
    assert printable(text) == one_line
    assert printable(text, lines=True) == lines
    assert printable(printable(text)) == printable(text)  # idempotent


def test_html_escaping_also_shows_control_characters() -> None:
    assert escape(f"<b>{TRICK}</b>") == "&lt;b&gt;\\x1b[2J\\x1b[1A\\rapproved: ls -la&lt;/b&gt;"
    assert escape("two\nlines") == "two\nlines"


def _no_raw_control(text: str) -> None:
    data = text.encode("utf-8")
    found = [b for b in RAW if b in data]
    assert not found, f"raw control bytes shown: {found!r}"


# ------------------------------------------------------------ the terminal approver


def test_the_stdin_approver_shows_a_model_chosen_argv_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    asked: list[str] = []

    def answer(prompt: str = "") -> str:
        asked.append(prompt)
        return "n"

    monkeypatch.setattr(builtins, "input", answer)
    argv = ["echo", TRICK, OSC + "x"]
    provider = hn.ScriptedProvider([{"tool": "run_command", "args": {"argv": argv}}, "done"])
    approver = hn.WidgetApprover(fallback="prompt", widgets=False)
    store = hn.Store(":memory:")
    result = hn.run_sync(
        hn.TaskContract("t", ws, max_steps=3), provider, store=store, approver=approver
    )
    shown = capsys.readouterr().out
    assert asked, "the approver asked on standard input"
    _no_raw_control(shown)
    assert "\\x1b[2J\\x1b[1A\\rapproved: ls -la" in shown
    assert "\\x1b]0;owned\\x07x" in shown
    # The person said no: the command did not run.
    assert store.tool_calls(result.run_id)["status"].tolist() == ["refused"]


def test_the_stdin_approver_shows_a_registered_key_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-approver-preview-0123456789abcdef"
    hn.OpenAI("m", api_key=key, base_url="http://127.0.0.1:9")  # registers the key
    ws = tmp_path / "ws"
    ws.mkdir()
    answers = iter(["y", "n"])
    monkeypatch.setattr(builtins, "input", lambda prompt="": next(answers))
    provider = hn.ScriptedProvider([
        {"tool": "write_file", "args": {"path": "notes.txt", "content": f"KEY={key}\n"}},
        {"tool": "run_command", "args": {"argv": ["curl", "-H", f"x-api-key: {key}", "x"]}},
        "done",
    ])  # fmt: skip
    approver = hn.WidgetApprover(fallback="prompt", widgets=False)
    store = hn.Store(":memory:")
    result = hn.run_sync(
        hn.TaskContract("t", ws, max_steps=4), provider, store=store, approver=approver
    )
    shown = capsys.readouterr().out
    assert "new file notes.txt:\nKEY=[redacted]" in shown  # the preview
    assert "harnessnb asks: exec curl -H 'x-api-key: [redacted]' x" in shown  # the target
    assert key not in shown and key[:12] not in shown
    # What was approved is what happened: the file holds what the model wrote.
    assert (ws / "notes.txt").read_text() == f"KEY={key}\n"
    assert store.tool_calls(result.run_id)["status"].tolist() == ["ok", "refused"]


def test_event_lines_show_file_names_and_details_escaped() -> None:
    event = ToolCallEvent(
        run_id="r", step=1, tool="read_file", args={"path": "\x1b[31mred.txt"}, status="ok"
    )
    line = event_words(event)
    assert line is not None and "red.txt" in line
    _no_raw_control(line)
    stall = StalledEvent(run_id="r", step=2, signal="window", detail=TRICK)
    words = event_words(stall)
    assert words is not None
    _no_raw_control(words)


# ------------------------------------------------------------------ the command


def _responder(request: ChaosRequest) -> Reply:
    # First a tool call naming a file with an escape in it, then text full of them.
    if len(request.messages) <= 2:
        return Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "\x1b[31mred.txt"}}])
    return Reply(text=f"{OSC}\x1b[2Jdone\rFAKE\x08 \x9b1m")


def _cli(tmp_path: Path, srv: ChaosServer) -> subprocess.CompletedProcess[bytes]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "PYTHONIOENCODING": "utf-8"}
    argv = [sys.executable, "-m", "harnessnb", "run", "read the file", "--workspace", str(ws),
            "--provider", "openai", "--base-url", srv.openai_url, "--model", "m",
            "--store", str(tmp_path / "runs.duckdb"), "--max-steps", "3"]  # fmt: skip
    return subprocess.run(argv, capture_output=True, env=env, timeout=120)


def test_the_command_prints_server_text_and_file_names_escaped(tmp_path: Path) -> None:
    with ChaosServer(responder=_responder) as srv:
        done = _cli(tmp_path, srv)
    out = done.stdout.decode("utf-8")
    err = done.stderr.decode("utf-8")
    assert b"\x1b" not in done.stdout + done.stderr
    _no_raw_control(out)
    _no_raw_control(err)
    assert "red.txt" in out and "\\x1b]0;owned\\x07\\x1b[2Jdone\\rFAKE\\x08 \\x9b1m" in out


def test_the_command_prints_a_server_error_escaped(tmp_path: Path) -> None:
    body: Any = {"error": {"message": f"{OSC}\x1b[2Jbad request\rOK", "type": "invalid"}}
    with ChaosServer() as srv:
        srv.set_default(Fault.status(400, body=body))
        done = _cli(tmp_path, srv)
    assert done.returncode == 4
    shown = done.stdout + done.stderr
    assert b"\x1b" not in shown and b"\r" not in shown and b"\x07" not in shown
    assert "\\x1b]0;owned\\x07\\x1b[2Jbad request\\rOK" in shown.decode("utf-8")
