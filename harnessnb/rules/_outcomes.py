"""How a run ends, as values: ``RunOutcome`` and its order.

Pure data, kept with the rules so every layer shares one list: the loop decides
outcomes (``loop/_outcome.py``), the store orders its ``outcome`` column by it.
"""

from __future__ import annotations

import enum

__all__ = ["RunOutcome"]


class RunOutcome(enum.StrEnum):
    """How a run ended; the value is what the store keeps."""

    SUCCESS = "success"  # the verification passed
    FINISHED = "finished"  # the model answered without a tool call; no verification set
    UNVERIFIED = "unverified"  # the model stopped, but the verification failed
    STEP_CAP = "step_cap"
    TIME_BUDGET = "time_budget"
    TOKEN_BUDGET = "token_budget"
    COST_BUDGET = "cost_budget"  # the contract's max_cost_usd was spent (or not knowable)
    STALLED = "stalled"
    ESCALATED_RETRYABLE = "escalated_retryable"  # a retryable failure outlasted the retries
    ESCALATED_TERMINAL = "escalated_terminal"  # a failure no retry can cure
    DENIED = "denied"  # the policy (or a person) refused something the run could not do without
    CANCELLED = "cancelled"
    NEEDS_RECONCILIATION = "needs_reconciliation"
    AWAITING_APPROVAL = "awaiting_approval"

    @property
    def resumable(self) -> bool:
        """Outcomes a ``resume`` continues rather than reports: an interruption, a
        provider that stayed down, a write to reconcile, an approval to give. A spent
        budget is final: the time a resume would continue in is already used up."""
        return self in _RESUMABLE


_RESUMABLE = frozenset(
    {
        RunOutcome.CANCELLED,
        RunOutcome.ESCALATED_RETRYABLE,
        RunOutcome.NEEDS_RECONCILIATION,
        RunOutcome.AWAITING_APPROVAL,
    }
)
