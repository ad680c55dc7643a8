"""Replay: a recorded run run again, as a sandbox of its own.

A store file is untrusted input (a shared notebook's recording), so a replay trusts
nothing in it that could act: the model's answers come from the recordings
(``Replay``), and every tool call from the recorded run's tool rows (``RecordedTools``):
a call the recording does not hold, with its output, is refused, and no command or tool
body runs. Only a file write or edit the recording holds as done is made again, through
the ordinary path (containment, the caller's policy, the approver), in the workspace
the caller gives or a new temporary folder, never the recorded one. The policy stored
with the run is never read.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..providers._completion import ToolCall
from ..rules._errors import ConfigError, RefusedError, ResumeError
from ..rules._retry import SystemClock
from ..store._writer import store_writer
from ..tools._executor import Execution, ToolExecutor
from ..tools._protocol import ToolResult
from ._bridge import sync_twin
from ._contract import TaskContract
from ._driver import Driver
from ._durable import Replay, get_run, open_source
from ._events import Callback
from ._result import RunResult
from ._servers import stand_ins
from ._tracing import TracerProviderLike, tracing

if TYPE_CHECKING:
    from ..rules._policy import Policy
    from ..store._store import Store
    from ..tools._approval import Approver
    from ..tools._protocol import Tool

__all__ = ["RecordedTools", "replay", "replay_sync"]


async def replay(
    run_id: str,
    source: Store | str | os.PathLike[str],
    *,
    store: Store | str | os.PathLike[str] | None = None,
    workspace: str | os.PathLike[str] | None = None,
    policy: Policy | None = None,
    approver: Approver | None = None,
    on_event: Callback | None = None,
    tools: Sequence[Tool] = (),
    tracer_provider: TracerProviderLike = None,
    include_content: bool = False,
) -> RunResult:
    """Run a recorded run again from its recordings: no network, no key, no command.

    A store file is untrusted input, so a replay is a sandbox of its own. Every model
    answer comes from the recordings, and every tool call from the recorded run's tool
    rows: a call the recording does not hold (with its output) is refused, and no
    command or tool body runs; only a file write or edit the recording holds as done
    is made again, in the replay's workspace, under ``policy``. The recorded task,
    budgets and verification are used with the same run id (so its store rows equal
    the original's except for wall-clock columns), into ``store`` (a new in-memory
    store by default; a store already holding ``run_id`` gets ``RUN_ID-replay-N``).

    Args:
        run_id: The recorded run.
        source: The store holding it (a path or a ``Store``).
        store: Where the replay is recorded.
        workspace: The folder the replay works in (give a copy of the folder as it was
            before the original run); None makes a new temporary folder. The recorded
            folder is never used.
        policy: The caller's policy; None means ``Policy.default()``. The policy stored
            with the run is never used.
        approver: Decides ``ask`` verdicts (a replayed write under the default policy,
            a verification command): say ``hn.ApproveAll()``.
        on_event: Sync or async callback receiving ``RunEvent``s.
        tools: The extra tools the run was recorded with (their specs are part of
            what the recordings are matched on; their bodies never run). A run's MCP
            tools need no server: they are offered as its stored snapshot says
            (``Store.mcp_servers``) and answered from its rows.
        tracer_provider, include_content: As for ``hn.run`` (from ``store``'s rows).
    """
    from ..rules._policy import Policy as PolicyClass
    from ..store._store import Store as StoreClass

    src = open_source(source)
    row = await get_run(src, run_id)
    contract = _recorded_contract(row)
    folder = (
        os.fspath(workspace)
        if workspace is not None
        else tempfile.mkdtemp(prefix="harnessnb-replay-")
    )
    if not os.path.isdir(folder):
        raise ConfigError(f"replay: the workspace {folder!r} is not a folder that exists")
    contract = dataclasses.replace(contract, workspace=folder)
    recorded = await asyncio.to_thread(_recorded_tool_rows, src, run_id, row)
    # A run's MCP tools as it offered them (its stored snapshot): no server runs.
    served = await asyncio.to_thread(store_writer(src).mcp_servers_of, run_id)
    tools = [*tools, *stand_ins(served)]
    target = StoreClass(":memory:") if store is None else open_source(store)
    new_id = run_id
    n = 1
    while await asyncio.to_thread(target.get_run, new_id) is not None:
        new_id = f"{run_id}-replay-{n}"
        n += 1
    driver = Driver(
        contract,
        Replay(src, model=row.get("model"), run_id=run_id),
        store=target,
        policy=policy if policy is not None else PolicyClass.default(),
        approver=approver,
        tools=tools,
        on_event=on_event,
        clock=SystemClock(),
        run_id=new_id,
    )
    driver.use_executor(RecordedTools(driver, recorded, tools))
    driver.tracing = tracing(tracer_provider, include_content)
    return await driver.drive()


def _recorded_contract(row: dict[str, Any]) -> TaskContract:
    try:
        return TaskContract.from_dict(row["contract"])
    except Exception as exc:
        raise ResumeError(
            f"run {row.get('run_id')!r}: its recorded contract cannot be read ({exc})",
            reason="unreadable_checkpoint",
        ) from exc


def _recorded_tool_rows(store: Store, run_id: str, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's tool rows in the order they ran (its steps, and a step begun after)."""
    rows: list[dict[str, Any]] = []
    for step in range(1, int(row.get("steps") or 0) + 2):
        rows.extend(store_writer(store).step_tool_calls(run_id, step))
    return rows


# Tools whose recorded, successful call a replay makes again (in its own workspace,
# under the caller's policy), so the folder ends as the original did and the recorded
# verification can check it: the built-in file writes, which containment keeps inside.
_REPLAYED_WRITES = frozenset({"write_file", "edit_file"})
# The recorded statuses a replay answers with; any other (an intent never settled, a
# write waiting for reconciliation or approval) is no answer.
_ANSWERED = frozenset({"ok", "error", "refused"})


class RecordedTools(ToolExecutor):
    """A replay's executor: each tool call is answered by the next recorded tool row
    when it names the same tool with the same arguments, else refused; no tool body
    runs, except a recorded file write (``_REPLAYED_WRITES``), made again through the
    ordinary path (containment, the caller's policy, the approver)."""

    def __init__(
        self, driver: Driver, recorded: list[dict[str, Any]], tools: Sequence[Tool]
    ) -> None:
        from ..tools._builtin import builtin_tools

        super().__init__(
            driver.workspace,
            policy=driver.policy,
            approver=driver.approver,
            tools=[*builtin_tools(), *tools],
            run_id=driver.run_id,
            on_event=driver.executor.gate.on_event,
            remaining=driver.remaining,
        )
        self._recorded = collections.deque(recorded)

    async def _execute(self, call: ToolCall, how: Execution) -> ToolResult:
        """The recorded answer (nothing ran, nothing changed), or the ordinary path's
        for a recorded write made again; ``execute`` announces it."""
        found = self._take(call)
        if found is None:
            return _not_recorded(call)
        result = _answer(found)
        if result.ok and call.name in _REPLAYED_WRITES:
            made = await super()._execute(call, how)
            if not made.ok:
                return made
            return dataclasses.replace(
                result, changed_workspace=made.changed_workspace, executions=made.executions
            )
        return result

    def _take(self, call: ToolCall) -> dict[str, Any] | None:
        """The next recorded row when it is this call's (same tool, same arguments)."""
        if not self._recorded:
            return None
        found = self._recorded[0]
        if (
            found.get("tool") != call.name
            or found.get("args") != call.arguments
            or found.get("status") not in _ANSWERED
        ):
            return None
        return self._recorded.popleft()


def _answer(row: dict[str, Any]) -> ToolResult:
    """The recorded row as a result whose message to the model is the recorded text."""
    content = str(row.get("output") or "")
    status = str(row["status"])
    if status == "ok":
        return ToolResult(ok=True, output=content)
    code = row.get("error_code")
    prefix = f"ERROR [{code or 'UNKNOWN'}] "
    text = content[len(prefix) :] if content.startswith(prefix) else content
    error = {"name": row.get("error_name"), "message": text}
    if code:
        error["code"] = code
    if row.get("error_kind"):  # an MCP tool's failure: how it failed
        error["kind"] = row["error_kind"]
    return ToolResult(ok=False, output=text, error=error, status=status)


def _not_recorded(call: ToolCall) -> ToolResult:
    err = RefusedError(
        f"a replay answers only the tool calls its recording holds; {call.name} with "
        "these arguments is not the recorded run's next call, so it was not run",
        act="replay",
        target=call.name,
        layer="replay",
        code="REFUSED_NOT_RECORDED",
    )
    return ToolResult(ok=False, output=err.message, error=err.to_dict(), status="refused")


replay_sync = sync_twin(replay, """``replay`` for blocking callers.""")
