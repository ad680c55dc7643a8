"""``WidgetApprover``: approve or deny an ``ask`` verdict with a click in the page.

The run lives on harnessnb's loop thread; the approver's coroutine awaits a future
that a button callback resolves from whichever thread runs it (the kernel's), via
``loop.call_soon_threadsafe``.

Quirk (blocked cells get no clicks): ipykernel handles a button click as a comm
message on the shell channel, and a cell that blocks the kernel's main thread holds
those back until it ends. A click therefore reaches a waiting approver when the cell
awaits: ``await hn.run(...)``, or a ``%%harness`` cell in ipykernel, which the
extension runs as an awaiting cell (see ``_magics.await_harness_cells``). Under
``hn.run_sync`` (the main thread blocked in ``run_blocking``) no click could arrive, so
no buttons are shown: the fallback answers, its refusal saying to await the run. With
``timeout`` set, an unanswered request defers: the run stops ``awaiting_approval``
and can be resumed.

What the page keeps: the panel is shown through a display handle, and once decided
(or timed out, or cancelled) the handle replaces it by an ``ApprovalRecord``, static
HTML and text saying what was asked and what was decided, so a saved notebook shows the
decision without the widget's model (which a reload no longer has).

A call of an MCP server's tool (its target ``mcp:SERVER/TOOL``) is shown as such: the
tool and its server in the headline, and each argument in a table, every value
scrubbed and escaped (an argument is text the model wrote; a key in it is shown
``[redacted]``), beside the tool's own preview.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from ..loop._bridge import blocks_main_thread
from ..rules._errors import ConfigError
from ..rules._html import (
    Html,
    Tone,
    badge,
    bold,
    card,
    code,
    details,
    join,
    kv_table,
    preview,
    text_block,
)
from ..rules._renamed import renamed
from ..rules._retry import seconds
from ..rules._secrets import scrub
from ..rules._text import printable, shorten
from ..tools._approval import PREVIEW_CHARS, ApprovalRequest, Decision, PromptApprover
from ._env import ipython_shell, widget_frontend

__all__ = ["ApprovalPanel", "ApprovalRecord", "WidgetApprover", "mcp_call", "refusal_hint"]

Fallback = Literal["deny", "prompt"]


def refusal_hint(request: ApprovalRequest, *, blocked: bool = False) -> str:
    """How to allow ``request`` without anyone clicking, for a refusal's message;
    ``blocked``: a frontend is there, but the cell blocks it (``hn.run_sync``)."""
    allow = {"write": "allow_write", "exec": "allow_exec", "net": "allow_net", "read": "allow_read"}
    method = allow.get(request.act, "allow_write")
    flag = " (or %%harness run --allow-write GLOB)" if request.act == "write" else ""
    why = (
        f"refused to {request.act} {request.target}: the cell blocks the kernel (hn.run_sync, "
        "or %autoawait off), so no click on Approve / Deny could reach the run "
        "(`await hn.run(...)` or %%harness run with autoawait on shows them)"
        if blocked
        else f"no notebook frontend to ask whether to {request.act} {request.target}"
    )
    return (
        f"{why}: allow it "
        f"with policy=hn.Policy.default().layer('app').{method}({request.target!r}){flag}"
    )


class ApprovalPanel:
    """The widgets for one request: what is asked, Approve / Deny, an optional reason.

    ``on_decision`` is called once, on the clicking thread, with the ``Decision``.
    """

    def __init__(self, request: ApprovalRequest, on_decision: Callable[[Decision], None]):
        import ipywidgets  # type: ignore[import-untyped]

        self.request = request
        self._on_decision = on_decision
        self._lock = threading.Lock()
        self.decision: Decision | None = None
        self.summary = ipywidgets.HTML(value=str(_request_html(request)))
        self.reason = ipywidgets.Text(placeholder="reason (optional, shown to the model)")
        # ipywidgets' default buttons, marked by icons: its "success" style is white on
        # --jp-success-color1 in Lab's light theme, 4.1:1, under the 4.5 the cards keep.
        self.approve_button = ipywidgets.Button(description="Approve", icon="check")
        self.deny_button = ipywidgets.Button(description="Deny", icon="times")
        self.approve_button.on_click(lambda _b: self._decide(Decision.approve()))
        self.deny_button.on_click(lambda _b: self._decide(self._denial()))
        self.buttons = ipywidgets.HBox([self.approve_button, self.deny_button, self.reason])
        self.status = ipywidgets.HTML(value="")
        self.widget = ipywidgets.VBox([self.summary, self.buttons, self.status])
        self.record: ApprovalRecord | None = None  # set by ``settle``
        self._handle: Any = None  # the display handle, once shown

    def show(self) -> None:
        """Display the panel in the current cell, through a handle ``settle`` updates."""
        self._handle = _show(_LivePanel(self))

    def _denial(self) -> Decision:
        reason = str(self.reason.value).strip()
        return Decision.deny(reason or "denied in the notebook")

    def _decide(self, decision: Decision) -> None:
        with self._lock:  # a double click decides once
            if self.decision is not None:
                return
            self.decision = decision
        self._on_decision(decision)

    def settle(
        self,
        decision: Decision,
        note: str = "",
        at: datetime | None = None,
        *,
        word: str | None = None,
    ) -> None:
        """Replace the buttons by a line saying what was decided (``word``: in other
        words), and the shown panel by its static ``ApprovalRecord`` (what a saved
        notebook keeps)."""
        self.approve_button.disabled = True
        self.deny_button.disabled = True
        self.reason.disabled = True
        self.record = ApprovalRecord(self.request, decision, note, at or datetime.now(UTC))
        verdict = self.record.verdict()
        if word is not None:  # the same reason, in other words
            verdict = word + verdict[verdict.find(":") :] if ":" in verdict else word
        self.status.value = str(join([bold(verdict), note], " "))
        if self._handle is not None:
            self._handle.update(self.record)

    def close(self) -> None:
        for w in (self.approve_button, self.deny_button, self.reason, self.buttons):
            w.close()


class _LivePanel:
    """What is displayed while a request waits: the widget, and for a page without the
    widget's model (a notebook saved mid-wait, nbviewer) text and HTML of what is asked."""

    def __init__(self, panel: ApprovalPanel) -> None:
        self.panel = panel

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        request = self.panel.request
        bundle: dict[str, Any] = dict(self.panel.widget._repr_mimebundle_() or {})
        bundle["text/plain"] = f"{_asked_text(request)}\n  {_WAITING}"
        bundle["text/html"] = str(join([_request_html(request), text_block(_WAITING)]))
        return bundle


_WAITING = "waiting for Approve / Deny (the buttons need the live kernel)"


@dataclasses.dataclass(frozen=True)
class ApprovalRecord:
    """A decided request as static output: what was asked, what was decided, and when."""

    request: ApprovalRequest
    decision: Decision
    note: str = ""
    at: datetime = dataclasses.field(default_factory=lambda: datetime.now(UTC))

    def verdict(self) -> str:
        """``approved`` / ``denied: reason`` / ``deferred: reason``."""
        word = {"approve": "approved", "deny": "denied", "defer": "deferred"}[self.decision.kind]
        reason = self.decision.reason
        return f"{word}: {reason}" if reason and self.decision.kind != "approve" else word

    def when(self) -> str:
        """``in the notebook at 08:12 UTC`` (a clicked answer) or ``at 08:12 UTC``."""
        clock = f"at {self.at.astimezone(UTC):%H:%M} UTC"
        return f"in the notebook {clock}" if self.decision.kind != "defer" else clock

    def summary_text(self) -> str:
        lines = [_asked_text(self.request), f"  {self.verdict()} {self.when()}"]
        if self.note:
            lines.append(f"  {self.note}")
        return scrub("\n".join(printable(line) for line in lines))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.summary_text(), "text/html": str(self._html())}

    def _html(self) -> Html:
        request = self.request
        tone = {"approve": Tone.GOOD, "deny": Tone.BAD, "defer": Tone.WARN}[self.decision.kind]
        word = {"approve": "approved", "deny": "denied", "defer": "not answered"}
        shown = _shown_preview(request)
        return card(
            "harnessnb-approval harnessnb-approval-record",
            [
                badge(word[self.decision.kind], tone),
                *_headline(request, "asked to"),
            ],
            text_block(join([bold(self.verdict()), self.when(), self.note], " ")),
            _mcp_arguments(request),
            text_block(_rule_words(request), faint=True),
            details(f"what was shown ({len(request.preview)} characters)", preview(shown)),
            tone=tone,
        )


def _asked_text(request: ApprovalRequest) -> str:
    called = mcp_call(request)
    what = (
        f"{request.act} {request.target} via {request.tool}"
        if called is None
        else f"call the MCP tool {called[1]} of server {called[0]}"
    )
    return scrub(printable(f"harnessnb asked to {what} ({_rule_words(request)})"))


def mcp_call(request: ApprovalRequest) -> tuple[str, str] | None:
    """(server, tool) of a request to call an MCP server's tool (its target
    ``mcp:SERVER/TOOL``), else None."""
    if request.act != "exec" or not request.target.startswith("mcp:"):
        return None
    server, slash, tool = request.target.removeprefix("mcp:").partition("/")
    return (server, tool) if slash and server and tool else None


def _headline(request: ApprovalRequest, verb: str) -> list[object]:
    """``approve exec TARGET via TOOL``, or for an MCP call ``approve the MCP tool TOOL
    of server SERVER``."""
    called = mcp_call(request)
    if called is None:
        return [f"{verb} {request.act}", code(request.target), "via", code(request.tool)]
    return [f"{verb} call the MCP tool", code(called[1]), "of server", code(called[0])]


_ARGUMENT_CHARS = 400  # one argument's value in the table; the preview holds the rest


def _mcp_arguments(request: ApprovalRequest) -> Html:
    """An MCP call's arguments, one row each (values as JSON, cut short; the table
    scrubs and escapes every key and value); nothing for another request."""
    if mcp_call(request) is None:
        return Html("")
    rows = [
        (
            shorten(str(name), 80),
            shorten(json.dumps(value, ensure_ascii=False, default=str), _ARGUMENT_CHARS),
        )
        for name, value in request.args.items()
    ]
    return kv_table(rows) if rows else text_block("no arguments", faint=True)


def _rule_words(request: ApprovalRequest) -> str:
    """Who asked, in words: a rule of a layer, or the act's default (no rule matched)."""
    if request.rule is None:
        return f"asked by the policy's default for {request.act}: no rule allows it"
    return f"asked by the rule '{request.rule}' in the '{request.layer or '-'}' layer"


def _shown_preview(request: ApprovalRequest) -> str:
    shown = request.preview
    if len(shown) > PREVIEW_CHARS:
        shown = shown[:PREVIEW_CHARS] + f"\n... ({len(request.preview)} characters)"
    return shown


def _request_html(request: ApprovalRequest) -> Html:
    return card(
        "harnessnb-approval",
        _headline(request, "approve"),
        _mcp_arguments(request),
        text_block(_rule_words(request), faint=True),
        preview(_shown_preview(request)),
        tone=Tone.WARN,
    )


@renamed(timeout="timeout_s")
class WidgetApprover:
    """Ask a person in the page: Approve / Deny buttons and an optional reason.

    Args:
        fallback: With no widget frontend (terminal, plain python, headless):
            ``"deny"`` refuses with a message saying how to allow the act, ``"prompt"``
            asks on standard input (``PromptApprover``, with the same ``timeout_s``).
        timeout_s: Seconds (or ``timedelta``) to wait for a click (or a typed answer);
            then the request is deferred and the run stops ``awaiting_approval``
            (resumable). None waits until the run is cancelled (an interrupt leaves
            the request not answered).
        widgets: Force the widget path (True) or the fallback (False); None detects.
    """

    def __init__(
        self,
        *,
        fallback: Fallback = "deny",
        timeout_s: float | timedelta | None = None,
        widgets: bool | None = None,
    ) -> None:
        if fallback not in ("deny", "prompt"):
            raise ValueError(f"fallback must be 'deny' or 'prompt', not {fallback!r}")
        self.fallback: Fallback = fallback
        try:
            self.timeout_s = seconds(timeout_s)
        except (TypeError, ValueError):
            self.timeout_s = math.nan
        if self.timeout_s is not None and not 0 < self.timeout_s < math.inf:
            raise ConfigError(
                f"WidgetApprover(timeout_s={timeout_s!r}): give a number of seconds above 0, or "
                "None to wait until answered"
            )
        self.widgets = widgets
        self.panels: list[ApprovalPanel] = []  # every request shown, newest last

    def __repr__(self) -> str:
        return f"WidgetApprover(fallback={self.fallback!r}, timeout_s={self.timeout_s!r})"

    async def __call__(self, request: ApprovalRequest) -> Decision:
        use_widgets = widget_frontend() if self.widgets is None else self.widgets
        blocked = self.widgets is None and use_widgets and blocks_main_thread()
        if not use_widgets or blocked:
            return await self._without_frontend(request, blocked=blocked)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Decision] = loop.create_future()

        def settle(decision: Decision) -> None:  # runs on the harness loop
            if not answer.done():
                answer.set_result(decision)

        def on_decision(decision: Decision) -> None:  # runs on the clicking thread
            loop.call_soon_threadsafe(settle, decision)

        panel = ApprovalPanel(request, on_decision)
        self.panels.append(panel)
        panel.show()
        try:
            decision = await asyncio.wait_for(answer, self.timeout_s)
        except TimeoutError:
            decision = Decision.defer(f"no answer within {self.timeout_s:g} s")
            panel.settle(decision, "- the run stopped awaiting approval; resume it to ask again")
            return decision
        except asyncio.CancelledError:  # an interrupt: the ask stays unanswered
            cancelled = Decision.defer("the run was cancelled")
            panel.settle(cancelled, "- resume the run to be asked again", word="not answered")
            raise
        panel.settle(decision)
        return decision

    async def _without_frontend(self, request: ApprovalRequest, *, blocked: bool) -> Decision:
        if self.fallback == "deny":
            return Decision.deny(refusal_hint(request, blocked=blocked))
        return await PromptApprover(self.timeout_s)(request)


def _show(shown: Any) -> Any:
    """Display ``shown`` in the current cell; its display handle (None outside IPython)."""
    if ipython_shell() is None:
        return None
    from ._ipython import display

    return display(shown, display_id=True)
