"""Approvers: built-ins, callables of every shape, and failures taken as denies."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import Any

import pytest

import harnessnb as hn
from harnessnb import ApprovalRequest, ApproveAll, Decision, DenyAll
from harnessnb.tools._approval import PromptApprover, decide

REQUEST = ApprovalRequest(
    act="write",
    target="NOTES.md",
    preview="new file NOTES.md:\nhello",
    rule=None,
    layer=None,
    tool="write_file",
    args={"path": "NOTES.md", "content": "hello"},
    call_id="c1",
)


async def test_approve_all_approves() -> None:
    assert await decide(ApproveAll(), REQUEST) == Decision("approve")


async def test_deny_all_carries_its_reason() -> None:
    assert await decide(DenyAll(reason="read-only today"), REQUEST) == Decision(
        "deny", "read-only today"
    )


def _sync(request: ApprovalRequest) -> Decision:
    return Decision.deny(f"no writes to {request.target}")


async def _async(request: ApprovalRequest) -> Decision:
    return Decision.defer()


@pytest.mark.parametrize(
    ("approver", "kind"),
    [
        (_sync, "deny"),
        (_async, "defer"),
        (lambda r: True, "approve"),
        (lambda r: False, "deny"),
        (lambda r: None, "defer"),
        (lambda r: "yes", "deny"),  # anything unreadable is a deny, never an approval
    ],
)
async def test_callables_sync_or_async_and_plain_answers(approver: Any, kind: str) -> None:
    assert (await decide(approver, REQUEST)).kind == kind


async def test_an_approver_that_raises_denies_with_the_error_as_reason() -> None:
    def broken(request: ApprovalRequest) -> Decision:
        raise RuntimeError("widget vanished")

    decision = await decide(broken, REQUEST)
    assert decision.kind == "deny"
    assert decision.reason == "the approver failed: RuntimeError: widget vanished"


async def test_an_async_approver_that_raises_denies_too() -> None:
    async def broken(request: ApprovalRequest) -> Decision:
        raise ValueError("boom")

    assert (await decide(broken, REQUEST)).kind == "deny"


def test_request_to_dict_is_json_ready() -> None:
    assert REQUEST.to_dict() == {
        "act": "write",
        "target": "NOTES.md",
        "preview": "new file NOTES.md:\nhello",
        "rule": None,
        "layer": None,
        "tool": "write_file",
        "args": {"path": "NOTES.md", "content": "hello"},
        "call_id": "c1",
    }


def test_reprs_are_cheap_and_readable() -> None:
    assert repr(ApproveAll()) == "ApproveAll()"
    assert repr(DenyAll("x")) == "DenyAll(reason='x')"
    assert repr(REQUEST) == "ApprovalRequest(write 'NOTES.md' via write_file, rule=None)"


def test_public_names() -> None:
    assert (hn.ApprovalRequest, hn.ApproveAll, hn.Decision, hn.DenyAll) == (
        ApprovalRequest,
        ApproveAll,
        Decision,
        DenyAll,
    )


# ------------------------------------------------------------------ the terminal


@pytest.fixture
def terminal() -> Any:
    """A real pipe as the terminal's input: (what the approver reads, the typing end)."""
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "r")
    writer = os.fdopen(write_fd, "w")
    yield reader, writer
    for stream in (reader, writer):
        with contextlib.suppress(OSError):
            stream.close()


@pytest.mark.parametrize(
    ("typed", "expected"),
    [("y\n", Decision.approve()), ("Yes\n", Decision.approve()), ("n\n", Decision.deny("denied")),
     ("not that file\n", Decision.deny("not that file"))],
)  # fmt: skip
async def test_prompt_approver_reads_the_answer_from_the_terminal(
    terminal: Any, typed: str, expected: Decision, capsys: pytest.CaptureFixture[str]
) -> None:
    reader, writer = terminal
    writer.write(typed)
    writer.flush()
    assert await PromptApprover(5, stdin=reader)(REQUEST) == expected
    assert "harnessnb asks: write NOTES.md via write_file" in capsys.readouterr().out


async def test_prompt_approver_with_no_answer_defers_after_its_timeout(terminal: Any) -> None:
    reader, _ = terminal  # nobody types
    started = time.monotonic()
    decision = await PromptApprover(0.3, stdin=reader)(REQUEST)
    assert decision == Decision.defer("no answer within 0.3 s")
    assert 0.3 <= time.monotonic() - started < 2
    # The question is given up: no thread is left reading the terminal.
    deadline = time.monotonic() + 2
    while _readers() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert _readers() == []


async def test_prompt_approver_at_end_of_input_denies(terminal: Any) -> None:
    reader, writer = terminal
    writer.close()
    assert await PromptApprover(5, stdin=reader)(REQUEST) == Decision.deny(
        "no answer on standard input"
    )


def _readers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.endswith("_read_line")]
