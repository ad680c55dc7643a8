"""Workspace containment, the built-in file tools, and run_command."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harnessnb import HarnessError, RefusedError, SandboxError, Tool, ToolError
from harnessnb.tools import _process
from harnessnb.tools._builtin import MAX_READ_BYTES, builtin_tools, glob_to_regex
from harnessnb.tools._process import run_argv
from harnessnb.tools._protocol import ToolContext, ToolOutput
from harnessnb.tools._workspace import Workspace
from tests.files_helpers import folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the workspace holding a file the agent must never touch."""
    return folder(tmp_path / "outside", {"secret.txt": "top secret"})


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(folder(tmp_path / "ws", {
        "src/app.py": "print('hi')\nx = 1\n",
        "README.md": "# Title\nhello world\n",
    }))


def _tool(name: str) -> Tool:
    return next(t for t in builtin_tools() if t.name == name)


async def call(ws: Workspace, name: str, timeout: float = 5.0, **args: Any) -> ToolOutput:
    ctx = ToolContext(workspace=ws, idempotency_key="k", command_timeout_s=timeout)
    return await _tool(name).invoke(args, ctx)


def test_builtin_names_and_parameters_are_the_recorded_ones() -> None:
    names = {t.name: sorted(t.parameters["properties"]) for t in builtin_tools()}
    assert names == {
        "read_file": ["path"],
        "write_file": ["content", "path"],
        "edit_file": ["new", "old", "path"],
        "list_dir": ["path"],
        "find_files": ["pattern"],
        "grep": ["path", "pattern"],
        "run_command": ["argv"],
    }


# ---------------------------------------------------------------- containment

ESCAPES = [
    "../x",
    "../outside/secret.txt",
    "/etc/passwd",
    "a/../../x",
    "src/../../outside/secret.txt",
    "bad\x00name",
    "n" * 256,
    "a/" * 2100,
    "C:\\Windows\\system.ini",
]


@pytest.mark.parametrize("path", ESCAPES)
@pytest.mark.parametrize("for_write", [False, True])
def test_escapes_are_refused(ws: Workspace, outside: Path, path: str, for_write: bool) -> None:
    with pytest.raises(RefusedError) as info:
        ws.resolve(path, for_write=for_write)
    err = info.value
    assert (err.rule, err.layer, err.target) == ("containment", "workspace", path)
    assert err.act == ("write" if for_write else "read")


def _no_io_on(outside: Path) -> tuple[float, list[str]]:
    secret = outside / "secret.txt"
    return secret.stat().st_atime, sorted(os.listdir(outside))


@pytest.fixture
def stale_atime(outside: Path) -> None:
    # An old atime makes any read visible even under relatime mounts.
    os.utime(outside / "secret.txt", (1_000_000, 1_000_000))


@pytest.mark.usefixtures("stale_atime")
async def test_symlink_to_an_outside_file_is_refused_without_reading_it(
    ws: Workspace, outside: Path
) -> None:
    os.symlink(outside / "secret.txt", ws.root / "link.txt")
    before = _no_io_on(outside)
    for name in ("read_file", "write_file"):
        args = {"path": "link.txt"} | ({"content": "pwned"} if name == "write_file" else {})
        with pytest.raises(RefusedError):
            await call(ws, name, **args)
    assert _no_io_on(outside) == before
    assert (outside / "secret.txt").read_text() == "top secret"


@pytest.mark.usefixtures("stale_atime")
async def test_symlinked_directory_pointing_out_is_refused(ws: Workspace, outside: Path) -> None:
    os.symlink(outside, ws.root / "linkdir")
    before = _no_io_on(outside)
    with pytest.raises(RefusedError):
        ws.resolve("linkdir/secret.txt")
    with pytest.raises(RefusedError):
        await call(ws, "write_file", path="linkdir/new.txt", content="x")
    with pytest.raises(RefusedError):
        await call(ws, "list_dir", path="linkdir")
    assert _no_io_on(outside) == before
    assert not (outside / "new.txt").exists()


def test_relative_symlink_climbing_out_is_refused(ws: Workspace, outside: Path) -> None:
    os.symlink("../../outside", ws.root / "src" / "up")
    with pytest.raises(RefusedError):
        ws.resolve("src/up/secret.txt")


def test_symlink_chains_inside_the_workspace_resolve(ws: Workspace) -> None:
    os.symlink("src", ws.root / "code")
    os.symlink(ws.root / "code" / "app.py", ws.root / "entry.py")
    assert ws.resolve("entry.py") == ws.root / "src" / "app.py"
    assert ws.relative(ws.resolve("code/app.py")) == "src/app.py"


def test_symlink_loop_is_refused(ws: Workspace) -> None:
    os.symlink("b", ws.root / "a")
    os.symlink("a", ws.root / "b")
    with pytest.raises(RefusedError, match="too many levels"):
        ws.resolve("a")


@pytest.mark.parametrize(
    ("path", "expected"),
    [("src/app.py", "src/app.py"), ("./src/../README.md", "README.md"), (".", "."), ("", ".")],
)
def test_inside_paths_resolve(ws: Workspace, path: str, expected: str) -> None:
    assert ws.relative(ws.resolve(path)) == expected


def test_the_root_cannot_be_written(ws: Workspace) -> None:
    with pytest.raises(RefusedError):
        ws.resolve(".", for_write=True)


def test_missing_paths_resolve_for_writing(ws: Workspace) -> None:
    assert ws.resolve("new/dir/file.txt", for_write=True) == ws.root / "new" / "dir" / "file.txt"


# ---------------------------------------------------------------- files


async def test_read_file(ws: Workspace) -> None:
    assert (await call(ws, "read_file", path="src/app.py")).text == "print('hi')\nx = 1\n"


@pytest.mark.parametrize(
    ("setup", "path", "error", "code"),
    [
        (None, "nope.txt", ToolError, "FILE_NOT_FOUND"),
        (None, "src", ToolError, "IS_A_DIRECTORY"),
        ("binary", "blob.bin", SandboxError, "SANDBOX_BINARY"),
        ("huge", "big.log", SandboxError, "SANDBOX_TOO_LARGE"),
    ],
)
async def test_read_file_failures(
    ws: Workspace, setup: str | None, path: str, error: type[HarnessError], code: str
) -> None:
    if setup == "binary":
        (ws.root / path).write_bytes(b"\x89PNG\x00\x00data")
    if setup == "huge":
        (ws.root / path).write_bytes(b"x" * (MAX_READ_BYTES + 1))
    with pytest.raises(error) as info:
        await call(ws, "read_file", path=path)
    assert info.value.code == code
    if setup == "huge":
        assert str(MAX_READ_BYTES + 1) in info.value.message and "grep" in info.value.message


async def test_write_identical_bytes_is_not_a_change(ws: Workspace) -> None:
    before = (ws.root / "README.md").stat().st_mtime_ns
    out = await call(ws, "write_file", path="README.md", content="# Title\nhello world\n")
    assert out.changed_workspace is False
    assert (ws.root / "README.md").stat().st_mtime_ns == before  # not even rewritten


async def test_write_new_content_is_a_change_and_creates_parents(ws: Workspace) -> None:
    out = await call(ws, "write_file", path="docs/notes/NOTES.md", content="# notes\n")
    assert out.changed_workspace is True
    assert (ws.root / "docs" / "notes" / "NOTES.md").read_text() == "# notes\n"


async def test_edit_file_replaces_the_unique_match(ws: Workspace) -> None:
    out = await call(ws, "edit_file", path="src/app.py", old="x = 1", new="x = 2")
    assert out.changed_workspace is True
    assert (ws.root / "src" / "app.py").read_text() == "print('hi')\nx = 2\n"


async def test_edit_file_with_same_text_is_not_a_change(ws: Workspace) -> None:
    out = await call(ws, "edit_file", path="src/app.py", old="x = 1", new="x = 1")
    assert out.changed_workspace is False


async def test_edit_keeps_undecodable_bytes_elsewhere(ws: Workspace) -> None:
    (ws.root / "latin.txt").write_bytes(b"caf\xe9\nold\n")
    await call(ws, "edit_file", path="latin.txt", old="old", new="new")
    assert (ws.root / "latin.txt").read_bytes() == b"caf\xe9\nnew\n"


@pytest.mark.parametrize(
    ("old", "code", "fragment"),
    [
        ("missing", "EDIT_NO_MATCH", "not found"),
        ("l", "EDIT_NOT_UNIQUE", "matches 3 places"),
        ("", "TOOL_ARGS", "must not be empty"),
    ],
)
async def test_edit_file_failures(ws: Workspace, old: str, code: str, fragment: str) -> None:
    (ws.root / "f.txt").write_text("hello\nworld\n")
    with pytest.raises(ToolError) as info:
        await call(ws, "edit_file", path="f.txt", old=old, new="z")
    assert info.value.code == code
    assert fragment in info.value.message
    assert (ws.root / "f.txt").read_text() == "hello\nworld\n"


async def test_list_dir_marks_folders_and_links(ws: Workspace) -> None:
    os.symlink("README.md", ws.root / "readme")
    assert (await call(ws, "list_dir", path=".")).text == "README.md\nreadme@\nsrc/"
    with pytest.raises(ToolError) as info:
        await call(ws, "list_dir", path="README.md")
    assert info.value.code == "NOT_A_DIRECTORY"


async def test_find_files_globs_sorted_within_the_workspace(ws: Workspace) -> None:
    (ws.root / "src" / "pkg").mkdir()
    (ws.root / "src" / "pkg" / "mod.py").write_text("")
    (ws.root / ".git").mkdir()
    (ws.root / ".git" / "hook.py").write_text("")
    assert (await call(ws, "find_files", pattern="*.py")).text == "src/app.py\nsrc/pkg/mod.py"
    assert (await call(ws, "find_files", pattern="src/*.py")).text == "src/app.py"
    assert (await call(ws, "find_files", pattern="src/**/*.py")).text == (
        "src/app.py\nsrc/pkg/mod.py"
    )
    assert "no match" in (await call(ws, "find_files", pattern="*.rs")).text
    with pytest.raises(RefusedError):
        await call(ws, "find_files", pattern="../*")


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("*.py", "a.py", True),
        ("*.py", "a/b.py", False),
        ("**/*.py", "a/b.py", True),
        ("**/*.py", "b.py", True),
        ("f?o.[ch]", "foo.c", True),
        ("[!a]*", "abc", False),
    ],
)
def test_glob_to_regex(pattern: str, path: str, hit: bool) -> None:
    assert bool(glob_to_regex(pattern).match(path)) is hit


async def test_grep_lists_file_line_text_and_skips_secrets(ws: Workspace) -> None:
    from harnessnb import Policy

    (ws.root / ".env").write_text("hello=SECRET\n")
    (ws.root / "blob.bin").write_bytes(b"hello\x00")
    ctx = ToolContext(workspace=ws, policy=Policy.default())
    out = await _tool("grep").invoke({"pattern": r"h(i|ello)", "path": "."}, ctx)
    assert out.text == (
        "README.md:2: hello world\nsrc/app.py:1: print('hi')\n(1 files skipped by the policy)"
    )
    assert "SECRET" not in out.text


async def test_listings_leave_out_the_names_the_policy_refuses_to_read(ws: Workspace) -> None:
    from harnessnb import Policy

    for name in (".env", ".env.local", ".envrc", "src/.ENV.prod", "private/notes.txt"):
        (ws.root / name).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / name).write_text("k=v\n")
    (ws.root / ".environment.md").write_text("docs\n")
    ctx = ToolContext(workspace=ws, policy=Policy.default().deny_read("private"))
    listing = await _tool("list_dir").invoke({"path": "."}, ctx)
    assert listing.text == (".environment.md\nREADME.md\nsrc/\n(4 entries hidden by the policy)")
    found = await _tool("find_files").invoke({"pattern": ".e*"}, ctx)
    assert found.text == ".environment.md\n(3 files hidden by the policy)"
    found = await _tool("find_files").invoke({"pattern": "**/*"}, ctx)
    assert found.text == (".environment.md\nREADME.md\nsrc/app.py\n(5 files hidden by the policy)")
    # with no policy (a tool called directly), nothing is hidden
    assert ".env" in (await call(ws, "list_dir", path=".")).text


async def test_grep_invalid_regex_is_a_tool_args_error(ws: Workspace) -> None:
    with pytest.raises(ToolError) as info:
        await call(ws, "grep", pattern="(", path=".")
    assert info.value.code == "TOOL_ARGS"


# ---------------------------------------------------------------- run_command


async def test_run_command_reports_exit_code_and_output(ws: Workspace) -> None:
    out = await call(ws, "run_command", argv=[sys.executable, "-c", "print('out'); exit(3)"])
    assert out.text == "exit code 3\nout\n"  # no backend named: a recording replays anywhere
    assert out.changed_workspace is False


async def test_run_command_that_writes_a_file_changed_the_workspace(ws: Workspace) -> None:
    code = "open('made.txt', 'w').write('x')"
    out = await call(ws, "run_command", argv=[sys.executable, "-c", code])
    assert out.changed_workspace is True
    assert (ws.root / "made.txt").exists()


async def test_run_command_runs_without_a_shell(ws: Workspace) -> None:
    out = await call(ws, "run_command", argv=["echo", "$HOME", "|", "*"])
    assert out.text == "exit code 0\n$HOME | *\n"


async def test_run_command_missing_program(ws: Workspace) -> None:
    with pytest.raises(ToolError) as info:
        await call(ws, "run_command", argv=["definitely-not-a-program-xyz"])
    assert info.value.code == "COMMAND_NOT_FOUND"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to see the grandchild")
async def test_timeout_kills_the_whole_group_and_keeps_partial_output(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by its command line: a command may have its own PID namespace, even
    # uncontained (root), so the pid it could print is not the host's.
    monkeypatch.setenv("HARNESSNB_SANDBOX", "none")
    marker = f"sleep {700_000 + os.getpid() % 100_000}"
    script = f"{marker} & echo grandchild; echo partial; sleep 30"
    started = time.monotonic()
    with pytest.raises(SandboxError) as info:
        await call(ws, "run_command", timeout=0.5, argv=["sh", "-c", script])
    assert time.monotonic() - started < 3
    err = info.value
    assert err.code == "SANDBOX_TIMEOUT" and err.reason == "timeout"
    assert "partial" in err.message
    assert "uncontained" not in err.message  # the model's text names no backend
    assert "grandchild" in err.message
    assert not _running(marker)  # killed before the call returned


def _running(command_line: str) -> bool:
    """True when a live process has exactly ``command_line`` (zombies have none)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                line = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
                if line.strip() == command_line.encode():
                    return True
    return False


async def test_background_stragglers_do_not_hold_a_finished_command(ws: Workspace) -> None:
    started = time.monotonic()
    result = await run_argv(["sh", "-c", "sleep 30 & echo done"], cwd=ws.root, timeout_s=5)
    assert result.exit_code == 0 and result.output == "done\n"
    assert time.monotonic() - started < 3


async def test_timeout_sends_sigterm_first_so_the_command_can_say_goodbye(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_process, "TERM_GRACE_S", 0.3)
    script = "trap 'echo got-term; exit 3' TERM; echo started; while :; do sleep 0.05; done"
    result = await run_argv(["sh", "-c", script], cwd=ws.root, timeout_s=0.5)
    assert result.timed_out and result.exit_code is None
    assert result.output.startswith("started\n") and "got-term" in result.output


async def test_a_command_ignoring_sigterm_is_killed_after_one_grace(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_process, "TERM_GRACE_S", 0.3)
    script = "trap '' TERM; echo started; while :; do sleep 0.05; done"
    started = time.monotonic()
    result = await run_argv(["sh", "-c", script], cwd=ws.root, timeout_s=0.3)
    elapsed = time.monotonic() - started
    assert result.timed_out and result.output == "started\n"
    assert 0.55 <= elapsed < 3  # the deadline, then the grace, then SIGKILL


async def test_endless_output_is_bounded(ws: Workspace) -> None:
    result = await run_argv(["yes"], cwd=ws.root, timeout_s=0.5, limit_bytes=2000)
    assert result.timed_out and result.exit_code is None
    assert result.output_bytes > 100_000
    assert len(result.output) < 2100
    assert result.output.startswith("y\ny\n") and "bytes elided" in result.output


async def test_write_file_onto_a_directory_is_an_error(ws: Workspace) -> None:
    with pytest.raises(ToolError) as info:
        await call(ws, "write_file", path="src", content="x")
    assert info.value.code == "IS_A_DIRECTORY"


def test_write_preview_is_a_diff_for_existing_files(ws: Workspace) -> None:
    preview = _tool("write_file").preview({"path": "README.md", "content": "# Title\n"}, ws)
    assert "-hello world\n" in preview
    new = _tool("write_file").preview({"path": "NEW.md", "content": "fresh"}, ws)
    assert new == "new file NEW.md:\nfresh"
