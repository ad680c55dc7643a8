"""The check half of a step: stall detection, the contract's verification, the outcome.

``StepChecks`` holds the state these carry from step to step (the stall detector,
whether the model was already told the check fails, the last check's result) and
turns a step's facts into its decision with :func:`._outcome.step_outcome`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..rules._stall import StallDetector, call_signature, replan_directive
from ._conversation import verify_feedback
from ._outcome import StepFacts, should_verify, step_outcome
from ._verify import VerifyOutcome, run_verification

if TYPE_CHECKING:
    from ..providers._completion import Completion
    from ..rules._policy import Policy
    from ..rules._retry import Clock
    from ..tools._approval import Approver
    from ..tools._workspace import Workspace
    from ._contract import RunOutcome, TaskContract

__all__ = ["StepChecked", "StepChecks"]


@dataclasses.dataclass(frozen=True)
class StepChecked:
    """A step's decision: ``outcome`` None means the run goes on.

    ``stall_rows`` go into the step's commit; ``messages`` (a replan directive, the
    check-failed nudge) are added to the conversation before it.
    """

    outcome: RunOutcome | None
    stall_rows: list[dict[str, Any]]
    messages: list[dict[str, Any]]


@dataclasses.dataclass(eq=False, repr=False)  # identity, not value: one per run
class StepChecks:
    """Stall detection and verification across a run's steps."""

    contract: TaskContract
    workspace: Workspace
    _: dataclasses.KW_ONLY
    policy: Policy
    approver: Approver | None
    clock: Clock
    remaining: Callable[[], float | None] = lambda: None
    """Seconds left in the run's time budget (None: no budget): a check is cut to them."""
    detector: StallDetector = dataclasses.field(init=False)
    feedback_given: bool = dataclasses.field(default=False, init=False)
    """The model was told once that the check fails."""
    verified: bool | None = dataclasses.field(default=None, init=False)
    refused: bool = dataclasses.field(default=False, init=False)
    """A tool call of the run was refused (a failed check then ends it ``denied``)."""
    verify_detail: str | None = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        self.detector = StallDetector(self.contract.stall)

    def state(self) -> dict[str, Any]:
        """This part of a step checkpoint."""
        return {
            "stall": self.detector.state(),
            "verify_feedback_given": self.feedback_given,
            "verified": self.verified,
            "refused": self.refused,
            "verify_detail": self.verify_detail,  # the card of a run read back says it too
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Take up what :meth:`state` stored."""
        self.detector = StallDetector.from_state(self.contract.stall, state.get("stall", {}))
        self.feedback_given = bool(state.get("verify_feedback_given"))
        self.verified = state.get("verified")
        self.refused = bool(state.get("refused"))
        self.verify_detail = state.get("verify_detail")

    async def verify(self) -> VerifyOutcome | None:
        """Run the contract's verification (None when it has none)."""
        if self.contract.verification is None:
            return None
        outcome = await run_verification(
            self.contract.verification,
            self.workspace,
            policy=self.policy,
            approver=self.approver,
            remaining_s=self.remaining(),
        )
        self.verified = outcome.passed if outcome.ran else None
        self.verify_detail = outcome.detail
        return outcome

    async def after_tools(
        self,
        step: int,
        completion: Completion,
        *,
        changed: bool,
        deferred: bool,
        tokens: int,
        refused: bool = False,
        cost_usd: float | None = 0.0,
    ) -> StepChecked:
        """Observe the step for stalls, verify when the rule says so, and decide."""
        self.refused = self.refused or refused
        signal = self.detector.observe(
            step, [call_signature(c.name, c.arguments) for c in completion.tool_calls], changed
        )
        stall_rows = []
        if signal is not None:
            stall_rows.append(
                {
                    "step": step,
                    "signal": signal.signal,
                    "action": signal.action,
                    "detail": signal.detail,
                    "at": self.clock.time(),
                }
            )
        answered = not completion.tool_calls
        check = None
        if should_verify(
            has_verification=self.contract.verification is not None,
            changed_workspace=changed,
            answered=answered,
        ):
            check = await self.verify()
        decision = step_outcome(
            StepFacts(
                answered=answered,
                deferred=deferred,
                stall_action=signal.action if signal is not None else None,
                check_passed=check.passed if check is not None else None,
                feedback_given=self.feedback_given,
                refused=self.refused,
                tokens=tokens,
                max_tokens=self.contract.max_total_tokens,
                cost_usd=cost_usd,
                max_cost_usd=self.contract.max_cost_usd,
                step=step,
                max_steps=self.contract.max_steps,
            )
        )
        messages = []
        if decision.replan and signal is not None:
            messages.append({"role": "user", "content": replan_directive(signal)})
        if decision.feedback and check is not None:
            self.feedback_given = True
            messages.append({"role": "user", "content": verify_feedback(check.detail)})
        return StepChecked(decision.outcome, stall_rows, messages)
