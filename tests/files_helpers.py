"""Folders with files in them, for the tests' workspaces."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def folder(path: Path, files: Mapping[str, str] | None = None) -> Path:
    """``path`` made (with its parents), holding ``files`` (relative path -> text)."""
    path.mkdir(parents=True)
    for rel, text in (files or {}).items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    return path
