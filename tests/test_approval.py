"""Approvers: built-ins, callables of every shape, and failures taken as denies."""

from __future__ import annotations

from typing import Any

import pytest

import harnessnb as hn
from harnessnb import ApprovalRequest, ApproveAll, Decision, DenyAll
from harnessnb.tools._approval import decide

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
