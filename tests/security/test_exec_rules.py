"""Exec rules judge what will run: real runs, real commands, a real store file.

A scripted model tries to get past ``deny_exec("rm")`` through wrappers and inline
code; every attempt is refused before anything runs, and the file it aimed at stays.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import harnessnb as hn

ATTEMPTS = [
    ["rm", "victim.txt"],
    ["env", "rm", "victim.txt"],
    ["env", "-i", "FOO=1", "rm", "victim.txt"],
    ["nice", "-n", "5", "rm", "victim.txt"],
    ["nohup", "rm", "victim.txt"],
    ["timeout", "10", "rm", "victim.txt"],
    ["stdbuf", "-oL", "rm", "victim.txt"],
    ["busybox", "rm", "victim.txt"],
    ["env", "nice", "timeout", "5", "rm", "victim.txt"],
    ["find", ".", "-name", "victim.txt", "-exec", "rm", "{}", ";"],
    ["sh", "-c", "rm victim.txt"],
    ["bash", "-c", "rm victim.txt"],
    ["python3", "-c", "import os; os.remove('victim.txt')"],
]


@pytest.mark.parametrize("argv", ATTEMPTS, ids=" ".join)
async def test_a_denied_program_does_not_run_behind_wrappers_or_inline_code(
    tmp_path: Path, argv: list[str]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "victim.txt").write_text("still here\n")
    policy = hn.Policy.permissive().layer("app").deny_exec("rm")
    provider = hn.ScriptedProvider([{"tool": "run_command", "args": {"argv": argv}}, "done"])
    store = hn.Store(tmp_path / "runs.duckdb")
    result = await hn.run(hn.TaskContract("clean up", ws, max_steps=3), provider, store=store,
                          policy=policy, approver=None)
    rows = store.tool_calls(result.run_id)
    store.close()
    assert list(rows["status"]) == ["refused"]
    assert (ws / "victim.txt").read_text() == "still here\n"
    shown = provider.calls[-1][-1]["content"]
    assert shown.startswith("ERROR [")
    # inline code cannot be read, so it asks (and with nobody to ask, is refused)
    expected = "built-in" if argv[0] in ("sh", "bash", "python3") else "app"
    assert f"'{expected}'" in shown
