"""A run that stopped ``awaiting_approval`` is taken up again by a resume: the call that
waited is asked again, the calls that ran are not repeated, the model is not asked
again for that step (real DuckDB files, the real loop, scripted model)."""

from __future__ import annotations

from pathlib import Path

import harnessnb as hn
from harnessnb.store._writer import store_writer

STEP = {
    "text": "reading, then writing",
    "tool_calls": [
        {"name": "read_file", "arguments": {"path": "a.txt"}},
        {"name": "write_file", "arguments": {"path": "NOTES.md", "content": "notes\n"}},
        {"name": "list_dir", "arguments": {"path": "."}},
    ],
}


class Asked:
    """An approver that answers ``answer`` and counts what it was asked."""

    def __init__(self, answer: hn.Decision) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def __call__(self, request: hn.ApprovalRequest) -> hn.Decision:
        self.asked.append(f"{request.act} {request.target}")
        return self.answer


def _ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    return ws


def _stopped(tmp_path: Path) -> tuple[Path, Path, str, hn.ScriptedProvider]:
    ws, store = _ws(tmp_path), tmp_path / "s.duckdb"
    first = hn.ScriptedProvider([STEP])
    waiting = Asked(hn.Decision.defer("no answer within 1 s"))
    result = hn.run_sync(hn.TaskContract("t", ws), first, store=store, approver=waiting)
    assert result.outcome is hn.RunOutcome.AWAITING_APPROVAL
    assert waiting.asked == ["write NOTES.md"]
    return ws, store, result.run_id, first


def test_a_run_awaiting_approval_keeps_its_step_begun_not_committed(tmp_path: Path) -> None:
    ws, store, run_id, first = _stopped(tmp_path)
    assert not (ws / "NOTES.md").exists()
    assert len(first.calls) == 1
    with hn.Store(store) as s:
        run = s.runs().iloc[0]
        assert (run["outcome"], run["steps"]) == ("awaiting_approval", 0)
        rows = s.tool_calls()[["step", "seq", "tool", "status"]].values.tolist()
        # The read that ran is kept (with its output); the write waits; list_dir never ran.
        assert rows == [[1, 1, "read_file", "ok"], [1, 2, "write_file", "deferred"]]
        assert store_writer(s).pending_step(run_id, 1) is not None


def test_resume_asks_again_and_finishes_the_step_without_asking_the_model(
    tmp_path: Path,
) -> None:
    ws, store, run_id, _ = _stopped(tmp_path)
    then = hn.ScriptedProvider(["done"])
    approving = Asked(hn.Decision.approve())
    result = hn.resume_sync(run_id, then, store=store, approver=approving)

    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert approving.asked == ["write NOTES.md"]
    assert (ws / "NOTES.md").read_text() == "notes\n"
    # One model call after the resume: the answer after the finished step, whose tool
    # results (the read reused, the write, list_dir) it saw.
    assert len(then.calls) == 1
    tool_texts = [m["content"] for m in then.calls[0] if m.get("role") == "tool"]
    assert tool_texts[0].startswith("alpha")
    assert "awaiting approval" not in " ".join(tool_texts)
    assert any("a.txt" in t and "NOTES.md" in t for t in tool_texts[2:])
    with hn.Store(store) as s:
        run = s.runs().iloc[0]
        assert (run["outcome"], run["steps"]) == ("finished", 2)
        rows = s.tool_calls()[["step", "seq", "tool", "status"]].values.tolist()
        assert rows == [
            [1, 1, "read_file", "ok"],
            [1, 2, "write_file", "ok"],
            [1, 3, "list_dir", "ok"],
        ]


def test_resume_that_is_denied_writes_nothing(tmp_path: Path) -> None:
    ws, store, run_id, _ = _stopped(tmp_path)
    denying = Asked(hn.Decision.deny("not today"))
    then = hn.ScriptedProvider(["gave up"])
    result = hn.resume_sync(run_id, then, store=store, approver=denying)

    assert result.outcome is hn.RunOutcome.FINISHED
    assert denying.asked == ["write NOTES.md"]
    assert not (ws / "NOTES.md").exists()
    with hn.Store(store) as s:
        statuses = dict(s.tool_calls()[["tool", "status"]].values.tolist())
        assert statuses["write_file"] == "refused"


def test_no_answer_again_stops_again_and_a_later_resume_still_asks(tmp_path: Path) -> None:
    ws, store, run_id, _ = _stopped(tmp_path)
    again = Asked(hn.Decision.defer("no answer"))
    silent = hn.ScriptedProvider([])  # asked nothing: the step is finished from the store
    result = hn.resume_sync(run_id, silent, store=store, approver=again)
    assert result.outcome is hn.RunOutcome.AWAITING_APPROVAL
    assert again.asked == ["write NOTES.md"] and silent.calls == []

    approving = Asked(hn.Decision.approve())
    result = hn.resume_sync(run_id, hn.ScriptedProvider(["done"]), store=store,
                            approver=approving)  # fmt: skip
    assert result.outcome is hn.RunOutcome.FINISHED
    assert approving.asked == ["write NOTES.md"]
    assert (ws / "NOTES.md").read_text() == "notes\n"


def test_a_write_made_before_the_waiting_call_is_not_made_again(tmp_path: Path) -> None:
    ws, store = _ws(tmp_path), tmp_path / "s.duckdb"
    step = {
        "tool_calls": [
            {"name": "write_file", "arguments": {"path": "A.md", "content": "a\n"}},
            {"name": "write_file", "arguments": {"path": "B.md", "content": "b\n"}},
        ]
    }
    policy = hn.Policy.default().layer("app").allow_write("A.md")
    waiting = Asked(hn.Decision.defer())
    contract = hn.TaskContract("t", ws)
    first = hn.run_sync(contract, hn.ScriptedProvider([step]), store=store, policy=policy,
                        approver=waiting)  # fmt: skip
    assert first.outcome is hn.RunOutcome.AWAITING_APPROVAL
    assert waiting.asked == ["write B.md"]
    (ws / "A.md").write_text("changed by a person meanwhile\n")

    approving = Asked(hn.Decision.approve())
    result = hn.resume_sync(first.run_id, hn.ScriptedProvider(["done"]), store=store,
                            approver=approving)  # fmt: skip
    assert result.outcome is hn.RunOutcome.FINISHED
    assert approving.asked == ["write B.md"]
    assert (ws / "A.md").read_text() == "changed by a person meanwhile\n"  # not redone
    assert (ws / "B.md").read_text() == "b\n"
