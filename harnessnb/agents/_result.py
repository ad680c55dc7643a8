"""``AgentResult``: what a coding-agent CLI run hands back, as text and as a card."""

from __future__ import annotations

import dataclasses
import html
from typing import Any

from ..loop._contract import RunOutcome
from ..rules._errors import HarnessError
from ._errors import shorten

__all__ = ["AgentResult"]


@dataclasses.dataclass(frozen=True)
class AgentResult:
    """The end of one coding-agent CLI run.

    Attributes:
        run_id: The id under which the store keeps the run.
        agent: The driver's name (``claude-code``, ``codex``, ``copilot``).
        outcome: ``finished`` when the CLI answered; ``escalated_retryable`` for a
            transient failure (quota, timeout, busy session), ``escalated_terminal``
            for the others, ``cancelled`` when the caller cancelled.
        text: The agent's final answer ("" on failure; see ``partial`` for a timeout).
        usage: input_tokens, output_tokens, cached_input_tokens, cost_usd (None when
            the CLI did not report a cost).
        session_id: The CLI's native session id (continue it with ``session=``).
        session: The session name it is bound to, if one was given.
        exit_code: The CLI's exit code (None when it was killed or never started).
        error: The typed failure (``hn.agents.CLIError``), None on success.
        elapsed: Seconds from start to end.
        tool_calls: Tool calls the agent made, as its stream reported them.
        changed_workspace: Whether the workspace's files changed during the run.
    """

    run_id: str
    agent: str
    outcome: RunOutcome
    text: str = ""
    usage: dict[str, Any] = dataclasses.field(default_factory=dict)
    session_id: str | None = None
    session: str | None = None
    exit_code: int | None = None
    error: HarnessError | None = None
    elapsed: float = 0.0
    tool_calls: int = 0
    changed_workspace: bool | None = None
    model: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is RunOutcome.FINISHED

    @property
    def tokens(self) -> int:
        return int(self.usage.get("input_tokens") or 0) + int(self.usage.get("output_tokens") or 0)

    def __repr__(self) -> str:
        err = f", error={self.error.code}" if self.error else ""
        return (
            f"AgentResult(run_id={self.run_id!r}, agent={self.agent!r}, "
            f"outcome={self.outcome.value!r}, session_id={self.session_id!r}, "
            f"exit_code={self.exit_code}{err})"
        )

    def summary_text(self) -> str:
        usage = self.usage
        cost = usage.get("cost_usd")
        lines = [
            f"{self.agent} run {self.run_id}: {self.outcome.value}",
            f"  tokens in {usage.get('input_tokens', 0)} (cached "
            f"{usage.get('cached_input_tokens', 0)}), out {usage.get('output_tokens', 0)}"
            + (f", cost ${cost:.4f}" if isinstance(cost, int | float) else "")
            + f"; {self.tool_calls} tool calls; {self.elapsed:.1f} s",
            f"  session {self.session or '-'} -> {self.session_id or '-'}; "
            f"exit code {self.exit_code if self.exit_code is not None else '-'}",
        ]
        if self.error is not None:
            lines.append(f"  error {self.error.code}: {shorten(self.error.message, 300)}")
        if self.text:
            lines.append(f"  answer: {shorten(self.text, 300)}")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.summary_text(), "text/html": self._html()}

    def _html(self) -> str:
        esc = html.escape
        color = "#070" if self.ok else "#a00"
        usage = self.usage
        rows = [
            ("agent", self.agent + (f" ({self.model})" if self.model else "")),
            ("outcome", self.outcome.value),
            ("tokens", f"in {usage.get('input_tokens', 0)} (cached "
                       f"{usage.get('cached_input_tokens', 0)}), out "
                       f"{usage.get('output_tokens', 0)}"),
            ("cost", "-" if usage.get("cost_usd") is None else f"${usage['cost_usd']:.4f}"),
            ("tool calls", str(self.tool_calls)),
            ("changed workspace", {True: "yes", False: "no", None: "-"}[self.changed_workspace]),
            ("session", f"{self.session or '-'} -> {self.session_id or '-'}"),
            ("exit code", "-" if self.exit_code is None else str(self.exit_code)),
            ("elapsed", f"{self.elapsed:.1f} s"),
        ]  # fmt: skip
        table = "".join(
            f"<tr><th style='text-align:left;padding-right:1em'>{esc(k)}</th>"
            f"<td style='text-align:left'>{esc(v)}</td></tr>"
            for k, v in rows
        )
        answer = ""
        if self.text:
            shown = esc(shorten(self.text, 4000))
            answer = f"<div style='margin-top:6px;white-space:pre-wrap'>{shown}</div>"
        error = self.error._card_html() if self.error is not None else ""
        return (
            f"<div class='harnessnb-agent-result' style='border:1px solid {color};"
            "border-radius:6px;padding:8px 12px;margin:4px 0;font-family:sans-serif;"
            "font-size:13px'>"
            f"<div style='font-weight:bold;color:{color}'>{esc(self.agent)} run "
            f"<code>{esc(self.run_id)}</code>: {esc(self.outcome.value)}</div>"
            f"<table>{table}</table>{answer}{error}</div>"
        )

