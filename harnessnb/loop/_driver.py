"""The run loop: observe -> reason -> act -> check -> stop, one committed step at a time.

This is the one module that ties providers, tools, policy and the store together.
Per step: check budgets, call the model (``_model_call``), run each tool call
through the executor (``_step_tools``), run the stall detector and the
verification, decide the outcome (``_outcome``), then commit the whole step in ONE
store transaction.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..providers._completion import Completion, Provider
from ..rules import _events as ev
from ..rules._errors import ConfigError, HarnessError, StoreError, wrap_unknown
from ..rules._retry import Clock, SystemClock
from ..store._open import default_store
from ..tools._sandbox import containment
from ._bridge import sync_twin
from ._contract import RunOutcome, TaskContract
from ._events import Asking, Callback, EventSink
from ._model_call import AttemptRows, Failure, ModelCalls, provider_url
from ._outcome import egress_refusal, out_of_time
from ._recorder import RunRecorder
from ._result import RunResult, StepSummary
from ._servers import MCPChanged, RunServers, given_servers
from ._start import awake_on_main_thread, begin_run, uncut
from ._state import RunState, StepResult
from ._step_check import StepChecked, StepChecks
from ._step_tools import PendingStep, StepTools
from ._store_wait import close_opened
from ._tracing import TracerProviderLike, Tracing, export_when_ended, tracing
from ._typed import TypedAnswers

if TYPE_CHECKING:
    from ..mcp._server import MCPServer
    from ..providers._prices import Prices
    from ..rules._policy import Policy
    from ..store._row_types import RunRow, StepRow, ToolCallRow
    from ..store._store import Store
    from ..tools._approval import Approver
    from ..tools._executor import ToolExecutor
    from ..tools._protocol import Tool

__all__ = ["Driver", "default_store", "run", "run_sync"]

T = TypeVar("T")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


class Driver:
    """Drives one run, one committed step at a time (:meth:`take_step`).

    It holds the run's ``RunState`` (``state``: each step's checkpoint, restored whole
    by :meth:`restore`) and composes what a step needs: the model calls
    (``model_calls``), the tool calls (``tools``), the checks after them (``checks``)
    and the run's recorder (``recorder``: the store, the lease, the events).

    ``run`` drives a new run with :meth:`drive`; ``tracing`` says where its spans go
    when it ends (``_tracing``). ``resume`` takes the run's lease
    (:meth:`take_lease`), hands the stored checkpoints to :meth:`restore` and goes on
    with :meth:`resume_from`; :meth:`release` gives the lease back if that fails.
    """

    tracing: Tracing | None = None

    def __init__(
        self,
        contract: TaskContract,
        provider: Provider,
        *,
        store: Store,
        policy: Policy,
        approver: Approver | None,
        tools: Sequence[Tool],
        on_event: Callback | None,
        clock: Clock,
        run_id: str,
        prices: Prices | None = None,
        sweep_id: str | None = None,
        mcp: Sequence[MCPServer] = (),
        builtins: bool = True,
    ) -> None:
        """``approver`` None means the notebook's widget when a frontend registered one;
        ``prices`` None the default prices (the catalogue, local servers free); ``mcp``
        the run's MCP servers (opened by ``drive``, closed when it ends); ``builtins``
        False offers none of the workspace tools (``hn.ask``)."""
        from ..providers._prices import default_prices
        from ..tools._builtin import builtin_tools
        from ..tools._executor import ToolExecutor
        from ..tools._workspace import Workspace

        approver = approver if approver is not None else _default_approver()
        self.contract = contract
        self.provider = provider
        self.store = store
        self.policy = policy.with_provider_hosts(provider.hosts())
        self.approver = approver
        self.clock = clock
        self.run_id = run_id
        self.events = EventSink(on_event)
        self.recorder = RunRecorder(
            store, run_id, clock=clock, events=self.events, remaining=self.remaining
        )
        self.workspace = Workspace(contract.workspace)
        self.executor: ToolExecutor = ToolExecutor(
            self.workspace,
            policy=self.policy,
            approver=approver,
            tools=[*(builtin_tools() if builtins else ()), *tools],
            run_id=run_id,
            on_event=self._tool_event,
            remaining=self.remaining,
        )
        self.model_calls = ModelCalls(
            provider,
            contract,
            clock,
            run=self,
            prices=prices if prices is not None else default_prices(),
        )
        self.recorder.typed_end = self.model_calls.typed_row
        self.tools = StepTools(self.executor, self.recorder, clock=clock, remaining=self.remaining)
        self.checks = StepChecks(
            contract,
            self.workspace,
            policy=self.policy,
            approver=approver,
            clock=clock,
            remaining=self.remaining,
        )
        self.state = RunState.new(contract)  # the checkpoint, saved and restored whole
        self.started = clock.monotonic()
        self.elapsed_before = 0.0  # time spent before this process took the run (resume)
        self.base_policy = policy  # what the caller gave, stored with the run for resume
        self.asking = Asking()  # an approval asked and not yet answered
        self.sweep_id = sweep_id  # the sweep the run belongs to (``hn.sweep``)
        self.servers = (
            RunServers(
                mcp, workspace=self.workspace.root, policy=self.policy, remaining=self.remaining
            )
            if mcp
            else None
        )
        self.mcp_stored: list[dict[str, Any]] = []  # a resumed run's snapshots
        self.mcp_changed: MCPChanged = "leave_out"

    @property
    def attempt_rows(self) -> AttemptRows:
        """The run's attempt rows, written as each model call ends."""
        return self.recorder.attempt_rows

    def tool_specs(self) -> list[dict[str, Any]]:
        """The tools offered to the model."""
        return self.executor.specs()

    @property
    def listening(self) -> bool:
        """Whether the run's events are taken (an ``on_event`` callback)."""
        return self.events.listening

    def use_executor(self, executor: ToolExecutor) -> None:
        """Run the tool calls through ``executor`` (the replay's recorded answers)."""
        self.executor = self.tools.executor = executor

    def elapsed(self) -> float:
        return self.elapsed_before + (self.clock.monotonic() - self.started)

    def remaining(self) -> float | None:
        budget = self.contract._budget_s
        return None if budget is None else budget - self.elapsed()

    async def emit(self, event: ev.AnyEvent, /) -> None:
        await self.recorder.emit(event, self.state.step)

    async def _tool_event(self, event: ev.ToolEvent) -> None:
        self.asking.see(event)
        if isinstance(event, ev.ApprovalDecidedEvent) and event.decision != "defer":
            # A deferred call is its row's status (deferred); an answered one is a marker.
            await self.recorder.note_approval(event.tool, event.decision == "approve", event.reason)
        await self.emit(event)

    async def take_lease(self) -> None:
        """One driver per run: another live process holding the run -> ConflictError."""
        await self.recorder.take_lease()

    async def release(self) -> None:
        """Give the run's lease back (a resume that could not load the run)."""
        await self.recorder.release()

    async def begin(self) -> None:
        """The run row and its lease in one commit: a run is never recorded undriven."""
        row: RunRow = {
            "run_id": self.run_id,
            "task": self.contract.task,
            "workspace": os.path.abspath(self.contract.workspace),
            "provider": self.provider.name,
            "model": self.provider.model,
            "extras": {"base_url": provider_url(self.provider)},  # for resume
            "started_at": self.clock.time(),
            "contract": self.model_calls.contract_dict(),
            "policy": self.base_policy.to_dict(),
            "sweep_id": self.sweep_id,
        }
        typed = self.model_calls.typed
        if typed is not None:
            row["output_mode"] = typed.mode  # as resolved; the end says the one it ended in
        await self.recorder.start(row)

    async def start(self) -> RunResult | None:
        """The ``started`` event (the row written first, unless ``begin`` wrote it),
        then the egress check: a provider the policy denies ends the run ``denied``."""
        if self.recorder.lease is None:
            await self.begin()
        await self._announce()
        refusal = egress_refusal(self.policy, self.provider.hosts())
        if refusal is not None:
            return await self.finish(RunOutcome.DENIED, refusal)
        return None

    async def _announce(self, *, resumed: bool = False) -> None:
        """The ``started`` event (with ``resumed=True`` when a resume takes the run up)."""
        await self.emit(
            ev.StartedEvent(
                task=self.contract.task,
                provider=self.provider.name,
                model=self.provider.model,
                max_steps=self.contract.max_steps,
                resumed=resumed,
            )
        )

    async def take_step(self, state: RunState, pending: PendingStep | None = None) -> StepResult:
        """One step of the run in ``state``, which it moves on (a step that is not
        committed leaves it as it was). ``ended`` in the result when the run ends.

        ``pending`` is a step a previous process began (its answer was durable with
        its first intent): it is finished without asking the model again.
        """
        state.step += 1
        if pending is None:
            called = await self.model_calls.call(state.conversation, state.step)
            if isinstance(called, Failure):
                state.step -= 1  # no step was committed
                return StepResult(await self.finish(called.outcome, called.error))
            completion = called
        else:
            completion = pending.completion
        messages_before = len(state.conversation)
        step_tokens = completion.usage.total_tokens
        state.tokens += step_tokens
        state.text = completion.text or state.text
        state.conversation.append(completion.to_message())

        tool_rows: list[ToolCallRow] = []
        tools = await self.tools.run_tools(
            completion,
            tool_rows,
            pending.settled if pending else None,
            step=state.step,
            conversation=state.conversation,
        )
        if tools.unreconciled is not None or tools.deferred:
            # The step stays uncommitted; the next resume picks it up again (a call
            # waiting for a person is asked again; the model is not).
            state.conversation.truncate(messages_before)
            state.tokens -= step_tokens
            state.step -= 1
            if tools.unreconciled is not None:
                unreconciled = RunOutcome.NEEDS_RECONCILIATION
                return StepResult(await self.finish(unreconciled, tools.unreconciled))
            await self.tools.keep_begun(completion, tool_rows)
            return StepResult(await self.finish(RunOutcome.AWAITING_APPROVAL))

        checked = await self.checks.after_tools(
            state, completion, changed=tools.changed, deferred=tools.deferred, refused=tools.refused
        )
        for message in checked.messages:
            state.conversation.append(message)
        committed = await self._commit_step(
            state, completion, step_tokens, tools.changed, checked, tool_rows
        )
        return StepResult(committed, committed=True)

    async def _commit_step(
        self,
        state: RunState,
        completion: Completion,
        step_tokens: int,
        changed: bool,
        checked: StepChecked,
        tool_rows: list[ToolCallRow],
    ) -> RunResult | None:
        """Commit the step (and the run's end, if it ends) in one transaction; keep its
        summary in ``state``."""
        ending, stall_rows = checked.outcome, checked.stall_rows
        ended_at = self.clock.time()  # when this step ends the run: the step is stamped after
        row: StepRow = {
            "step": state.step,
            "decision": "tool_calls" if completion.tool_calls else "answer",
            "tool_calls": len(completion.tool_calls),
            "tokens": step_tokens,
            "changed_workspace": changed,
            "provider": completion.provider or self.provider.name,
            "at": self.clock.time(),
        }
        # Its attempts are not part of it: each was written when its call ended. The
        # last step and the run's end (lease released) are one commit.
        await self.recorder.commit_step(
            row,
            checkpoint=state.checkpoint(self.elapsed()),
            tool_calls=tool_rows,
            stalls=stall_rows,
            ending=ending,
            finished_at=ended_at,
        )
        state.summaries.append(StepSummary.of(row, tool_rows, self.model_calls.step_attempts))
        await self.emit(
            ev.StepEvent(
                tokens=state.tokens,
                cost_usd=state.calls.cost_usd,
                tool_calls=len(completion.tool_calls),
                changed_workspace=changed,
                provider=completion.provider,
            )
        )
        for stall_row in stall_rows:
            stall = ev.ReplanEvent if stall_row["action"] == "replan" else ev.StalledEvent
            await self.emit(stall(signal=str(stall_row["signal"]), detail=str(stall_row["detail"])))
        if ending is not None:
            return await self.finished(ending, None)
        return None

    def restore(self, run: dict[str, Any], checkpoints: list[dict[str, Any]]) -> None:
        """Take up a stored run from its step checkpoints (in step order): conversation,
        tokens, counters and time already used (the time the process was down included).

        Args:
            run: The run's row (``Store.get_run``).
            checkpoints: The run's checkpoints (``Store.checkpoints``); empty when it
                stopped before its first step was committed.
        """
        self.elapsed_before = max(0.0, self.clock.time() - float(run["started_at"]))
        self.started = self.clock.monotonic()
        self.state = RunState.from_checkpoints(self.contract, checkpoints)

    async def resume_from(self, pending: PendingStep | None) -> RunResult:
        """Drive a run taken up with :meth:`restore` (the lease held) to its end.

        ``pending`` is the step after the last checkpoint when a previous process
        had begun it (``StoreWriter.pending_step``): it is finished first, without asking
        the model again.
        """
        await self._announce(resumed=True)
        return await self.drive(pending)

    async def finish(self, outcome: RunOutcome, error: HarnessError | None = None) -> RunResult:
        await self.recorder.finish(outcome, error)
        return await self.finished(outcome, error)

    def record_cancelled(self) -> None:
        """Record the run ``cancelled`` now (its task is being torn down), a pending
        approval as not answered; a store busy or full leaves it to its lease's expiry."""
        self.recorder.record_cancelled(self.asking.unanswered())

    async def store_gave_out(self, exc: StoreError) -> RunResult:
        """End the run whose store stayed busy or full for the rest of its time.

        The outcome is ``time_budget`` (the run's time ran out waiting) or, for a run
        without a budget, ``escalated_retryable`` (a resume goes on once the store can
        be written); the error is the ``StoreError``. It is recorded, with the lease
        released, if one last try gets through; otherwise the result alone reports it
        and the lease, no longer renewed, expires within ``LEASE_TTL_S``.
        """
        outcome = await self.recorder.gave_out(exc, self.contract._budget_s)
        return await self.finished(outcome, exc)

    async def finished(self, outcome: RunOutcome, error: HarnessError | None) -> RunResult:
        """The result and the ``finished`` event of a run whose end is committed."""
        result = self.result(outcome, error)
        await self.emit(
            ev.FinishedEvent(
                outcome=outcome.value,
                steps=self.state.step,
                tokens=self.state.tokens,
                cost_usd=self.state.calls.cost_usd,
                verified=self.state.checks.verified,
                error=error.to_dict() if error else None,
            )
        )
        return result

    def result(self, outcome: RunOutcome, error: HarnessError | None) -> RunResult:
        state, calls = self.state, self.state.calls
        return RunResult(
            run_id=self.run_id,
            outcome=outcome,
            steps=state.step,
            tokens=state.tokens,
            cost_usd=calls.cost_usd,
            verified=state.checks.verified,
            error=error,
            elapsed_s=self.elapsed(),
            text=state.text,
            providers=tuple(calls.providers),
            attempts=calls.attempts,
            retries=calls.retries,
            fallbacks=calls.fallbacks,
            replans=state.checks.detector.replans,
            task=self.contract.task,
            verify_detail=state.checks.verify_detail,
            commands=containment(),
            step_summaries=tuple(state.summaries),
            **self.model_calls.typed_result(),
        )

    async def drive(self, pending: PendingStep | None = None, *, fresh: bool = False) -> RunResult:
        """Start the run (``fresh``: its row written by ``begin``; else unless a resume
        holds its lease already) and take steps until an outcome; a cancellation is
        recorded as ``cancelled`` and re-raised."""
        renewer: asyncio.Task[None] | None = None
        awake = awake_on_main_thread()
        try:
            ended = await self.start() if fresh or self.recorder.lease is None else None
            renewer = asyncio.create_task(self.recorder.keep_leases())
            if ended is None and self.servers is not None:
                ended = await self._open_servers(self.servers)
            if ended is None and pending is not None:
                ended = (await self.take_step(self.state, pending)).ended
            while ended is None:
                if out_of_time(self.remaining()):
                    ended = await self.finish(RunOutcome.TIME_BUDGET)
                    break
                ended = (await self.take_step(self.state)).ended
            return ended
        except StoreError as exc:
            if not exc.retryable:
                raise
            return await self.store_gave_out(exc)  # busy or full past the run's time
        except asyncio.CancelledError:
            self.record_cancelled()
            raise
        finally:
            if renewer is not None:
                renewer.cancel()
            if self.servers is not None:
                await self.servers.aclose()  # no server outlives its run, whatever its end
            if awake is not None:
                awake()
            # Its end is committed (or recorded cancelled): its spans, from its rows.
            await export_when_ended(self.store, self.run_id, self.tracing)

    async def _open_servers(self, servers: RunServers) -> RunResult | None:
        """Open the run's MCP servers; a server that cannot start ends the run with
        its ``MCPError`` (``escalated_retryable`` when a retry may help)."""
        error = await servers.open(
            self.executor,
            self.recorder,
            self.emit,
            stored=self.mcp_stored,
            changed=self.mcp_changed,
        )
        if error is None:
            return None
        outcome = (
            RunOutcome.ESCALATED_RETRYABLE if error.retryable else RunOutcome.ESCALATED_TERMINAL
        )
        return await self.finish(outcome, error)


async def run(
    contract: TaskContract,
    provider: Provider,
    *,
    store: Store | str | os.PathLike[str] | None = None,
    policy: Policy | None = None,
    approver: Approver | None = None,
    tools: Sequence[Tool] = (),
    on_event: Callback | None = None,
    clock: Clock | None = None,
    run_id: str | None = None,
    prices: Prices | None = None,
    sweep_id: str | None = None,
    mcp: Sequence[MCPServer] = (),
    tracer_provider: TracerProviderLike = None,
    include_content: bool = False,
) -> RunResult:
    """Run an agent on ``contract`` with ``provider`` until an outcome is reached.

    Args:
        contract: The task, workspace, verification and budgets.
        provider: Any provider (``hn.OpenAI``, ``hn.Fallback(...)``, ``hn.ScriptedProvider``).
        store: Where the run is recorded: a ``Store`` or a path; None means the
            default file store (``$HARNESSNB_STORE`` or ./runs.duckdb).
        policy: None means ``Policy.default()``; provider hosts are allowed by an
            implicit layer beneath it.
        approver: Decides ``ask`` verdicts. None: the notebook widget when a frontend
            registered one, otherwise a refusal that says how to allow the act.
        tools: Extra tools (``@hn.tool``) besides the built-in workspace tools.
        on_event: Sync or async callback receiving ``RunEvent``s.
        clock: Time source (tests pass ``FakeClock``).
        run_id: Use this id instead of a fresh one.
        prices: How attempts are priced into ``cost_usd`` (``hn.Prices``); None means
            genai-prices' catalogue with local servers free.
        sweep_id: Tag the run as one of this sweep's (``hn.sweep`` passes it).
        mcp: MCP tool servers (``hn.MCPServer``) whose tools the model may call too:
            opened once the run is recorded, closed when it ends; one that cannot
            start ends the run with its ``MCPError``.
        tracer_provider: An OpenTelemetry ``TracerProvider`` (or a callable building
            one) its spans go to, from its rows, when it ends; None: the process default.
        include_content: Put the messages and tool arguments (scrubbed) in the spans.

    Returns:
        The ``RunResult``; failures are in ``result.error`` and ``result.outcome``.
    """
    from ..rules._policy import Policy

    if not os.path.isdir(contract.workspace):
        raise ConfigError(f"the workspace {str(contract.workspace)!r} is not a folder that exists")
    TypedAnswers.of(contract, provider)  # a mode the provider cannot answer in: refused now
    clock, run_id = clock or SystemClock(), run_id or new_id("run")
    policy = policy if policy is not None else Policy.default()
    mcp = given_servers(mcp, "run")
    traced = tracing(tracer_provider, include_content)

    def build(opened: Store) -> Driver:
        return Driver(
            contract,
            provider,
            store=opened,
            policy=policy,
            approver=approver,
            tools=tools,
            on_event=on_event,
            clock=clock,
            run_id=run_id,
            prices=prices,
            sweep_id=sweep_id,
            mcp=mcp,
        )

    driver = await uncut(begin_run(store, contract, run_id, clock, build), store)
    if isinstance(driver, RunResult):
        return driver
    driver.tracing = traced
    return await _driven(driver, store)


async def _driven(driver: Driver, given: Store | str | os.PathLike[str] | None) -> RunResult:
    """Drive a new run to its end; a bug is kept on record and raised typed."""
    try:
        return await driver.drive(fresh=True)
    except (asyncio.CancelledError, HarnessError):
        raise
    except Exception as exc:  # a bug: keep the run on record, surface it typed
        err = wrap_unknown(exc)
        try:
            driver.recorder.record_now(RunOutcome.ESCALATED_TERMINAL, err.to_dict())
        finally:
            raise err from exc
    finally:
        await close_opened(driver.store, given)  # opened from a path or the default: closed
        _untie(driver)


def _untie(driver: Driver) -> None:
    """Free an ended run's parts by reference counting: the bound methods the driver and
    its recorder hand their collaborators tie them in cycles only the cyclic GC frees, late."""
    vars(driver.recorder).clear()
    vars(driver).clear()


_approver_factory: Any = None


def set_default_approver_factory(factory: Any) -> None:
    """The notebook layer registers the widget approver here when a frontend is present."""
    global _approver_factory
    _approver_factory = factory


def _default_approver() -> Approver | None:
    return _approver_factory() if _approver_factory is not None else None


run_sync = sync_twin(
    run,
    """``run`` for blocking callers: safe in a plain script and inside a Jupyter kernel.

    The run happens on harnessnb's own loop thread; Ctrl-C (or the notebook's
    interrupt) cancels it cleanly, recording ``cancelled``.""",
)
