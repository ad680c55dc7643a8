"""The workspace folder, its containment rule, and the built-in tools that act on it.

Containment: every path a tool receives is resolved inside the workspace before any
I/O on it. ``Workspace.resolve`` refuses NUL bytes, over-long names, absolute paths,
``..`` that climbs out, and symlinks (files or directories, at any component) whose
target lies outside; the refusal is a ``RefusedError`` with rule ``containment`` and
layer ``workspace``. It reads only link texts (``readlink``) and ``lstat``s of
components inside the workspace, never the outside target. The path it returns has
no symlink left in its existing part, so the I/O that follows opens what was checked
(a process racing to swap a component can still win; ``run_command`` is not
sandboxed either, so the workspace is a boundary for the model's file tools, not
for arbitrary code).

``run_argv`` (behind the ``run_command`` tool) runs argv without a shell in its own
session, captures stdout and stderr together, keeps only head and tail while reading,
and kills the whole process group on timeout (and any stragglers after a normal exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import os
import posixpath
import re
import stat
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..rules._errors import RefusedError, SandboxError, ToolError
from ..rules._policy import exec_target
from ._process import BoundedCapture, kill_group
from ._tool import Effect, Tool, ToolContext, ToolOutput, bound_output

__all__ = [
    "MAX_READ_BYTES",
    "CommandResult",
    "Workspace",
    "glob_to_regex",
    "read_text_file",
    "run_argv",
    "workspace_tools",
]

MAX_READ_BYTES = 1 << 20  # 1 MiB: larger files are refused with their size (use grep)
_BINARY_SNIFF = 8192
_MAX_COMPONENT_BYTES = 255
_MAX_PATH_BYTES = 4096
_MAX_SYMLINK_HOPS = 40  # as the Linux kernel
_LIST_LIMIT = 1000
_GREP_LIMIT = 500
_GREP_LINE = 300
_SKIP_DIRS = frozenset({".git"})  # noise for the model; never a place to search
_FINGERPRINT_LIMIT = 50_000
_COMMAND_CAPTURE_BYTES = 16_000
_PIPE_GRACE_S = 1.0
_POLL_S = 0.02
_LINK_OUT = "a symlink in the path points outside the workspace"


class Workspace:
    """The folder the agent works in; every tool path is resolved inside it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    def resolve(self, path: str, *, for_write: bool = False) -> Path:
        """The absolute path for ``path``, or ``RefusedError`` if it would leave the root."""
        act = "write" if for_write else "read"
        parts = self._lexical_parts(path, act)
        if for_write and not parts:
            raise _refused("the workspace root itself cannot be written", act, path)
        return self._walk(parts, path, act)

    def relative(self, path: Path) -> str:
        """``path`` relative to the root, ``/``-separated; ``.`` for the root."""
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    def _lexical_parts(self, path: str, act: str) -> list[str]:
        """Check the text of ``path`` and collapse ``.`` and ``..`` without any I/O."""
        if not isinstance(path, str):
            raise _refused("a path must be a string", act, repr(path))
        if "\x00" in path:
            raise _refused("the path contains a NUL byte", act, path)
        if len(os.fsencode(path)) > _MAX_PATH_BYTES:
            raise _refused(f"the path is longer than {_MAX_PATH_BYTES} bytes", act, path)
        if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", path):
            raise _refused("absolute paths are outside the workspace", act, path)
        parts: list[str] = []
        for part in path.split("/"):
            if len(os.fsencode(part)) > _MAX_COMPONENT_BYTES:
                message = f"a path component is longer than {_MAX_COMPONENT_BYTES} bytes"
                raise _refused(message, act, path)
            if part in ("", "."):
                continue
            if part == "..":
                if not parts:
                    raise _refused("the path climbs out of the workspace with '..'", act, path)
                parts.pop()
            else:
                parts.append(part)
        return parts

    def _walk(self, parts: list[str], original: str, act: str) -> Path:
        """Follow ``parts`` from the root, replacing symlinks by their (checked) targets."""
        current = self.root
        pending = list(parts)
        hops = 0
        exists = True
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":  # only from a relative symlink target
                if current == self.root:
                    raise _refused(_LINK_OUT, act, original)
                current = current.parent
                continue
            candidate = current / part
            if exists:
                try:
                    mode = os.lstat(candidate).st_mode
                except (FileNotFoundError, NotADirectoryError):
                    exists = False  # nothing below a missing component exists either
                else:
                    if stat.S_ISLNK(mode):
                        hops += 1
                        if hops > _MAX_SYMLINK_HOPS:
                            raise _refused("too many levels of symlinks", act, original)
                        link_parts, absolute = self._link_parts(candidate, original, act)
                        pending = link_parts + pending
                        if absolute:
                            current = self.root
                        continue
            current = candidate
        return current

    def _link_parts(self, link: Path, original: str, act: str) -> tuple[list[str], bool]:
        """A symlink's components, and whether they start at the root (absolute target)."""
        target = os.readlink(link)
        if not os.path.isabs(target):
            return target.split("/"), False
        normal = posixpath.normpath(target)
        root = str(self.root)
        if normal != root and not normal.startswith(root.rstrip("/") + "/"):
            raise _refused(_LINK_OUT, act, original)
        return [p for p in normal[len(root) :].split("/") if p], True

    def fingerprint(self) -> frozenset[tuple[str, int, int]] | None:
        """Sizes and mtimes of every entry (``.git`` skipped); None when too many to list."""
        seen: set[tuple[str, int, int]] = set()
        stack = [self.root]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                seen.add((entry.path, st.st_size, st.st_mtime_ns))
                if len(seen) > _FINGERPRINT_LIMIT:
                    return None
                if entry.is_dir(follow_symlinks=False) and entry.name not in _SKIP_DIRS:
                    stack.append(Path(entry.path))
        return frozenset(seen)


def _refused(message: str, act: str, target: str) -> RefusedError:
    return RefusedError(
        f"refused: {target!r}: {message}",
        act=act,
        target=target,
        rule="containment",
        layer="workspace",
    )


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
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink():
                found.append((path, workspace.relative(path)))
    return sorted(found, key=lambda item: item[1])


# ------------------------------------------------------------------ file tools


def _path_prop(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


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
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"path": _path_prop("File path relative to the workspace root.")},
        "required": ["path"],
        "additionalProperties": False,
    }
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
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "path": _path_prop("File path relative to the workspace root."),
            "content": {"type": "string", "description": "The complete new file content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
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
        # Compare before writing: identical bytes are not a change (and not a write).
        if _holds(path, data, shown):
            return ToolOutput(f"unchanged: {shown} already has these {len(data)} bytes")
        _write(path, data, shown)
        return ToolOutput(f"wrote {len(data)} bytes to {shown}", changed_workspace=True)


class EditFile(_PathTool):
    name = "edit_file"
    act = "write"
    description = (
        "Replace the exact text `old` with `new` in a workspace file. `old` must match "
        "exactly once (whitespace included); add surrounding lines to make it unique."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "path": _path_prop("File path relative to the workspace root."),
            "old": {"type": "string", "description": "The exact text to replace."},
            "new": {"type": "string", "description": "The replacement text."},
        },
        "required": ["path", "old", "new"],
        "additionalProperties": False,
    }
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
        if updated == data:
            return ToolOutput(f"unchanged: {shown} (old and new are the same)")
        _write(path, updated, shown)
        return ToolOutput(f"edited {shown}: replaced 1 occurrence", changed_workspace=True)


class ListDir(_PathTool):
    name = "list_dir"
    description = "List a workspace folder: folders end with '/', symlinks with '@'."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"path": {**_path_prop("Folder relative to the root."), "default": "."}},
        "required": [],
        "additionalProperties": False,
    }
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
        names = [_entry_name(e) for e in entries]
        return ToolOutput(_bounded_lines(names, _LIST_LIMIT, "entries") or "(empty folder)")


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
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "A glob: '*.py', 'src/**/test_*.py'."}
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    effect = Effect.READ

    def target(self, args: Mapping[str, Any]) -> tuple[str, str]:
        return ("read", str(args["pattern"]))

    def resolve_target(self, args: Mapping[str, Any], workspace: Workspace) -> tuple[str, str]:
        pattern = args["pattern"]
        if pattern.startswith("/") or ".." in pattern.split("/") or "\x00" in pattern:
            raise _refused("a pattern must stay inside the workspace", "read", pattern)
        return ("read", pattern)

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        self.resolve_target(args, ctx.workspace)
        pattern = args["pattern"].removeprefix("./")
        regex = glob_to_regex(pattern)
        by_name = "/" not in pattern
        files = await asyncio.to_thread(_walk_files, ctx.workspace, ctx.workspace.root)
        hits = [rel for _, rel in files if regex.match(posixpath.basename(rel) if by_name else rel)]
        return ToolOutput(_bounded_lines(hits, _LIST_LIMIT, "files") or f"no match for {pattern!r}")


class Grep(_PathTool):
    name = "grep"
    description = (
        "Search text files under a workspace path with a Python regular expression; "
        "prints 'file:line: text' for each matching line."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "A Python regular expression."},
            "path": {**_path_prop("File or folder to search (relative)."), "default": "."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
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


# ------------------------------------------------------------------ commands


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """What ``run_command`` saw: exit code (None if killed on timeout) and bounded output."""

    exit_code: int | None
    output: str
    timed_out: bool
    elapsed_s: float
    output_bytes: int


async def run_argv(
    argv: list[str], *, cwd: Path, timeout_s: float, limit_bytes: int = _COMMAND_CAPTURE_BYTES
) -> CommandResult:
    """Run ``argv`` (no shell) in ``cwd``; kill its process group at ``timeout_s``."""
    if not argv:
        raise ToolError("argv needs at least the program to run", code="TOOL_ARGS")
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own group, so one killpg reaches grandchildren
        )
    except FileNotFoundError as exc:
        raise ToolError(f"command not found: {argv[0]}", code="COMMAND_NOT_FOUND") from exc
    except PermissionError as exc:
        raise ToolError(f"not executable: {argv[0]}", code="COMMAND_NOT_EXECUTABLE") from exc
    except OSError as exc:
        raise ToolError(f"cannot start {argv[0]}: {exc}", code="COMMAND_FAILED") from exc
    capture = BoundedCapture(limit_bytes)
    assert proc.stdout is not None
    reader = asyncio.create_task(_pump(proc.stdout, capture))
    try:
        timed_out = not await _wait_exit(proc, reader, timeout_s)
        # Also kills stragglers a finished command left behind. The group id is the
        # leader's pid, reaped moments ago; sequential pid allocation makes a reuse
        # within this window practically impossible.
        kill_group(proc.pid)
        await _settle(proc, reader)
    except BaseException:
        kill_group(proc.pid)
        reader.cancel()
        raise
    return CommandResult(
        exit_code=None if timed_out else proc.returncode,
        output=capture.text(),
        timed_out=timed_out,
        elapsed_s=time.monotonic() - started,
        output_bytes=capture.total,
    )


async def _pump(stream: asyncio.StreamReader, capture: BoundedCapture) -> None:
    while chunk := await stream.read(65536):
        capture.feed(chunk)


async def _wait_exit(
    proc: asyncio.subprocess.Process, reader: asyncio.Task[None], timeout_s: float
) -> bool:
    """True when the process exited within ``timeout_s``.

    ``Process.wait()`` also waits for the pipes to close, which a backgrounded child
    can hold open forever, so the exit is seen through ``returncode`` instead, checked
    whenever the reader finishes or every ``_POLL_S``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while proc.returncode is None:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        if reader.done():  # pipe closed: the exit itself follows at once
            try:
                await asyncio.wait_for(proc.wait(), remaining)
            except TimeoutError:
                return False
            return True
        await asyncio.wait({reader}, timeout=min(_POLL_S, remaining))
    return True


async def _settle(proc: asyncio.subprocess.Process, reader: asyncio.Task[None]) -> None:
    """Read what is left and reap the process, each within a grace period.

    After the group is killed the pipe closes; only a process that left the group
    (its own ``setsid``) could hold it open, and then reading stops at the grace.
    """
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(reader, _PIPE_GRACE_S)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), _PIPE_GRACE_S)


class RunCommand(Tool):
    name = "run_command"
    description = (
        "Run a program in the workspace root, without a shell: argv is the program and "
        "its arguments, e.g. ['python', '-m', 'pytest', '-q']. Shows the exit code and "
        "output (long output is shown head and tail). Killed with all its children at "
        "the timeout."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "argv": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "Program and arguments; no shell syntax (pipes, globs) applies.",
            }
        },
        "required": ["argv"],
        "additionalProperties": False,
    }
    # A command can do anything, so it is never repeated on a guess.
    effect = Effect.WRITE

    def target(self, args: Mapping[str, Any]) -> tuple[str, str]:
        return ("exec", exec_target(args["argv"]))

    def preview(self, args: Mapping[str, Any], workspace: Workspace) -> str:
        return f"$ {exec_target(args['argv'])}\n(in {workspace.root})"

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        before = await asyncio.to_thread(ctx.workspace.fingerprint)
        result = await run_argv(
            list(args["argv"]), cwd=ctx.workspace.root, timeout_s=ctx.command_timeout_s
        )
        if result.timed_out:
            raise SandboxError(
                f"command timed out after {ctx.command_timeout_s:g} s; its process group was "
                f"killed. Partial output:\n{bound_output(result.output)}",
                reason="timeout",
            )
        after = await asyncio.to_thread(ctx.workspace.fingerprint)
        changed = before is None or after is None or before != after
        text = f"exit code {result.exit_code}\n{result.output}"
        return ToolOutput(text, changed_workspace=changed)


def workspace_tools() -> list[Tool]:
    """Fresh instances of the seven built-in tools, in their documented order."""
    return [ReadFile(), WriteFile(), EditFile(), ListDir(), FindFiles(), Grep(), RunCommand()]
