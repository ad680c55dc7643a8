"""A provider that answers from a script: for tests and examples, no network.

Each scripted reply is one of:

- a ``str``: a final text answer;
- a dict ``{"text": ..., "tool_calls": [{"name": ..., "arguments": {...}}]}``, or the
  shorthand ``{"tool": name, "args": {...}}`` for one tool call;
- a ``Completion``, used as it is;
- a ``ProviderError`` instance, raised (and reported as a failed attempt).

``replies`` is a list (answered in order) or a function of the conversation
returning one reply, like pydantic-ai's FunctionModel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ..rules._errors import ConfigError, ProviderError, ProviderErrorKind
from ..rules._renamed import renamed_keywords
from ._base import Call, LocalProvider
from ._completion import Completion, ToolCall, Usage

__all__ = ["ScriptedProvider"]

Reply = str | dict[str, Any] | Completion | ProviderError
ReplyFunction = Callable[[Sequence[dict[str, Any]]], Reply]


@dataclasses.dataclass(eq=False, repr=False)  # a provider is compared by identity
class ScriptedProvider(LocalProvider):
    """Answers from a list or a function; one attempt per call, on its answer.

    Args:
        replies: The script (see module docstring).
        model: The model name to report ("scripted").
        name: The provider name to report ("scripted").
        tokens_per_reply: Usage to report per answer (input, output).
    """

    replies: Sequence[Reply] | ReplyFunction
    _: dataclasses.KW_ONLY
    model: str = "scripted"
    name: str = "scripted"
    tokens_per_reply: tuple[int, int] = (10, 5)
    calls: list[list[dict[str, Any]]] = dataclasses.field(default_factory=list, init=False)
    """The messages of every call, in order."""
    _index: int = dataclasses.field(default=0, init=False)

    @renamed_keywords(seconds="timeout_s")
    def with_timeout(self, timeout_s: float) -> ScriptedProvider:
        return self

    def __repr__(self) -> str:
        return f"ScriptedProvider(model={self.model!r}, calls={len(self.calls)})"

    def _next_reply(self, messages: Sequence[dict[str, Any]]) -> Reply:
        if callable(self.replies):
            return self.replies(messages)
        if self._index >= len(self.replies):
            raise ProviderError(
                f"the script has no reply left (it had {len(self.replies)})",
                kind=ProviderErrorKind.REQUEST,
                provider=self.name,
                model=self.model,
            )
        reply = self.replies[self._index]
        self._index += 1
        return reply

    async def _reply(self, call: Call) -> Completion:
        # The list as sent, sharing its message dicts (the loop never edits a sent
        # message): copying every dict made each call O(conversation) in allocations
        # and garbage-collector work, 0.15 ms a step at 300 messages.
        self.calls.append(list(call.messages))
        reply = self._next_reply(call.messages)
        if isinstance(reply, ProviderError):
            raise reply
        return self._to_completion(reply)

    def _to_completion(self, reply: Reply) -> Completion:
        if isinstance(reply, Completion):
            return reply
        usage = Usage(*self.tokens_per_reply)
        if isinstance(reply, str):
            return Completion(
                text=reply,
                usage=usage,
                finish_reason="stop",
                provider=self.name,
                model=self.model,
            )
        if isinstance(reply, dict):
            raw_calls = list(reply.get("tool_calls") or [])
            if "tool" in reply:
                raw_calls.append({"name": reply["tool"], "arguments": reply.get("args", {})})
            calls = tuple(
                ToolCall(
                    id=str(c.get("id") or f"call_{self._index}_{i}"),
                    name=str(c["name"]),
                    arguments=dict(c.get("arguments") or {}),
                )
                for i, c in enumerate(raw_calls)
            )
            return Completion(
                text=str(reply.get("text", "")),
                tool_calls=calls,
                usage=usage,
                finish_reason="tool_calls" if calls else "stop",
                provider=self.name,
                model=self.model,
            )
        raise ConfigError(f"ScriptedProvider: cannot use a reply of type {type(reply).__name__}")
