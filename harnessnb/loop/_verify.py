"""Running a contract's verification against the workspace.

A check that could not run (refused by the policy or containment, a program not
found, a timeout) is reported apart from one that ran and failed: ``ran`` False
versus ``passed`` False.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..rules._errors import HarnessError
from ..tools._fileio import read_at
from ..tools._gate import Gate, Stop
from ._contract import Command, FileContains, Verification

if TYPE_CHECKING:
    from ..rules._policy import Policy
    from ..tools._approval import Approver
    from ..tools._workspace import Workspace

__all__ = ["VerifyOutcome", "run_verification"]

_READ_LIMIT = 64 << 20  # a file to search for a needle: generous, but not unbounded


@dataclasses.dataclass(frozen=True)
class VerifyOutcome:
    ran: bool
    passed: bool
    detail: str


async def run_verification(
    check: Verification,
    workspace: Workspace,
    *,
    policy: Policy,
    approver: Approver | None,
    remaining_s: float | None = None,
) -> VerifyOutcome:
    """Run ``check``; never raises for a failing or unrunnable check. A command is cut to
    ``remaining_s``, the run's time left (its whole tree killed then, as a tool's)."""
    if isinstance(check, FileContains):
        return _file_contains(check, workspace)
    timeout_s = check.timeout_s if remaining_s is None else min(check.timeout_s, remaining_s)
    if timeout_s <= 0:
        return VerifyOutcome(False, False, "could not run: the run's time budget is spent")
    return await _command(check, workspace, policy, approver, timeout_s)


def _file_contains(check: FileContains, workspace: Workspace) -> VerifyOutcome:
    # Walked and read like the file tools: a FIFO the agent made is refused, not
    # waited on (this runs on the event loop's thread).
    try:
        with workspace.walk(check.path) as walked:
            data = read_at(walked, check.path, guard=None, limit=_READ_LIMIT, text=False)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return VerifyOutcome(True, False, f"{check.path} does not exist")
    except HarnessError as exc:
        return VerifyOutcome(False, False, f"could not run: {exc.message}")
    except OSError as exc:
        return VerifyOutcome(False, False, f"could not run: {check.path}: {exc.strerror or exc}")
    text = data.decode("utf-8", errors="replace")
    if check.needle in text:
        return VerifyOutcome(True, True, check.describe())
    return VerifyOutcome(True, False, f"{check.path} does not contain {check.needle!r}")


async def _command(
    check: Command,
    workspace: Workspace,
    policy: Policy,
    approver: Approver | None,
    timeout_s: float,
) -> VerifyOutcome:
    from ..rules._policy import exec_target
    from ..tools._process import run_argv
    from ..tools._sandbox import sandbox_backend, sandbox_label

    line = exec_target(list(check.argv))
    gate = Gate(policy, approver)  # no events: a verification is not a tool call
    stop = await gate.check(
        "exec",
        line,
        tool="verification",
        preview=lambda: f"{line}\n({sandbox_label(sandbox_backend())})",
    )
    if stop is not None:
        return VerifyOutcome(False, False, f"could not run: {_refused(stop)}")
    try:
        done = await run_argv(
            list(check.argv), cwd=workspace.root, timeout_s=timeout_s, policy=policy
        )
    except HarnessError as exc:
        return VerifyOutcome(False, False, f"could not run: {exc.message}")
    if done.timed_out or done.exit_code is None:
        return VerifyOutcome(False, False, f"could not run: `{line}` timed out")
    if done.exit_code == check.expect_exit:
        return VerifyOutcome(True, True, check.describe())
    return VerifyOutcome(
        True, False, f"`{line}` exited {done.exit_code}, expected {check.expect_exit}"
    )


def _refused(stop: Stop) -> str:
    """How a verification words a gate's refusal (shorter than a tool call's)."""
    if stop.kind == "denied":
        return f"refused by rule {stop.error.rule!r}"
    if stop.kind == "no_approver":
        return "refused (exec needs approval and no approver is set)"
    return f"refused ({stop.decision.reason if stop.decision else None})"
