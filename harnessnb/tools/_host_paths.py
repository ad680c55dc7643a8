"""Host folders under /tmp that a sandboxed command needs bound back read-only.

Both sandboxes give a command a private /tmp, which would hide what lives under the
host's: the Python environment harnessnb runs in and the PATH entries
(``programs_under_tmp``: a virtual environment made with ``mktemp``, as CI makes one),
and, for an MCP server's own command line and ``env=``, the script, repository or
``PYTHONPATH`` folder they name (``named_paths``, ``argv_folders``). /tmp itself is never bound.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["argv_folders", "named_paths", "programs_under_tmp"]


def argv_folders(argv: Sequence[str], root: Path) -> list[str]:
    """Folders under the host's /tmp that ``argv`` names, outside the workspace: a word
    that is an existing absolute path gives itself (a folder) or its folder (a file).
    The private /tmp would hide a server script or repository kept there (a notebook's
    temporary folder, a CI clone); they are bound back read-only. /tmp itself never is,
    so a file lying directly in /tmp stays hidden."""
    found: set[str] = set()
    for word in argv:
        if not word.startswith("/"):
            continue
        path = os.path.realpath(word)
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        inside = Path(folder) == root or Path(folder).is_relative_to(root)
        if folder.startswith("/tmp/") and os.path.exists(path) and not inside:
            found.add(folder)
    return sorted(found)


def named_paths(argv: Sequence[str], env: Mapping[str, str] | None) -> list[str]:
    """The words of an MCP server's own configuration that may name a path: its command
    line, and each entry of its ``env=`` values (``PYTHONPATH=/tmp/x/site-packages``,
    split at ``os.pathsep``), for ``argv_folders``."""
    words = list(argv)
    for value in (env or {}).values():
        words += value.split(os.pathsep)
    return words


def programs_under_tmp(path_env: str) -> list[str]:
    """Folders under the host's /tmp that the command needs to find its programs: the
    Python environment harnessnb runs in and every PATH entry (a virtual environment made
    with ``mktemp``, as CI makes one). The private /tmp would hide them; they are bound
    back read-only. /tmp itself never is."""
    candidates = [sys.prefix, sys.exec_prefix, sys.base_prefix, *path_env.split(os.pathsep)]
    found: set[str] = set()
    for entry in filter(None, candidates):
        for path in (os.path.abspath(entry), os.path.realpath(entry)):
            if path.startswith("/tmp/") and os.path.isdir(path):
                found.add(path)
    return sorted(found)
