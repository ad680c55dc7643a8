"""Outcomes mean what they say: a run whose check failed is never ``finished`` or
``success`` (issue #15 item 2), through real runs, the real store and the real command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb import cli
from harnessnb.rules._html import Tone
from tests.files_helpers import folder
from tests.test_cli import keyless_env

TASK = "summarise README.md into NOTES.md"
WRITE_NOTES = {"tool": "write_file", "args": {"path": "NOTES.md", "content": "# Notes\n"}}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "ws", {"README.md": "# Title\n\nSome text.\n\n## Usage\n\nRun it.\n"})


def _failing_check() -> hn.Command:
    return hn.Command(["sh", "check.sh"])  # exits 3


async def test_a_written_file_with_a_failing_command_check_is_unverified(ws: Path) -> None:
    store = hn.Store(":memory:")
    provider = hn.ScriptedProvider([WRITE_NOTES, "done", "really done"])
    (ws / "check.sh").write_text("exit 3\n")
    policy = hn.Policy.default().layer("test").allow_write("NOTES.md").allow_exec("sh check.sh")
    c = hn.TaskContract(TASK, ws, verification=_failing_check())
    result = await hn.run(c, provider, store=store, policy=policy)

    assert (ws / "NOTES.md").read_text() == "# Notes\n"  # the agent did write it
    assert result.outcome is hn.RunOutcome.UNVERIFIED
    assert (result.ok, result.verified) == (False, False)
    assert result.verify_detail is not None and "exited 3, expected 0" in result.verify_detail
    assert store.get_run(result.run_id)["outcome"] == "unverified"  # type: ignore[index]
    card = result._repr_mimebundle_()["text/html"]
    assert Tone.WARN.value in card and Tone.GOOD.value not in card  # amber: not a success
    assert result.summary_text().startswith(f"run {result.run_id}: unverified")


async def test_a_run_whose_only_path_is_a_refused_write_ends_denied(ws: Path) -> None:
    store = hn.Store(":memory:")
    provider = hn.ScriptedProvider([WRITE_NOTES, "I could not write NOTES.md", "still cannot"])
    c = hn.TaskContract(TASK, ws, verification=hn.FileContains("NOTES.md", "#"))
    result = await hn.run(c, provider, store=store, policy=hn.Policy.default())

    assert not (ws / "NOTES.md").exists()
    assert (result.outcome, result.ok, result.verified) == (hn.RunOutcome.DENIED, False, False)
    assert store.tool_calls(result.run_id)["status"].tolist() == ["refused"]
    assert store.get_run(result.run_id)["outcome"] == "denied"  # type: ignore[index]


async def test_a_refused_call_then_a_passing_check_is_success(ws: Path) -> None:
    provider = hn.ScriptedProvider(
        [
            {"tool": "write_file", "args": {"path": "SECRET.md", "content": "x"}},
            {"tool": "write_file", "args": {"path": "NOTES.md", "content": "# Notes\n"}},
        ]
    )
    policy = hn.Policy.default().layer("test").allow_write("NOTES.md")
    c = hn.TaskContract(TASK, ws, verification=hn.FileContains("NOTES.md", "#"))
    result = await hn.run(c, provider, store=hn.Store(":memory:"), policy=policy)
    assert (result.outcome, result.ok) == (hn.RunOutcome.SUCCESS, True)


def _command(tmp_path: Path, ws: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "harnessnb", "run", TASK, "--workspace", str(ws),
            "--provider", "demo", "--store", str(tmp_path / "runs.duckdb"), *extra]  # fmt: skip
    return subprocess.run(
        argv, cwd=tmp_path, env=keyless_env(), capture_output=True, text=True, timeout=120
    )


def _stored_outcomes(tmp_path: Path) -> list[str]:
    with hn.Store(tmp_path / "runs.duckdb") as store:
        return list(store.runs()["outcome"])


def test_the_command_exits_non_zero_when_the_agent_wrote_but_the_check_failed(
    tmp_path: Path, ws: Path
) -> None:
    out = _command(tmp_path, ws, "--allow-write", "NOTES.md", "--verify-cmd", "false")
    assert (ws / "NOTES.md").exists()  # the demo model wrote it, then stopped
    assert out.returncode == cli.EXIT_CODES["unverified"] == 9, out.stdout + out.stderr
    assert ": unverified" in out.stdout and "check: `false` exited 1" in out.stdout
    assert _stored_outcomes(tmp_path) == ["unverified"]


def test_the_command_exits_denied_when_the_only_write_is_refused(tmp_path: Path, ws: Path) -> None:
    out = _command(tmp_path, ws, "--verify", "NOTES.md contains #")
    assert not (ws / "NOTES.md").exists()
    assert out.returncode == cli.EXIT_CODES["denied"] == 8, out.stdout + out.stderr
    assert ": denied" in out.stdout and "refused" in out.stdout
    assert _stored_outcomes(tmp_path) == ["denied"]


def test_the_command_still_exits_0_for_a_run_with_no_check(tmp_path: Path, ws: Path) -> None:
    out = _command(tmp_path, ws, "--allow-write", "NOTES.md")
    assert out.returncode == 0, out.stdout + out.stderr
    assert _stored_outcomes(tmp_path) == ["finished"]


# ------------------------------------------------------------------ the demo's workspace


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every path under ``root`` (itself included): bytes and mtime."""
    return {
        p.relative_to(root).as_posix(): (
            p.read_bytes() if p.is_file() else b"",
            p.stat().st_mtime_ns,
        )
        for p in [root, *root.rglob("*")]
    }


def _demo(tmp_path: Path, ws: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "harnessnb", "demo", "--no-chaos", "--workspace", str(ws),
            "--store", str(tmp_path / "demo.duckdb")]  # fmt: skip
    return subprocess.run(
        argv, cwd=tmp_path, env=keyless_env(), capture_output=True, text=True, timeout=120
    )


def test_demo_refuses_a_folder_of_someones_files_and_changes_nothing(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    (mine / "src").mkdir(parents=True)
    (mine / "README.md").write_text("# My project\n\nPlease keep me.\n")
    (mine / "src" / "x.py").write_text("print('mine')\n")
    before = _tree(mine)
    out = _demo(tmp_path, mine)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "is not empty and was not made by the harnessnb demo" in out.stderr
    assert "nothing in it was changed" in out.stderr and "--workspace NEW_DIR" in out.stderr
    assert "Traceback" not in out.stderr
    assert _tree(mine) == before


def test_demo_builds_in_a_new_folder_and_reuses_it(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    first = _demo(tmp_path, fresh)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (fresh / ".harnessnb-demo").is_file() and (fresh / "NOTES.md").is_file()
    again = _demo(tmp_path, fresh)  # the marker: its own folder, used again
    assert again.returncode == 0, again.stdout + again.stderr
