"""Durable runs: resume after a crash, settle dangling writes, record and replay.

``resume`` continues a run at the first step not committed, from the checkpoint the
store holds. A step the previous process had begun (its answer is durable with its
first tool intent) is finished without asking the model again: finished tool calls
are reused, READ and IDEMPOTENT intents run again with their recorded key, and a
WRITE intent with no completion stops the run as ``needs_reconciliation`` until a
person says what happened (``resolve``) or gives it up (``abandon``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import threading
import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..providers._base import BaseProvider, Call, LocalProvider, ask, offers_native_output
from ..providers._completion import Completion, Messages, Provider, ToolSpecs
from ..rules._errors import (
    ConfigError,
    HarnessError,
    ProviderError,
    ProviderErrorKind,
    ResumeError,
    StoreError,
)
from ..rules._retry import Clock, SystemClock
from ..rules._secrets import scrub
from ..store._leases import owner_alive, owner_identity
from ..store._open import open_store, refuse_store_inside
from ..store._writer import store_writer
from ._bridge import sync_twin
from ._contract import RunOutcome, TaskContract
from ._driver import Driver
from ._events import Callback
from ._output import OutputSpec, schema_difference
from ._result import RunResult, stored_steps
from ._servers import MCPChanged, resumed_servers
from ._step_tools import PendingStep
from ._tracing import TracerProviderLike, tracing

if TYPE_CHECKING:
    from ..mcp._server import MCPServer
    from ..providers._prices import Prices
    from ..rules._policy import Policy
    from ..store._row_types import ToolCallRow
    from ..store._store import Store
    from ..tools._approval import Approver
    from ..tools._protocol import Tool

__all__ = [
    "Record",
    "Replay",
    "Settled",
    "abandon",
    "abandon_sync",
    "get_run",
    "open_source",
    "resolve",
    "resolve_sync",
    "resume",
    "resume_sync",
]


def _open(store: Store | str | os.PathLike[str] | None) -> Store:
    """``open_store``, with a store too new for this harnessnb as a ``ResumeError``."""
    try:
        return open_store(store)
    except StoreError as exc:
        raise _newer(exc, exc.path or str(store)) from exc


def _newer(exc: StoreError, path: str) -> HarnessError:
    if exc.kind != "newer":
        return exc
    return ResumeError(
        f"the store {path!r} was written by a newer harnessnb; upgrade to resume",
        reason="newer_store",
    )


def _stored_run(store: Store, run_id: str) -> dict[str, Any]:
    """The run's row; ``ResumeError`` for an unknown run or a store too new to read."""
    try:
        row = store.get_run(run_id)
    except StoreError as exc:
        raise _newer(exc, store.path) from exc
    if row is None:
        raise ResumeError(f"no run {run_id!r} in the store {store.path!r}", reason="unknown_run")
    return row


async def _get_run(store: Store, run_id: str) -> dict[str, Any]:
    return await asyncio.to_thread(_stored_run, store, run_id)


def _recorded(row: dict[str, Any]) -> tuple[TaskContract, Policy]:
    from ..rules._policy import Policy

    try:
        return TaskContract.from_dict(row["contract"]), Policy.from_dict(row["policy"])
    except Exception as exc:
        raise ResumeError(
            f"run {row.get('run_id')!r}: its recorded contract or policy cannot be read ({exc})",
            reason="unreadable_checkpoint",
        ) from exc


def _resumable(run_id: str, row: dict[str, Any], output: Any) -> tuple[TaskContract, Policy]:
    """A run of the loop's (not an agent CLI's): its contract (answering as ``output``
    when given) and its recorded policy."""
    if row.get("agent"):
        raise ResumeError(
            f"run {run_id!r} was driven by the {row['agent']} CLI, not harnessnb's loop; "
            "continue its conversation with hn.agents.run(..., session=NAME)",
            reason="agent_run",
        )
    contract, recorded = _recorded(row)
    if output is not None:
        contract = _typed_again(run_id, contract, row["contract"], output)
    return contract, recorded


def _typed_again(
    run_id: str, contract: TaskContract, stored: dict[str, Any], output: Any
) -> TaskContract:
    """``contract`` answering as ``output`` (a ``T``): its schema must be the stored one."""
    kept = stored.get("output")
    if not isinstance(kept, dict) or not isinstance(kept.get("schema"), dict):
        raise ConfigError(f"resume(output=...): run {run_id!r} asked for no typed answer")
    given = OutputSpec.of(output).schema
    differ = schema_difference(kept["schema"], dict(given))
    if differ:
        raise ConfigError(
            f"resume(output=...): the schema of {output!r} is not the one run {run_id!r} "
            "stored: " + "; ".join(differ)
        )
    return dataclasses.replace(contract, output=output)


def _as_typed(result: RunResult, output: Any) -> RunResult:
    """A stored result's answer (its JSON value) as ``output``'s ``T`` when given."""
    if output is None or result.output is None:
        return result
    checked = OutputSpec.of(output).validate(result.output)
    if isinstance(checked, list):  # stored valid under the same schema: not expected
        raise ConfigError(f"resume(output=...): the stored answer is no {output!r}: {checked}")
    return dataclasses.replace(result, output=checked.value)


async def resume(
    run_id: str,
    provider: Provider,
    *,
    store: Store | str | os.PathLike[str] | None = None,
    policy: Policy | None = None,
    approver: Approver | None = None,
    tools: Sequence[Tool] = (),
    on_event: Callback | None = None,
    clock: Clock | None = None,
    prices: Prices | None = None,
    mcp: Sequence[MCPServer] = (),
    mcp_changed: MCPChanged = "leave_out",
    output: Any = None,
    tracer_provider: TracerProviderLike = None,
    include_content: bool = False,
) -> RunResult:
    """Continue ``run_id`` where its last committed step left it.

    A run that already ended (success, finished, a budget, stalled, terminal) is a
    no-op that reports its outcome. The recorded policy is used unless ``policy`` is
    given, and a given policy looser than the recorded one is refused: resuming
    must not silently drop a boundary. A run's MCP servers are needed again in
    ``mcp``; a tool changed since (or new) that is not READ is left out unless
    ``mcp_changed="accept"`` (``loop._servers``).

    A typed run stores ``T``'s JSON Schema, not ``T``: its answer is that schema's JSON
    value (a dict) unless ``output=T`` is given again (``T``'s schema the stored one).

    Traced (``tracer_provider``, as for ``hn.run``), its spans are exported whole again.

    Raises:
        ResumeError: reason ``unknown_run``, ``newer_store``, ``weaker_policy``,
            ``unreadable_checkpoint``, ``agent_run`` (a coding-agent CLI's run),
            ``mcp_servers`` (the run's MCP servers not given); ConfigError: a bad
            ``mcp_changed``; an ``output`` given to a run asked no typed answer, or
            whose schema is not the stored one (the differences named).
        ConflictError: another live process drives the run.
    """
    store = _open(store)
    clock = clock or SystemClock()
    row = await _get_run(store, run_id)
    contract, recorded = _resumable(run_id, row, output)
    refuse_store_inside(store, contract.workspace)  # the agent must not reach its record
    policy = _policy_for(run_id, recorded, policy)
    if row.get("outcome") and not RunOutcome(row["outcome"]).resumable:
        await store_writer(store).queued.add_marker(
            run_id, "skipped", f"already {row['outcome']}", clock.time()
        )
        ended = await asyncio.to_thread(RunResult.from_store, run_id, store=store)
        return _as_typed(ended, output)

    stored = await resumed_servers(store, run_id, mcp, mcp_changed)
    driver = Driver(
        contract,
        provider,
        store=store,
        policy=policy,
        approver=approver,
        tools=tools,
        on_event=on_event,
        clock=clock,
        run_id=run_id,
        prices=prices,
        mcp=mcp,
    )
    driver.mcp_stored, driver.mcp_changed = stored, mcp_changed
    driver.tracing = tracing(tracer_provider, include_content)
    await driver.take_lease()
    try:
        pending = await _restore(driver, store, row)
    except BaseException:
        await driver.release()
        raise
    await store_writer(store).queued.add_marker(
        run_id, "resume", f"at step {driver.state.step + 1}", clock.time()
    )
    return await driver.resume_from(pending)


def _policy_for(run_id: str, recorded: Policy, given: Policy | None) -> Policy:
    """The recorded policy, or ``given`` when at least as strict (else ResumeError)."""
    if given is None:
        return recorded
    if not given.at_least_as_strict_as(recorded):
        raise ResumeError(
            f"run {run_id!r} was recorded under a stricter policy than the one given; "
            "resume without policy= to keep the recorded one",
            reason="weaker_policy",
        )
    return given


async def _restore(driver: Driver, store: Store, row: dict[str, Any]) -> PendingStep | None:
    """Load the checkpoint into ``driver``; return the begun-but-uncommitted step."""
    try:
        checkpoints = await asyncio.to_thread(store.checkpoints, driver.run_id)
        driver.restore(row, checkpoints)
        begun = await asyncio.to_thread(
            store_writer(store).pending_step, driver.run_id, driver.state.step + 1
        )
        await _continue_attempt_numbers(driver, store, begun)
        # The card's steps before the resume, and the attempts of the step it goes on with.
        summaries, attempts = await asyncio.to_thread(stored_steps, store, driver.run_id)
        step = driver.state.step + 1
        driver.state.summaries = list(summaries)
        driver.model_calls.step_attempts = [a for a in attempts if a["step"] == step]
        if begun is None:
            return None
        rows = await asyncio.to_thread(store_writer(store).step_tool_calls, driver.run_id, step)
        return PendingStep(
            completion=Completion.from_dict(begun["completion"]),
            settled={int(r["seq"]): cast("ToolCallRow", r) for r in rows},
        )
    except (ResumeError, StoreError):
        raise
    except Exception as exc:
        raise ResumeError(
            f"run {driver.run_id!r}: its checkpoint cannot be read ({type(exc).__name__}: {exc})",
            reason="unreadable_checkpoint",
        ) from exc


async def _continue_attempt_numbers(
    driver: Driver, store: Store, begun: dict[str, Any] | None
) -> None:
    """Number the resumed run's attempts after every one already made: the failed calls
    that ended the run came after its last checkpoint, so its counter does not hold them.

    A begun step written by an older harnessnb carries its attempts (then written only
    with the step): those not in the store are written now, once.
    """
    stored = await asyncio.to_thread(store.attempts, driver.run_id)
    numbers = [int(n) for n in stored["attempt"].dropna()] if len(stored) else []
    legacy = [a for a in (begun or {}).get("attempts") or [] if a.get("attempt") is not None]
    written = set(numbers)
    unwritten = [a for a in legacy if int(a["attempt"]) not in written]
    if unwritten:
        await store_writer(store).queued.add_attempts(driver.run_id, unwritten)
    numbers += [int(a["attempt"]) for a in legacy]
    driver.state.calls.attempts = max([driver.state.calls.attempts, *numbers])


resume_sync = sync_twin(
    resume, """``resume`` for blocking callers (scripts, notebooks), on harnessnb's loop thread."""
)


def _unsettled(store: Store, run_id: str) -> dict[str, Any]:
    _stored_run(store, run_id)
    rows = [
        r for r in store_writer(store).unsettled_tool_calls(run_id) if r.get("effect") == "write"
    ]
    if not rows:
        raise ResumeError(
            f"run {run_id!r} has no write waiting for reconciliation", reason="nothing_to_resolve"
        )
    return rows[0]


class Settled:
    """What ``resolve`` and ``abandon`` return: the decision is already in the store.

    Awaiting it returns at once, so async code can write ``await hn.resolve(...)`` as it
    writes ``await hn.resume(...)``, and a blocking caller needs no ``_sync`` form (one
    exists anyway for symmetry). A person's decision is never left in an unawaited
    coroutine.
    """

    __slots__ = ("marker", "run_id")

    def __init__(self, run_id: str, marker: str) -> None:
        self.run_id = run_id
        self.marker = marker

    def __await__(self) -> Generator[None, None, None]:
        yield from ()

    def __repr__(self) -> str:
        return f"Settled({self.run_id!r}, {self.marker!r})"


def resolve(
    run_id: str, output: str, *, store: Store | str | os.PathLike[str] | None = None
) -> Settled:
    """Say that the dangling write of ``run_id`` did land; ``output`` is what the model
    will see as its result. Then ``resume`` continues. Done at once (one short write);
    the result may be awaited. A run another live process (or a run in this one) drives
    is refused with ``ConflictError``: its write is under way, not dangling."""
    return _settle(run_id, "ok", str(output), "resolved", "", store)


def abandon(
    run_id: str, reason: str, *, store: Store | str | os.PathLike[str] | None = None
) -> Settled:
    """Give up the dangling write of ``run_id``: the model is told it may or may not have
    happened, with ``reason``. Then ``resume`` continues. Done at once; may be awaited."""
    return _settle(run_id, "abandoned", str(reason), "abandoned", f": {reason}", store)


def resolve_sync(
    run_id: str, output: str, *, store: Store | str | os.PathLike[str] | None = None
) -> None:
    """``resolve`` for blocking callers (the same call; named like ``run_sync``)."""
    resolve(run_id, output, store=store)


def abandon_sync(
    run_id: str, reason: str, *, store: Store | str | os.PathLike[str] | None = None
) -> None:
    """``abandon`` for blocking callers (the same call; named like ``run_sync``)."""
    abandon(run_id, reason, store=store)


def _settle(
    run_id: str,
    status: str,
    output: str,
    marker: str,
    why: str,
    store: Store | str | os.PathLike[str] | None,
) -> Settled:
    opened = _open(store)
    _unsettled(opened, run_id)
    # Taken as a driver takes the run: a run another live process drives (or a run of
    # this one: the owner differs) is refused with ConflictError; its write is not
    # dangling but under way.
    lease = store_writer(opened).acquire_lease(
        run_id, f"{owner_identity()}:settle", owner_alive=owner_alive
    )
    try:
        found = _unsettled(opened, run_id)
        step, seq = int(found["step"]), int(found["seq"])
        store_writer(opened).settle_tool_call(run_id, step, seq, status=status, output=output)
        store_writer(opened).add_marker(
            run_id, marker, f"{found['tool']} at step {step}{why}", time.time()
        )
    finally:
        store_writer(opened).release_lease(lease)
    return Settled(run_id, marker)


# ------------------------------------------------------------------ record / replay


def request_key(
    model: str | None,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    *,
    run_id: str | None = None,
) -> str:
    """The recording key: the request's content (never a counter, never a header).

    With ``model`` None the key covers messages and tools only, which is what a
    ``Replay`` that was not told the model looks up. With ``run_id`` it is the key of
    that run's own request (the model left out: the run names the answer).
    """
    if run_id is not None:
        model = None
    body = {"model": model, "messages": list(messages), "tools": list(tools or [])}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()
    if run_id is not None:
        return f"{_run_prefix(run_id)}{digest}"
    return f"{'m' if model is not None else 'c'}:{digest}"


def _run_prefix(run_id: str) -> str:
    return f"r:{run_id}:"


# Record's read-then-write of a key's next seq, made one at a time in this process: two
# runs asking the same request at once would both take the same seq, one answer lost.
_recording_lock = threading.Lock()


class Record(BaseProvider):
    """Wraps a provider and records every successful completion in ``store``.

    Identical requests are recorded in order, so a replay answers them in the same
    order. A call made for a run (its ``run_id`` argument) is also recorded under that
    run, so ``replay`` of a run answers as that run was answered, not as another run
    asking the same was. Nothing but the completion is stored: no header, no key; the
    inner provider's attempts pass through on the answer.
    """

    def __init__(self, provider: Provider, store: Store | str | os.PathLike[str]) -> None:
        self.inner = provider
        self.store = open_store(store)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def model(self) -> str:
        return self.inner.model

    def hosts(self) -> list[str]:
        return self.inner.hosts()

    @property
    def native_output(self) -> bool:
        """As the provider it records: a typed run asks it the same way."""
        return offers_native_output(self.inner)

    def __repr__(self) -> str:
        return f"Record({self.inner!r})"

    async def _answer(self, call: Call) -> Completion:
        completion = await ask(self.inner, call)  # its attempts on it, passed through
        payload = completion.to_dict()
        messages, tools = call.messages, call.tools
        keys = [request_key(self.inner.model, messages, tools), request_key(None, messages, tools)]
        if call.run_id is not None:
            keys.append(request_key(None, messages, tools, run_id=call.run_id))
        for key in keys:
            await asyncio.to_thread(self._append, key, payload)
        return completion

    def _append(self, key: str, payload: dict[str, Any]) -> None:
        with _recording_lock:
            seq = len(store_writer(self.store).get_recordings(key))
            store_writer(self.store).put_recording(key, seq, payload)


class Replay(LocalProvider):
    """Answers requests from recordings in ``store``: no network, no key.

    Args:
        store: The store holding the recordings.
        model: The model the recording was made with; None matches on messages and
            tools alone.
        run_id: Answer as run ``run_id`` was answered, from the recordings made for it
            (a run recorded before harnessnb kept them per run is matched by content).

    A request with no recording left is a non-retryable ``ProviderError`` (kind
    request) naming what was missing.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        model: str | None = None,
        *,
        run_id: str | None = None,
    ) -> None:
        self.store = open_store(store)
        self._model = model
        self._run_id = run_id
        self._per_run: bool | None = None  # whether run_id has recordings of its own
        self._served: dict[str, int] = {}

    @property
    def name(self) -> str:
        return "replay"

    @property
    def native_output(self) -> bool:
        """True: a typed run's native answers are replayed as recorded (a run recorded in
        another mode stores that mode in its contract, and is asked so)."""
        return True

    @property
    def model(self) -> str:
        return self._model or "replay"

    def __repr__(self) -> str:
        return f"Replay({self.store!r}, model={self._model!r}, run_id={self._run_id!r})"

    async def _reply(self, call: Call) -> Completion:
        key = await self._key(call.messages, call.tools)
        recorded = await asyncio.to_thread(store_writer(self.store).get_recordings, key)
        index = self._served.get(key, 0)
        if index >= len(recorded):
            raise ProviderError(
                _no_recording(call.messages, index, first=not self._served),
                kind=ProviderErrorKind.REQUEST,
                provider="replay",
                model=self.model,
            )
        self._served[key] = index + 1
        return Completion.from_dict(recorded[index])

    async def _key(self, messages: Messages, tools: ToolSpecs) -> str:
        if self._run_id is not None and self._per_run is None:
            found = await asyncio.to_thread(
                self.store.sql,
                "SELECT count(*) AS n FROM recordings WHERE starts_with(key, ?)",
                [_run_prefix(self._run_id)],
            )
            self._per_run = bool(found["n"].iloc[0])
        if self._per_run:
            return request_key(None, messages, tools, run_id=self._run_id)
        return request_key(self._model, messages, tools)


def _no_recording(messages: Messages, index: int, *, first: bool) -> str:
    """Why a replay has no answer: a run never recorded (its very first request has no
    recording), or a conversation that went another way than the recorded one."""
    last = messages[-1] if messages else {}
    quoted = f"({last.get('role')}: {scrub(str(last.get('content')))[:120]!r})"
    if first:
        return (
            f"no recording of the run's first request {quoted}: the run was not recorded "
            "(or was recorded with other tools or another task). To record a run, give "
            "hn.run the provider wrapped as hn.Record(provider, store); replay it from "
            "that store."
        )
    return (
        f"no recording for this request (after {index} answered): the conversation "
        f"differs from the recorded run at its last message {quoted}"
    )


# For ``_replay``: its source store opened, and the run's row read, as resume does.
open_source = _open
get_run = _get_run
