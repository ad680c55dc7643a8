"""The conversation a run holds with the model, and how it is checkpointed.

Owns the messages the harness writes itself (system prompt, tool results, the
check-failed nudge), shrinking old tool output to fit a context window, and the
conversation's form in step checkpoints: the messages each step added (a delta), or
a full copy after earlier messages were rewritten; ``replay_conversation`` rebuilds
it on resume.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..providers._completion import ToolCall
    from ._contract import TaskContract

__all__ = [
    "ELIDED",
    "SYSTEM_PROMPT",
    "Conversation",
    "abandoned_output",
    "initial_messages",
    "replay_conversation",
    "shrink_messages",
    "tool_message",
    "verify_feedback",
]

SYSTEM_PROMPT = (
    "You are an agent working inside a workspace folder, through tools. Paths are "
    "relative to the workspace root. Read before you change things; make the smallest "
    "change that does the task. When the task is done, reply with a short summary and "
    "no tool call."
)

ELIDED = "[older tool output removed to fit the model's context window]"

NOT_RUN_AWAITING_APPROVAL = "not run: the run paused for approval"


def initial_messages(contract: TaskContract) -> list[dict[str, Any]]:
    """The system prompt (naming the check, when there is one) and the task."""
    system = contract.system_prompt or SYSTEM_PROMPT
    if contract.verification is not None:
        system += f"\nThe task is checked by: {contract.verification.describe()}."
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": contract.task},
    ]


def tool_message(call: ToolCall, content: str) -> dict[str, Any]:
    """The message that hands a tool call's result back to the model."""
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}


def abandoned_output(reason: str | None) -> str:
    """What the model sees for a dangling write a person gave up (``hn.abandon``)."""
    return (
        "ERROR [ABANDONED] this call may or may not have taken effect; the operator "
        f"abandoned it: {reason or 'no reason given'}. Check before "
        "repeating it."
    )


def verify_feedback(detail: str) -> str:
    """The one nudge given when the model stops while the check fails."""
    return (
        f"The task is not done yet: the check failed ({detail}). "
        "Keep working with the tools until it passes, then answer."
    )


def shrink_messages(
    messages: list[dict[str, Any]], keep_turns: int = 2
) -> list[dict[str, Any]] | None:
    """Drop the content of old tool outputs, keeping the system prompt, the task and the
    latest ``keep_turns`` assistant turns whole. None when there is nothing to drop."""
    assistant_idx = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if len(assistant_idx) <= keep_turns:
        cutoff = assistant_idx[0] if assistant_idx else len(messages)
    else:
        cutoff = assistant_idx[-keep_turns]
    out: list[dict[str, Any]] = []
    dropped = False
    for i, msg in enumerate(messages):
        if i < cutoff and msg.get("role") == "tool" and msg.get("content") != ELIDED:
            out.append({**msg, "content": ELIDED})
            dropped = True
        else:
            out.append(msg)
    return out if dropped else None


def replay_conversation(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation rebuilt from checkpoint states: full copies and deltas."""
    messages: list[dict[str, Any]] = []
    for state in states:
        if "messages" in state:
            messages = list(state["messages"])
        else:
            start = int(state["messages_from"])
            if start > len(messages):
                raise ValueError(f"checkpoint delta starts at {start}, past {len(messages)}")
            messages = messages[:start] + list(state["messages_delta"])
    return messages


class Conversation:
    """The run's messages, and how many of them the checkpoints already hold.

    Attributes:
        messages: The conversation as the model sees it next.
        committed: Messages covered by committed checkpoints; None when the next
            checkpoint must be a full copy (nothing committed yet, or a shrink
            rewrote earlier messages).
    """

    def __init__(self, messages: list[dict[str, Any]] | None = None) -> None:
        self.messages: list[dict[str, Any]] = list(messages or [])
        self.committed: int | None = None

    def __len__(self) -> int:
        return len(self.messages)

    def append(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    def truncate(self, length: int) -> None:
        """Forget the messages past ``length`` (a step that will not be committed)."""
        del self.messages[length:]

    def rewrite(self, messages: list[dict[str, Any]]) -> None:
        """Replace the conversation (a context shrink): the next checkpoint is a full copy."""
        self.messages = messages
        self.committed = None

    def checkpoint(self) -> dict[str, Any]:
        """The conversation's part of a step checkpoint: the messages this step added
        (a delta), so a long run's commits stay small, or a full copy when earlier
        messages were rewritten. Marks them committed."""
        base = self.committed
        if base is None or base > len(self.messages):
            part: dict[str, Any] = {"messages": list(self.messages)}
        else:
            part = {"messages_from": base, "messages_delta": self.messages[base:]}
        self.committed = len(self.messages)
        return part

    @classmethod
    def from_checkpoints(cls, states: list[dict[str, Any]]) -> Conversation:
        """The conversation the stored checkpoint states add up to, all committed."""
        conversation = cls(replay_conversation(states))
        conversation.committed = len(conversation.messages)
        return conversation
