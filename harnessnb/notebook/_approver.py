"""``WidgetApprover``: approve or deny an ``ask`` verdict with a click in the page.

The run lives on harnessnb's loop thread; the approver's coroutine awaits a future
that a button callback resolves from whichever thread runs it (the kernel's), via
``loop.call_soon_threadsafe``.

Quirk (blocked cells get no clicks): ipykernel handles a button click as a comm
message on the shell channel, and a cell that blocks the kernel's main thread holds
those back until it ends. A click therefore reaches a waiting approver when the cell
awaits: ``await hn.run(...)``, or a ``%%harness`` cell in ipykernel, which the
extension runs as an awaiting cell (see ``_magics.await_harness_cells``). With
``timeout`` set, an unanswered request defers: the run stops ``awaiting_approval``
and can be resumed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

from ..rules._html import Html, Tone, bold, card, code, join, preview, text_block
from ..rules._retry import seconds
from ..tools._approval import PREVIEW_CHARS, ApprovalRequest, Decision, PromptApprover
from ._env import ipython_shell, widget_frontend

__all__ = ["ApprovalPanel", "WidgetApprover", "refusal_hint"]

Fallback = Literal["deny", "prompt"]


def refusal_hint(request: ApprovalRequest) -> str:
    """How to allow ``request`` without anyone clicking, for a refusal's message."""
    allow = {"write": "allow_write", "exec": "allow_exec", "net": "allow_net", "read": "allow_read"}
    method = allow.get(request.act, "allow_write")
    flag = " (or %%harness run --allow-write GLOB)" if request.act == "write" else ""
    return (
        f"no notebook frontend to ask whether to {request.act} {request.target}: allow it "
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
        self.approve_button = ipywidgets.Button(description="Approve", button_style="success")
        self.deny_button = ipywidgets.Button(description="Deny", button_style="danger")
        self.approve_button.on_click(lambda _b: self._decide(Decision.approve()))
        self.deny_button.on_click(lambda _b: self._decide(self._denial()))
        self.buttons = ipywidgets.HBox([self.approve_button, self.deny_button, self.reason])
        self.status = ipywidgets.HTML(value="")
        self.widget = ipywidgets.VBox([self.summary, self.buttons, self.status])

    def _denial(self) -> Decision:
        reason = str(self.reason.value).strip()
        return Decision.deny(reason or "denied in the notebook")

    def _decide(self, decision: Decision) -> None:
        with self._lock:  # a double click decides once
            if self.decision is not None:
                return
            self.decision = decision
        self._on_decision(decision)

    def settle(self, decision: Decision, note: str = "", *, word: str | None = None) -> None:
        """Replace the buttons by a line saying what was decided (``word``: in other words)."""
        self.approve_button.disabled = True
        self.deny_button.disabled = True
        self.reason.disabled = True
        word = word or {"approve": "approved", "deny": "denied", "defer": "deferred"}[decision.kind]
        why = f": {decision.reason}" if decision.reason and decision.kind != "approve" else ""
        self.status.value = str(join([bold(word + why), note], " "))

    def close(self) -> None:
        for w in (self.approve_button, self.deny_button, self.reason, self.buttons):
            w.close()


def _request_html(request: ApprovalRequest) -> Html:
    shown = request.preview
    if len(shown) > PREVIEW_CHARS:
        shown = shown[:PREVIEW_CHARS] + f"\n... ({len(request.preview)} characters)"
    rule = request.rule or "the default for this act"
    return card(
        "harnessnb-approval",
        [f"approve {request.act}", code(request.target), "via", code(request.tool)],
        text_block(f"asked by rule {rule} in layer {request.layer or '-'}", faint=True),
        preview(shown),
        tone=Tone.WARN,
    )


class WidgetApprover:
    """Ask a person in the page: Approve / Deny buttons and an optional reason.

    Args:
        fallback: With no widget frontend (terminal, plain python, headless):
            ``"deny"`` refuses with a message saying how to allow the act, ``"prompt"``
            asks on standard input (``PromptApprover``, with the same ``timeout``).
        timeout: Seconds (or ``timedelta``) to wait for a click (or a typed answer);
            then the request is deferred and the run stops ``awaiting_approval``
            (resumable). None waits until the run is cancelled (an interrupt leaves
            the request not answered).
        widgets: Force the widget path (True) or the fallback (False); None detects.
    """

    def __init__(
        self,
        *,
        fallback: Fallback = "deny",
        timeout: float | timedelta | None = None,
        widgets: bool | None = None,
    ) -> None:
        if fallback not in ("deny", "prompt"):
            raise ValueError(f"fallback must be 'deny' or 'prompt', not {fallback!r}")
        self.fallback: Fallback = fallback
        self.timeout = seconds(timeout)
        self.widgets = widgets
        self.panels: list[ApprovalPanel] = []  # every request shown, newest last

    def __repr__(self) -> str:
        return f"WidgetApprover(fallback={self.fallback!r}, timeout={self.timeout!r})"

    async def __call__(self, request: ApprovalRequest) -> Decision:
        use_widgets = widget_frontend() if self.widgets is None else self.widgets
        if not use_widgets:
            return await self._without_frontend(request)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Decision] = loop.create_future()

        def settle(decision: Decision) -> None:  # runs on the harness loop
            if not answer.done():
                answer.set_result(decision)

        def on_decision(decision: Decision) -> None:  # runs on the clicking thread
            loop.call_soon_threadsafe(settle, decision)

        panel = ApprovalPanel(request, on_decision)
        self.panels.append(panel)
        _show(panel.widget)
        try:
            decision = await asyncio.wait_for(answer, self.timeout)
        except TimeoutError:
            decision = Decision.defer(f"no answer within {self.timeout:g} s")
            panel.settle(decision, "- the run stopped awaiting approval; resume it to ask again")
            return decision
        except asyncio.CancelledError:  # an interrupt: the ask stays unanswered
            cancelled = Decision.defer("the run was cancelled")
            panel.settle(cancelled, "- resume the run to be asked again", word="not answered")
            raise
        panel.settle(decision)
        return decision

    async def _without_frontend(self, request: ApprovalRequest) -> Decision:
        if self.fallback == "deny":
            return Decision.deny(refusal_hint(request))
        return await PromptApprover(self.timeout)(request)


def _show(widget: Any) -> None:
    """Display ``widget`` in the current cell (a no-op outside IPython)."""
    if ipython_shell() is None:
        return
    from ._ipython import display

    display(widget)
