"""A step's tool calls: write-ahead intents, per-call rows, and finishing a begun step.

``StepTools`` is one of the driver's collaborators: it runs a step's calls through
the ``ToolExecutor`` (policy, approval, per-effect retry) and writes their rows
through the run's ``RunRecorder`` (which holds the run's one lease, renewed while
the step runs); an effectful call's intent is committed before it runs and its
completion right after. On resume, the rows a previous process left are reused,
run again or sent to reconciliation as :func:`._outcome.settled_call` says.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar, cast

from ..providers._completion import Completion, ToolCall
from ..rules._errors import HarnessError, ResumeError
from ..rules._secrets import scrub_values
from ._conversation import (
    NOT_RUN_AWAITING_APPROVAL,
    Conversation,
    abandoned_output,
    tool_message,
)
from ._outcome import settled_call

if TYPE_CHECKING:
    from ..rules._retry import Clock
    from ..store._row_types import ToolCallRow
    from ..tools._executor import ToolExecutor
    from ._recorder import RunRecorder

__all__ = ["COMMAND_TIMEOUT_S", "PendingStep", "StepTools", "idempotency_key"]

T = TypeVar("T")

COMMAND_TIMEOUT_S = 30.0  # run_command's default timeout, cut to the run's remaining time

_TOOL_ROW_KEYS = (
    "step",
    "seq",
    "tool",
    "effect",
    "args",
    "idempotency_key",
    "status",
    "error_name",
    "error_code",
    "output_bytes",
    "sandbox",
    "server",
    "error_kind",
)


def idempotency_key(run_id: str, step: int, seq: int) -> str:
    """The key of one tool call: drawn from its place in the run, so a resumed or
    replayed run reuses it exactly."""
    digest = hashlib.sha256(f"{run_id}:{step}:{seq}".encode()).hexdigest()
    return f"idem_{digest[:24]}"


@dataclasses.dataclass
class PendingStep:
    """A step begun by an earlier process: its answer and settled tool rows (its
    attempts were written as they ended)."""

    completion: Completion
    settled: dict[int, ToolCallRow]


@dataclasses.dataclass
class ToolsDone:
    """What a step's tool calls came to.

    Attributes:
        changed: A call changed the workspace.
        deferred: A call waits for a person's approval (later calls were not run).
        unreconciled: A WRITE left by a previous process may or may not have run.
        refused: A call was refused (the policy, containment, a person's denial).
    """

    changed: bool = False
    deferred: bool = False
    refused: bool = False
    unreconciled: HarnessError | None = None


class StepTools:
    """The driver's tool-call half of a step (see the module docstring).

    Args:
        executor: Runs each call (the replay's answers from recordings instead).
        recorder: Where the calls' rows go.
        clock: The run's clock (the rows' times).
        remaining: Seconds the run has left (None: no time budget): a command's
            timeout is cut to them.
    """

    def __init__(
        self,
        executor: ToolExecutor,
        recorder: RunRecorder,
        *,
        clock: Clock,
        remaining: Callable[[], float | None],
    ) -> None:
        self.executor = executor
        self.recorder = recorder
        self.run_id = recorder.run_id
        self.clock = clock
        self.remaining = remaining
        self.step = 0
        self.conversation = Conversation()

    async def run_tools(
        self,
        completion: Completion,
        tool_rows: list[ToolCallRow],
        settled: dict[int, ToolCallRow] | None = None,
        *,
        step: int,
        conversation: Conversation,
    ) -> ToolsDone:
        """Run step ``step``'s tool calls in order, each answer appended to
        ``conversation`` and one row each to ``tool_rows``.

        ``settled`` holds the tool rows a previous process left for this step (on
        resume): a finished call's output is reused, a READ or IDEMPOTENT intent is
        run again with its recorded key, a WRITE intent is NOT run: the step stops for
        reconciliation.
        """
        self.step, self.conversation = step, conversation  # the step being run
        done = ToolsDone()
        record_intent = self._intent_recorder(completion)
        for seq, call in enumerate(completion.tool_calls, start=1):
            if done.deferred:
                self.conversation.append(tool_message(call, NOT_RUN_AWAITING_APPROVAL))
                continue
            tool = self.executor.get(call.name)
            effect = tool.effect.value if tool is not None else "read"
            key = idempotency_key(self.run_id, self.step, seq)
            earlier = (settled or {}).get(seq)
            if earlier is not None:
                # The effect the call had when it ran: its tool may be gone now (an MCP
                # server that no longer offers it), and a WRITE intent is never re-run.
                action = settled_call(earlier.get("status"), str(earlier.get("effect") or effect))
                if action == "reuse":
                    self._reuse_settled(call, earlier, tool_rows)
                    done.changed = done.changed or bool(earlier.get("changed_workspace"))
                    done.refused = done.refused or earlier.get("status") == "refused"
                    continue
                if action == "reconcile":
                    done.unreconciled = await self._needs_reconciliation(earlier)
                    return done
                key = earlier.get("idempotency_key") or key
            row = await self._run_call(call, seq, effect, key, record_intent, done)
            tool_rows.append(row)
        return done

    async def keep_begun(self, completion: Completion, tool_rows: list[ToolCallRow]) -> None:
        """Keep the step whose call waits for approval as begun (its answer, the rows
        of the calls made), for a resume to finish: ``keep_begun_step``."""
        step = int(tool_rows[-1]["step"])
        await self.recorder.keep_begun(step, {"completion": completion.to_dict()}, tool_rows)

    def _intent_recorder(self, completion: Completion) -> Callable[[ToolCallRow], Awaitable[None]]:
        """Write-ahead: an effectful call's intent is durable before it runs, with the
        step's answer the first time, so a resume can finish the step without asking
        the model again."""
        pending_saved = False

        async def record(row: ToolCallRow) -> None:
            nonlocal pending_saved
            if row["effect"] == "read":
                return
            pending = None
            if not pending_saved:
                pending = {"completion": completion.to_dict()}
                pending_saved = True
            await self.recorder.record_intent(row, pending)

        return record

    async def _run_call(
        self,
        call: ToolCall,
        seq: int,
        effect: str,
        key: str,
        record_intent: Callable[[ToolCallRow], Awaitable[None]],
        done: ToolsDone,
    ) -> ToolCallRow:
        """Run one call through the executor; its tool row, settled (an MCP tool's with
        its ``server`` and, failed, its error's ``kind`` as ``error_kind``)."""
        served = self.executor.get(call.name)
        server = None if served is None else served.server
        row: ToolCallRow = {
            "step": self.step,
            "seq": seq,
            "tool": call.name,
            "effect": effect,
            "args": call.arguments,
            "idempotency_key": key,
            "status": "intent",
            "error_name": None,
            "error_code": None,
            "output_bytes": None,
            "sandbox": None,
            "server": server,
            "error_kind": None,
            "at": self.clock.time(),
        }

        async def before_run() -> None:
            await record_intent(row)

        # A command may not outlive the run's time budget either.
        remaining = self.remaining()
        timeout_s = (
            COMMAND_TIMEOUT_S if remaining is None else max(0.1, min(COMMAND_TIMEOUT_S, remaining))
        )
        result = await self.executor.execute(
            call, idempotency_key=key, before_run=before_run, command_timeout_s=timeout_s
        )
        done.changed = done.changed or result.changed_workspace
        # Secret values never reach the model, the checkpoint or the row (a printenv, say).
        content = scrub_values(result.to_message_content())
        self.conversation.append(tool_message(call, content))
        error = result.error or {}
        row.update(
            {
                "status": result.status,
                "error_name": error.get("name"),
                "error_code": error.get("code"),
                "output_bytes": len(result.output.encode("utf-8", "replace")),
                "output": content,
                "sandbox": result.sandbox,
                "error_kind": error.get("kind") if result.server is not None else None,
                "at": self.clock.time(),
            }
        )
        if effect != "read" and result.executions > 0:
            # The call's completion is durable at once: a crash later in the step
            # must not make a finished write look like one that may not have run.
            await self.recorder.settle_tool_call(
                self.step, seq, status=result.status, output=content, sandbox=result.sandbox
            )
        if result.status == "deferred":
            done.deferred = True
        done.refused = done.refused or result.status == "refused"
        return row

    def _reuse_settled(
        self, call: ToolCall, earlier: ToolCallRow, tool_rows: list[ToolCallRow]
    ) -> None:
        """Use a settled row from before a crash (or a person's resolve/abandon)."""
        if earlier.get("status") == "abandoned":
            content = abandoned_output(earlier.get("output"))
        else:
            content = str(earlier.get("output") or "")
        self.conversation.append(tool_message(call, content))
        row = cast("ToolCallRow", {k: earlier.get(k) for k in _TOOL_ROW_KEYS})
        row.update({"output": content, "at": self.clock.time()})
        tool_rows.append(row)

    async def _needs_reconciliation(self, earlier: ToolCallRow) -> HarnessError:
        await self.recorder.settle_tool_call(
            self.step, int(earlier["seq"]), status="needs_reconciliation"
        )
        args = json.dumps(earlier.get("args"), ensure_ascii=False)
        return ResumeError(
            f"{earlier.get('tool')}({args}) at step {self.step} may or may not have run before "
            "the process stopped, and a write is never repeated on a guess. Check the "
            f"workspace, then hn.resolve({self.run_id!r}, output=...) if it landed or "
            f"hn.abandon({self.run_id!r}, reason) if not, and resume.",
            reason="needs_reconciliation",
        )
