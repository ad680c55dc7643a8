"""The pure rules that decide how a run ends (harnessnb.loop._outcome), row by row."""

from __future__ import annotations

from typing import Any

import pytest

from harnessnb import (
    HarnessError,
    Policy,
    ProviderError,
    ProviderErrorKind,
    RefusedError,
    ResumeError,
    RunOutcome,
)
from harnessnb.loop._outcome import (
    StepDecision,
    StepFacts,
    egress_refusal,
    out_of_time,
    provider_failure_outcome,
    settled_call,
    should_verify,
    step_outcome,
)

Out = RunOutcome
GOES_ON = StepDecision(None)

# (case, facts, decision). Unless a row says otherwise: tool calls were made, nothing
# deferred, no stall, no check ran, no nudge given, 0 of no token budget, step 1 of 12.
STEP_ROWS: list[tuple[str, dict[str, Any], StepDecision]] = [
    ("tool calls, nothing else: the run goes on", {"answered": False}, GOES_ON),
    ("answer, no verification: finished", {"answered": True}, StepDecision(Out.FINISHED)),
    (
        "answer, check passed: success",
        {"answered": True, "check_passed": True},
        StepDecision(Out.SUCCESS),
    ),
    (
        "tool calls changed the workspace, check passed: success",
        {"answered": False, "check_passed": True},
        StepDecision(Out.SUCCESS),
    ),
    (
        "tool calls, check failed: the run goes on, no nudge",
        {"answered": False, "check_passed": False},
        GOES_ON,
    ),
    (
        "answer, check failed, first time: one nudge, the run goes on",
        {"answered": True, "check_passed": False},
        StepDecision(None, feedback=True),
    ),
    (
        "answer, check failed, nudged before: unverified, never finished",
        {"answered": True, "check_passed": False, "feedback_given": True},
        StepDecision(Out.UNVERIFIED),
    ),
    (
        "answer, check failed, nudged before, a call was refused: denied",
        {"answered": True, "check_passed": False, "feedback_given": True, "refused": True},
        StepDecision(Out.DENIED),
    ),
    (
        "answer, check failed, first time, a call was refused: one nudge first",
        {"answered": True, "check_passed": False, "refused": True},
        StepDecision(None, feedback=True),
    ),
    (
        "answer, check passed after a refused call: success",
        {"answered": True, "check_passed": True, "refused": True},
        StepDecision(Out.SUCCESS),
    ),
    (
        "answer, no verification, a call was refused: finished (no check to tell)",
        {"answered": True, "refused": True},
        StepDecision(Out.FINISHED),
    ),
    (
        "tool calls refused, check failed, the model goes on: the run goes on",
        {"answered": False, "check_passed": False, "refused": True},
        GOES_ON,
    ),
    (
        "a tool call waits for approval: awaiting_approval",
        {"answered": False, "deferred": True},
        StepDecision(Out.AWAITING_APPROVAL),
    ),
    (
        "awaiting approval wins over a passing check",
        {"answered": False, "deferred": True, "check_passed": True},
        StepDecision(Out.AWAITING_APPROVAL),
    ),
    (
        "awaiting approval wins over a stall",
        {"answered": False, "deferred": True, "stall_action": "stalled"},
        StepDecision(Out.AWAITING_APPROVAL),
    ),
    (
        "stall, first signal: replan directive, the run goes on",
        {"answered": False, "stall_action": "replan"},
        StepDecision(None, replan=True),
    ),
    (
        "stall after the replans: stalled",
        {"answered": False, "stall_action": "stalled"},
        StepDecision(Out.STALLED),
    ),
    (
        "a passing check wins over a stall",
        {"answered": False, "stall_action": "stalled", "check_passed": True},
        StepDecision(Out.SUCCESS),
    ),
    (
        "replan on a step whose check passed: success, the directive still added",
        {"answered": False, "stall_action": "replan", "check_passed": True},
        StepDecision(Out.SUCCESS, replan=True),
    ),
    (
        "stalled on an answer with a failed check: stalled, no nudge",
        {"answered": True, "stall_action": "stalled", "check_passed": False},
        StepDecision(Out.STALLED),
    ),
    (
        "no token budget: any tokens go on",
        {"answered": False, "tokens": 10**9},
        GOES_ON,
    ),
    (
        "no cost budget: any spend, known or not, goes on",
        {"answered": False, "cost_usd": None},
        GOES_ON,
    ),
    (
        "a cost budget with an unknown spend (an unpriced model): cost_budget",
        {"answered": False, "cost_usd": None, "max_cost_usd": 0.5},
        StepDecision(Out.COST_BUDGET),
    ),
    (
        "the token budget is checked before the cost budget",
        {"answered": False, "tokens": 100, "max_tokens": 100, "cost_usd": 1.0, "max_cost_usd": 0.5},
        StepDecision(Out.TOKEN_BUDGET),
    ),
    (
        "cost budget wins over the step cap",
        {"answered": False, "cost_usd": 1.0, "max_cost_usd": 0.5, "step": 12, "max_steps": 12},
        StepDecision(Out.COST_BUDGET),
    ),
    (
        "token budget wins over the step cap",
        {"answered": False, "tokens": 100, "max_tokens": 100, "step": 12, "max_steps": 12},
        StepDecision(Out.TOKEN_BUDGET),
    ),
]

# The three limits end a run alike: (the limit, facts at it, facts just under it, its outcome).
LIMITS: list[tuple[str, dict[str, Any], dict[str, Any], RunOutcome]] = [
    ("the token budget", {"tokens": 100, "max_tokens": 100}, {"tokens": 99, "max_tokens": 100},
     Out.TOKEN_BUDGET),
    ("the cost budget", {"cost_usd": 0.5, "max_cost_usd": 0.5},
     {"cost_usd": 0.49, "max_cost_usd": 0.5}, Out.COST_BUDGET),
    ("the step cap", {"step": 12, "max_steps": 12}, {"step": 11, "max_steps": 12}, Out.STEP_CAP),
]  # fmt: skip


def _limit_rows(
    limit: str, at: dict[str, Any], under: dict[str, Any], out: RunOutcome
) -> list[tuple[str, dict[str, Any], StepDecision]]:
    """At a limit the run ends with the limit's outcome unless a rule before the limits
    decided it (an approval waits, a passing check is success, a stall stalls, an answer
    is finished, nudged or unverified); a nudge or a replan on that step is still given."""
    return [
        (f"{limit} reached: {out.value}",
         {"answered": False, **at}, StepDecision(out)),
        (f"just under {limit}: the run goes on",
         {"answered": False, **under}, GOES_ON),
        (f"an answer at {limit} is finished, not {out.value}",
         {"answered": True, **at}, StepDecision(Out.FINISHED)),
        (f"a passing check at {limit}: success",
         {"answered": False, "check_passed": True, **at}, StepDecision(Out.SUCCESS)),
        (f"nudge on the step {limit} is reached: {out.value}, nudge recorded",
         {"answered": True, "check_passed": False, **at}, StepDecision(out, feedback=True)),
        (f"replan on the step {limit} is reached: {out.value}, directive recorded",
         {"answered": False, "stall_action": "replan", **at}, StepDecision(out, replan=True)),
        (f"awaiting approval at {limit}: awaiting_approval, not {out.value}",
         {"answered": False, "deferred": True, **at}, StepDecision(Out.AWAITING_APPROVAL)),
        (f"stalled at {limit}: stalled, not {out.value}",
         {"answered": False, "stall_action": "stalled", **at}, StepDecision(Out.STALLED)),
        (f"answer, check failed, nudged before, at {limit}: unverified, not {out.value}",
         {"answered": True, "check_passed": False, "feedback_given": True, **at},
         StepDecision(Out.UNVERIFIED)),
    ]  # fmt: skip


STEP_ROWS += [row for limit in LIMITS for row in _limit_rows(*limit)]


@pytest.mark.parametrize(
    ("facts", "decision"),
    [pytest.param(facts, decision, id=case) for case, facts, decision in STEP_ROWS],
)
def test_step_outcome_table(facts: dict[str, Any], decision: StepDecision) -> None:
    assert step_outcome(StepFacts(**facts)) == decision


def _provider_error(kind: ProviderErrorKind) -> ProviderError:
    return ProviderError("failed", kind=kind)


BUDGET_CUT = ProviderError("out of time", kind=ProviderErrorKind.TIMEOUT, code="RUN_TIME_BUDGET")

# Each kind of provider failure once the retry rule (or the shrink) said stop: a later
# retry could cure it (escalated_retryable) or none can (escalated_terminal).
EXHAUSTED: dict[ProviderErrorKind, RunOutcome] = {
    ProviderErrorKind.RATE_LIMITED: Out.ESCALATED_RETRYABLE,
    ProviderErrorKind.TRANSPORT: Out.ESCALATED_RETRYABLE,
    ProviderErrorKind.TIMEOUT: Out.ESCALATED_RETRYABLE,
    ProviderErrorKind.MALFORMED: Out.ESCALATED_RETRYABLE,
    ProviderErrorKind.SERVER: Out.ESCALATED_RETRYABLE,
    ProviderErrorKind.AUTH: Out.ESCALATED_TERMINAL,
    ProviderErrorKind.REQUEST: Out.ESCALATED_TERMINAL,
    ProviderErrorKind.CONTEXT_OVERFLOW: Out.ESCALATED_TERMINAL,
}

# (case, error, retries exhausted, outcome; None: the loop may still retry or shrink)
FAILURE_ROWS: list[tuple[str, HarnessError, bool, RunOutcome | None]] = [
    ("the run's time budget cut the call", BUDGET_CUT, False, Out.TIME_BUDGET),
    ("the budget cut, retries exhausted too", BUDGET_CUT, True, Out.TIME_BUDGET),
    ("a custom provider's bug", HarnessError("boom", code="UNKNOWN"), False,
     Out.ESCALATED_TERMINAL),
    ("a non-provider error, retries exhausted", ResumeError("x", reason="y"), True,
     Out.ESCALATED_TERMINAL),
]  # fmt: skip
FAILURE_ROWS += [
    (f"{kind.value}, retries left", _provider_error(kind), False, None) for kind in EXHAUSTED
]
FAILURE_ROWS += [
    (f"{kind.value}, retries exhausted", _provider_error(kind), True, outcome)
    for kind, outcome in EXHAUSTED.items()
]


def test_every_kind_of_provider_failure_has_its_rows() -> None:
    assert set(EXHAUSTED) == set(ProviderErrorKind)


@pytest.mark.parametrize(
    ("err", "exhausted", "outcome"),
    [pytest.param(e, x, o, id=case) for case, e, x, o in FAILURE_ROWS],
)
def test_provider_failure_outcome_table(
    err: HarnessError, exhausted: bool, outcome: RunOutcome | None
) -> None:
    assert provider_failure_outcome(err, retries_exhausted=exhausted) == outcome


@pytest.mark.parametrize(
    ("remaining", "ended"),
    [(None, False), (10.0, False), (0.001, False), (0.0, True), (-3.0, True)],
)
def test_out_of_time_before_a_step(remaining: float | None, ended: bool) -> None:
    assert out_of_time(remaining) is ended


# (stored status, effect, action)
SETTLED_ROWS = [
    ("ok", "write", "reuse"),
    ("error", "write", "reuse"),
    ("refused", "write", "reuse"),
    ("abandoned", "write", "reuse"),
    ("ok", "read", "reuse"),
    ("ok", "idempotent", "reuse"),
    ("intent", "read", "rerun"),
    ("intent", "idempotent", "rerun"),
    ("intent", "write", "reconcile"),
    ("needs_reconciliation", "write", "reconcile"),
    ("needs_reconciliation", "idempotent", "rerun"),
    ("deferred", "write", "rerun"),  # it waited for approval and never ran: ask again
    ("deferred", "read", "rerun"),
]


@pytest.mark.parametrize(("status", "effect", "action"), SETTLED_ROWS)
def test_settled_call_on_resume(status: str, effect: str, action: str) -> None:
    assert settled_call(status, effect) == action


@pytest.mark.parametrize(
    ("has_verification", "changed", "answered", "runs"),
    [
        (False, True, True, False),
        (True, False, False, False),
        (True, True, False, True),
        (True, False, True, True),
        (True, True, True, True),
    ],
)
def test_check_runs_after_a_change_or_an_answer(
    has_verification: bool, changed: bool, answered: bool, runs: bool
) -> None:
    assert (
        should_verify(has_verification=has_verification, changed_workspace=changed,
                      answered=answered)
        is runs
    )


def test_egress_allowed_for_provider_hosts_is_no_refusal() -> None:
    policy = Policy.default().with_provider_hosts(["api.example.com"])
    assert egress_refusal(policy, ["api.example.com"]) is None
    assert egress_refusal(Policy.default(), []) is None


def test_egress_to_an_unlisted_host_is_refused_by_the_default() -> None:
    refusal = egress_refusal(Policy.default(), ["api.example.com"])
    assert isinstance(refusal, RefusedError)
    assert (refusal.act, refusal.target, refusal.rule, refusal.layer) == (
        "net", "api.example.com", None, None,
    )
    assert refusal.message == (
        "network access to api.example.com is deny under the policy (rule None, layer None); "
        "the run made no request"
    )


def test_explicit_deny_beats_the_provider_layer() -> None:
    policy = Policy.default().layer("app").deny_net("api.example.com")
    refusal = egress_refusal(policy.with_provider_hosts(["api.example.com"]), ["api.example.com"])
    assert refusal is not None
    assert (refusal.layer, refusal.target) == ("app", "api.example.com")


def test_every_host_is_checked_the_first_refused_one_named() -> None:
    policy = Policy.default().with_provider_hosts(["a.example.com"])
    refusal = egress_refusal(policy, ["a.example.com", "b.example.com"])
    assert refusal is not None
    assert refusal.target == "b.example.com"
