"""One model turn per step: the loop's retries, the run's deadline, one context shrink.

``ModelCalls`` calls the provider for the driver, turns every HTTP attempt (fallback
legs and failures included) into an attempt row, and counts what a ``RunResult``
reports: attempts, retries, fallbacks and the leaf providers that answered. Whether
a failure ends the run is :func:`._outcome.provider_failure_outcome`'s call; how
long to wait before a retry is ``rules._retry.retry_decision``'s. Each attempt is
priced as its row is built (``providers._prices``), and the run's spend kept for the
cost budget.

An attempt's row is written when its call ends (``AttemptRows``): queued for the
store's writer at once, committed before a retry's wait, never part of the step's
commit. So the failed attempts before a cancel, a crash or a kill are in the store,
and no row is written twice. The attempt a cancel cuts off in flight is a row too,
``cancelled`` (the server may have billed it), counted in no failure rate; one the
run's time budget cuts off is a ``timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..providers._base import Call, ask
from ..providers._completion import AttemptRecord, Completion, Provider, attempts_of, shown_url
from ..providers._prices import Prices, default_prices, is_local
from ..rules._classify import OutputFailureKind
from ..rules._errors import HarnessError, ProviderError, ProviderErrorKind, StoreError, wrap_unknown
from ..rules._events import FellBackEvent, RetryEvent, ShrunkEvent
from ..rules._retry import Clock, retry_decision
from ..store._writer import store_writer
from ..store._writes import add_attempts
from ._contract import RunOutcome
from ._conversation import shrink_messages
from ._events import AnyEvent, Emit, TextDeltas
from ._outcome import over_cost, provider_failure_outcome
from ._output import answer_text
from ._typed import Judged, TypedAnswers

if TYPE_CHECKING:
    from ..store._row_types import AttemptRow
    from ..store._store import Store
    from ._contract import TaskContract
    from ._conversation import Conversation
    from ._state import CallCounts, RunState

__all__ = ["ATTEMPT_LINGER_S", "AttemptRows", "Failure", "ModelCalls", "provider_url"]

# A successful call's attempt rows are committed within this long of its end, or with
# its step when that commits first (the usual case: one commit per step, not two).
ATTEMPT_LINGER_S: Final = 0.05


@dataclasses.dataclass
class Failure:
    """A model turn that ends the run: the outcome and the error behind it."""

    outcome: RunOutcome
    error: HarnessError


class AttemptRows:
    """Writes a run's attempt rows the moment their call ends, through the store's
    group commit.

    A failed call's rows are awaited before the retry's wait (``write``). A successful
    call's are queued and not waited for (``send``): the step goes on while they
    commit; the writer's queue is first in, first out, so they land no later than the
    step's commit, after which ``settle`` surfaces a failed write. A
    cancel never loses a queued row nor writes it twice (``settle_now``): a write
    not yet begun is taken back and done at once in this thread; one begun is
    waited for. A write the store refused as busy or full (nothing of it committed) is
    tried again through ``patient`` (the driver's: while the run has time left).
    """

    __slots__ = ("_pending", "patient", "run_id", "store")

    def __init__(
        self,
        store: Store,
        run_id: str,
        patient: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.patient = patient
        self._pending: list[tuple[Future[None], list[AttemptRow]]] = []

    def send(self, rows: list[AttemptRow], *, linger_s: float = 0.0) -> None:
        """Queue ``rows`` for the writer thread; ``settle`` waits for them. With
        ``linger_s`` the writer may hold them that long for the step commit that
        follows, to share its transaction."""
        if rows:
            op = add_attempts(self.run_id, rows, linger_s=linger_s)
            self._pending.append((store_writer(self.store).submit(op), rows))

    async def write(self, rows: list[AttemptRow]) -> None:
        """Queue ``rows`` and wait until they (and any queued before) are committed."""
        self.send(rows)
        await self.settle()

    async def settle(self) -> None:
        """Wait for the queued rows; a failed write raises here."""
        while self._pending:
            future, _ = self._pending[0]
            try:
                await asyncio.shield(asyncio.wrap_future(future))
            except asyncio.CancelledError:
                self.settle_now()
                raise
            except StoreError as exc:
                _, rows = self._pending.pop(0)
                if not exc.retryable or self.patient is None:
                    raise
                await self.patient(self._rewrite(rows))
                continue
            except BaseException:
                self._pending.pop(0)
                raise
            self._pending.pop(0)

    def _rewrite(self, rows: list[AttemptRow]) -> Callable[[], Awaitable[None]]:
        return lambda: store_writer(self.store).queued.add_attempts(self.run_id, rows)

    def settle_now(self) -> None:
        """Make every queued row durable from this thread (a cancel: the loop is going
        away). The cancel goes on: the store's own error is not the news here."""
        pending, self._pending = self._pending, []
        for future, rows in pending:
            with contextlib.suppress(HarnessError):
                if future.cancel():  # never began: nothing written yet
                    store_writer(self.store).add_attempts(self.run_id, rows)
                else:
                    future.result()


class CallingRun(Protocol):
    """What model calls need of the run they are made for (the loop's ``Driver``)."""

    @property
    def attempt_rows(self) -> AttemptRows:
        """Where attempt rows go, as each call ends."""

    def elapsed(self) -> float:
        """Seconds the run has used."""

    def remaining(self) -> float | None:
        """Seconds the run has left (None: no time budget)."""

    async def emit(self, event: AnyEvent, /) -> None:
        """Send a run event (``retry``, ``fell_back``, ``shrunk``, ``delta``)."""

    def tool_specs(self) -> list[dict[str, Any]]:
        """The tools offered to the model."""

    @property
    def listening(self) -> bool:
        """Whether the run's events are taken (an ``on_event`` callback): streamed text
        becomes ``delta`` events only then."""

    @property
    def state(self) -> RunState:
        """The run's state: the calls count into its ``calls``."""


@dataclasses.dataclass(eq=False, repr=False)  # identity, not value: one per run
class ModelCalls:
    """Calls the model for each step and keeps the run's provider counters.

    Args:
        provider: The run's provider.
        contract: Its retry policy, retries and time budget apply.
        clock: The run's clock (sleeps between retries go through it).
        run: The run the calls are made for: its time used and left, its events
            (``delta`` with streamed text throttled by ``TextDeltas``), its attempt
            rows, the tools it offers (bound here as ``elapsed``, ``remaining``,
            ``emit``, ``rows``, ``tool_specs``).
        prices: How attempts are priced (the catalogue, local servers free).
        step_attempts: The attempt rows of the latest step called for (its summary's).

    What the calls came to (attempts, retries, fallbacks, providers, the spend) is
    counted in the run's state (``counts``: ``RunState.calls``), never here.
    """

    provider: Provider
    contract: TaskContract
    clock: Clock
    _: dataclasses.KW_ONLY
    run: CallingRun
    tool_specs: Callable[[], list[dict[str, Any]]] = dataclasses.field(init=False)
    elapsed: Callable[[], float] = dataclasses.field(init=False)
    remaining: Callable[[], float | None] = dataclasses.field(init=False)
    emit: Emit = dataclasses.field(init=False)
    rows: AttemptRows = dataclasses.field(init=False)
    prices: Prices = dataclasses.field(default_factory=default_prices)
    step_attempts: list[Mapping[str, Any]] = dataclasses.field(default_factory=list, init=False)
    typed: TypedAnswers | None = dataclasses.field(init=False)
    """The run's typed answer (``TaskContract(output=T)``; None: a text answer)."""
    _judged: Judged | None = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        run = self.run
        self.tool_specs, self.elapsed, self.remaining = run.tool_specs, run.elapsed, run.remaining
        self.emit, self.rows = run.emit, run.attempt_rows
        self.typed = TypedAnswers.of(self.contract, self.provider)

    def contract_dict(self) -> dict[str, Any]:
        """The contract as the run row keeps it: a typed run's mode as resolved (``auto``
        on this provider), so a resume or a replay asks the same way."""
        stored = self.contract.to_dict()
        if self.typed is not None:
            stored["output_mode"] = self.typed.mode
        return stored

    @property
    def counts(self) -> CallCounts:
        """The run's counters (its state's, restored with it on resume)."""
        return self.run.state.calls

    async def call(self, conversation: Conversation, step: int) -> Completion | Failure:
        """One model turn with the loop's retries, deadline, and one context shrink.

        Writes an attempt row per HTTP attempt as its call ends; a shrink that let the
        call through replaces the conversation's messages.
        """
        retries_done = 0
        shrunk = False
        messages = conversation.messages
        while True:
            result = await self._call_once(messages, step)
            if isinstance(result, Completion) and self._judged is not None:
                judged, self._judged = self._judged, None
                if judged.failure is not None:
                    asked = await self._ask_again(judged)
                    if isinstance(asked, Failure):
                        return asked
                    messages = [*messages, *asked]
                    continue
                if judged.value is not None and self.typed is not None:
                    self.typed.output = judged.value
                result = judged.completion
            if isinstance(result, Completion):
                if result.provider and result.provider not in self.counts.providers:
                    self.counts.providers.append(result.provider)
                if shrunk:
                    conversation.rewrite(messages)
                return result
            err = result
            if (ended := provider_failure_outcome(err, retries_exhausted=False)) is not None:
                return Failure(ended, err)
            if await self._fell_back(err):
                continue
            if over_cost(self.counts.cost_usd, self.contract.max_cost_usd):
                # Billed answers that could not be used count too: no retry past the budget.
                return Failure(RunOutcome.COST_BUDGET, err)
            assert isinstance(err, ProviderError)  # anything else ended the run above
            if err.kind is ProviderErrorKind.CONTEXT_OVERFLOW and not shrunk:
                smaller = shrink_messages(messages)
                if smaller is not None:
                    shrunk = True
                    messages = smaller
                    await self.emit(
                        ShrunkEvent(
                            before_chars=len(json.dumps(conversation.messages)),
                            after_chars=len(json.dumps(messages)),
                        )
                    )
                    continue
            if not await self._retry(err, retries_done):
                ended = provider_failure_outcome(err, retries_exhausted=True)
                assert ended is not None
                return Failure(ended, err)
            retries_done += 1

    def typed_result(self) -> dict[str, Any]:
        """A typed run's ``RunResult`` fields: ``output`` (the answer, None when none
        was usable) and ``output_mode`` (the mode it ended in)."""
        typed = self.typed
        if typed is None:
            return {}
        return {
            "output": None if typed.output is None else typed.output.value,
            "output_mode": typed.mode,
        }

    def typed_row(self) -> dict[str, str | None]:
        """What a typed run's end adds to its run row: the mode it ended in and its
        validated answer as JSON text (None when none was usable); empty for an
        untyped run (``RunRecorder.finished_typed``)."""
        typed = self.typed
        if typed is None:
            return {}
        output = None if typed.output is None else answer_text(typed.output.value)
        return {"output_mode": typed.mode, "output": output}

    async def _ask_again(self, judged: Judged) -> Failure | list[dict[str, Any]]:
        """After an unusable typed answer: the messages to add before asking again
        (the feedback), or the ``Failure`` that ends the run (``OutputError``,
        ``escalated_terminal``: a provider's non-retryable failure's outcome)."""
        typed, state = self.typed, self.run.state
        assert typed is not None and judged.failure is not None
        state.tokens += judged.completion.usage.total_tokens  # spent, if not used
        if not typed.again(judged, state.tokens, self.contract.max_total_tokens):
            return Failure(RunOutcome.ESCALATED_TERMINAL, typed.error(judged))
        if over_cost(self.counts.cost_usd, self.contract.max_cost_usd):
            return Failure(RunOutcome.COST_BUDGET, typed.error(judged))
        violation = judged.failure is OutputFailureKind.SCHEMA_VIOLATION
        self.counts.retries += 1
        await self.emit(
            RetryEvent(
                error_kind=judged.failure.value,
                status=None,
                attempt=(typed.violations if violation else typed.truncations) + 1,
                max_attempts=(typed.retries if violation else 1) + 1,
                delay_s=0.0,
                retry_after_s=None,
                provider=judged.completion.provider or self.provider.name,
            )
        )
        return [typed.feedback(judged)] if violation else []

    async def _fell_back(self, err: HarnessError) -> bool:
        """A native request the provider refused: asked again once in the next mode."""
        typed = self.typed
        if typed is None or not isinstance(err, ProviderError) or not typed.fall_back(err):
            return False
        await self.emit(
            RetryEvent(
                error_kind=f"{err.kind.value}: output_mode native -> {typed.mode}",
                status=err.status,
                attempt=2,  # the one more try the fallback allows
                max_attempts=2,
                delay_s=0.0,
                retry_after_s=None,
                provider=err.provider,
            )
        )
        return True

    async def _retry(self, err: ProviderError, retries_done: int) -> bool:
        """Wait before the next try when the retry rule allows one; False: stop."""
        decision = retry_decision(
            err,
            retries_done=retries_done,
            max_retries=self.contract.max_retries,
            policy=self.contract.retry,
            elapsed=self.elapsed(),
            max_seconds=self.contract._budget_s,
        )
        if decision.action == "stop":
            return False
        self.counts.retries += 1
        await self.emit(
            RetryEvent(
                error_kind=err.kind.value,
                status=err.status,
                attempt=retries_done + 2,
                max_attempts=self.contract.max_retries + 1,
                delay_s=decision.delay,
                retry_after_s=err.retry_after_s,
                provider=err.provider,
            )
        )
        await self.clock.sleep(decision.delay)
        return True

    async def _call_once(
        self, messages: list[dict[str, Any]], step: int
    ) -> Completion | HarnessError:
        await self.prices.warm([self.provider.name])  # the catalogue off the event loop
        remaining = self.remaining()
        call_start = self.clock.time()
        real_start = time.time()
        result: Completion | HarnessError
        # Streamed text becomes delta events only for a listener: none, no sink at all.
        deltas = TextDeltas(self.emit) if self.run.listening else None
        call = self._call(messages, deltas)
        records: tuple[AttemptRecord, ...] = ()
        try:
            # In this task (no wait_for task): a cut-off call's CancelledError is the one
            # its provider put the attempts on.
            async with asyncio.timeout(remaining):
                result = await ask(self.provider, call)
            records = result.attempts
        except TimeoutError as exc:
            result = ProviderError(
                "the run's time budget ran out while waiting for the provider",
                kind=ProviderErrorKind.TIMEOUT,
                provider=self.provider.name,
                model=self.provider.model,
                code="RUN_TIME_BUDGET",
            )
            # The budget, not a person, cut the attempt: it is the provider's timeout.
            records = tuple(_timed_out(rec, result) for rec in _cut_off_attempts(exc))
        except HarnessError as exc:  # a ProviderError carries the attempts it made
            result = exc
            records = attempts_of(exc)
        except asyncio.CancelledError as exc:
            # The legs that ended before the cancel (a Fallback's) and the one it cut
            # off (``cancelled``) are written now.
            records = attempts_of(exc)
            if not records:  # a provider that reports nothing: its cut-off call
                records = (_cut_off_record(self.provider, real_start),)
            self.rows.send(self._attempt_rows(records, step, call_start))
            self.rows.settle_now()
            raise
        except Exception as exc:  # a custom provider's bug: typed, with its cause
            result = wrap_unknown(exc, f"the provider raised {type(exc).__name__}: {exc}")
        if isinstance(result, Completion) and deltas is not None:
            await deltas.flush()  # the answer's last words, held by the throttle
        if not records:  # a provider that reports nothing still gets its attempt row
            records = (_synthetic_record(self.provider, result, real_start),)
        if self.typed is not None:
            self._judged = self.typed.judge(result) if isinstance(result, Completion) else None
            records = self.typed.marked(records, self._judged)
        if isinstance(result, Completion):
            rows = self._attempt_rows(records, step, call_start)
            self.rows.send(rows, linger_s=ATTEMPT_LINGER_S)
        else:  # durable before the wait for a retry (or the run's end)
            await self.rows.write(self._attempt_rows(records, step, call_start))
        for rec in records:
            if rec.fell_back:
                self.counts.fallbacks += 1
                await self.emit(
                    FellBackEvent(
                        from_provider=rec.provider,
                        model=rec.model,
                        error_kind=rec.kind,
                        status=rec.status,
                    )
                )
        return result

    def _call(self, messages: list[dict[str, Any]], deltas: TextDeltas | None) -> Call:
        """The call for ``messages``: a typed run's mode adds its part."""
        run_id, typed = self.rows.run_id, self.typed
        if typed is None:
            return Call(messages, self.tool_specs(), on_text=deltas, run_id=run_id)
        return Call(
            typed.messages(messages),
            typed.tools(self.tool_specs()),
            typed.cap,
            on_text=deltas,
            run_id=run_id,
            output=typed.output_schema(),
        )

    def _attempt_rows(
        self, records: Sequence[AttemptRecord], step: int, call_start: float
    ) -> list[AttemptRow]:
        """The rows of a call's attempts, numbered on from the run's last one.

        The first attempt of a call starts when the call does (on the run's clock);
        later ones (fallback legs) keep their real offsets from the first.
        """
        if not records:
            return []
        first = records[0].started_at
        rows = [self._attempt_row(rec, step, call_start, first) for rec in records]
        self.step_attempts = [*(r for r in self.step_attempts if r["step"] == step), *rows]
        return rows

    def _attempt_row(
        self, rec: AttemptRecord, step: int, call_start: float, first_real: float
    ) -> AttemptRow:
        self.counts.attempts += 1
        # Map the provider's wall-clock start onto the run's clock, so an injected
        # clock orders attempts the way the retry waits did.
        started_at = call_start + max(0.0, rec.started_at - first_real)
        return {
            "step": step,
            "attempt": self.counts.attempts,
            "provider": rec.provider,
            "model": rec.model,
            "kind": rec.kind,
            "status": rec.status,
            "retry_after_s": rec.retry_after_s,
            "latency_ms": rec.latency_ms,
            "ttft_ms": rec.ttft_ms,
            "input_tokens": rec.input_tokens,
            "output_tokens": rec.output_tokens,
            "cost_usd": self._cost(rec),
            "request_id": rec.request_id,
            "fell_back": rec.fell_back,
            "error": rec.error,
            "started_at": started_at,
            "base_url": rec.base_url,
            "cancelled": rec.cancelled,
            "usage_estimated": rec.usage_estimated,
            "output_mode": rec.output_mode,
            "answer": rec.answer,
        }

    def _cost(self, rec: AttemptRecord) -> float | None:
        """Price one attempt and add it to the run's spend."""
        provider = rec.provider
        if is_local(self.provider.name, None):
            # A stand-in (a replay, a scripted provider) bills nothing, whichever
            # provider its answers name.
            provider = self.provider.name
        # The server decides whether it is local: the record's where the provider
        # reports it, else the run's provider's when this attempt was its own.
        base_url = getattr(rec, "base_url", None)
        if base_url is None and rec.provider == self.provider.name:
            url = getattr(self.provider, "base_url", None)
            base_url = url if isinstance(url, str) else None
        cost = self.prices.cost_usd(
            provider, rec.model, rec.input_tokens, rec.output_tokens, base_url
        )
        if cost is not None and self.counts.cost_usd is not None:
            self.counts.cost_usd += cost
        elif cost is None and (rec.input_tokens is not None or rec.output_tokens is not None):
            self.counts.cost_usd = None  # tokens spent at an unknown price: the total is unknown
        return cost


def provider_url(provider: Provider) -> str | None:
    """The server a provider talks to as rows keep it (no credentials), or None (a
    Fallback, a scripted or custom provider)."""
    url = getattr(provider, "base_url", None)
    return shown_url(url) if isinstance(url, str) and url else None


def _timed_out(rec: AttemptRecord, err: ProviderError) -> AttemptRecord:
    """An attempt the run's time budget cut off, as the timeout it was."""
    if not rec.cancelled:
        return rec
    return dataclasses.replace(rec, cancelled=False, kind=err.kind.value, error=err.message)


def _cut_off_attempts(exc: BaseException) -> tuple[AttemptRecord, ...]:
    """The attempts of a call the run's time budget cut off: on the ``CancelledError``
    the ``TimeoutError`` was raised from (its cause, or on 3.11 its context)."""
    return attempts_of(exc.__cause__) or attempts_of(exc.__context__)


def _cut_off_record(provider: Provider, started: float) -> AttemptRecord:
    """The row of a call a cancel cut off, for a provider that reported none itself."""
    return AttemptRecord.cut_off(
        provider=provider.name,
        model=provider.model,
        started_at=started,
        latency_ms=(time.time() - started) * 1000,
        base_url=provider_url(provider),
    )


def _synthetic_record(
    provider: Provider, result: Completion | HarnessError, started: float
) -> AttemptRecord:
    """The attempt row of a provider that reported none itself (a custom provider), or
    of a call the run's time budget cut short."""
    latency = (time.time() - started) * 1000
    base_url = provider_url(provider)
    if isinstance(result, Completion):
        filled = dataclasses.replace(
            result, provider=result.provider or provider.name, model=result.model or provider.model
        )
        return AttemptRecord.succeeded(
            filled, started_at=started, latency_ms=latency, base_url=base_url
        )
    if not isinstance(result, ProviderError):
        result = ProviderError(result.message, kind=ProviderErrorKind.TRANSPORT)
    return AttemptRecord.failed(
        result,
        provider=result.provider or provider.name,
        model=provider.model,
        started_at=started,
        latency_ms=latency,
        base_url=base_url,
    )
