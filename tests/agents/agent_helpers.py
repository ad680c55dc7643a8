"""The stand-in CLIs (standin.py) installed in a bin folder, with a HOME and a store."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import harnessnb as hn

STANDIN = Path(__file__).with_name("standin.py")


class CLIs:
    """The stand-ins' bin folder, HOME, workspace and a store, with helpers."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.home = root / "home"
        self.ws = root / "ws"
        for folder in (self.bin, self.home, self.ws):
            folder.mkdir()
        (self.ws / "a.txt").write_text("hello\n")
        source = STANDIN.read_text()
        for name in ("claude", "codex", "copilot"):
            exe = self.bin / name
            exe.write_text(f"#!{sys.executable}\n{source}")
            exe.chmod(0o755)
        self.store = hn.Store(root / "runs.duckdb")

    def scenario(self, **keys: Any) -> None:
        (self.home / "scenario.json").write_text(json.dumps(keys))

    def calls(self) -> list[dict[str, Any]]:
        path = self.home / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def grandchild_pid(self) -> int:
        return int((self.home / "grandchild.pid").read_text())
