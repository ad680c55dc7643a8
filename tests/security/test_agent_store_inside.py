"""A coding-agent CLI's run refuses a store inside its workspace, as a loop run does
(issue 25, item 5): the CLI's own tools could erase or rewrite the run's record."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import harnessnb as hn


def test_an_agent_run_refuses_a_store_inside_its_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(hn.ConfigError, match="is inside the workspace"):
        hn.agents.run_sync(hn.agents.ClaudeCode(), "say hi", ws, store=ws / "runs.duckdb")
    assert os.listdir(ws) == []  # nothing made, nothing run


def test_an_agent_run_refuses_the_default_store_inside_its_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HARNESSNB_STORE", raising=False)
    monkeypatch.chdir(tmp_path)  # ./runs.duckdb would land in the workspace "."
    with pytest.raises(hn.ConfigError, match="the default store"):
        hn.agents.run_sync(hn.agents.Codex(), "say hi", ".")
    assert os.listdir(tmp_path) == []
