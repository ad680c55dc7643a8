"""One run's life in the store: ``RunRecorder``, used by the loop's driver and the
coding-agent CLIs alike.

A run is begun with its lease in one commit (``start``: a run is never recorded
undriven), or taken up by taking its lease (``take_lease``, a resume). While it is
driven, its lease and any other lease it holds (a CLI's named session: ``hold``) are
renewed (``keep_leases``). Its typed events go to the caller's callback, stamped
with the run, step and time (``emit``); its rows go to the store through here:
attempts as each call ends (``attempt_rows``), a tool call's write-ahead intent and
its completion, a step with its tool calls, stalls and checkpoint in one commit, and
the run's end with its outcome (with the last step, or alone: ``finish``), the lease
released in the same commit. A cancelled run is recorded ``cancelled`` from the
thread that tears it down (``record_cancelled``).

Every write waits out a busy or full store while the run has time left
(``patient``, ``_store_wait``); a store that stays so ends the run with the outcome
``gave_out`` records. Which outcome a run ends with is ``_outcome``'s rule; the
recorder only writes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..rules._errors import HarnessError, StoreError
from ..rules._events import AnyEvent, stamped
from ..rules._outcomes import RunOutcome
from ..store._leases import LEASE_TTL_S, owner_alive, owner_identity
from ..store._writer import store_writer
from ._events import EventSink
from ._model_call import AttemptRows
from ._store_wait import gave_out_outcome, patiently

if TYPE_CHECKING:
    from ..rules._retry import Clock
    from ..store._leases import Lease
    from ..store._row_types import AttemptRow, Finish, RunRow, StallRow, StepRow, ToolCallRow
    from ..store._store import Store

__all__ = ["RunRecorder"]

T = TypeVar("T")


def _no_budget() -> float | None:
    return None


def _untyped() -> Mapping[str, str | None]:
    return {}


class RunRecorder:
    """What a run writes to its store, and its leases.

    Args:
        store: The run's store.
        run_id: The run.
        clock: The run's clock (timestamps, the waits of a busy store).
        events: Where the run's events go.
        remaining: Seconds the run has left (None: no time budget): how long a busy
            or full store is waited for.

    Attributes:
        lease: The run's lease while this process drives it; None before and after.
        attempt_rows: The run's attempt rows, written as each call ends.
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        *,
        clock: Clock,
        events: EventSink,
        remaining: Callable[[], float | None] = _no_budget,
    ) -> None:
        self.store = store
        self.writer = store_writer(store)
        self.run_id = run_id
        self.clock = clock
        self.events = events
        self.remaining = remaining
        self.lease: Lease | None = None
        self.held: list[Lease] = []
        self.attempt_rows = AttemptRows(store, run_id, patient=self.patient)
        # What a typed run's end adds to its run row (the mode it ended in, the
        # answer's JSON text): set by the loop's driver; none for an agent CLI's run.
        self.typed_end: Callable[[], Mapping[str, str | None]] = _untyped

    # ---------------------------------------------------------------- writes

    async def patient(self, write: Callable[[], Awaitable[T]]) -> T:
        """A store write, tried again while the store is busy or full and the run has
        time left (``_store_wait``); then its ``StoreError`` leaves, for the caller to
        end the run with (``gave_out``)."""
        return await patiently(write, remaining=self.remaining, sleep=self.clock.sleep)

    async def emit(self, event: AnyEvent, step: int, /) -> None:
        """Send one event of the run, stamped with its run, ``step`` and time, to the
        caller's callback (none to make when nobody listens)."""
        if not self.events.listening:
            return
        await self.events.emit(stamped(event, self.run_id, step, self.clock.time()))

    async def start(self, row: RunRow) -> None:
        """The run row and its lease in one commit: a run is never recorded undriven."""
        self.lease = await self.patient(
            lambda: self.writer.queued.start_run(
                row, owner_identity(), ttl_s=LEASE_TTL_S, owner_alive=owner_alive
            )
        )

    async def take_lease(self) -> None:
        """One driver per run: another live process holding the run -> ConflictError."""
        self.lease = await self.hold(self.run_id, renewed=False)

    async def hold(self, key: str, *, renewed: bool = True) -> Lease:
        """Take the lease ``key`` (a CLI's named session); ``renewed``: kept with the
        run's own by ``keep_leases`` until ``let_go``. Held elsewhere: ConflictError."""
        lease = await self.patient(
            lambda: self.writer.queued.acquire_lease(
                key, owner_identity(), ttl_s=LEASE_TTL_S, owner_alive=owner_alive
            )
        )
        if renewed:
            self.held.append(lease)
        return lease

    async def let_go(self, lease: Lease) -> None:
        """Give back a lease taken with ``hold``."""
        self.held = [h for h in self.held if h.run_id != lease.run_id]
        await self.patient(lambda: self.writer.queued.release_lease(lease))

    async def release(self) -> None:
        """Give the run's lease back (a resume that could not load the run)."""
        lease, self.lease = self.lease, None
        if lease is not None:
            await self.patient(lambda: self.writer.queued.release_lease(lease))

    async def keep_leases(self) -> None:
        """Renew the run's lease and the ones ``hold`` took while the run is driven (a
        provider call may take minutes). A lease another process took over is no longer
        renewed: the run's next commit is refused with ``ConflictError``."""
        lost: set[str] = set()
        while self.lease is not None or self.held:
            await asyncio.sleep(LEASE_TTL_S / 3)
            for lease in [self.lease, *self.held]:
                if lease is None or lease.run_id in lost:
                    continue
                try:
                    renewed = await self.writer.queued.renew_lease(lease, ttl_s=LEASE_TTL_S)
                except StoreError as exc:
                    if not exc.retryable:
                        lost.add(lease.run_id)
                    continue  # busy or full: tried again at the next renewal, well in time
                except HarnessError:
                    lost.add(lease.run_id)  # taken over
                    continue
                if self.lease is lease:
                    self.lease = renewed
                self.held = [renewed if h is lease else h for h in self.held]

    async def record_intent(self, row: ToolCallRow, pending: dict[str, Any] | None) -> None:
        """Write-ahead: an effectful tool call's intent, durable before it runs (with the
        step's answer, ``pending``, the first time)."""
        await self.patient(
            lambda: self.writer.queued.record_intent(
                self.run_id, row.copy(), lease=self.lease, pending=pending
            )
        )

    async def note_approval(self, tool: str, granted: bool, reason: str | None) -> None:
        """An approver's answer (approve or deny), as a marker of the run: a granted
        call leaves no other trace in the store (its row reads as one the policy
        allowed). Its detail names the tool and quotes the reason (scrubbed)."""
        kind = "approval_granted" if granted else "approval_denied"
        detail = tool if not reason else f"{tool}: {reason}"
        await self.patient(
            lambda: self.writer.queued.add_marker(self.run_id, kind, detail, self.clock.time())
        )

    async def settle_tool_call(self, step: int, seq: int, **fields: Any) -> None:
        """A tool call's completion (or ``needs_reconciliation``), durable at once."""
        await self.patient(
            lambda: self.writer.queued.settle_tool_call(self.run_id, step, seq, **fields)
        )

    async def keep_begun(
        self, step: int, pending: dict[str, Any], tool_rows: list[ToolCallRow]
    ) -> None:
        """Keep a step that waits for approval as begun (its answer, the rows of the
        calls made), for a resume to finish."""
        await self.patient(
            lambda: self.writer.queued.keep_begun_step(
                self.run_id, step, pending, tool_rows, lease=self.lease
            )
        )

    async def commit_step(
        self,
        row: StepRow,
        *,
        checkpoint: dict[str, Any],
        tool_calls: Sequence[ToolCallRow] = (),
        stalls: Sequence[StallRow] = (),
        attempts: Sequence[AttemptRow] = (),
        ending: RunOutcome | None = None,
        error: HarnessError | None = None,
        finished_at: float | None = None,
    ) -> None:
        """Commit a step (and the run's end with ``ending``, the lease released) in one
        transaction. ``attempts`` are rows not already written as their calls ended."""
        final: Finish | None = None
        if ending is not None:
            final = self._final(ending, error, finished_at)
        await self.patient(
            lambda: self.writer.queued.commit_step(
                self.run_id,
                row,
                attempts=list(attempts),
                tool_calls=list(tool_calls),
                stalls=list(stalls),
                checkpoint=checkpoint,
                lease=self.lease,
                finish=final,
            )
        )
        # The step's attempt rows, queued as their calls ended, were ahead of it in the
        # writer's queue: committed by now (in its transaction or an earlier one).
        await self.attempt_rows.settle()
        if final is not None:
            self.lease = None

    async def finish(
        self,
        outcome: RunOutcome,
        error: HarnessError | None = None,
        *,
        finished_at: float | None = None,
    ) -> None:
        """The run's end with no step to commit, the lease released in the same commit."""
        await self.attempt_rows.settle()
        final = self._final(outcome, error, finished_at)
        queued = self.writer.queued
        await self.patient(
            lambda: queued.finish_run(self.run_id, lease=self.lease, release=True, **final)
        )
        self.lease = None

    def record_cancelled(self, error: dict[str, Any] | None = None) -> None:
        """Record the run ``cancelled`` now, from this thread (its task is being torn
        down); a store busy or full leaves it to its lease's expiry."""
        self.record_now(RunOutcome.CANCELLED, error)

    def record_now(self, outcome: RunOutcome, error: dict[str, Any] | None) -> None:
        """Record the run's end now, from this thread (a cancel, or a bug in the loop
        that ended it), the lease released; a store busy or full leaves it to its
        lease's expiry."""
        lease, self.lease = self.lease, None
        typed = self.typed_end()
        try:
            self.attempt_rows.settle_now()
            self.writer.finish_run(
                self.run_id,
                outcome=outcome.value,
                finished_at=self.clock.time(),
                error=error,
                lease=lease,
                release=True,
                output_mode=typed.get("output_mode"),
                output=typed.get("output"),
            )
        except StoreError as exc:
            if not exc.retryable and exc.kind != "missing":
                raise

    async def gave_out(self, exc: StoreError, budget_s: float | None) -> RunOutcome:
        """End a run whose store stayed busy or full for the rest of its time: the
        outcome (``_store_wait.gave_out_outcome``), recorded with the lease released if
        one last try gets through; otherwise the lease, no longer renewed, expires
        within ``LEASE_TTL_S`` and the caller's result alone reports it."""
        outcome = gave_out_outcome(budget_s)
        lease, self.lease = self.lease, None  # stops the renewals whatever happens
        typed = self.typed_end()
        with contextlib.suppress(HarnessError):
            await self.writer.queued.finish_run(
                self.run_id,
                outcome=outcome.value,
                finished_at=self.clock.time(),
                error=exc.to_dict(),
                lease=lease,
                release=True,
                output_mode=typed.get("output_mode"),
                output=typed.get("output"),
            )
        return outcome

    def _final(
        self, outcome: RunOutcome, error: HarnessError | None, finished_at: float | None
    ) -> Finish:
        final: Finish = {
            "outcome": outcome.value,
            "finished_at": self.clock.time() if finished_at is None else finished_at,
            "error": None if error is None else error.to_dict(),
        }
        typed = self.typed_end()
        if typed:
            final["output_mode"] = typed.get("output_mode")
            final["output"] = typed.get("output")
        return final
