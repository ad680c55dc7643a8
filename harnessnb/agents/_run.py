"""Run a coding-agent CLI on a task: spawn it, read its stream, classify, record.

One CLI invocation is one run in the store: a ``runs`` row (provider = the CLI's
name), one ``steps`` row, an ``attempts`` row for each failed request the CLI reported
while retrying and one for how the invocation ended (its ``kind`` says how it failed,
in the taxonomy every provider shares), and a ``tool_calls`` row per tool call the CLI
reported. A reported cause that waiting cannot fix stops the CLI at once (the line
reader raises; the runner kills the process group). A named session is bound in
``agent_sessions`` once the CLI's stream names it; while a run drives it, the session
is held by a lease in the same store, so a second run on it, from this kernel or
another, gets ``SessionBusy``. Nothing is retried here.

The run's life in the store (its row with its lease, the leases' renewal, events,
rows, its end) is the loop's ``RunRecorder``'s, as for ``hn.run``; its outcome is
``loop._outcome.invocation_outcome``. What is a CLI's own is here: the invocation,
its stream read into a ``Turn``, and the session; the rows are built from them by
``_rows``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from ..loop._bridge import sync_twin
from ..loop._driver import new_id
from ..loop._events import Callback, EventSink
from ..loop._outcome import invocation_outcome
from ..loop._recorder import RunRecorder
from ..loop._start import uncut
from ..loop._tracing import TracerProviderLike, export_when_ended, tracing
from ..rules._errors import (
    ConfigError,
    ConflictError,
    HarnessError,
    wrap_unknown,
)
from ..rules._events import (
    AnyEvent,
    FinishedEvent,
    RetryEvent,
    StartedEvent,
    StepEvent,
    ToolCallEvent,
)
from ..rules._retry import SystemClock
from ..rules._secrets import is_secret_name, scrub
from ..store._open import open_store, refuse_store_inside
from ..store._writer import store_writer
from ._drivers import AgentCLI, Invocation
from ._errors import (
    Cancelled,
    CLIError,
    CommandLineTooLarge,
    NotInstalled,
    SessionBusy,
    SessionConflict,
    Spawn,
)
from ._process import ProcessEnd, run_process, too_large
from ._result import AgentResult, usage_of
from ._rows import _reported_cost, run_rows
from ._turn import Turn, to_int
from ._verdict import verdict

if TYPE_CHECKING:
    from ..store._leases import Lease
    from ..store._row_types import RunRow
    from ..store._store import Store

__all__ = ["run", "run_sync"]


async def run(
    agent: AgentCLI,
    task: str,
    workspace: str | os.PathLike[str],
    *,
    session: str | None = None,
    store: Store | str | os.PathLike[str] | None = None,
    on_event: Callback | None = None,
    run_id: str | None = None,
    tracer_provider: TracerProviderLike = None,
    include_content: bool = False,
) -> AgentResult:
    """Hand ``task`` to the coding-agent CLI ``agent``, working in ``workspace``.

    Args:
        agent: ``hn.agents.ClaudeCode()``, ``Codex()`` or ``Copilot()`` (with options).
        task: The prompt.
        workspace: The folder the CLI runs in.
        session: A name to continue: the first run with it starts a CLI session and
            binds the name to it; later runs continue that session.
        store: Where the run is recorded (a ``Store``, a path, or None: the default).
        on_event: Sync or async callback receiving ``RunEvent``s (started, step,
            tool_call, finished), as from ``hn.run``.
        run_id: Use this id instead of a fresh one.
        tracer_provider, include_content: As for ``hn.run``: the run's spans, from its
            rows, when it ends.

    Returns:
        The ``AgentResult``; a failure is in ``result.error`` (an ``hn.agents.CLIError``)
        and ``result.outcome``, and in the store, never raised. Bad arguments raise
        ``ConfigError``; ``asyncio.CancelledError`` propagates after the CLI's whole
        process group is gone and the run is recorded ``cancelled``.
    """
    if not isinstance(agent, AgentCLI):
        raise ConfigError(
            f"agent must be hn.agents.ClaudeCode(), Codex() or Copilot(), not {agent!r}"
        )
    root = Path(workspace)
    if not root.is_dir():
        raise ConfigError(f"the workspace {str(workspace)!r} is not a folder that exists")
    if session is not None and not session.strip():
        raise ConfigError("session must be a non-empty name")
    refuse_store_inside(store, root)  # the CLI's own tools must not reach its record
    traced = tracing(tracer_provider, include_content)
    driver = _AgentRun(
        agent,
        task,
        root.resolve(),
        session,
        open_store(store),
        EventSink(on_event),
        run_id or new_id("run"),
    )
    try:
        return await driver.drive()
    finally:
        await export_when_ended(driver.store, driver.run_id, traced)


run_sync = sync_twin(
    run, """``run`` for blocking callers: safe in a plain script and inside a Jupyter kernel."""
)


@dataclasses.dataclass(eq=False, repr=False)  # identity, not value: one per run
class _AgentRun:
    agent: AgentCLI
    task: str
    root: Path
    session: str | None
    store: Store
    events: EventSink
    run_id: str
    turn: Turn = dataclasses.field(init=False)
    started: float = dataclasses.field(default_factory=time.time, init=False)
    recorder: RunRecorder = dataclasses.field(init=False)
    """The run's life in the store: its row, its leases, events, rows and end."""
    session_lease: Lease | None = dataclasses.field(default=None, init=False)
    bound: str | None = dataclasses.field(default=None, init=False)
    """The session id written in agent_sessions."""
    end: ProcessEnd | None = dataclasses.field(default=None, init=False)
    spawned: bool = dataclasses.field(default=False, init=False)
    """The CLI process was started (it may have been killed)."""
    secrets: list[str] = dataclasses.field(default_factory=list, init=False)
    prior_usage: dict[str, Any] | None = dataclasses.field(default=None, init=False)
    """The session's usage totals when this run began (CLIs that report totals)."""
    usage_total: dict[str, Any] | None = dataclasses.field(default=None, init=False)
    model: str | None = dataclasses.field(default=None, init=False)
    confirmed: bool = dataclasses.field(default=False, init=False)
    """The CLI's stream named the session: the name may be bound to it."""
    hint: str = dataclasses.field(default="", init=False)
    """The fix for a failed login, for the environment the CLI was given."""
    stopped_after: float | None = dataclasses.field(default=None, init=False)
    """Seconds the CLI ran before it was stopped on a cause waiting cannot fix."""

    def __post_init__(self) -> None:
        self.turn = Turn(self.agent.limits)
        self.recorder = RunRecorder(
            self.store, self.run_id, clock=SystemClock(), events=self.events
        )
        # The model asked for, or the one the CLI's own configuration names.
        self.model = self.agent.configured_model(self.agent.environment())

    # ------------------------------------------------------------------ drive

    async def drive(self) -> AgentResult:
        # An interrupt during the start lets it end and records the run cancelled.
        await uncut(self._start(), self.store)
        renewer = asyncio.create_task(self.recorder.keep_leases())
        changed: bool | None = None
        error: HarnessError | None
        try:
            try:
                resume = await self._take_session()
                before = await asyncio.to_thread(_fingerprint, self.root)
                try:
                    await self._invoke(resume)
                finally:
                    after = await asyncio.to_thread(_fingerprint, self.root)
                    changed = None if before is None or after is None else before != after
                error = self._classify()
            except CLIError as exc:
                error = exc
            except asyncio.CancelledError:
                error = Cancelled(
                    f"the {self.agent.bin} run was cancelled; its processes are gone",
                    agent=self.agent.name,
                    bin=self.agent.bin,
                )
                await asyncio.shield(self._finish(error, changed))
                raise
            except HarnessError as exc:
                error = exc
            except Exception as exc:  # a bug: keep the run on record, surface it typed
                error = wrap_unknown(exc)
            return await self._finish(error, changed)
        finally:
            renewer.cancel()
            if self.session_lease is not None:
                lease, self.session_lease = self.session_lease, None
                await asyncio.shield(self.recorder.let_go(lease))

    async def _start(self) -> RunRecorder:
        run: RunRow = {
            "run_id": self.run_id,
            "task": self.task,
            "workspace": str(self.root),
            "provider": self.agent.name,
            "model": self.model,
            "started_at": self.started,
            "extras": {
                "agent": self.agent.name,
                "agent_bin": self.agent.bin,
                "session": self.session,
                "permission": self.agent.permission,
            },
        }
        await self.recorder.start(run)
        await self._emit(
            StartedEvent(
                provider=self.agent.name,
                model=self.model,
                task=self.task,
                max_steps=self.agent.max_turns or 0,
                session=self.session,
            )
        )
        return self.recorder

    async def _take_session(self) -> str | None:
        """Hold the named session and return the CLI session id to resume (if any)."""
        if self.session is None:
            return None
        named: _NamedSession = {
            "agent": self.agent.name,
            "bin": self.agent.bin,
            "name": self.session,
        }
        try:
            self.session_lease = await self.recorder.hold(_session_key(self.root, self.session))
        except ConflictError as exc:
            raise SessionBusy(
                f"session {self.session!r} is being driven by another run ({exc.owner}); "
                "wait for it to end, or use another name",
                **named,
                holder=exc.owner,
            ) from exc
        bound = await asyncio.to_thread(
            store_writer(self.store).agent_session, str(self.root), self.session
        )
        if bound is None:
            return None
        if bound["agent"] != self.agent.name:
            raise SessionConflict(
                f"session {self.session!r} belongs to {bound['agent']}, not {self.agent.name}: "
                "a CLI cannot continue another CLI's session; use another name",
                **named,
                bound=bound["agent"],
                requested=self.agent.name,
            )
        self.bound = bound["session_id"]
        if self.agent.cumulative_usage and bound.get("run_id"):
            last = await asyncio.to_thread(
                store_writer(self.store).last_checkpoint, bound["run_id"]
            )
            state = (last or {}).get("state") or {}
            self.prior_usage = state.get("usage_total") if isinstance(state, dict) else None
        return self.bound

    async def _invoke(self, resume: str | None) -> None:
        with tempfile.TemporaryDirectory(prefix="harnessnb-agent-") as scratch:
            usage_file = os.path.join(scratch, "usage.json")
            await self._invoke_with(resume, usage_file)
            self.agent.read_scratch(scratch, self.turn)
            if os.path.exists(usage_file):
                with open(usage_file, encoding="utf-8", errors="replace") as f:
                    self.agent.read_usage_file(f.read(1 << 20), self.turn)
        self._settle_usage()

    def _settle_usage(self) -> None:
        """This run's usage: a CLI that reports session totals is charged the difference."""
        if not self.agent.cumulative_usage:
            return
        usage = self.turn.usage
        self.usage_total = {k: usage[k] for k in _TOKEN_KEYS}
        if isinstance(self.prior_usage, dict):
            for key in _TOKEN_KEYS:
                usage[key] = max(0, int(usage[key]) - to_int(self.prior_usage.get(key)))

    async def _invoke_with(self, resume: str | None, usage_file: str) -> None:
        agent = self.agent
        invocation: Invocation = agent.invocation(self.task, resume=resume, usage_file=usage_file)
        env = agent.environment()
        path = env.get("PATH", os.defpath)
        # Keys and tokens are secret; a base URL or a model name is not.
        self.secrets = self.turn.secrets = [v for k, v in env.items() if is_secret_name(k)]
        self.hint = agent.auth_hint(env)
        self.turn.model = agent.configured_model(env)
        exe = shutil.which(agent.bin, path=path)
        if exe is None:
            raise NotInstalled(
                f"{agent.bin} was not found on PATH; install it with: {agent.install_hint}",
                agent=agent.name,
                bin=agent.bin,
                hint=agent.install_hint,
            )
        # The name is bound once the CLI confirms the session (its first event naming
        # it), so a run killed before that leaves the name free for a new session.
        self.spawned = True
        spawned_at = time.monotonic()
        try:
            self.end = await run_process(
                [exe, *invocation.argv[1:]],
                cwd=self.root,
                env=env,
                stdin=invocation.stdin,
                timeout_s=agent.timeout_s,
                on_line=self._on_line,
                limits=agent.limits,
            )
        except _Stopped:
            self.stopped_after = time.monotonic() - spawned_at  # the group is gone
        except OSError as exc:
            self.spawned = False
            raise self._spawn_error(exc, exe, invocation) from exc

    def _spawn_error(self, exc: OSError, exe: str, invocation: Invocation) -> CLIError:
        """The typed failure of an exec that the OS refused."""
        agent = self.agent
        if isinstance(exc, FileNotFoundError):
            # Found on PATH, yet exec says "no such file": the interpreter its first
            # line names is missing (node, for the npm-installed CLIs).
            return Spawn(
                f"{agent.bin} ({exe}) could not be started: the interpreter its first line "
                "names was not found on PATH (the npm-installed CLIs need node)",
                agent=agent.name,
                bin=agent.bin,
                reason="interpreter_missing",
            )
        if too_large(exc):
            size = sum(len(a.encode()) + 1 for a in invocation.argv)
            return CommandLineTooLarge(
                f"the command line for {agent.bin} is too large ({size} bytes of arguments "
                "plus the environment)",
                agent=agent.name,
                bin=agent.bin,
                what="argv",
                size=size,
                limit=os.sysconf("SC_ARG_MAX"),
            )
        reason = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        return Spawn(
            f"{agent.bin} ({exe}) could not be started: {exc.strerror or exc}",
            agent=agent.name,
            bin=agent.bin,
            reason=reason,
        )

    async def _on_line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").strip()
        if not line:
            return
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            self.turn.unreadable(line)
            return
        try:
            self.agent.read(obj, self.turn)
        except (TypeError, ValueError, AttributeError, KeyError):
            # An event of a shape this driver does not know: counted, never fatal.
            self.turn.unreadable(line)
        events, self.turn.events = self.turn.events, []
        for event in events:
            await self._emit(event)
        if self.turn.session_id and not self.confirmed:
            self.confirmed = True  # bound (or re-bound to this run) once confirmed
            await self._bind(self.turn.session_id)
        if self.turn.stop is not None:
            raise _Stopped  # waiting cannot fix it: the runner kills the process group

    async def _bind(self, session_id: str) -> None:
        if self.session is None:
            return
        await store_writer(self.store).queued.bind_agent_session(
            str(self.root),
            self.session,
            agent=self.agent.name,
            session_id=session_id,
            run_id=self.run_id,
        )
        self.bound = session_id

    # -------------------------------------------------------------- classify

    def _classify(self) -> CLIError | None:
        """The failure this invocation ended with, or None for a good answer."""
        lost = ""
        if self.bound:
            lost = (
                f" (session {self.session!r} is bound to {self.bound}, which "
                f"{self.agent.bin} no longer has: use a new session name)"
            )
        return verdict(
            self.agent, self.turn, self.end, scrub=self._scrub, hint=self.hint, lost=lost
        )

    def _scrub(self, text: str) -> str:
        # The child's own variables are secret for this run (not process-wide: TERM...).
        return scrub(text, self.secrets)

    # ---------------------------------------------------------------- finish

    async def _finish(self, error: HarnessError | None, changed: bool | None) -> AgentResult:
        turn, end, agent = self.turn, self.end, self.agent
        outcome = invocation_outcome(error, cancelled=isinstance(error, Cancelled))
        now = time.time()
        if not self.spawned:
            # Never started (not installed, busy session...): no attempt, no step.
            await self.recorder.finish(outcome, error, finished_at=now)
        else:
            step, attempts, tools = run_rows(
                self.agent,
                self.turn,
                self.end,
                error,
                changed=changed,
                model=self.model,
                started=self.started,
                stopped_after=self.stopped_after,
                now=now,
            )
            await self.recorder.commit_step(
                step,
                checkpoint=self._checkpoint(),
                tool_calls=tools,
                attempts=attempts,
                ending=outcome,
                error=error,
                finished_at=now,
            )
        result = AgentResult(
            run_id=self.run_id,
            agent=agent.name,
            outcome=outcome,
            text="" if error is not None else turn.text,
            cost_usd=_reported_cost(turn.usage),
            usage=usage_of(turn.usage, _reported_cost(turn.usage)),
            session_id=turn.session_id or self.bound,
            session=self.session,
            exit_code=None if end is None else end.exit_code,
            error=error,
            elapsed_s=now - self.started,
            tool_calls=turn.tool_calls_seen,
            changed_workspace=changed,
            model=turn.model or self.model,
        )
        await self._emit(
            FinishedEvent(
                outcome=outcome.value,
                steps=int(self.spawned),
                tokens=turn.tokens,
                verified=None,
                error=None if error is None else error.to_dict(),
            )
        )
        return result

    def _checkpoint(self) -> dict[str, Any]:
        # Not resumable by hn.resume: what a later run needs is the CLI's session id.
        return {
            "agent": self.agent.name,
            "session_id": self.turn.session_id or self.bound,
            "usage": self.turn.usage,
            "usage_total": self.usage_total or self.prior_usage,
            "unparsed": self.turn.unparsed,
        }

    async def _emit(self, event: AnyEvent) -> None:
        in_turn = isinstance(event, StepEvent | ToolCallEvent | RetryEvent)
        step = max(1, self.turn.messages) if in_turn else 0
        await self.recorder.emit(event, step)


class _NamedSession(TypedDict):
    """What both refusals of a named session (``SessionBusy``, ``SessionConflict``)
    say it is: the CLI's name, its executable, the session's name."""

    agent: str
    bin: str
    name: str


_TOKEN_KEYS = ("input_tokens", "output_tokens", "cached_input_tokens")


class _Stopped(Exception):
    """Raised from the line reader to stop the CLI on a cause waiting cannot fix."""


def _session_key(root: Path, name: str) -> str:
    """The lease key of a named session (leases share one table with runs)."""
    return f"agent-session:{root}:{name}"


def _fingerprint(root: Path) -> Any:
    from ..tools._workspace import Workspace

    return Workspace(root).fingerprint()
