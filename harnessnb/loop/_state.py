"""A run between steps, as one value: ``RunState`` is what each step's checkpoint
saves and what a resume restores, whole; ``StepResult`` is what one step came to.

The driver's collaborators keep no run state of their own: the model calls count
into ``RunState.calls`` (``CallCounts``), the checks after a step carry theirs in
``RunState.checks`` (``CheckState``). The checkpoint's stored form (a JSON object in
the ``steps`` row) is unchanged: ``checkpoint`` writes it and ``from_checkpoints``
reads it back, a step's conversation as a delta of the one before
(``Conversation.checkpoint``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..rules._stall import StallDetector
from ._conversation import Conversation, initial_messages

if TYPE_CHECKING:
    from ._contract import TaskContract
    from ._result import RunResult, StepSummary

__all__ = ["CallCounts", "CheckState", "RunState", "StepResult"]


@dataclasses.dataclass
class CallCounts:
    """What the run's model calls came to so far.

    Attributes:
        attempts: HTTP attempts made (fallback legs and failures included).
        retries: Retries the loop made after a failed call.
        fallbacks: Times a ``Fallback`` moved on to its next provider.
        providers: The leaf providers that answered, in first-answer order.
        cost_usd: Dollars the attempts cost; None once one that used tokens could
            not be priced (the spend is then unknown).
    """

    attempts: int = 0
    retries: int = 0
    fallbacks: int = 0
    providers: list[str] = dataclasses.field(default_factory=list)
    cost_usd: float | None = 0.0


@dataclasses.dataclass
class CheckState:
    """What the checks after a step carry to the next.

    Attributes:
        detector: The stall detector and what it has seen.
        feedback_given: The model was told once that the check fails.
        verified: The last check's result (None: not run).
        refused: A tool call of the run was refused (a failed check then ends it
            ``denied``).
        verify_detail: The last check's detail (the card of a run read back says it
            too).
    """

    detector: StallDetector
    feedback_given: bool = False
    verified: bool | None = None
    refused: bool = False
    verify_detail: str | None = None


@dataclasses.dataclass
class RunState:
    """A run between steps: the conversation, the steps committed, the tokens used,
    the last answer's text, the model calls' counts and the checks' state.

    ``checkpoint`` is its stored form; ``from_checkpoints`` rebuilds it whole. The
    committed steps' summaries (``summaries``, what the result's card shows) are not
    in it: they are the store's step rows, read back once by a resume
    (``_result.stored_steps``).
    """

    conversation: Conversation
    checks: CheckState
    step: int = 0
    tokens: int = 0
    text: str = ""
    calls: CallCounts = dataclasses.field(default_factory=CallCounts)
    summaries: list[StepSummary] = dataclasses.field(default_factory=list)

    @classmethod
    def new(cls, contract: TaskContract) -> RunState:
        """A run before its first step: the system prompt and the task."""
        return cls(
            Conversation(initial_messages(contract)), CheckState(StallDetector(contract.stall))
        )

    def checkpoint(self, elapsed_s: float) -> dict[str, Any]:
        """This state as a step's checkpoint (``elapsed_s``: the run's time so far)."""
        calls, checks = self.calls, self.checks
        return {
            **self.conversation.checkpoint(),
            "tokens": self.tokens,
            "elapsed_s": elapsed_s,
            "stall": checks.detector.state(),
            "verify_feedback_given": checks.feedback_given,
            "verified": checks.verified,
            "refused": checks.refused,
            "verify_detail": checks.verify_detail,
            "providers": calls.providers,
            "counts": {
                "attempts": calls.attempts,
                "retries": calls.retries,
                "fallbacks": calls.fallbacks,
                "cost_usd": calls.cost_usd,
            },
            "text": self.text,
        }

    @classmethod
    def from_checkpoints(
        cls, contract: TaskContract, checkpoints: list[dict[str, Any]]
    ) -> RunState:
        """The state a run's stored checkpoints (``Store.checkpoints``, in step order)
        add up to; a new run's when there are none (it stopped before its first step
        was committed)."""
        if not checkpoints:
            return cls.new(contract)
        state = checkpoints[-1]["state"]
        counts = state.get("counts", {})
        attempts = int(counts.get("attempts", 0))
        # A checkpoint from before costs were kept: the spend of its attempts is unknown.
        cost = counts.get("cost_usd", None if attempts else 0.0)
        return cls(
            conversation=Conversation.from_checkpoints([c["state"] for c in checkpoints]),
            checks=CheckState(
                StallDetector.from_state(contract.stall, state.get("stall", {})),
                feedback_given=bool(state.get("verify_feedback_given")),
                verified=state.get("verified"),
                refused=bool(state.get("refused")),
                verify_detail=state.get("verify_detail"),
            ),
            step=int(checkpoints[-1]["step"]),
            tokens=int(state.get("tokens", 0)),
            text=str(state.get("text", "")),
            calls=CallCounts(
                attempts=attempts,
                retries=int(counts.get("retries", 0)),
                fallbacks=int(counts.get("fallbacks", 0)),
                providers=list(state.get("providers", [])),
                cost_usd=None if cost is None else float(cost),
            ),
        )


@dataclasses.dataclass(frozen=True)
class StepResult:
    """What one step came to.

    Attributes:
        ended: The run's result when the step ended the run; None: it goes on.
        committed: The step was committed (a model failure, a step waiting for
            approval or for reconciliation commits none).
    """

    ended: RunResult | None = None
    committed: bool = False
