"""The run loop: observe -> reason -> act -> check -> stop, one committed step at a time.

This is the one module that ties providers, tools, policy and the store together.
Per step: check budgets, call the provider (retrying on the harness's terms),
run each tool call through the executor (policy, approval, per-effect retry, a
write-ahead intent for effectful tools), run the stall detector and the
verification, then commit the whole step in ONE store transaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..providers._completion import AttemptRecord, Completion, Provider, collect_attempts
from ..rules._errors import (
    ConfigError,
    HarnessError,
    ProviderError,
    ProviderErrorKind,
    RefusedError,
    ResumeError,
    wrap_unknown,
)
from ..rules._retry import Clock, SystemClock, retry_decision
from ..rules._stall import StallDetector, call_signature, replan_directive
from ..store._leases import LEASE_TTL_S, owner_alive, owner_identity
from ..store._open import default_store, open_store
from ._contract import RunOutcome, TaskContract
from ._events import Callback, EventSink, RunEvent
from ._result import RunResult
from ._verify import VerifyOutcome, run_verification

if TYPE_CHECKING:
    from ..rules._policy import Policy
    from ..store._leases import Lease
    from ..store._store import Store
    from ..tools._approval import Approver
    from ..tools._tool import Tool, ToolExecutor

__all__ = ["default_store", "run", "run_sync"]

_SYSTEM_PROMPT = (
    "You are an agent working inside a workspace folder, through tools. Paths are "
    "relative to the workspace root. Read before you change things; make the smallest "
    "change that does the task. When the task is done, reply with a short summary and "
    "no tool call."
)

_ELIDED = "[older tool output removed to fit the model's context window]"


COMMAND_TIMEOUT_S = 30.0  # run_command's default timeout, cut to the run's remaining time


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def idempotency_key(run_id: str, step: int, seq: int) -> str:
    """The key of one tool call: drawn from its place in the run, so a resumed or
    replayed run reuses it exactly."""
    digest = hashlib.sha256(f"{run_id}:{step}:{seq}".encode()).hexdigest()
    return f"idem_{digest[:24]}"


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
)


@dataclasses.dataclass
class PendingStep:
    """A step begun by an earlier process: its answer, attempts and settled tool rows."""

    completion: Completion
    attempts: list[dict[str, Any]]
    settled: dict[int, dict[str, Any]]


@dataclasses.dataclass
class _Failure:
    outcome: RunOutcome
    error: HarnessError


class _Driver:
    """Drives one run. Holds the state a checkpoint captures."""

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
    ) -> None:
        from ..tools._tool import ToolExecutor, builtin_tools
        from ..tools._workspace import Workspace

        self.contract = contract
        self.provider = provider
        self.store = store
        self.policy = policy.with_provider_hosts(provider.hosts())
        self.approver = approver
        self.clock = clock
        self.run_id = run_id
        self.events = EventSink(on_event)
        self.workspace = Workspace(contract.workspace)
        self.executor: ToolExecutor = ToolExecutor(
            self.workspace,
            policy=self.policy,
            approver=approver,
            tools=[*builtin_tools(), *tools],
            run_id=run_id,
            on_event=self._tool_event,
        )
        self.detector = StallDetector(contract.stall)
        self.messages: list[dict[str, Any]] = []
        self.tokens = 0
        self.step = 0
        self.started = clock.monotonic()
        self.elapsed_before = 0.0  # time spent before this process took the run (resume)
        self.attempt_count = 0
        self.retries = 0
        self.fallbacks = 0
        self.providers: list[str] = []
        self.verify_feedback_given = False
        self.verified: bool | None = None
        self.verify_detail: str | None = None
        self.text = ""
        self.lease: Lease | None = None
        self.committed_messages: int | None = None  # messages covered by checkpoints
        self.base_policy = policy  # what the caller gave, stored with the run for resume

    # ------------------------------------------------------------------ helpers

    def elapsed(self) -> float:
        return self.elapsed_before + (self.clock.monotonic() - self.started)

    def remaining(self) -> float | None:
        budget = self.contract.budget_seconds
        return None if budget is None else budget - self.elapsed()

    async def emit(self, kind: Any, /, **data: Any) -> None:
        await self.events.emit(RunEvent(kind, self.run_id, self.step, self.clock.time(), data))

    async def _tool_event(self, kind: str, data: dict[str, Any]) -> None:
        await self.emit(kind, **data)

    # ------------------------------------------------------------------ lease

    async def take_lease(self) -> None:
        """One driver per run: another live process holding the run -> ConflictError."""
        self.lease = await self.store.queued.acquire_lease(
            self.run_id,
            owner_identity(),
            ttl_s=LEASE_TTL_S,
            owner_alive=owner_alive,
        )

    async def keep_lease(self) -> None:
        """Renew the lease while the run is driven (a provider call may take minutes)."""
        while self.lease is not None:
            await asyncio.sleep(LEASE_TTL_S / 3)
            if self.lease is None:
                return
            try:
                self.lease = await self.store.queued.renew_lease(self.lease, ttl_s=LEASE_TTL_S)
            except HarnessError:
                return  # taken over: the next commit is refused with ConflictError

    async def release(self) -> None:
        lease, self.lease = self.lease, None
        if lease is not None:
            await self.store.queued.release_lease(lease)

    # ------------------------------------------------------------------ start

    def initial_messages(self) -> list[dict[str, Any]]:
        system = self.contract.system_prompt or _SYSTEM_PROMPT
        if self.contract.verification is not None:
            system += f"\nThe task is checked by: {self.contract.verification.describe()}."
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": self.contract.task},
        ]

    async def start(self) -> RunResult | None:
        self.messages = self.initial_messages()
        # The run row and its lease in one commit: a run is never recorded undriven.
        self.lease = await self.store.queued.start_run(
            {
                "run_id": self.run_id,
                "task": self.contract.task,
                "workspace": os.path.abspath(self.contract.workspace),
                "provider": self.provider.name,
                "model": self.provider.model,
                "started_at": self.clock.time(),
                "contract": self.contract.to_dict(),
                "policy": self.base_policy.to_dict(),
            },
            owner_identity(),
            ttl_s=LEASE_TTL_S,
            owner_alive=owner_alive,
        )
        await self.emit(
            "started",
            task=self.contract.task,
            provider=self.provider.name,
            model=self.provider.model,
            max_steps=self.contract.max_steps,
        )
        refusal = await self._check_egress()
        if refusal is not None:
            return await self.finish(RunOutcome.DENIED, refusal)
        return None

    async def _check_egress(self) -> RefusedError | None:
        """Every provider host must be allowed before the first request."""
        for host in self.provider.hosts():
            verdict = self.policy.explain("net", host)
            if verdict.effect != "allow":
                return RefusedError(
                    f"network access to {host} is {verdict.effect} under the policy "
                    f"(rule {verdict.rule!r}, layer {verdict.layer!r}); the run made no request",
                    act="net",
                    target=host,
                    rule=verdict.rule,
                    layer=verdict.layer,
                )
        return None

    # ------------------------------------------------------------------ provider call

    def _attempt_row(
        self, rec: AttemptRecord, call_start: float, first_real: float
    ) -> dict[str, Any]:
        self.attempt_count += 1
        # Map the provider's wall-clock start onto the run's clock, so an injected
        # clock orders attempts the way the retry waits did.
        started_at = call_start + max(0.0, rec.started_at - first_real)
        return {
            "step": self.step,
            "attempt": self.attempt_count,
            "provider": rec.provider,
            "model": rec.model,
            "kind": rec.kind,
            "status": rec.status,
            "retry_after_s": rec.retry_after_s,
            "latency_ms": rec.latency_ms,
            "ttft_ms": rec.ttft_ms,
            "input_tokens": rec.input_tokens,
            "output_tokens": rec.output_tokens,
            "request_id": rec.request_id,
            "fell_back": rec.fell_back,
            "error": rec.error,
            "started_at": started_at,
        }

    async def _call_once(
        self, messages: list[dict[str, Any]], rows: list[dict[str, Any]]
    ) -> Completion | HarnessError:
        remaining = self.remaining()
        call_start = self.clock.time()
        real_start = time.time()
        result: Completion | HarnessError
        with collect_attempts() as records:
            try:
                coro = self.provider.complete(messages, tools=self.executor.specs())
                result = await asyncio.wait_for(coro, timeout=remaining)
            except TimeoutError:
                result = ProviderError(
                    "the run's time budget ran out while waiting for the provider",
                    kind=ProviderErrorKind.TIMEOUT,
                    provider=self.provider.name,
                    model=self.provider.model,
                    code="RUN_TIME_BUDGET",
                )
            except ProviderError as exc:
                result = exc
            except HarnessError as exc:
                result = exc
            except Exception as exc:  # a custom provider's bug: typed, with its cause
                result = wrap_unknown(exc, f"the provider raised {type(exc).__name__}: {exc}")
        if not records:  # a provider that reports nothing still gets its attempt row
            records.append(_synthetic_record(self.provider, result, real_start))
        # The first attempt of a call starts when the call does (on the run's clock);
        # later ones (fallback legs) keep their real offsets from the first.
        first = records[0].started_at
        for rec in records:
            rows.append(self._attempt_row(rec, call_start, first))
            if rec.fell_back:
                self.fallbacks += 1
                await self.emit(
                    "fell_back",
                    from_provider=rec.provider,
                    model=rec.model,
                    kind=rec.kind,
                    status=rec.status,
                )
        return result

    async def call_provider(self, rows: list[dict[str, Any]]) -> Completion | _Failure:
        """One model turn with the loop's retries, deadline, and one context shrink."""
        retries_done = 0
        shrunk = False
        messages = self.messages
        while True:
            result = await self._call_once(messages, rows)
            if isinstance(result, Completion):
                if result.provider and result.provider not in self.providers:
                    self.providers.append(result.provider)
                if shrunk:
                    self.messages = messages
                    self.committed_messages = None  # the next checkpoint is a full copy
                return result
            err = result
            if getattr(err, "code", "") == "RUN_TIME_BUDGET":
                return _Failure(RunOutcome.TIME_BUDGET, err)
            if not isinstance(err, ProviderError):
                return _Failure(RunOutcome.ESCALATED_TERMINAL, err)
            if err.kind is ProviderErrorKind.CONTEXT_OVERFLOW and not shrunk:
                smaller = shrink_messages(messages)
                if smaller is not None:
                    shrunk = True
                    messages = smaller
                    await self.emit(
                        "shrunk",
                        before=len(json.dumps(self.messages)),
                        after=len(json.dumps(messages)),
                    )
                    continue
            decision = retry_decision(
                err,
                retries_done=retries_done,
                max_retries=self.contract.max_retries,
                policy=self.contract.retry,
                elapsed=self.elapsed(),
                max_seconds=self.contract.budget_seconds,
            )
            if decision.action == "stop":
                outcome = (
                    RunOutcome.ESCALATED_RETRYABLE
                    if err.retryable
                    else RunOutcome.ESCALATED_TERMINAL
                )
                return _Failure(outcome, err)
            retries_done += 1
            self.retries += 1
            await self.emit(
                "retry",
                kind=err.kind.value,
                status=err.status,
                attempt=retries_done + 1,
                max_attempts=self.contract.max_retries + 1,
                delay=decision.delay,
                retry_after=err.retry_after,
                provider=err.provider,
            )
            await self.clock.sleep(decision.delay)

    # ------------------------------------------------------------------ one step

    async def run_tools(
        self,
        completion: Completion,
        attempt_rows: list[dict[str, Any]],
        tool_rows: list[dict[str, Any]],
        settled: dict[int, dict[str, Any]] | None = None,
    ) -> tuple[bool, bool, HarnessError | None]:
        """Run the step's tool calls in order.

        ``settled`` holds the tool rows a previous process left for this step (on
        resume): a finished call's output is reused, a READ or IDEMPOTENT intent is
        run again with its recorded key, a WRITE intent is NOT run: the step stops for
        reconciliation. Returns (changed_workspace, deferred, reconciliation error).
        """
        changed = False
        deferred = False
        pending_saved = False
        for seq, call in enumerate(completion.tool_calls, start=1):
            if deferred:
                self.messages.append(_tool_message(call, "not run: the run paused for approval"))
                continue
            tool = self.executor.get(call.name)
            effect = tool.effect.value if tool is not None else "read"
            key = idempotency_key(self.run_id, self.step, seq)
            earlier = (settled or {}).get(seq)
            if earlier is not None:
                reused = self._reuse_settled(call, earlier, tool_rows)
                if reused is not None:
                    changed = changed or bool(earlier.get("changed_workspace"))
                    continue
                if effect == "write":
                    return changed, deferred, await self._needs_reconciliation(earlier)
                key = earlier.get("idempotency_key") or key
            row = {
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
                "at": self.clock.time(),
            }

            async def before_run(row: dict[str, Any] = row) -> None:
                # Write-ahead: an effectful call's intent is durable before it runs,
                # with the step's answer the first time, so a resume can finish the
                # step without asking the model again.
                nonlocal pending_saved
                if row["effect"] == "read":
                    return
                pending = None
                if not pending_saved:
                    pending = {"completion": completion.to_dict(), "attempts": attempt_rows}
                    pending_saved = True
                await self.store.queued.record_intent(
                    self.run_id, dict(row), lease=self.lease, pending=pending
                )

            # A command may not outlive the run's time budget either.
            remaining = self.remaining()
            self.executor.command_timeout_s = (
                COMMAND_TIMEOUT_S
                if remaining is None
                else max(0.1, min(COMMAND_TIMEOUT_S, remaining))
            )
            result = await self.executor.execute(call, idempotency_key=key, before_run=before_run)
            changed = changed or result.changed_workspace
            content = result.to_message_content()
            self.messages.append(_tool_message(call, content))
            error = result.error or {}
            row.update(
                status=result.status,
                error_name=error.get("name"),
                error_code=error.get("code"),
                output_bytes=len(result.output.encode("utf-8", "replace")),
                output=content,
                at=self.clock.time(),
            )
            if effect != "read" and result.executions > 0:
                # The call's completion is durable at once: a crash later in the step
                # must not make a finished write look like one that may not have run.
                await self.store.queued.settle_tool_call(
                    self.run_id,
                    self.step,
                    seq,
                    status=result.status,
                    output=content,
                )
            tool_rows.append(row)
            if result.status == "deferred":
                deferred = True
        return changed, deferred, None

    def _reuse_settled(
        self, call: Any, earlier: dict[str, Any], tool_rows: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """Use a settled row from before a crash (or a person's resolve/abandon)."""
        status = earlier.get("status")
        if status in ("intent", "needs_reconciliation"):
            return None
        if status == "abandoned":
            content = (
                "ERROR [ABANDONED] this call may or may not have taken effect; the operator "
                f"abandoned it: {earlier.get('output') or 'no reason given'}. Check before "
                "repeating it."
            )
        else:
            content = str(earlier.get("output") or "")
        self.messages.append(_tool_message(call, content))
        row = {k: earlier.get(k) for k in _TOOL_ROW_KEYS}
        row.update(output=content, at=self.clock.time())
        tool_rows.append(row)
        return row

    async def _needs_reconciliation(self, earlier: dict[str, Any]) -> HarnessError:
        await self.store.queued.settle_tool_call(
            self.run_id,
            self.step,
            int(earlier["seq"]),
            status="needs_reconciliation",
        )
        args = json.dumps(earlier.get("args"), ensure_ascii=False)
        return ResumeError(
            f"{earlier.get('tool')}({args}) at step {self.step} may or may not have run before "
            "the process stopped, and a write is never repeated on a guess. Check the "
            f"workspace, then hn.resolve({self.run_id!r}, output=...) if it landed or "
            f"hn.abandon({self.run_id!r}, reason) if not, and resume.",
            reason="needs_reconciliation",
        )

    async def verify(self) -> VerifyOutcome | None:
        if self.contract.verification is None:
            return None
        outcome = await run_verification(
            self.contract.verification,
            self.workspace,
            policy=self.policy,
            approver=self.approver,
        )
        self.verified = outcome.passed if outcome.ran else None
        self.verify_detail = outcome.detail
        return outcome

    async def take_step(self, pending: PendingStep | None = None) -> RunResult | None:
        """One step. Returns a result when the run ends, else None.

        ``pending`` is a step a previous process began (its answer was durable with
        its first intent): it is finished without asking the model again.
        """
        self.step += 1
        if pending is None:
            attempt_rows: list[dict[str, Any]] = []
            called = await self.call_provider(attempt_rows)
            if isinstance(called, _Failure):
                self.step -= 1  # no step was committed
                return await self.finish(called.outcome, called.error, attempts=attempt_rows)
            completion = called
        else:
            completion, attempt_rows = pending.completion, pending.attempts
        messages_before = len(self.messages)
        step_tokens = completion.usage.total_tokens
        self.tokens += step_tokens
        self.text = completion.text or self.text
        self.messages.append(completion.to_message())

        tool_rows: list[dict[str, Any]] = []
        changed, deferred, unreconciled = await self.run_tools(
            completion, attempt_rows, tool_rows, pending.settled if pending else None
        )
        if unreconciled is not None:
            # The step stays uncommitted; the next resume picks it up again.
            del self.messages[messages_before:]
            self.tokens -= step_tokens
            self.step -= 1
            return await self.finish(RunOutcome.NEEDS_RECONCILIATION, unreconciled)

        stall_rows: list[dict[str, Any]] = []
        ending: tuple[RunOutcome, HarnessError | None] | None = None
        signal = self.detector.observe(
            self.step,
            [call_signature(c.name, c.arguments) for c in completion.tool_calls],
            changed,
        )
        if signal is not None:
            stall_rows.append(
                {
                    "step": self.step,
                    "signal": signal.signal,
                    "action": signal.action,
                    "detail": signal.detail,
                    "at": self.clock.time(),
                }
            )
            if signal.action == "replan":
                self.messages.append({"role": "user", "content": replan_directive(signal)})
            else:
                ending = (RunOutcome.STALLED, None)

        check = None
        if self.contract.verification is not None and (changed or not completion.tool_calls):
            check = await self.verify()

        if deferred:
            ending = (RunOutcome.AWAITING_APPROVAL, None)
        elif check is not None and check.passed:
            ending = (RunOutcome.SUCCESS, None)
        elif ending is None and not completion.tool_calls:
            if check is not None and not self.verify_feedback_given:
                # One nudge: the model stopped but the check says the task is not done.
                self.verify_feedback_given = True
                self.messages.append({"role": "user", "content": _verify_feedback(check)})
            else:
                ending = (RunOutcome.FINISHED, None)
        max_tokens = self.contract.max_tokens
        if ending is None and max_tokens is not None and self.tokens >= max_tokens:
            ending = (RunOutcome.TOKEN_BUDGET, None)
        if ending is None and self.step >= self.contract.max_steps:
            ending = (RunOutcome.STEP_CAP, None)

        final = None
        if ending is not None:
            # The last step and the run's end (lease released) are one commit.
            final = {
                "outcome": ending[0].value,
                "finished_at": self.clock.time(),
                "error": ending[1].to_dict() if ending[1] is not None else None,
            }
        await self.store.queued.commit_step(
            self.run_id,
            {
                "step": self.step,
                "decision": "tool_calls" if completion.tool_calls else "answer",
                "tool_calls": len(completion.tool_calls),
                "tokens": step_tokens,
                "changed_workspace": changed,
                "provider": completion.provider or self.provider.name,
                "at": self.clock.time(),
            },
            attempts=attempt_rows,
            tool_calls=tool_rows,
            stalls=stall_rows,
            checkpoint=self.checkpoint(),
            lease=self.lease,
            finish=final,
        )
        if final is not None:
            self.lease = None
        await self.emit(
            "step",
            tokens=self.tokens,
            tool_calls=len(completion.tool_calls),
            changed_workspace=changed,
            provider=completion.provider,
        )
        if signal is not None:
            await self.emit(signal.action, signal=signal.signal, detail=signal.detail)
        if ending is not None:
            return await self.finished(ending[0], ending[1])
        return None

    def checkpoint(self) -> dict[str, Any]:
        """The state a resume needs. The conversation is stored as the messages this
        step added (a delta), so a long run's commits stay small; a full copy is
        stored when earlier messages were rewritten (a context shrink)."""
        base = self.committed_messages
        if base is None or base > len(self.messages):
            conversation: dict[str, Any] = {"messages": list(self.messages)}
        else:
            conversation = {"messages_from": base, "messages_delta": self.messages[base:]}
        self.committed_messages = len(self.messages)
        return {
            **conversation,
            "tokens": self.tokens,
            "elapsed_s": self.elapsed(),
            "stall": self.detector.state(),
            "verify_feedback_given": self.verify_feedback_given,
            "verified": self.verified,
            "providers": self.providers,
            "counts": {
                "attempts": self.attempt_count,
                "retries": self.retries,
                "fallbacks": self.fallbacks,
            },
            "text": self.text,
        }

    def restore(self, run: dict[str, Any], checkpoints: list[dict[str, Any]]) -> None:
        """Take up a stored run from its step checkpoints (in step order): conversation,
        tokens, counters and time already used (the time the process was down included)."""
        self.elapsed_before = max(0.0, self.clock.time() - float(run["started_at"]))
        self.started = self.clock.monotonic()
        if not checkpoints:  # stopped before its first step was committed
            self.messages = self.initial_messages()
            return
        self.messages = replay_conversation([c["state"] for c in checkpoints])
        self.committed_messages = len(self.messages)
        state = checkpoints[-1]["state"]
        self.step = int(checkpoints[-1]["step"])
        self.tokens = int(state.get("tokens", 0))
        self.detector = StallDetector.from_state(self.contract.stall, state.get("stall", {}))
        self.verify_feedback_given = bool(state.get("verify_feedback_given"))
        self.verified = state.get("verified")
        self.providers = list(state.get("providers", []))
        counts = state.get("counts", {})
        self.attempt_count = int(counts.get("attempts", 0))
        self.retries = int(counts.get("retries", 0))
        self.fallbacks = int(counts.get("fallbacks", 0))
        self.text = str(state.get("text", ""))

    # ------------------------------------------------------------------ end

    async def finish(
        self,
        outcome: RunOutcome,
        error: HarnessError | None = None,
        *,
        attempts: list[dict[str, Any]] | None = None,
    ) -> RunResult:
        await self.store.queued.finish_run(
            self.run_id,
            outcome=outcome.value,
            finished_at=self.clock.time(),
            error=error.to_dict() if error is not None else None,
            attempts=attempts or [],
            lease=self.lease,
            release=True,  # the lease is given up in the same commit
        )
        self.lease = None
        return await self.finished(outcome, error)

    async def finished(self, outcome: RunOutcome, error: HarnessError | None) -> RunResult:
        """The result and the ``finished`` event of a run whose end is committed."""
        result = self.result(outcome, error)
        await self.emit(
            "finished",
            outcome=outcome.value,
            steps=self.step,
            tokens=self.tokens,
            verified=self.verified,
            error=error.to_dict() if error else None,
        )
        return result

    def result(self, outcome: RunOutcome, error: HarnessError | None) -> RunResult:
        return RunResult(
            run_id=self.run_id,
            outcome=outcome,
            steps=self.step,
            tokens=self.tokens,
            verified=self.verified,
            error=error,
            elapsed=self.elapsed(),
            text=self.text,
            providers=tuple(self.providers),
            attempts=self.attempt_count,
            retries=self.retries,
            fallbacks=self.fallbacks,
            replans=self.detector.replans,
            task=self.contract.task,
            verify_detail=self.verify_detail,
        )

    async def drive(self, pending: PendingStep | None = None) -> RunResult:
        renewer: asyncio.Task[None] | None = None
        try:
            ended = await self.start() if self.lease is None else None
            renewer = asyncio.create_task(self.keep_lease())
            if ended is None and pending is not None:
                ended = await self.take_step(pending)
            while ended is None:
                if (rem := self.remaining()) is not None and rem <= 0:
                    ended = await self.finish(RunOutcome.TIME_BUDGET)
                    break
                ended = await self.take_step()
            return ended
        except asyncio.CancelledError:
            # Record the cancellation synchronously: the task is being torn down.
            self.store.finish_run(
                self.run_id,
                outcome=RunOutcome.CANCELLED.value,
                finished_at=self.clock.time(),
                lease=self.lease,
                release=True,
            )
            self.lease = None
            raise
        finally:
            if renewer is not None:
                renewer.cancel()


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


def _tool_message(call: Any, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}


def _verify_feedback(check: VerifyOutcome) -> str:
    return (
        f"The task is not done yet: the check failed ({check.detail}). "
        "Keep working with the tools until it passes, then answer."
    )


def _synthetic_record(
    provider: Provider, result: Completion | HarnessError, started: float
) -> AttemptRecord:
    """The attempt row of a provider that reported none itself (a custom provider)."""
    latency = (time.time() - started) * 1000
    if isinstance(result, Completion):
        filled = dataclasses.replace(
            result, provider=result.provider or provider.name, model=result.model or provider.model
        )
        return AttemptRecord.succeeded(filled, started_at=started, latency_ms=latency)
    if not isinstance(result, ProviderError):
        result = ProviderError(result.message, kind=ProviderErrorKind.TRANSPORT)
    return AttemptRecord.failed(
        result,
        provider=result.provider or provider.name,
        model=provider.model,
        started_at=started,
        latency_ms=latency,
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
        if i < cutoff and msg.get("role") == "tool" and msg.get("content") != _ELIDED:
            out.append({**msg, "content": _ELIDED})
            dropped = True
        else:
            out.append(msg)
    return out if dropped else None


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

    Returns:
        The ``RunResult``; failures are in ``result.error`` and ``result.outcome``.
    """
    from ..rules._policy import Policy

    if not os.path.isdir(contract.workspace):
        raise ConfigError(f"the workspace {str(contract.workspace)!r} is not a folder that exists")
    driver = _Driver(
        contract,
        provider,
        store=open_store(store),
        policy=policy if policy is not None else Policy.default(),
        approver=approver if approver is not None else _default_approver(),
        tools=tools,
        on_event=on_event,
        clock=clock or SystemClock(),
        run_id=run_id or new_id("run"),
    )
    try:
        return await driver.drive()
    except (asyncio.CancelledError, HarnessError):
        raise
    except Exception as exc:  # a bug: keep the run on record, surface it typed
        err = wrap_unknown(exc)
        try:
            driver.store.finish_run(
                driver.run_id,
                outcome=RunOutcome.ESCALATED_TERMINAL.value,
                finished_at=driver.clock.time(),
                error=err.to_dict(),
            )
        finally:
            raise err from exc


_approver_factory: Any = None


def set_default_approver_factory(factory: Any) -> None:
    """The notebook layer registers the widget approver here when a frontend is present."""
    global _approver_factory
    _approver_factory = factory


def _default_approver() -> Approver | None:
    return _approver_factory() if _approver_factory is not None else None


def run_sync(contract: TaskContract, provider: Provider, **kwargs: Any) -> RunResult:
    """``run`` for blocking callers: safe in a plain script and inside a Jupyter kernel.

    The run happens on harnessnb's own loop thread; Ctrl-C (or the notebook's
    interrupt) cancels it cleanly, recording ``cancelled``.
    """
    from ._bridge import run_blocking

    return run_blocking(run(contract, provider, **kwargs))
