"""The built-in tools the model sees: read_file, write_file, edit_file, list_dir,
find_files, grep and run_command (names are part of recorded runs; never rename).

Every path is walked from the workspace root's descriptor (``Workspace.walk``) and
read or written on what the walk opened (``_fileio``); blocking file work runs on
daemon threads (``_blocking``). ``run_command`` runs through the one subprocess runner
(``_process.run_argv``).
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

import re2

from ..rules._errors import RefusedError, SandboxError, ToolError
from ..rules._policy import exec_target
from ..rules._secrets import scrub_values
from ._blocking import run_blocking
from ._fileio import (
    MAX_READ_BYTES,
    Found,
    LinkGuard,
    admit,
    file_mode,
    iter_files,
    list_folder,
    read_at,
    replace_walked,
)
from ._process import run_argv
from ._protocol import Effect, Tool, ToolContext, ToolOutput, bound_output
from ._sandbox import sandbox_backend, sandbox_label
from ._schema import object_schema, shipped
from ._workspace import Workspace, containment_refusal

__all__ = ["MAX_READ_BYTES", "builtin_tools", "glob_to_regex", "re2_compile", "read_text_file"]

_LIST_LIMIT = 1000
_GREP_LIMIT = 500
_GREP_LINE = 300
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is the model's error, not a log line


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


def _read_bytes(ctx: ToolContext, shown: str, *, act: str = "read") -> bytes:
    """The bytes of a regular text file: walked, judged on the path taken, hard links checked.

    ``act="write"`` is an edit's read: judged as the write the gate passed, and refused
    where reading is denied outright.
    """
    try:
        with ctx.workspace.walk(shown) as walked:
            admit(ctx, act, walked.rel)
            policy = ctx.policy
            if act != "read" and policy is not None and policy.explain("read", walked.rel).denied:
                admit(ctx, "read", walked.rel)
            return read_at(walked, shown, guard=LinkGuard(ctx.workspace, ctx.policy))
    except OSError as exc:
        raise _os_error(exc, shown) from exc


def read_text_file(workspace: Workspace, shown: str) -> str:
    """A text file's content (undecodable bytes replaced), with no policy: for previews."""
    return _read_bytes(ToolContext(workspace=workspace), shown).decode("utf-8", errors="replace")


def _write(ctx: ToolContext, shown: str, data: bytes, *, same: bytes | None = None) -> bool:
    """Land ``data`` at ``shown`` by an atomic replace; False when the file already holds it.

    ``same``: the content an edit started from (identical bytes are no change).
    """
    if same is not None and same == data:
        return False
    try:
        with ctx.workspace.walk(shown, act="write", create=True) as walked:
            admit(ctx, "write", walked.rel)
            return replace_walked(walked, data, shown)
    except OSError as exc:
        raise _os_error(exc, shown) from exc


def _land(changed: bool, *, unchanged: str, done: str) -> ToolOutput:
    """The tool's answer: identical bytes are no change."""
    if not changed:
        return ToolOutput(unchanged)
    return ToolOutput(done, changed_workspace=True)


def _diff(old: str, new: str, shown: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{shown}", f"b/{shown}"
    )
    return "".join(lines) or "(no change)"


def glob_to_regex(pattern: str) -> Any:
    """A glob as an RE2 regex over ``/``-paths: ``*`` and ``?`` stay in one component,
    ``**`` spans. RE2 (linear time), so no glob can make matching run away."""
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
    return re2_compile("".join(out) + r"\z", pattern, "glob")


def re2_compile(regex: str, shown: str, what: str) -> Any:
    """``regex`` compiled by RE2, or a ``TOOL_ARGS`` error naming the pattern."""
    try:
        return re2.compile(regex, options=_RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args else str(exc)
        message = (
            f"invalid {what} {shown!r}: {reason} (patterns run on RE2: no backreferences "
            "or lookaround)"
        )
        raise ToolError(message, code="TOOL_ARGS") from exc


def _walk_files(workspace: Workspace, start: Path) -> list[tuple[Path, str]]:
    """Regular files under ``start`` (no symlinks followed, ``.git`` skipped), sorted.

    Walked folder by folder from the root's descriptor, never through a symlink.
    """
    with workspace.walk(workspace.relative(start)) as walked:
        found = [(workspace.root / rel, rel) for _, _, rel in iter_files(walked)]
    return sorted(found, key=lambda item: item[1])


# ------------------------------------------------------------------ file tools


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _params(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return shipped(object_schema(properties, required))


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
        data = await run_blocking(_read_bytes, ctx, args["path"])
        return ToolOutput(data.decode("utf-8", errors="replace"))


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
        try:
            old = read_text_file(workspace, args["path"])
        except ToolError as exc:
            if exc.code != "FILE_NOT_FOUND":
                raise
            return f"new file {args['path']}:\n{args['content']}"
        except SandboxError:  # binary or huge: a diff would say nothing useful
            return f"replace {args['path']} with:\n{args['content']}"
        return _diff(old, args["content"], args["path"])

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        shown, data = args["path"], args["content"].encode("utf-8")
        return _land(
            await run_blocking(_write, ctx, shown, data),
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
        text = read_text_file(workspace, args["path"])
        return _diff(text, text.replace(args["old"], args["new"], 1), args["path"])

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return await run_blocking(self._edit, ctx, args["path"], args["old"], args["new"])

    @staticmethod
    def _edit(ctx: ToolContext, shown: str, old: str, new: str) -> ToolOutput:
        if not old:
            message = "`old` must not be empty; use write_file to create a file"
            raise ToolError(message, code="TOOL_ARGS")
        data = _read_bytes(ctx, shown, act="write")
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
            _write(ctx, shown, updated, same=data),
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
        folder, found = await run_blocking(_list_dir, ctx, shown)
        entries = sorted(found, key=lambda e: e.name)
        names = [_entry_name(e) for e in entries if not ctx.hides(posixpath.join(folder, e.name))]
        listing = _bounded_lines(names, _LIST_LIMIT, "entries") or "(empty folder)"
        return ToolOutput(listing + _hidden_note(len(entries) - len(names), "entries"))


def _hidden_note(hidden: int, noun: str) -> str:
    """The one line that says how many names the policy kept out of a listing."""
    return f"\n({hidden} {noun} hidden by the policy)" if hidden else ""


def _list_dir(ctx: ToolContext, shown: str) -> tuple[str, list[os.DirEntry[str]]]:
    """The folder's path from the root and its entries, walked to from the root and
    judged on the path taken."""
    try:
        with ctx.workspace.walk(shown) as walked:
            admit(ctx, "read", walked.rel)
            mode = file_mode(walked)
            if mode is not None and not stat.S_ISDIR(mode):
                raise ToolError(f"{shown} is a file; use read_file", code="NOT_A_DIRECTORY")
            return walked.rel, list_folder(walked)
    except OSError as exc:
        raise _os_error(exc, shown) from exc


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
        files = await run_blocking(_walk_files, ctx.workspace, ctx.workspace.root)
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
    # The spec stays as recorded runs have it (a replay matches requests by their
    # tools); a pattern RE2 cannot run says so in its error.
    parameters = _params(
        ["pattern"],
        pattern=_string("A Python regular expression."),
        path={**_string("File or folder to search (relative)."), "default": "."},
    )
    effect = Effect.READ

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        # RE2 runs in linear time: no pattern can make a search run away.
        regex = re2_compile(args["pattern"], args["pattern"], "regular expression")
        shown = args.get("path", ".")
        return ToolOutput(await run_blocking(_grep, regex, shown, ctx))


def _grep(regex: Any, shown: str, ctx: ToolContext) -> str:
    guard = LinkGuard(ctx.workspace, ctx.policy)
    found: list[tuple[str, list[str]]] = []
    skipped = 0
    try:
        with ctx.workspace.walk(shown) as walked:
            admit(ctx, "read", walked.rel)
            mode = file_mode(walked)
            if mode is None:
                raise ToolError(f"no such file or folder: {shown}", code="FILE_NOT_FOUND")
            if not stat.S_ISDIR(mode):  # one file: its refusals are the answer
                text = read_at(walked, shown, guard=guard).decode("utf-8", "replace")
                found.append((walked.rel, _grep_lines(regex, walked.rel, text)))
            else:
                for file in iter_files(walked):
                    if not ctx.may_read(file.rel):  # secrets stay unread even in bulk
                        skipped += 1
                        continue
                    try:
                        searched = _text_or_none(file, guard)
                    except RefusedError:  # another name of a denied file
                        skipped += 1
                        continue
                    if searched is not None:
                        found.append((file.rel, _grep_lines(regex, file.rel, searched)))
    except OSError as exc:
        raise _os_error(exc, shown) from exc
    hits = [hit for _, lines in sorted(found) for hit in lines]
    out = _bounded_lines(hits, _GREP_LIMIT, "matches") or "no matches"
    return out + (f"\n({skipped} files skipped by the policy)" if skipped else "")


def _grep_lines(regex: Any, rel: str, text: str) -> list[str]:
    return [
        f"{rel}:{number}: {line[:_GREP_LINE]}"
        for number, line in enumerate(text.splitlines(), 1)
        if regex.search(line)
    ]


def _text_or_none(file: Found, guard: LinkGuard) -> str | None:
    """A searchable file's text; binary, huge, unreadable and non-regular files are
    skipped quietly (``RefusedError`` for another name of a denied file)."""
    try:
        return read_at(file, file.rel, guard=guard).decode("utf-8", "replace")
    except (SandboxError, ToolError, OSError):
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
    # The description and the output are part of every recorded request (replay
    # matches on them): neither names the sandbox, so a run recorded under bubblewrap
    # replays where there is none. The backend goes to the tool row (``ctx.sandbox``).
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
        ctx.sandbox = result.backend
        if result.timed_out:
            raise SandboxError(
                f"command timed out after {ctx.command_timeout_s:g} s; its process group "
                f"was killed. Partial output:\n{bound_output(scrub_values(result.output))}",
                reason="timeout",
            )
        after = await asyncio.to_thread(ctx.workspace.fingerprint)
        changed = before is None or after is None or before != after
        text = f"exit code {result.exit_code}\n{result.output}"
        return ToolOutput(text, changed_workspace=changed)


def builtin_tools() -> list[Tool]:
    """Fresh instances of the seven built-in tools, in their documented order.

    Their model-facing names are part of recorded runs: never rename them.
    """
    return [ReadFile(), WriteFile(), EditFile(), ListDir(), FindFiles(), Grep(), RunCommand()]
