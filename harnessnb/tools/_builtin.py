"""The built-in tools the model sees: read_file, write_file, edit_file, list_dir,
find_files, grep and run_command (names are part of recorded runs; never rename).

Every path goes through ``Workspace.resolve`` before any I/O; ``run_command`` runs
through the one subprocess runner (``_process.run_argv``).
"""

from __future__ import annotations

import asyncio
import difflib
import os
import posixpath
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..rules._errors import SandboxError, ToolError
from ..rules._policy import exec_target
from ._process import run_argv
from ._protocol import Effect, Tool, ToolContext, ToolOutput, bound_output
from ._sandbox import sandbox_backend, sandbox_label
from ._schema import object_schema
from ._workspace import SKIP_DIRS, Workspace, containment_refusal

__all__ = ["MAX_READ_BYTES", "builtin_tools", "glob_to_regex", "read_text_file"]

MAX_READ_BYTES = 1 << 20  # 1 MiB: larger files are refused with their size (use grep)
_BINARY_SNIFF = 8192
_LIST_LIMIT = 1000
_GREP_LIMIT = 500
_GREP_LINE = 300


# ------------------------------------------------------------------ file helpers


def _os_error(exc: OSError, shown: str) -> ToolError:
    """An ``OSError`` as an error the model can act on."""
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return ToolError(f"no such file: {shown}", code="FILE_NOT_FOUND")
    if isinstance(exc, IsADirectoryError):
        return ToolError(f"{shown} is a directory; use list_dir", code="IS_A_DIRECTORY")
    if isinstance(exc, PermissionError):
        return ToolError(f"permission denied: {shown}", code="PERMISSION_DENIED")
    return ToolError(f"cannot access {shown}: {exc.strerror or exc}", code="FILE_IO")


def _read_bytes_checked(path: Path, shown: str) -> bytes:
    """The bytes of a regular text file, refusing directories, huge and binary files."""
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(shown)
        if st.st_size > MAX_READ_BYTES:
            raise SandboxError(
                f"{shown} is {st.st_size} bytes, over the {MAX_READ_BYTES} byte read limit; "
                "use grep to find the lines you need",
                reason="too_large",
            )
        data = path.read_bytes()
    except OSError as exc:
        raise _os_error(exc, shown) from exc
    if b"\x00" in data[:_BINARY_SNIFF]:
        raise SandboxError(f"{shown} looks binary (NUL bytes); not shown", reason="binary")
    return data


def read_text_file(path: Path, shown: str) -> str:
    """A text file's content for the model (undecodable bytes replaced)."""
    return _read_bytes_checked(path, shown).decode("utf-8", errors="replace")


def _holds(path: Path, data: bytes, shown: str) -> bool:
    """True when the file at ``path`` already has exactly ``data`` (size checked first)."""
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(shown)
        return st.st_size == len(data) and path.read_bytes() == data
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _os_error(exc, shown) from exc


def _write(path: Path, data: bytes, shown: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as exc:
        raise _os_error(exc, shown) from exc


def _land(
    path: Path, data: bytes, shown: str, *, same: bool, unchanged: str, done: str
) -> ToolOutput:
    """Write ``data`` unless the file already holds it: identical bytes are no change."""
    if same:
        return ToolOutput(unchanged)
    _write(path, data, shown)
    return ToolOutput(done, changed_workspace=True)


def _diff(old: str, new: str, shown: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{shown}", f"b/{shown}"
    )
    return "".join(lines) or "(no change)"


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regex over ``/``-paths: ``*`` and ``?`` stay in one component, ``**`` spans."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _walk_files(workspace: Workspace, start: Path) -> list[tuple[Path, str]]:
    """Regular files under ``start`` (no symlinks followed, ``.git`` skipped), sorted."""
    found: list[tuple[Path, str]] = []
    for folder, dirs, files in os.walk(start, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink():
                found.append((path, workspace.relative(path)))
    return sorted(found, key=lambda item: item[1])


# ------------------------------------------------------------------ file tools


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _params(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return object_schema(properties, required)


class _PathTool(Tool):
    """A tool whose ``path`` argument names a workspace path judged as ``act``."""

    act = "read"

    def resolve_target(self, args: Mapping[str, Any], workspace: Workspace) -> tuple[str, str]:
        path = workspace.resolve(args.get("path", "."), for_write=self.act == "write")
        return (self.act, workspace.relative(path))

    def target(self, args: Mapping[str, Any]) -> tuple[str, str]:
        return (self.act, str(args.get("path", ".")))


class ReadFile(_PathTool):
    name = "read_file"
    description = (
        "Read a UTF-8 text file in the workspace. Long files are shown head and tail; "
        f"files over {MAX_READ_BYTES} bytes are refused (use grep)."
    )
    parameters = _params(["path"], path=_string("File path relative to the workspace root."))
    effect = Effect.READ

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        path = ctx.workspace.resolve(args["path"])
        return ToolOutput(await asyncio.to_thread(read_text_file, path, args["path"]))


class WriteFile(_PathTool):
    name = "write_file"
    act = "write"
    description = (
        "Create or overwrite a text file in the workspace with `content` "
        "(missing parent folders are created)."
    )
    parameters = _params(
        ["path", "content"],
        path=_string("File path relative to the workspace root."),
        content=_string("The complete new file content."),
    )
    effect = Effect.WRITE

    def preview(self, args: Mapping[str, Any], workspace: Workspace) -> str:
        path = workspace.resolve(args["path"], for_write=True)
        if not path.exists():
            return f"new file {args['path']}:\n{args['content']}"
        try:
            old = read_text_file(path, args["path"])
        except SandboxError:  # binary or huge: a diff would say nothing useful
            return f"replace {args['path']} with:\n{args['content']}"
        return _diff(old, args["content"], args["path"])

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return await asyncio.to_thread(self._write, ctx.workspace, args["path"], args["content"])

    @staticmethod
    def _write(workspace: Workspace, shown: str, content: str) -> ToolOutput:
        path = workspace.resolve(shown, for_write=True)
        data = content.encode("utf-8")
        return _land(
            path,
            data,
            shown,
            same=_holds(path, data, shown),
            unchanged=f"unchanged: {shown} already has these {len(data)} bytes",
            done=f"wrote {len(data)} bytes to {shown}",
        )


class EditFile(_PathTool):
    name = "edit_file"
    act = "write"
    description = (
        "Replace the exact text `old` with `new` in a workspace file. `old` must match "
        "exactly once (whitespace included); add surrounding lines to make it unique."
    )
    parameters = _params(
        ["path", "old", "new"],
        path=_string("File path relative to the workspace root."),
        old=_string("The exact text to replace."),
        new=_string("The replacement text."),
    )
    effect = Effect.WRITE

    def preview(self, args: Mapping[str, Any], workspace: Workspace) -> str:
        path = workspace.resolve(args["path"], for_write=True)
        text = read_text_file(path, args["path"])
        return _diff(text, text.replace(args["old"], args["new"], 1), args["path"])

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return await asyncio.to_thread(
            self._edit, ctx.workspace, args["path"], args["old"], args["new"]
        )

    @staticmethod
    def _edit(workspace: Workspace, shown: str, old: str, new: str) -> ToolOutput:
        if not old:
            message = "`old` must not be empty; use write_file to create a file"
            raise ToolError(message, code="TOOL_ARGS")
        path = workspace.resolve(shown, for_write=True)
        data = _read_bytes_checked(path, shown)
        # surrogateescape keeps undecodable bytes elsewhere in the file byte-exact.
        text = data.decode("utf-8", "surrogateescape")
        count = text.count(old)
        if count == 0:
            raise ToolError(
                f"`old` was not found in {shown}; read the file and copy the exact text",
                code="EDIT_NO_MATCH",
            )
        if count > 1:
            raise ToolError(
                f"`old` matches {count} places in {shown}; include more surrounding text "
                "so it matches exactly one",
                code="EDIT_NOT_UNIQUE",
            )
        updated = text.replace(old, new, 1).encode("utf-8", "surrogateescape")
        return _land(
            path,
            updated,
            shown,
            same=updated == data,
            unchanged=f"unchanged: {shown} (old and new are the same)",
            done=f"edited {shown}: replaced 1 occurrence",
        )


class ListDir(_PathTool):
    name = "list_dir"
    description = "List a workspace folder: folders end with '/', symlinks with '@'."
    parameters = _params([], path={**_string("Folder relative to the root."), "default": "."})
    effect = Effect.READ

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        shown = args.get("path", ".")
        path = ctx.workspace.resolve(shown)
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except OSError as exc:
            if isinstance(exc, NotADirectoryError) and path.exists():
                message = f"{shown} is a file; use read_file"
                raise ToolError(message, code="NOT_A_DIRECTORY") from exc
            raise _os_error(exc, shown) from exc
        folder = ctx.workspace.relative(path)
        names = [_entry_name(e) for e in entries if not ctx.hides(posixpath.join(folder, e.name))]
        listing = _bounded_lines(names, _LIST_LIMIT, "entries") or "(empty folder)"
        return ToolOutput(listing + _hidden_note(len(entries) - len(names), "entries"))


def _hidden_note(hidden: int, noun: str) -> str:
    """The one line that says how many names the policy kept out of a listing."""
    return f"\n({hidden} {noun} hidden by the policy)" if hidden else ""


def _entry_name(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return entry.name + "@"
    return entry.name + "/" if entry.is_dir() else entry.name


def _bounded_lines(lines: list[str], limit: int, noun: str) -> str:
    if len(lines) <= limit:
        return "\n".join(lines)
    return "\n".join([*lines[:limit], f"... and {len(lines) - limit} more {noun}"])


class FindFiles(Tool):
    name = "find_files"
    description = (
        "Find workspace files by glob, sorted. `*` and `?` stay within a folder, `**` "
        "spans folders; a pattern without '/' matches file names at any depth."
    )
    parameters = _params(["pattern"], pattern=_string("A glob: '*.py', 'src/**/test_*.py'."))
    effect = Effect.READ

    def target(self, args: Mapping[str, Any]) -> tuple[str, str]:
        return ("read", str(args["pattern"]))

    def resolve_target(self, args: Mapping[str, Any], workspace: Workspace) -> tuple[str, str]:
        pattern = args["pattern"]
        if pattern.startswith("/") or ".." in pattern.split("/") or "\x00" in pattern:
            raise containment_refusal("a pattern must stay inside the workspace", "read", pattern)
        return ("read", pattern)

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        self.resolve_target(args, ctx.workspace)
        pattern = args["pattern"].removeprefix("./")
        regex = glob_to_regex(pattern)
        by_name = "/" not in pattern
        files = await asyncio.to_thread(_walk_files, ctx.workspace, ctx.workspace.root)
        hits = [rel for _, rel in files if regex.match(posixpath.basename(rel) if by_name else rel)]
        shown = [rel for rel in hits if not ctx.hides(rel)]
        listing = _bounded_lines(shown, _LIST_LIMIT, "files") or f"no match for {pattern!r}"
        return ToolOutput(listing + _hidden_note(len(hits) - len(shown), "files"))


class Grep(_PathTool):
    name = "grep"
    description = (
        "Search text files under a workspace path with a Python regular expression; "
        "prints 'file:line: text' for each matching line."
    )
    parameters = _params(
        ["pattern"],
        pattern=_string("A Python regular expression."),
        path={**_string("File or folder to search (relative)."), "default": "."},
    )
    effect = Effect.READ

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        try:
            regex = re.compile(args["pattern"])
        except re.error as exc:
            message = f"invalid regular expression {args['pattern']!r}: {exc}"
            raise ToolError(message, code="TOOL_ARGS") from exc
        shown = args.get("path", ".")
        start = ctx.workspace.resolve(shown)
        return ToolOutput(await asyncio.to_thread(_grep, regex, start, shown, ctx))


def _grep(regex: re.Pattern[str], start: Path, shown: str, ctx: ToolContext) -> str:
    if start.is_file():
        files = [(start, ctx.workspace.relative(start))]
        texts = {files[0][1]: read_text_file(start, shown)}
    elif start.is_dir():
        files = _walk_files(ctx.workspace, start)
        texts = {}
    else:
        raise ToolError(f"no such file or folder: {shown}", code="FILE_NOT_FOUND")
    hits: list[str] = []
    skipped = 0
    for path, rel in files:
        if not ctx.may_read(rel):  # secrets stay unread even in bulk
            skipped += 1
            continue
        text = texts.get(rel) if rel in texts else _text_or_none(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                hits.append(f"{rel}:{number}: {line[:_GREP_LINE]}")
    out = _bounded_lines(hits, _GREP_LIMIT, "matches") or "no matches"
    return out + (f"\n({skipped} files skipped by the policy)" if skipped else "")


def _text_or_none(path: Path) -> str | None:
    """A searchable file's text; binary, huge and unreadable files are skipped quietly."""
    try:
        return read_text_file(path, str(path))
    except (SandboxError, ToolError):
        return None


class RunCommand(Tool):
    name = "run_command"
    description = (
        "Run a program in the workspace root, without a shell: argv is the program and "
        "its arguments, e.g. ['python', '-m', 'pytest', '-q']. Shows the exit code and "
        "output (long output is shown head and tail). Killed with all its children at "
        "the timeout."
    )
    parameters = _params(
        ["argv"],
        argv={
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "description": "Program and arguments; no shell syntax (pipes, globs) applies.",
        },
    )
    # The description is part of every recorded request (replay matches on it): the
    # sandbox is told to the model in the output header instead.
    # A command can do anything, so it is never repeated on a guess.
    effect = Effect.WRITE

    def target(self, args: Mapping[str, Any]) -> tuple[str, str]:
        return ("exec", exec_target(args["argv"]))

    def preview(self, args: Mapping[str, Any], workspace: Workspace) -> str:
        where = sandbox_label(sandbox_backend())
        return f"$ {exec_target(args['argv'])}\n(in {workspace.root}; {where})"

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        before = await asyncio.to_thread(ctx.workspace.fingerprint)
        result = await run_argv(
            list(args["argv"]),
            cwd=ctx.workspace.root,
            timeout_s=ctx.command_timeout_s,
            policy=ctx.policy,
        )
        if result.timed_out:
            raise SandboxError(
                f"command timed out after {ctx.command_timeout_s:g} s ({result.sandbox}); its "
                f"process group was killed. Partial output:\n{bound_output(result.output)}",
                reason="timeout",
            )
        after = await asyncio.to_thread(ctx.workspace.fingerprint)
        changed = before is None or after is None or before != after
        text = f"exit code {result.exit_code} ({result.sandbox})\n{result.output}"
        return ToolOutput(text, changed_workspace=changed)


def builtin_tools() -> list[Tool]:
    """Fresh instances of the seven built-in tools, in their documented order.

    Their model-facing names are part of recorded runs: never rename them.
    """
    return [ReadFile(), WriteFile(), EditFile(), ListDir(), FindFiles(), Grep(), RunCommand()]
