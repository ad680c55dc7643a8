"""How a run ends: the pure rules that turn what a step saw into the run's outcome.

No I/O, no store, no clock: the driver gathers the facts (the provider's error, the
tool calls' results, the stall signal, the check) and applies the decision. Each
rule has one home here and a row-by-row table in ``tests/test_step_outcome.py``.

Where each ``RunOutcome`` is decided:

- ``denied``: :func:`egress_refusal`, before the first request;
- ``time_budget``: :func:`out_of_time` before a step, :func:`provider_failure_outcome`
  for a provider call the budget cut short;
- ``escalated_retryable`` / ``escalated_terminal``: :func:`provider_failure_outcome`;
- ``needs_reconciliation``: :func:`settled_call` (a WRITE intent with no completion);
- ``success``, ``finished``, ``unverified``, ``denied`` (the agent stopped with the
  check failing after a refused tool call), ``stalled``, ``awaiting_approval``,
  ``token_budget``, ``cost_budget``, ``step_cap``: :func:`step_outcome`, after a step's tools, stall
  check and verification;
- ``cancelled`` (the task was cancelled) and ``escalated_terminal`` for a bug in the
  loop are exceptions, caught where they surface: ``Driver.drive`` and ``run``;
- a coding-agent CLI's invocation (one step, no retries of ours): :func:`invocation_outcome`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal

from ..rules._errors import HarnessError, ProviderError, RefusedError
from ._contract import RunOutcome

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..rules._policy import Policy

__all__ = [
    "StepDecision",
    "StepFacts",
    "egress_refusal",
    "invocation_outcome",
    "out_of_time",
    "over_cost",
    "provider_failure_outcome",
    "settled_call",
    "should_verify",
    "step_outcome",
]


def egress_refusal(policy: Policy, hosts: Iterable[str]) -> RefusedError | None:
    """The refusal that ends a run as ``denied`` before any request: every provider
    host must be allowed by the policy."""
    for host in hosts:
        verdict = policy.explain("net", host)
        if verdict.effect != "allow":
            return RefusedError(
                f"network access to {host} is {verdict.effect} under the policy "
                f"(rule {verdict.rule!r}, layer {verdict.layer!r}); the run made no request",
                act="net",
                target=host,
                rule=verdict.rule,
                layer=verdict.layer,
            )
    return None


def out_of_time(remaining_s: float | None) -> bool:
    """True when the run's time budget is spent before a step (None: no budget)."""
    return remaining_s is not None and remaining_s <= 0


def provider_failure_outcome(err: HarnessError, *, retries_exhausted: bool) -> RunOutcome | None:
    """The outcome a failed provider call ends the run with, or None to go on trying.

    A call the run's time budget cut short ends ``time_budget``; an error that is not
    a provider's (a bug in a custom provider) is terminal at once. A provider error
    ends the run only once the retry rule said stop: ``escalated_retryable`` when a
    later retry could cure it, else ``escalated_terminal``.
    """
    if err.code == "RUN_TIME_BUDGET":
        return RunOutcome.TIME_BUDGET
    if not isinstance(err, ProviderError):
        return RunOutcome.ESCALATED_TERMINAL
    if not retries_exhausted:
        return None
    return RunOutcome.ESCALATED_RETRYABLE if err.retryable else RunOutcome.ESCALATED_TERMINAL


def invocation_outcome(error: HarnessError | None, *, cancelled: bool) -> RunOutcome:
    """How a run of one invocation that harnessnb does not retry ends (a coding-agent
    CLI's): ``finished`` without an error, ``cancelled`` when it was cancelled, else
    ``escalated_retryable`` when a later try could cure the error (a rate limit, an
    overloaded server), ``escalated_terminal`` when it cannot."""
    if error is None:
        return RunOutcome.FINISHED
    if cancelled:
        return RunOutcome.CANCELLED
    return RunOutcome.ESCALATED_RETRYABLE if error.retryable else RunOutcome.ESCALATED_TERMINAL


SettledAction = Literal["reuse", "reconcile", "rerun"]


def settled_call(status: str | None, effect: str) -> SettledAction:
    """What a resumed step does with a tool call a previous process left a row for.

    A finished call (or one a person resolved or abandoned) is reused as it stands.
    A call that waited for approval never ran: it is run again (the approver asked
    again). An intent with no completion is run again with its recorded key when it
    is READ or IDEMPOTENT; a WRITE is never repeated on a guess: the run stops as
    ``needs_reconciliation``.
    """
    if status == "deferred":
        return "rerun"
    if status not in ("intent", "needs_reconciliation"):
        return "reuse"
    return "reconcile" if effect == "write" else "rerun"


def over_cost(cost_usd: float | None, max_cost_usd: float | None) -> bool:
    """True when a cost budget is spent, or cannot be checked (the spend is unknown)."""
    if max_cost_usd is None:
        return False
    return cost_usd is None or cost_usd >= max_cost_usd


def should_verify(*, has_verification: bool, changed_workspace: bool, answered: bool) -> bool:
    """The contract's check runs after a step that changed the workspace or in which
    the model answered without a tool call."""
    return has_verification and (changed_workspace or answered)


@dataclasses.dataclass(frozen=True)
class StepFacts:
    """What one step saw, as far as ending the run goes.

    Attributes:
        answered: The model replied without a tool call.
        deferred: A tool call waits for a person's approval.
        stall_action: The stall detector's action this step (None: no stall).
        check_passed: The verification's result this step; None when it did not run.
        feedback_given: The model was already told once that the check failed.
        refused: A tool call of this run (this step or an earlier one) was refused
            (the policy, containment, or a person's denial).
        tokens: Tokens used by the run so far, this step included.
        max_tokens: The contract's token budget (None: none).
        cost_usd: Dollars the run's attempts cost so far, this step's included; None
            when an attempt's price is unknown.
        max_cost_usd: The contract's cost budget (None: none).
        step: This step's number (1-based).
        max_steps: The contract's step cap.
    """

    answered: bool
    deferred: bool = False
    stall_action: Literal["replan", "stalled"] | None = None
    check_passed: bool | None = None
    feedback_given: bool = False
    refused: bool = False
    tokens: int = 0
    max_tokens: int | None = None
    cost_usd: float | None = 0.0
    max_cost_usd: float | None = None
    step: int = 1
    max_steps: int = 12


@dataclasses.dataclass(frozen=True)
class StepDecision:
    """The outcome of a step: ``outcome`` None means the run goes on.

    ``replan`` adds the stall detector's replan directive to the conversation;
    ``feedback`` tells the model (once) that it stopped while the check fails.
    """

    outcome: RunOutcome | None
    replan: bool = False
    feedback: bool = False


def step_outcome(facts: StepFacts) -> StepDecision:
    """Decide whether and how the run ends after a committed step.

    In order: an approval to wait for pauses the run; a passing check is success
    (even on a stalled step); a stall ends it; a model that stopped is ``finished``
    when there is no check, and when the check failed it gets one nudge, then ends
    ``unverified`` (``denied`` when a tool call of the run was refused: it needed
    something the run may not do); then the token budget, then the cost budget,
    then the step cap. A cost budget with a spend that cannot be known (an attempt
    of a model with no price) ends the run ``cost_budget`` too: a budget that
    cannot be kept is not silently dropped.

    A failed check is never ``finished`` or ``success``. With no check there is no
    telling whether a refusal kept the run from its task, so it stays ``finished``.
    """
    outcome = RunOutcome.STALLED if facts.stall_action == "stalled" else None
    feedback = False
    if facts.deferred:
        outcome = RunOutcome.AWAITING_APPROVAL
    elif facts.check_passed:
        outcome = RunOutcome.SUCCESS
    elif outcome is None and facts.answered:
        if facts.check_passed is None:
            outcome = RunOutcome.FINISHED
        elif not facts.feedback_given:
            feedback = True
        else:
            outcome = RunOutcome.DENIED if facts.refused else RunOutcome.UNVERIFIED
    if outcome is None and facts.max_tokens is not None and facts.tokens >= facts.max_tokens:
        outcome = RunOutcome.TOKEN_BUDGET
    if outcome is None and over_cost(facts.cost_usd, facts.max_cost_usd):
        outcome = RunOutcome.COST_BUDGET
    if outcome is None and facts.step >= facts.max_steps:
        outcome = RunOutcome.STEP_CAP
    return StepDecision(outcome, replan=facts.stall_action == "replan", feedback=feedback)
