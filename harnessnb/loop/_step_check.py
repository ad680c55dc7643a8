"""The check half of a step: stall detection, the contract's verification, the outcome.

``StepChecks`` runs them after a step's tools and turns the step's facts into its
decision with :func:`._outcome.step_outcome`; what they carry from step to step
(the stall detector, whether the model was already told the check fails, the last
check's result) is the run's state's (``RunState.checks``), saved with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..rules._stall import call_signature, replan_directive
from ._conversation import verify_feedback
from ._outcome import StepFacts, should_verify, step_outcome
from ._verify import VerifyOutcome, run_verification

if TYPE_CHECKING:
    from ..providers._completion import Completion
    from ..rules._policy import Policy
    from ..rules._retry import Clock
    from ..store._row_types import StallRow
    from ..tools._approval import Approver
    from ..tools._workspace import Workspace
    from ._contract import RunOutcome, TaskContract
    from ._state import CheckState, RunState

__all__ = ["StepChecked", "StepChecks"]


@dataclasses.dataclass(frozen=True)
class StepChecked:
    """A step's decision: ``outcome`` None means the run goes on.

    ``stall_rows`` go into the step's commit; ``messages`` (a replan directive, the
    check-failed nudge) are added to the conversation before it.
    """

    outcome: RunOutcome | None
    stall_rows: list[StallRow]
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

    async def verify(self, checks: CheckState) -> VerifyOutcome | None:
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
        checks.verified = outcome.passed if outcome.ran else None
        checks.verify_detail = outcome.detail
        return outcome

    async def after_tools(
        self,
        state: RunState,
        completion: Completion,
        *,
        changed: bool,
        deferred: bool,
        refused: bool = False,
    ) -> StepChecked:
        """Observe the step (``state.step``, its tokens and spend counted in) for stalls,
        verify when the rule says so, and decide; what carries to the next step goes
        in ``state.checks``."""
        step, checks = state.step, state.checks
        checks.refused = checks.refused or refused
        signal = checks.detector.observe(
            step, [call_signature(c.name, c.arguments) for c in completion.tool_calls], changed
        )
        stall_rows: list[StallRow] = []
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
            check = await self.verify(checks)
        decision = step_outcome(
            StepFacts(
                answered=answered,
                deferred=deferred,
                stall_action=signal.action if signal is not None else None,
                check_passed=check.passed if check is not None else None,
                feedback_given=checks.feedback_given,
                refused=checks.refused,
                tokens=state.tokens,
                max_tokens=self.contract.max_total_tokens,
                cost_usd=state.calls.cost_usd,
                max_cost_usd=self.contract.max_cost_usd,
                step=step,
                max_steps=self.contract.max_steps,
            )
        )
        messages = []
        if decision.replan and signal is not None:
            messages.append({"role": "user", "content": replan_directive(signal)})
        if decision.feedback and check is not None:
            checks.feedback_given = True
            messages.append({"role": "user", "content": verify_feedback(check.detail)})
        return StepChecked(decision.outcome, stall_rows, messages)
