"""Stand-in CLIs on PATH and a fresh HOME for each agent test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_helpers import CLIs


@pytest.fixture
def clis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CLIs]:
    c = CLIs(tmp_path)
    monkeypatch.setenv("PATH", f"{c.bin}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("HOME", str(c.home))
    yield c
    c.store.close()
