"""The two faces, ``harnessnb run`` and ``%harness run``, take the same options and treat
them alike: one definition in ``launch._options``; the options that once drifted apart."""

from __future__ import annotations

import contextlib
import re
import shlex
from pathlib import Path
from typing import Any, TypeVar

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import harnessnb as hn
from harnessnb import cli
from harnessnb import events as evs
from harnessnb.chaos import ChaosServer, Fault
from harnessnb.launch._options import AGENT_NAMES, FACE_MARK, PERMISSIONS, Face
from harnessnb.notebook import _magics
from tests.chaos_helpers import writes_notes


@pytest.fixture
def shell(shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> InteractiveShell:
    """The suite's notebook shell (conftest.py), with text progress instead of widgets."""
    monkeypatch.setenv("HARNESSNB_NO_WIDGETS", "1")
    return shell


def _options(help_text: str) -> dict[str, str]:
    """Each ``--option`` of a help text with its whole entry, whitespace collapsed."""
    entries: dict[str, str] = {}
    current: str | None = None
    for line in help_text.splitlines():
        match = re.match(r"^  (?:-\w, )?(--[\w-]+)", line)
        if match:
            current = match[1]
            entries[current] = line
        elif current and line.startswith("   "):
            entries[current] += " " + line
        else:
            current = None
    return {flag: " ".join(text.split()) for flag, text in entries.items()}


def _command_help(sub: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        cli.main([sub, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def _magic_help(shell: InteractiveShell, sub: str) -> str:
    with capture_output() as cap:
        shell.run_line_magic("harness", f"{sub} --help")
    return cap.stdout


@pytest.mark.parametrize("sub", ["run", "resume"])
def test_both_faces_list_the_same_options_apart_from_the_marked_ones(
    shell: InteractiveShell, sub: str, capsys: pytest.CaptureFixture[str]
) -> None:
    command = _options(_command_help(sub, capsys))
    notebook = _options(_magic_help(shell, sub))

    def split(entries: dict[str, str], mine: Face, other: Face) -> tuple[set[str], set[str]]:
        assert not [f for f, text in entries.items() if FACE_MARK[other] in text]
        only = {f for f, text in entries.items() if FACE_MARK[mine] in text}
        return set(entries) - only, only

    command_shared, command_only = split(command, "command", "notebook")
    notebook_shared, notebook_only = split(notebook, "notebook", "command")
    assert command_shared == notebook_shared
    assert (command_only, notebook_only) == (set(), {"--out", "--quiet", "--prices"})
    assert {"--provider", "--model", "--base-url", "--fallback", "--price",
            "--store"} <= command_shared  # fmt: skip
    if sub == "run":
        assert {"--workspace", "--verify", "--verify-cmd", "--max-steps", "--max-seconds",
                "--max-cost", "--price", "--allow-write", "--agent", "--session", "--permission",
                "--timeout"} <= command_shared  # fmt: skip
    for flag in command_shared:  # one help text
        assert command[flag] == notebook[flag]


def test_the_agent_names_and_permissions_are_the_drivers() -> None:
    from harnessnb.agents._drivers import _DRIVERS

    assert set(AGENT_NAMES) == set(_DRIVERS)
    assert PERMISSIONS == ("read_only", "edit", "bypass")


# ------------------------------------------------------------------ usage errors


def _command_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # an argparse error
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return " ".join(err.split())


def _magic_error(shell: InteractiveShell, options: list[str]) -> str:
    with pytest.raises(UsageError) as err:
        shell.run_cell_magic("harness", "run " + shlex.join(options), "task")
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--max-steps", "0"], "'0' must be at least 1"),
        (["--max-steps", "x"], "'x' is not a whole number"),
        (["--max-seconds", "0"], "'0' must be more than 0"),
        (["--max-cost", "0"], "'0' must be more than 0"),
        (["--agent", "codex", "--max-cost", "5"], "--max-cost applies to harnessnb's"),
        (["--agent", "claude", "--timeout", "-1"], "'-1' must be more than 0"),
        (["--fallback", "nope"], "invalid choice: 'nope'"),
        (["--provider", "nope"], "invalid choice: 'nope'"),
        (["--agent", "gemini"], "invalid choice: 'gemini'"),
        (["--agent", "claude", "--permission", "yolo"], "invalid choice: 'yolo'"),
        (["--verify", "a contains b", "--verify-cmd", "true"], "not allowed with argument"),
        (["--verify", "nonsense"], 'write it as "FILE contains TEXT"'),
        (["--verify-cmd", "'open"], "No closing quotation"),
        (["--session", "s"], "--session applies only with --agent"),
        (["--timeout", "5"], "--timeout applies only with --agent"),
        (["--permission", "edit"], "--permission applies only with --agent"),
        (["--agent", "codex", "--fallback", "openai"],
         "--fallback applies to harnessnb's own loop, not to --agent codex"),
        (["--agent", "codex", "--verify-cmd", "true"],
         "--verify-cmd applies to harnessnb's own loop, not to --agent codex"),
        (["--agent", "codex", "--max-seconds", "5"], "--max-seconds applies to harnessnb's"),
        (["--agent", "codex", "--allow-write", "x"], "(use --permission edit)"),
        (["--approval-timeout", "0"], "'0' must be more than 0"),
        (["--approval-timeout", "inf"], "'inf' must be more than 0, and finite"),
        (["--agent", "codex", "--approval-timeout", "5"],
         "--approval-timeout applies to harnessnb's own loop"),
        (["--provider", "local"], "--provider local needs --base-url"),
        (["--workspace", "/no/such/folder"], "'/no/such/folder' is not a folder that exists"),
    ],
)  # fmt: skip
def test_a_bad_run_option_is_the_same_usage_error_in_both_faces(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    options: list[str], message: str,
) -> None:
    base = ["--workspace", str(tmp_path), "--store", str(tmp_path / "s.duckdb")]
    assert message in _command_error(["run", "task", *base, *options], capsys)
    assert message in _magic_error(shell, [*base, *options])


def test_resume_with_a_local_provider_needs_a_base_url_in_both_faces(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "s.duckdb")
    message = "--provider local needs --base-url"
    assert message in _command_error(["resume", "run_x", "--provider", "local",
                                      "--store", store], capsys)  # fmt: skip
    with pytest.raises(UsageError, match=message):
        shell.run_line_magic("harness", f"resume run_x --provider local --store {store}")


# ------------------------------------------------------------------ runs


def _in_both_faces(
    shell: InteractiveShell, tmp_path: Path, server: ChaosServer, options: list[str],
    before: Any = None,
) -> dict[str, dict[str, Any]]:
    """Run "write notes" with ``options`` in each face; each face's run row and attempts."""
    rows: dict[str, dict[str, Any]] = {}
    for face in ("command", "notebook"):
        ws = tmp_path / face
        ws.mkdir()
        store = str(tmp_path / f"{face}.duckdb")
        argv = ["--provider", "openai", "--base-url", server.openai_url,
                "--workspace", str(ws), "--store", store, *options]  # fmt: skip
        if before is not None:
            before()
        if face == "command":
            cli.main(["run", "write notes", *argv])
            opened = hn.Store(store)
        else:
            # A failed run raises after its card; the store has the row either way.
            with capture_output(), contextlib.suppress(hn.HarnessError):
                shell.run_cell_magic("harness", "run " + shlex.join(argv), "write notes")
            opened = _magics._store(store)
        run = opened.runs().to_dict("records")[0]
        attempts = [(a.provider, a.kind if isinstance(a.kind, str) else None, bool(a.fell_back))
                    for a in opened.attempts(run["run_id"]).itertuples()]
        rows[face] = {"outcome": run["outcome"], "provider": run["provider"],
                      "notes": (ws / "NOTES.md").exists(),
                      "attempts": attempts}  # fmt: skip
    return rows


def test_verify_cmd_is_the_check_in_both_faces(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    with ChaosServer(responder=writes_notes) as server:
        rows = _in_both_faces(shell, tmp_path, server,
                              ["--allow-write", "NOTES.md", "--verify-cmd", "test -f NOTES.md"])
    assert rows["command"] == rows["notebook"]
    # The person typed the check, which allows that exact command: it runs and passes.
    assert (rows["command"]["outcome"], rows["command"]["notes"]) == ("success", True)


def test_verify_cmd_allows_its_own_command_line_and_nothing_else() -> None:
    import argparse

    from harnessnb.launch._options import policy_from

    args = argparse.Namespace(allow_write=None, verify_cmd="test -f 'NOTES [1].md'")
    policy = policy_from(args, "cli")
    assert policy.explain("exec", "test -f 'NOTES [1].md'").effect == "allow"
    for other in ("test -f NOTES1.md", "test", "rm -rf .", "test -f 'NOTES [1].md' x"):
        assert policy.explain("exec", other).effect == "ask", other


def test_allow_write_given_twice_allows_both_globs_in_both_faces(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    with ChaosServer(responder=writes_notes) as server:
        rows = _in_both_faces(shell, tmp_path, server, ["--allow-write", "NOTES.md",
                                                        "--allow-write", "other.md"])
    assert rows["command"] == rows["notebook"]
    assert rows["command"]["notes"] is True


def test_fallback_serves_the_step_after_a_retryable_failure_in_both_faces(
    shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ChaosServer() as server:
        monkeypatch.setenv("OPENROUTER_API_KEY", "k")
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.openai_url)
        rows = _in_both_faces(shell, tmp_path, server, ["--fallback", "openrouter"],
                              before=lambda: server.push(Fault.status(503)))
    assert rows["command"] == rows["notebook"]
    assert rows["command"]["attempts"] == [("openai", "server", True),
                                           ("openrouter", None, False)]


# ------------------------------------------------------------------ words


E = TypeVar("E", bound=evs.RunEvent)


def ev(kind: type[E], step: int = 0, /, **fields: Any) -> E:
    return kind(run_id="run_x", step=step, at=0.0, **fields)


WORDS = [
    (ev(evs.StartedEvent, provider="openai", model="m", max_steps=12),
     "started run_x with openai (m)"),
    (ev(evs.StartedEvent, provider="demo", model="d", max_steps=12, resumed=True),
     "resumed run_x with demo (d)"),
    (ev(evs.ToolCallEvent, 1, tool="read_file", args={"path": "a.md"}, status="ok"),
     'read_file("path": "a.md") ok'),
    (ev(evs.ToolCallEvent, 1, tool="write_file", args={"path": "N.md", "content": "x" * 99},
        status="intent"), 'write_file("path": "N.md", "content": "<99 chars>") intent'),
    (ev(evs.ToolCallEvent, 1, tool="grep", args={"pattern": "y" * 80}, status="ok"),
     'grep("pattern": "' + "y" * 45 + "...) ok"),
    (ev(evs.StepEvent, 3, tool_calls=1, tokens=110, provider=None),
     "step 3/12: 1 tool call, 110 tokens"),
    (ev(evs.StepEvent, 4, tool_calls=2, tokens=120, provider=None),
     "step 4/12: 2 tool calls, 120 tokens"),
    (ev(evs.StepEvent, 5, tool_calls=0, tokens=130, provider=None),
     "step 5/12: answered, 130 tokens"),
    (ev(evs.StepEvent, 6, tool_calls=1, tokens=140, provider=None, cost_usd=0.0035),
     "step 6/12: 1 tool call, 140 tokens, $0.003500 so far"),
    (ev(evs.StepEvent, 7, tool_calls=1, tokens=150, provider=None, cost_usd=0.0),
     "step 7/12: 1 tool call, 150 tokens"),
    (ev(evs.StepEvent, 8, tool_calls=1, tokens=160, provider=None, cost_usd=None),
     "step 8/12: 1 tool call, 160 tokens"),
    (ev(evs.RetryEvent, error_kind="rate_limited", status=429, attempt=2, max_attempts=3,
        delay_s=6.2, retry_after_s=6.2), "rate_limited (HTTP 429) - retrying in 7 s, attempt 2/3"),
    (ev(evs.RetryEvent, error_kind="transport", status=None, attempt=2, max_attempts=3,
        delay_s=0.5),
     "transport - retrying in 1 s, attempt 2/3"),
    (ev(evs.FellBackEvent, from_provider="openai", model="m", error_kind="server", status=503),
     "fell back from openai after server (HTTP 503)"),
    (ev(evs.ReplanEvent, 2, signal="window", detail="same calls"),
     "stall (window): same calls; told the model to change approach"),
    (ev(evs.StalledEvent, 7, signal="repetition", detail="read a.md 3 times"),
     "stall (repetition): read a.md 3 times; stopping"),
    (ev(evs.RefusedEvent, act="write", target="x.md", rule=None, layer=None),
     "refused: write x.md"),
    (ev(evs.ApprovalRequestedEvent, act="exec", target="ls", preview="ls", rule=None, layer=None,
        tool="run_command", args={}), "approval asked: exec ls"),
    (ev(evs.ApprovalDecidedEvent, tool="run_command", decision="approve"), "approval: approve"),
    (ev(evs.ShrunkEvent, before_chars=900, after_chars=300),
     "context too long: old tool output dropped and the call retried"),
    (ev(evs.FinishedEvent, outcome="success", steps=1, tokens=10), None),
]  # fmt: skip


@pytest.mark.parametrize(("event", "words"), WORDS)
def test_both_faces_put_an_event_in_the_same_words(event: hn.RunEvent, words: str | None) -> None:
    from harnessnb.launch._words import event_words
    from harnessnb.notebook._progress import ProgressState

    command, notebook = cli.LineProgress(), ProgressState()
    for progress_line in (command.line, lambda e: notebook.fold(e, now=0.0)):
        progress_line(ev(evs.StartedEvent, provider="openai", model="m", max_steps=12))
    assert event_words(event, max_steps=12) == words
    assert notebook.fold(event, now=0.0) == words
    line = command.line(event)
    assert (line.strip() if line else line) == words


def test_a_step_without_a_cap_has_no_slash() -> None:
    from harnessnb.launch._words import event_words

    step = ev(evs.StepEvent, 2, tool_calls=1, tokens=5, provider=None)
    assert event_words(step) == "step 2: 1 tool call, 5 tokens"
