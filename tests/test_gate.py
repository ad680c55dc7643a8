"""The one gate (policy verdict, approver, refusal) and its two users' words for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harnessnb import (
    ApprovalRequest,
    ApproveAll,
    Command,
    Decision,
    DenyAll,
    Policy,
    sandbox_backend,
)
from harnessnb.events import RefusedEvent, ToolEvent
from harnessnb.loop._verify import run_verification
from harnessnb.tools._gate import Gate
from harnessnb.tools._sandbox import sandbox_label
from harnessnb.tools._workspace import Workspace

ASK = Policy().layer("app").ask_exec("make *")
DENY = Policy().layer("app").deny_exec("make *")
ALLOW = Policy().layer("app").allow_exec("make *")


def defer(request: ApprovalRequest) -> Decision:
    return Decision.defer("back on monday")


class Events:
    def __init__(self) -> None:
        self.seen: list[ToolEvent] = []

    def __call__(self, event: ToolEvent) -> None:
        self.seen.append(event)

    def names(self) -> list[str]:
        return [event.kind for event in self.seen]


# (policy, approver, stop kind or None, events, error code, refusal message start)
CASES: list[tuple[Policy, Any, str | None, list[str], str | None, str | None]] = [
    (ALLOW, None, None, [], None, None),
    (DENY, ApproveAll(), "denied", ["refused"], "REFUSED", "refused: exec make all is denied"),
    (ASK, None, "no_approver", ["refused"], "REFUSED", "refused: exec make all needs approval"),
    (ASK, ApproveAll(), None, ["approval_requested", "approval_decided"], None, None),
    (
        ASK,
        DenyAll("not today"),
        "approver_denied",
        ["approval_requested", "approval_decided", "refused"],
        "REFUSED",
        "refused: the approver denied exec make all: not today",
    ),
    (
        ASK,
        defer,
        "deferred",
        ["approval_requested", "approval_decided"],
        "APPROVAL_DEFERRED",
        "awaiting approval for exec make all: back on monday",
    ),
]


@pytest.mark.parametrize(("policy", "approver", "kind", "events", "code", "message"), CASES)
async def test_the_gate_verdict_approver_and_refusal(
    policy: Policy,
    approver: Any,
    kind: str | None,
    events: list[str],
    code: str | None,
    message: str | None,
) -> None:
    seen = Events()
    previews: list[str] = []

    def preview() -> str:
        previews.append("shown")
        return "$ make all"

    gate = Gate(policy, approver, run_id="run-1", on_event=seen)
    stop = await gate.check("exec", "make all", tool="run_command", preview=preview, call_id="c1")
    assert seen.names() == events
    assert all(event.run_id == "run-1" for event in seen.seen)
    assert previews == (["shown"] if "approval_requested" in events else [])
    if kind is None:
        assert stop is None
        return
    assert stop is not None and stop.kind == kind
    assert stop.error.code == code and stop.error.message.startswith(message or "")
    assert (stop.error.act, stop.error.target, stop.error.layer) == ("exec", "make all", "app")
    if "refused" in events:
        refused = seen.seen[-1]
        assert isinstance(refused, RefusedEvent)
        assert refused.source == {"denied": "policy", "no_approver": "policy"}.get(
            kind, "approver"
        )
        assert (refused.call_id, refused.tool) == ("c1", "run_command")
        assert refused.rule == stop.error.rule and refused.message == stop.error.message
    if kind == "deferred":
        assert stop.request is not None and stop.request.preview == "$ make all"


async def test_a_listener_that_raises_changes_nothing() -> None:
    def broken(event: ToolEvent) -> None:
        raise RuntimeError("listener bug")

    stop = await Gate(DENY, None, on_event=broken).check(
        "exec", "make all", tool="t", preview=lambda: ""
    )
    assert stop is not None and stop.kind == "denied"


@pytest.mark.parametrize(
    ("policy", "approver", "detail"),
    [
        (DENY, ApproveAll(), "could not run: refused by rule 'deny exec make *'"),
        (ASK, None, "could not run: refused (exec needs approval and no approver is set)"),
        (ASK, DenyAll("not today"), "could not run: refused (not today)"),
        (ASK, defer, "could not run: refused (back on monday)"),
    ],
)
async def test_verification_words_each_refusal_of_the_same_gate(
    tmp_path: Path, policy: Policy, approver: Any, detail: str
) -> None:
    outcome = await run_verification(
        Command(["make", "all"]), Workspace(tmp_path), policy=policy, approver=approver
    )
    assert (outcome.ran, outcome.passed, outcome.detail) == (False, False, detail)


async def test_an_approved_verification_command_runs(tmp_path: Path) -> None:
    approved: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        approved.append(request)
        return True

    policy = Policy().layer("app").ask_exec("true")
    outcome = await run_verification(
        Command(["true"]), Workspace(tmp_path), policy=policy, approver=approve
    )
    assert (outcome.ran, outcome.passed) == (True, True)
    assert [(r.tool, r.act, r.target, r.preview) for r in approved] == [
        ("verification", "exec", "true", f"true\n({sandbox_label(sandbox_backend())})")
    ]
