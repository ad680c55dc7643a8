"""File access without races, as an attacker would try it: real runs (a scripted model,
the real tools, a real store file) on real filesystem objects.

FIFOs, hard links to secrets and to files outside, a symlink swapped in while calls
run, a pathological regular expression, a tool that outlives the run's time budget.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.loop._verify import run_verification
from harnessnb.tools._builtin import builtin_tools
from harnessnb.tools._executor import SETTLE_S, ToolExecutor
from harnessnb.tools._protocol import ToolContext
from harnessnb.tools._workspace import Workspace
from tests.files_helpers import folder, keyed_workspace

SECRET = "sk-test-SECRET-in-dotenv-0123456789"
OUTSIDE = "OUTSIDE-must-stay-as-it-was"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return keyed_workspace(tmp_path / "ws", "# Title\nhello\n", SECRET)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    return folder(tmp_path / "outside", {"target.txt": OUTSIDE})


def writer() -> hn.Policy:
    return hn.Policy.default().layer("test").allow_write("**")


def calls(*items: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """One scripted answer with several tool calls."""
    return {"tool_calls": [{"name": name, "arguments": args} for name, args in items]}


def run(
    ws: Path, store_path: Path, replies: list[Any], **contract: Any
) -> tuple[hn.RunResult, list[dict[str, Any]]]:
    """A real run on a real store file; its result and its tool rows in order."""
    policy = contract.pop("policy", None) or writer()
    store = hn.Store(store_path)
    try:
        result = hn.run_sync(
            hn.TaskContract("attack", ws, stall=hn.StallPolicy(window=0), **contract),
            hn.ScriptedProvider(replies),
            store=store,
            policy=policy,
        )
        rows = store.tool_calls(result.run_id).sort_values(["step", "seq"])
        return result, [
            {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
            for row in rows.to_dict("records")
        ]
    finally:
        store.close()


def assert_secret_absent(store_path: Path, *texts: str) -> None:
    """Neither the secret nor the outside file's content reached the store's bytes."""
    data = store_path.read_bytes()
    for text in texts:
        assert text.encode() not in data


# ------------------------------------------------------------------ FIFOs


def test_a_fifo_is_refused_at_once_by_read_write_grep_and_edit(ws: Path, tmp_path: Path) -> None:
    os.mkfifo(ws / "pipe")
    store = tmp_path / "r.duckdb"
    started = time.monotonic()
    result, rows = run(
        ws,
        store,
        [
            calls(
                ("read_file", {"path": "pipe"}),
                ("write_file", {"path": "pipe", "content": "x"}),
                ("edit_file", {"path": "pipe", "old": "a", "new": "b"}),
                ("grep", {"pattern": "x", "path": "pipe"}),
                ("grep", {"pattern": "hello", "path": "."}),
                ("list_dir", {"path": "."}),
            ),
            "done",
        ],
        max_time_s=120,
    )
    assert time.monotonic() - started < 30  # a blocking open would hang to the budget
    assert result.outcome is hn.RunOutcome.FINISHED
    by_tool = [(r["tool"], r["status"], r["error_code"]) for r in rows]
    assert by_tool[:4] == [
        ("read_file", "error", "SANDBOX_NOT_REGULAR"),
        ("write_file", "error", "SANDBOX_NOT_REGULAR"),
        ("edit_file", "error", "SANDBOX_NOT_REGULAR"),
        ("grep", "error", "SANDBOX_NOT_REGULAR"),
    ]
    assert "pipe is a FIFO (named pipe); only regular files" in rows[0]["output"]
    assert rows[4]["output"] == "README.md:2: hello\n(1 files skipped by the policy)"
    assert stat.S_ISFIFO(os.lstat(ws / "pipe").st_mode)  # not replaced by a file


async def test_socket_is_refused_like_a_fifo(ws: Path) -> None:
    import socket

    path = ws / "s.sock"
    if len(os.fsencode(path)) > 100:
        pytest.skip("temporary path too long for a unix socket")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        ctx = ToolContext(workspace=Workspace(ws))
        tool = next(t for t in builtin_tools() if t.name == "read_file")
        with pytest.raises(hn.SandboxError, match="is a socket"):
            await tool.invoke({"path": "s.sock"}, ctx)


# ------------------------------------------------------------------ hard links


def test_a_hard_link_to_dotenv_reads_nothing(ws: Path, tmp_path: Path) -> None:
    os.link(ws / ".env", ws / "notes.txt")
    (ws / "sub").mkdir()
    os.link(ws / ".env", ws / "sub" / "copy.cfg")
    store = tmp_path / "r.duckdb"
    _, rows = run(
        ws,
        store,
        [
            calls(
                ("read_file", {"path": "notes.txt"}),
                ("read_file", {"path": "sub/copy.cfg"}),
                ("grep", {"pattern": "OPENAI", "path": "."}),
                ("grep", {"pattern": "OPENAI", "path": "notes.txt"}),
                ("edit_file", {"path": "notes.txt", "old": "OPENAI", "new": "X"}),
            ),
            "done",
        ],
    )
    assert [(r["status"], r["error_code"]) for r in rows] == [
        ("refused", "REFUSED"),
        ("refused", "REFUSED"),
        ("ok", None),
        ("refused", "REFUSED"),
        ("refused", "REFUSED"),
    ]
    assert "another name (a hard link) of a file" in rows[0]["output"]
    assert rows[2]["output"] == "no matches\n(3 files skipped by the policy)"
    assert (ws / ".env").read_text() == f"OPENAI_API_KEY={SECRET}\n"
    assert_secret_absent(store, SECRET)


def test_a_write_through_a_hard_link_to_an_outside_file_leaves_it_unchanged(
    ws: Path, outside: Path, tmp_path: Path
) -> None:
    os.link(outside / "target.txt", ws / "linked.txt")
    os.chmod(ws / "linked.txt", 0o640)
    store = tmp_path / "r.duckdb"
    _, rows = run(
        ws,
        store,
        [
            calls(("write_file", {"path": "linked.txt", "content": "PWNED"})),
            calls(("edit_file", {"path": "linked.txt", "old": "PWNED", "new": "again"})),
            "done",
        ],
    )
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert (outside / "target.txt").read_text() == OUTSIDE
    inside = ws / "linked.txt"
    assert inside.read_text() == "again"
    assert inside.stat().st_nlink == 1 and stat.S_IMODE(inside.stat().st_mode) == 0o640
    assert sorted(p.name for p in ws.iterdir()) == [".env", "README.md", "linked.txt"]


# ------------------------------------------------------------------ the symlink race


class Swapper:
    """A thread that keeps swapping paths between a real thing and a symlink."""

    def __init__(self, swaps: list[tuple[Path, Path, str]]) -> None:
        self.swaps = swaps  # (path, where the real thing is parked, symlink target)
        self.stop = threading.Event()
        self.rounds = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            for path, parked, target in self.swaps:
                os.rename(path, parked)
                _put(path, lambda p=path, t=target: os.symlink(t, p))
                time.sleep(0)
                _clear(path)
                _put(path, lambda p=path, k=parked: os.rename(k, p))
            self.rounds += 1

    def __enter__(self) -> Swapper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def _clear(path: Path) -> None:
    """Remove whatever is at ``path`` (a racing write may have made a folder there)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _put(path: Path, make: Any) -> None:
    for _ in range(1000):
        try:
            make()
            return
        except OSError:
            _clear(path)
    raise AssertionError(f"could not put {path} back")


@pytest.fixture
def raced(ws: Path, outside: Path, tmp_path: Path) -> Iterator[Swapper]:
    (ws / "d").mkdir()
    (ws / "d" / "in.txt").write_text("inside d\n")
    (ws / "notes.txt").write_text("just notes\n")
    (ws / "up").mkdir()
    (ws / "up" / "f.txt").write_text("inside up\n")
    (outside / "in.txt").write_text(OUTSIDE)
    parked = tmp_path / "ws" / ".parked"
    parked.mkdir()
    swaps = [
        (ws / "d", parked / "d", str(outside)),  # a folder, for a symlink out
        (ws / "notes.txt", parked / "notes.txt", ".env"),  # a file, for a link to a secret
        (ws / "up" / "f.txt", parked / "f.txt", "../../outside/in.txt"),  # relative, out
    ]
    with Swapper(swaps) as swapper:
        yield swapper


def test_300_racing_writes_and_reads_land_nothing_outside_and_read_no_secret(
    ws: Path, outside: Path, tmp_path: Path, raced: Swapper
) -> None:
    per_step = [
        ("write_file", {"path": "d/new.txt", "content": "PWNED"}),
        ("write_file", {"path": "d/in.txt", "content": "PWNED"}),
        ("write_file", {"path": "up/f.txt", "content": "PWNED"}),
        ("edit_file", {"path": "up/f.txt", "old": "inside", "new": "PWNED"}),
        ("read_file", {"path": "notes.txt"}),
        ("read_file", {"path": "d/in.txt"}),
        ("read_file", {"path": "up/f.txt"}),
        ("grep", {"pattern": "OPENAI|OUTSIDE", "path": "."}),
        ("grep", {"pattern": ".", "path": "notes.txt"}),
        ("list_dir", {"path": "d"}),
    ]
    store = tmp_path / "r.duckdb"
    result, rows = run(ws, store, [calls(*per_step)] * 30 + ["done"], max_steps=40, policy=writer())
    raced.stop.set()
    raced.thread.join(10)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert len(rows) == 300 and raced.rounds > 10
    # Nothing landed outside, nothing there changed.
    assert sorted(p.name for p in outside.iterdir()) == ["in.txt", "target.txt"]
    assert (outside / "in.txt").read_text() == OUTSIDE
    assert (outside / "target.txt").read_text() == OUTSIDE
    # No answer carried the secret or the outside content; both sides of the race ran.
    for row in rows:
        assert SECRET not in row["output"] and OUTSIDE not in row["output"], row
    statuses = {(r["tool"], r["status"]) for r in rows}
    assert ("read_file", "ok") in statuses and ("write_file", "ok") in statuses
    assert ("read_file", "refused") in statuses
    assert_secret_absent(store, SECRET, OUTSIDE)


async def test_300_racing_direct_reads_of_a_path_swapped_to_dotenv(
    ws: Path, outside: Path, raced: Swapper
) -> None:
    """The same race without the store in between: tighter interleaving."""
    executor = ToolExecutor(Workspace(ws), policy=writer(), approver=None, tools=builtin_tools())
    outputs = []
    for i in range(300):
        name, args = [
            ("read_file", {"path": "notes.txt"}),
            ("write_file", {"path": "d/x.txt", "content": "PWNED"}),
            ("read_file", {"path": "up/f.txt"}),
        ][i % 3]
        result = await executor.execute(hn.ToolCall(f"c{i}", name, args), idempotency_key=f"k{i}")
        outputs.append(result.output)
    assert not [o for o in outputs if SECRET in o or OUTSIDE in o]
    assert sorted(p.name for p in outside.iterdir()) == ["in.txt", "target.txt"]


# ------------------------------------------------------------------ RE2


def test_a_pathological_pattern_returns_promptly(ws: Path, tmp_path: Path) -> None:
    (ws / "long.txt").write_text("a" * 50_000 + "!\n" + "a" * 30 + "\n")
    started = time.monotonic()
    _, rows = run(
        ws,
        tmp_path / "r.duckdb",
        [
            calls(
                ("grep", {"pattern": "(a+)+$", "path": "."}),
                ("grep", {"pattern": r"(a)\1", "path": "."}),
                ("grep", {"pattern": "(?=a)", "path": "."}),
                ("find_files", {"pattern": "*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b"}),
            ),
            "done",
        ],
    )
    assert time.monotonic() - started < 30  # backtracking would take far longer
    assert rows[0]["output"] == "long.txt:2: " + "a" * 30 + "\n(1 files skipped by the policy)"
    assert (rows[1]["status"], rows[1]["error_code"]) == ("error", "TOOL_ARGS")
    assert "invalid regular expression '(a)\\\\1'" in rows[1]["output"]
    assert "no backreferences or lookaround" in rows[1]["output"]
    assert "'(?=a)'" in rows[2]["output"] and rows[2]["error_code"] == "TOOL_ARGS"
    assert rows[3]["status"] == "ok"


# ------------------------------------------------------------------ the time bound


SLOW_RUN = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import harnessnb as hn

    @hn.tool
    def slow_lookup(key: str) -> str:
        "Look a key up, slowly."
        time.sleep(600)
        return "late"

    store = hn.Store(sys.argv[1])
    contract = hn.TaskContract("look up a", sys.argv[2], max_time_s=1.0)
    provider = hn.ScriptedProvider([{"tool": "slow_lookup", "args": {"key": "a"}}, "done"])
    if sys.argv[3] == "sync":
        result = hn.run_sync(contract, provider, store=store, tools=[slow_lookup])
    else:
        result = asyncio.run(hn.run(contract, provider, store=store, tools=[slow_lookup]))
    row = store.tool_calls(result.run_id).iloc[0]
    print(json.dumps({"outcome": result.outcome.value, "status": row["status"],
                      "code": row["error_code"], "output": row["output"]}))
    store.close()
    """
)


@pytest.mark.parametrize("face", ["sync", "asyncio.run"])
def test_a_tool_past_the_budget_is_a_timeout_and_the_interpreter_exits(
    ws: Path, tmp_path: Path, face: str
) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", SLOW_RUN, str(tmp_path / "r.duckdb"), str(ws), face],
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["outcome"] == "time_budget"
    assert (row["status"], row["code"]) == ("error", "SANDBOX_TIMEOUT")
    assert "slow_lookup ran past the run's time budget" in row["output"]
    assert elapsed < 1.0 + SETTLE_S + 25  # a loaded machine, but nowhere near 600 s


async def test_an_async_tool_past_the_budget_is_cancelled(ws: Path) -> None:
    cancelled = asyncio.Event()

    @hn.tool(effect=hn.Effect.WRITE)
    async def wait_forever() -> str:
        """Wait."""
        try:
            await asyncio.sleep(600)
        finally:
            cancelled.set()
        return "late"

    executor = ToolExecutor(
        Workspace(ws),
        policy=hn.Policy.permissive(),
        approver=None,
        tools=[wait_forever],
        remaining=lambda: 0.05,
    )
    result = await executor.execute(hn.ToolCall("c1", "wait_forever", {}), idempotency_key="k")
    assert cancelled.is_set()
    assert (result.status, result.error and result.error["code"]) == ("error", "SANDBOX_TIMEOUT")
    assert result.executions == 1
    assert "may still complete" in result.output


# ------------------------------------------------------------------ the walk itself


async def invoke(ws: Path, name: str, args: dict[str, Any], **ctx: Any) -> str:
    tool = next(t for t in builtin_tools() if t.name == name)
    return (await tool.invoke(args, ToolContext(workspace=Workspace(ws), **ctx))).text


async def test_a_write_through_an_inside_symlink_replaces_its_target(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_text("old\n")
    os.symlink("src", ws / "code")
    os.symlink(ws / "code" / "app.py", ws / "entry.py")
    assert await invoke(ws, "write_file", {"path": "entry.py", "content": "new\n"}) == (
        "wrote 4 bytes to entry.py"
    )
    assert os.readlink(ws / "entry.py") == str(ws / "code" / "app.py")
    assert (ws / "src" / "app.py").read_text() == "new\n"
    with Workspace(ws).walk("entry.py") as walked:
        assert walked.rel == "src/app.py"
    assert not [p for p in (ws / "src").iterdir() if p.name.endswith(".harnessnb-tmp")]


async def test_a_path_that_changed_after_approval_is_refused(ws: Path) -> None:
    """The gate asked about a.txt; by the time the tool ran, a.txt led to b.txt."""
    (ws / "b.txt").write_text("b\n")
    os.symlink("b.txt", ws / "a.txt")
    policy = hn.Policy.default()  # write: ask
    args = {"path": "a.txt", "content": "x"}
    with pytest.raises(hn.RefusedError, match="the path changed while the call ran"):
        await invoke(ws, "write_file", args, policy=policy, judged=("write", "a.txt"))
    assert (ws / "b.txt").read_text() == "b\n"
    await invoke(ws, "write_file", args, policy=policy, judged=("write", "b.txt"))
    assert (ws / "b.txt").read_text() == "x"


async def test_a_symlink_to_a_secret_is_judged_by_the_secret(ws: Path) -> None:
    os.symlink(".env", ws / "innocent.txt")
    with pytest.raises(hn.RefusedError, match="denied by rule"):
        await invoke(ws, "read_file", {"path": "innocent.txt"}, policy=hn.Policy.default())


def test_verification_of_a_fifo_says_it_could_not_run_at_once(ws: Path, tmp_path: Path) -> None:
    os.mkfifo(ws / "NOTES.md")
    started = time.monotonic()
    result, _ = run(
        ws,
        tmp_path / "r.duckdb",
        ["done"],
        verification=hn.FileContains("NOTES.md", "#"),
        max_steps=1,
    )
    assert time.monotonic() - started < 30
    assert result.outcome is hn.RunOutcome.STEP_CAP
    check = run_verification(
        hn.FileContains("NOTES.md", "#"), Workspace(ws), policy=hn.Policy.default(), approver=None
    )
    outcome = asyncio.run(check)
    assert (outcome.ran, outcome.passed) == (False, False)
    assert outcome.detail.startswith("could not run: NOTES.md is a FIFO (named pipe)")


async def test_an_edit_is_judged_as_the_write_it_was_approved_as(ws: Path) -> None:
    """Under read: ask, an approved edit still reads its file; a denied read stays denied."""
    (ws / "a.txt").write_text("alpha\n")
    policy = hn.Policy.default().with_default("read", "ask").layer("t").allow_write("**")
    args = {"path": "a.txt", "old": "alpha", "new": "beta"}
    await invoke(ws, "edit_file", args, policy=policy, judged=("write", "a.txt"))
    assert (ws / "a.txt").read_text() == "beta\n"
    policy = policy.layer("t2").deny_read("a.txt")
    with pytest.raises(hn.RefusedError, match=r"deny read a\.txt"):
        await invoke(
            ws, "edit_file", {**args, "old": "beta"}, policy=policy, judged=("write", "a.txt")
        )


def test_a_multi_name_file_is_refused_when_the_workspace_is_too_big_to_check(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harnessnb.tools import _fileio

    os.link(ws / "README.md", ws / "also-readme.md")
    monkeypatch.setattr(_fileio, "_SCAN_LIMIT", 1)
    guard = _fileio.LinkGuard(Workspace(ws), hn.Policy.default())
    with pytest.raises(hn.RefusedError, match="too large to check"):
        guard.check(os.stat(ws / "also-readme.md"), "also-readme.md")
    guard.check(os.stat(ws / ".env"), ".env")  # one name: nothing to check


async def test_a_write_clears_what_a_killed_write_of_the_same_file_left(ws: Path) -> None:
    """A process killed between a write's temporary file and its rename leaves that
    file behind; the next write of the same file (the redo after a resume) removes it.
    Another file's, and a live process's, are left alone."""
    import hashlib

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()

    def temp(target: str, pid: int) -> Path:
        tag = hashlib.sha1(target.encode()).hexdigest()[:12]
        return ws / f".{tag}.{pid}.0badc0de.harnessnb-tmp"

    left = temp("notes.md", dead.pid)
    other = temp("other.md", dead.pid)
    busy = temp("notes.md", os.getpid())  # a write still going in a live process
    for path in (left, other, busy):
        path.write_text("half a wri")
    assert await invoke(ws, "write_file", {"path": "notes.md", "content": "# notes\n"}) == (
        "wrote 8 bytes to notes.md"
    )
    assert (ws / "notes.md").read_text() == "# notes\n"
    assert not left.exists() and other.exists() and busy.exists()
