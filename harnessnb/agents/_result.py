"""``AgentResult``: what a coding-agent CLI run hands back, as text and as a card."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..loop._contract import RunOutcome
from ..providers._completion import Usage
from ..rules._errors import HarnessError
from ..rules._html import Html, Tone, badge, card, code, kv_table, text_block
from ..rules._renamed import renamed, warn_renamed
from ..rules._secrets import scrub
from ..rules._text import shorten

__all__ = ["AgentResult", "usage_of"]


@renamed(elapsed="elapsed_s")
@dataclasses.dataclass(frozen=True)
class AgentResult:
    """The end of one coding-agent CLI run.

    Attributes:
        run_id: The id under which the store keeps the run.
        agent: The driver's name (``claude-code``, ``codex``, ``copilot``).
        outcome: ``finished`` when the CLI answered; ``escalated_retryable`` for a
            retryable failure (quota, timeout, busy session), ``escalated_terminal``
            for the others, ``cancelled`` when the caller cancelled.
        text: The agent's final answer ("" on failure; see ``partial`` for a timeout).
        usage: The run's token counts, an ``hn.Usage`` (``input_tokens``,
            ``output_tokens``, ``cached_input_tokens``); reading it as the dict it was
            (``usage["input_tokens"]``) is deprecated.
        cost_usd: What the CLI reported the run cost in US dollars (None when it did
            not report one).
        session_id: The CLI's native session id (continue it with ``session=``).
        session: The session name it is bound to, if one was given.
        exit_code: The CLI's exit code (None when it was killed or never started).
        error: The typed failure (``hn.agents.CLIError``), None on success.
        elapsed_s: Seconds from start to end (was ``elapsed``, deprecated).
        tool_calls: Tool calls the agent made, as its stream reported them.
        changed_workspace: Whether the workspace's files changed during the run.
    """

    run_id: str
    agent: str
    outcome: RunOutcome
    text: str = ""
    usage: Usage = dataclasses.field(default_factory=lambda: usage_of({}, None))
    session_id: str | None = None
    session: str | None = None
    exit_code: int | None = None
    error: HarnessError | None = None
    elapsed_s: float = 0.0
    tool_calls: int = 0
    changed_workspace: bool | None = None
    model: str | None = None
    cost_usd: float | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is RunOutcome.FINISHED

    @property
    def tokens(self) -> int:
        return self.usage.total_tokens

    def __repr__(self) -> str:
        err = f", error={self.error.code}" if self.error else ""
        return (
            f"AgentResult(run_id={self.run_id!r}, agent={self.agent!r}, "
            f"outcome={self.outcome.value!r}, session_id={self.session_id!r}, "
            f"exit_code={self.exit_code}{err})"
        )

    def summary_text(self) -> str:
        usage, cost = self.usage, self.cost_usd
        lines = [
            f"{self.agent} run {self.run_id}: {self.outcome.value}",
            f"  tokens in {usage.input_tokens} (cached "
            f"{usage.cached_input_tokens}), out {usage.output_tokens}"
            + (f", cost ${cost:.4f}" if cost is not None else "")
            + f"; {self.tool_calls} tool calls; {self.elapsed_s:.1f} s",
            f"  session {self.session or '-'} -> {self.session_id or '-'}; "
            f"exit code {self.exit_code if self.exit_code is not None else '-'}",
        ]
        if self.error is not None:
            lines.append(f"  error {self.error.code}: {shorten(str(self.error).strip(), 300)}")
        if self.text:
            lines.append(f"  answer: {shorten(self.text.strip(), 300)}")
        return scrub("\n".join(lines))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.summary_text(), "text/html": str(self._html())}

    def _html(self) -> Html:
        tone = Tone.GOOD if self.ok else Tone.BAD
        usage = self.usage
        rows = [
            ("agent", self.agent + (f" ({self.model})" if self.model else "")),
            ("outcome", self.outcome.value),
            ("tokens", f"in {usage.input_tokens} (cached "
                       f"{usage.cached_input_tokens}), out "
                       f"{usage.output_tokens}"),
            ("cost", "-" if self.cost_usd is None else f"${self.cost_usd:.4f}"),
            ("tool calls", str(self.tool_calls)),
            ("changed workspace", {True: "yes", False: "no", None: "-"}[self.changed_workspace]),
            ("session", f"{self.session or '-'} -> {self.session_id or '-'}"),
            ("exit code", "-" if self.exit_code is None else str(self.exit_code)),
            ("elapsed", f"{self.elapsed_s:.1f} s"),
        ]  # fmt: skip
        return card(
            "harnessnb-agent-result",
            [f"{self.agent} run", code(self.run_id), badge(self.outcome.value, tone)],
            kv_table(rows),
            text_block(shorten(self.text.strip(), 4000)) if self.text else "",
            self.error._card_html() if self.error is not None else "",
            tone=tone,
        )


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class _ReadAsDict(Usage):
    """An agent run's ``Usage`` that still answers the dict reads it used to (its
    ``cost_usd`` key too), each warning: ``AgentResult.usage`` was a dict. Equal to,
    and shown as, the plain ``Usage`` it holds."""

    cost_usd: float | None = None

    def _plain(self) -> Usage:
        return Usage(
            self.input_tokens, self.output_tokens, self.estimated, self.cached_input_tokens
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Usage):
            return NotImplemented
        plain = other._plain() if isinstance(other, _ReadAsDict) else other
        return self._plain() == plain

    def __hash__(self) -> int:
        return hash(self._plain())

    def __repr__(self) -> str:
        return repr(self._plain())

    def __getitem__(self, key: str) -> Any:
        new = "AgentResult.cost_usd" if key == "cost_usd" else f"AgentResult.usage.{key}"
        warn_renamed("AgentResult", f"usage[{key!r}]", new, keyword=False)
        if key not in {f.name for f in dataclasses.fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


def usage_of(counts: Mapping[str, Any], cost_usd: float | None) -> Usage:
    """An agent run's ``Usage`` from its turn's counts (and the cost the CLI reported)."""
    return _ReadAsDict(
        input_tokens=int(counts.get("input_tokens") or 0),
        output_tokens=int(counts.get("output_tokens") or 0),
        cached_input_tokens=int(counts.get("cached_input_tokens") or 0),
        cost_usd=cost_usd,
    )
