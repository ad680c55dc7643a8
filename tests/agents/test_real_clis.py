"""The argv each driver builds, checked against the real CLIs' ``--help``, and how they
fail logged out (test_real_endpoint.py runs them against a fake model endpoint).

The real CLIs come from the npm registry (``.ci/run`` installs them under
``$HARNESSNB_REAL_CLIS``, default /opt/harnessnb-clis/node_modules/.bin). Where one is
not installed its tests are skipped, saying so (the stand-in tests, standin.py, cover
what the real CLIs cannot be made to do on demand).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import harnessnb as hn

ag = hn.agents
BIN = Path(os.environ.get("HARNESSNB_REAL_CLIS", "/opt/harnessnb-clis/node_modules/.bin"))


def real(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None or "standin" in Path(found).read_text(errors="replace")[:4000]:
        pytest.skip(f"the real {name} CLI is not installed (npm install it under {BIN})")
    return found


def help_text(exe: str, *sub: str, home: Path) -> str:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home)}
    out = subprocess.run([exe, *sub, "--help"], capture_output=True, text=True, timeout=60,
                         env=env, stdin=subprocess.DEVNULL)  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-2000:]
    return text


def options(argv: list[str]) -> set[str]:
    """The long and short options of an argv (``--opt=value`` counts as ``--opt``)."""
    found = set()
    for arg in argv[1:]:
        if arg == "--":
            break
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", arg):
            found.add(arg.split("=", 1)[0])
    return found


def argvs(agent_cls: type[ag.AgentCLI], **extra: object) -> list[list[str]]:
    """Every argv shape the driver builds: each permission, new and resumed, with a model."""
    out = []
    for permission in ("read_only", "edit", "bypass"):
        agent = agent_cls(model="some-model", permission=permission, **extra)  # type: ignore[arg-type]
        for resume in (None, "0b7c2f4e-6f5e-4c69-9d3c-1f0f6f7a2b11"):
            out.append(agent.invocation("do the task", resume=resume).argv)
    return out


def test_claude_accepts_every_option_the_driver_passes(tmp_path: Path) -> None:
    exe = real("claude")
    text = help_text(exe, home=tmp_path)
    for argv in argvs(ag.ClaudeCode, max_turns=3):
        for opt in options(argv) - {"--max-turns"}:
            assert re.search(rf"(^|[\s,]){re.escape(opt)}\b", text, re.M), (opt, argv)
    # print mode and the stream format are what the driver relies on
    assert "stream-json" in text and "--permission-mode" in text
    for mode in ("default", "acceptEdits"):
        assert mode in text


def test_claude_max_turns_is_accepted_by_the_installed_version(tmp_path: Path) -> None:
    # --max-turns is a print-mode option that --help does not list in every version:
    # the CLI must at least not reject it as unknown before anything else.
    exe = real("claude")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    argv = [exe, "-p", "--max-turns", "1", "--output-format", "stream-json", "--verbose",
            "--", "hi"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=90, env=env,
                         stdin=subprocess.DEVNULL)  # fmt: skip
    assert "unknown option" not in (out.stdout + out.stderr).lower()


def test_codex_accepts_every_option_the_driver_passes(tmp_path: Path) -> None:
    exe = real("codex")
    new_help = help_text(exe, "exec", home=tmp_path)
    resume_help = help_text(exe, "exec", "resume", home=tmp_path)
    for argv in argvs(ag.Codex):
        resumed = argv[1:3] == ["exec", "resume"]
        text = resume_help if resumed else new_help
        for opt in options(argv):
            assert re.search(rf"(^|[\s,]){re.escape(opt)}\b", text, re.M), (opt, argv)
    assert "read-only" in new_help and "workspace-write" in new_help  # sandbox_mode values
    assert "read from stdin" in new_help  # the '-' prompt


def test_copilot_accepts_every_option_the_driver_passes(tmp_path: Path) -> None:
    exe = real("copilot")
    text = help_text(exe, home=tmp_path)
    for argv in argvs(ag.Copilot):
        for opt in options(argv):
            assert re.search(rf"(^|[\s,]){re.escape(opt)}\b", text, re.M), (opt, argv)
    assert re.search(r"--output-format.*\n?.*json", text)


# ------------------------------------------------ the real CLIs, logged out
# No credentials and no network to their services: how each real CLI fails must come
# out as the typed failure its stand-in produces.


@pytest.fixture
def logged_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for agent in (ag.ClaudeCode(), ag.Codex(), ag.Copilot()):
        for key in set(agent.environment()) - {"PATH", "HOME"}:
            monkeypatch.delenv(key)
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def test_real_claude_logged_out_is_not_authenticated(logged_out: Path) -> None:
    real("claude")
    result = ag.run_sync(ag.ClaudeCode(timeout_s=60), "say hi", logged_out, store=":memory:")
    err = result.error
    assert isinstance(err, ag.NotAuthenticated), err
    assert "Not logged in" in err.detail and err.hint.startswith("claude")
    assert result.session_id  # the stream's init line was read


def test_real_copilot_logged_out_is_not_authenticated(logged_out: Path) -> None:
    real("copilot")
    result = ag.run_sync(ag.Copilot(timeout_s=60), "say hi", logged_out, store=":memory:")
    err = result.error
    assert isinstance(err, ag.NotAuthenticated), err
    assert err.detail == "Error: No authentication information found."


def test_real_codex_without_a_network_is_a_transient_transport_failure(logged_out: Path) -> None:
    # codex retries for ever offline; at the deadline the error is what it was retrying
    # (a DNS failure: transport), or a bare Timeout if it had reported nothing yet.
    real("codex")
    # 10 s, not 4: on a loaded machine (load 7 on 2 cores) node took longer than 4 s to
    # start codex, so the kill came before its first line and the session was unread.
    result = ag.run_sync(ag.Codex(timeout_s=10), "say hi", logged_out, store=":memory:")
    err = result.error
    assert isinstance(err, ag.Timeout | ag.AgentError), err
    assert err.retryable and err.kind.value in ("transport", "timeout"), err
    if isinstance(err, ag.Timeout):
        assert result.session_id  # thread.started was read before the kill
