"""The store's writes and the reads resume needs: ``StoreWriter``, the loop's side of a
``Store`` (``store_writer(store)``), kept apart from the readers users see.

The run loop, the agent CLIs' runs, resume, ``Record`` and the tests write through it;
``hn.Store`` itself only reads. Each write is declared once in ``_writes`` as a typed
function that builds a ``WriteOp``; the methods here are written out (so
go-to-definition and ``help`` find them) and only run that op: at once in the calling
thread and its own transaction (``StoreWriter.commit_step``...), or queued for group
commit and awaited from asyncio (``store_writer(store).queued.commit_step``...). A
combined store's writer refuses every write (``StoreError(read_only)``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from . import _writes
from ._conn import parallel
from ._leases import LEASE_TTL_S, Lease
from ._rows import from_ts

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import duckdb
    import pandas as pd

    from ._batch import WriteOp
    from ._row_types import AttemptRow, Finish, RunRow, StallRow, StepRow, ToolCallRow

__all__ = ["QueuedWriter", "StoreWriter", "store_writer"]

T = TypeVar("T")


class Writable(Protocol):
    """What a writer needs of its ``Store`` (``_store`` imports this module, not the
    other way round)."""

    _writer: StoreWriter

    def _write(self, op: WriteOp[T]) -> T: ...

    def _submit(self, op: WriteOp[T]) -> Future[T]: ...

    def _connection(self) -> AbstractContextManager[duckdb.DuckDBPyConnection]: ...


def store_writer(store: Writable) -> StoreWriter:
    """The writer of ``store`` (one per ``Store`` object)."""
    return store._writer


class StoreWriter:
    """The writes of one ``Store`` (and the reads resume, replay and the agent runs
    need). Made by the ``Store``: ``store_writer(store)``."""

    __slots__ = ("store",)

    def __init__(self, store: Writable) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"StoreWriter({self.store!r})"

    # ------------------------------------------------------------ any write

    def write(self, op: WriteOp[T]) -> T:
        """Run ``op`` now, in the calling thread and its own transaction; return its result.

        Raises:
            StoreError, ConflictError: as the write's function documents.
        """
        return self.store._write(op)

    def submit(self, op: WriteOp[T]) -> Future[T]:
        """Queue ``op`` for the store's writer thread.

        The writer commits every write queued while its previous transaction ran in ONE
        transaction (group commit), so concurrent runs of a process share statements
        and commits. The future holds what the op returns or raises; an error of one
        write (say ``ConflictError``) fails only that write.
        """
        return self.store._submit(op)

    async def awrite(self, op: WriteOp[T]) -> T:
        """``submit`` awaited from asyncio: the event loop never waits on the file.
        Cancelling the awaiting task drops a write that has not begun."""
        return await asyncio.wrap_future(self.submit(op))

    @property
    def queued(self) -> QueuedWriter:
        """The writes as coroutines through group commit (``writer.queued.commit_step``)."""
        return QueuedWriter(self)

    # ------------------------------------------------------- each write, now

    def create_run(self, run: RunRow) -> None:
        """Run ``_writes.create_run`` now, in its own transaction."""
        return self.write(_writes.create_run(run))

    def start_run(
        self,
        run: RunRow,
        owner: str,
        *,
        ttl_s: float = LEASE_TTL_S,
        now: float | None = None,
        owner_alive: Callable[[str], bool] | None = None,
    ) -> Lease:
        """Run ``_writes.start_run`` now, in its own transaction."""
        return self.write(
            _writes.start_run(run, owner, ttl_s=ttl_s, now=now, owner_alive=owner_alive)
        )

    def commit_step(
        self,
        run_id: str,
        step: StepRow,
        *,
        attempts: Sequence[AttemptRow],
        tool_calls: Sequence[ToolCallRow],
        stalls: Sequence[StallRow],
        checkpoint: Mapping[str, Any],
        lease: Lease | None = None,
        finish: Finish | None = None,
    ) -> None:
        """Run ``_writes.commit_step`` now, in its own transaction."""
        return self.write(
            _writes.commit_step(
                run_id,
                step,
                attempts=attempts,
                tool_calls=tool_calls,
                stalls=stalls,
                checkpoint=checkpoint,
                lease=lease,
                finish=finish,
            )
        )

    def finish_run(
        self,
        run_id: str,
        *,
        outcome: str,
        finished_at: float,
        error: Mapping[str, Any] | None = None,
        stalls: Sequence[StallRow] | None = None,
        lease: Lease | None = None,
        release: bool = False,
    ) -> None:
        """Run ``_writes.finish_run`` now, in its own transaction."""
        return self.write(
            _writes.finish_run(
                run_id,
                outcome=outcome,
                finished_at=finished_at,
                error=error,
                stalls=stalls,
                lease=lease,
                release=release,
            )
        )

    def add_attempts(
        self, run_id: str, attempts: Sequence[AttemptRow], *, linger_s: float = 0.0
    ) -> None:
        """Run ``_writes.add_attempts`` now, in its own transaction."""
        return self.write(_writes.add_attempts(run_id, attempts, linger_s=linger_s))

    def add_marker(self, run_id: str, kind: str, detail: str, at: float) -> None:
        """Run ``_writes.add_marker`` now, in its own transaction."""
        return self.write(_writes.add_marker(run_id, kind, detail, at))

    def record_intent(
        self,
        run_id: str,
        tool_call: ToolCallRow,
        *,
        lease: Lease | None = None,
        pending: Mapping[str, Any] | None = None,
    ) -> None:
        """Run ``_writes.record_intent`` now, in its own transaction."""
        return self.write(_writes.record_intent(run_id, tool_call, lease=lease, pending=pending))

    def keep_begun_step(
        self,
        run_id: str,
        step: int,
        pending: Mapping[str, Any],
        tool_calls: Sequence[ToolCallRow],
        *,
        lease: Lease | None = None,
    ) -> None:
        """Run ``_writes.keep_begun_step`` now, in its own transaction."""
        return self.write(_writes.keep_begun_step(run_id, step, pending, tool_calls, lease=lease))

    def settle_tool_call(
        self,
        run_id: str,
        step: int,
        seq: int,
        *,
        status: str,
        output: str | None = None,
        sandbox: str | None = None,
    ) -> None:
        """Run ``_writes.settle_tool_call`` now, in its own transaction."""
        return self.write(
            _writes.settle_tool_call(
                run_id, step, seq, status=status, output=output, sandbox=sandbox
            )
        )

    def acquire_lease(
        self,
        run_id: str,
        owner: str,
        *,
        ttl_s: float = LEASE_TTL_S,
        now: float | None = None,
        owner_alive: Callable[[str], bool] | None = None,
    ) -> Lease:
        """Run ``_writes.acquire_lease`` now, in its own transaction."""
        return self.write(
            _writes.acquire_lease(run_id, owner, ttl_s=ttl_s, now=now, owner_alive=owner_alive)
        )

    def renew_lease(self, lease: Lease, *, ttl_s: float = LEASE_TTL_S) -> Lease:
        """Run ``_writes.renew_lease`` now, in its own transaction."""
        return self.write(_writes.renew_lease(lease, ttl_s=ttl_s))

    def release_lease(self, lease: Lease) -> None:
        """Run ``_writes.release_lease`` now, in its own transaction."""
        return self.write(_writes.release_lease(lease))

    def put_recording(self, key: str, seq: int, response: Mapping[str, Any]) -> None:
        """Run ``_writes.put_recording`` now, in its own transaction."""
        return self.write(_writes.put_recording(key, seq, response))

    def bind_agent_session(
        self, workspace: str, name: str, *, agent: str, session_id: str | None, run_id: str
    ) -> None:
        """Run ``_writes.bind_agent_session`` now, in its own transaction."""
        return self.write(
            _writes.bind_agent_session(
                workspace, name, agent=agent, session_id=session_id, run_id=run_id
            )
        )

    # ------------------------------------------------------ reads for resume

    def last_checkpoint(self, run_id: str) -> dict[str, Any] | None:
        """``{"step": n, "state": {...}}`` of the highest committed step, or None."""
        with self.store._connection() as con:
            found = con.execute(
                "SELECT step, checkpoint FROM steps WHERE run_id = ? AND checkpoint IS NOT NULL "
                "ORDER BY step DESC LIMIT 1",
                [run_id],
            ).fetchone()
        if found is None:
            return None
        return {"step": int(found[0]), "state": json.loads(found[1])}

    def open_intents(self, run_id: str) -> list[dict[str, Any]]:
        """Tool rows still in status ``intent`` (a WRITE that may or may not have run)."""
        return self._tool_rows("WHERE run_id = ? AND status = 'intent'", [run_id])

    def pending_step(self, run_id: str, step: int) -> dict[str, Any] | None:
        """The answer recorded with step ``step``'s first intent, if that step began."""
        with self.store._connection() as con:
            found = con.execute(
                "SELECT answer FROM pending_steps WHERE run_id = ? AND step = ?", [run_id, step]
            ).fetchone()
        return None if found is None else dict(json.loads(found[0]))

    def step_tool_calls(self, run_id: str, step: int) -> list[dict[str, Any]]:
        """The tool rows of one step, whatever their status, ordered by seq."""
        return self._tool_rows("WHERE run_id = ? AND step = ?", [run_id, step])

    def unsettled_tool_calls(self, run_id: str) -> list[dict[str, Any]]:
        """Tool rows still ``intent`` or ``needs_reconciliation``."""
        return self._tool_rows(
            "WHERE run_id = ? AND status IN ('intent', 'needs_reconciliation')", [run_id]
        )

    def _tool_rows(self, where: str, params: list[Any]) -> list[dict[str, Any]]:
        with self.store._connection() as con:
            cur = con.execute(f"SELECT * FROM tool_calls {where} ORDER BY step, seq", params)
            names = [d[0] for d in cur.description or []]
            rows = cur.fetchall()
        out = []
        for values in rows:
            item = dict(zip(names, values, strict=True))
            item["args"] = None if item["args"] is None else json.loads(item["args"])
            item["at"] = from_ts(item["at"])
            out.append(item)
        return out

    def get_recordings(self, key: str) -> list[dict[str, Any]]:
        """The responses recorded under ``key``, ordered by seq."""
        with self.store._connection() as con:
            rows = con.execute(
                "SELECT response FROM recordings WHERE key = ? ORDER BY seq", [key]
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def agent_session(self, workspace: str, name: str) -> dict[str, Any] | None:
        """The binding of session ``name`` in ``workspace``: agent, session_id, run_id."""
        with self.store._connection() as con:
            found = con.execute(
                "SELECT agent, session_id, run_id, updated_at FROM agent_sessions "
                "WHERE workspace = ? AND name = ?",
                [workspace, name],
            ).fetchone()
        if found is None:
            return None
        agent, session_id, run_id, updated_at = found
        return {
            "workspace": workspace,
            "name": name,
            "agent": agent,
            "session_id": session_id,
            "run_id": run_id,
            "updated_at": from_ts(updated_at),
        }

    def agent_sessions(self) -> pd.DataFrame:
        """Every named agent session and the CLI session it continues."""
        from ._frames import frame

        with self.store._connection() as con, parallel(con):
            return frame(con.execute("SELECT * FROM agent_sessions ORDER BY workspace, name"))


class QueuedWriter:
    """The writes from asyncio, each queued for group commit and awaited
    (``StoreWriter.awrite``): the writes of concurrent runs share transactions and the
    event loop never blocks. Same arguments, results and errors as ``StoreWriter``'s."""

    __slots__ = ("writer",)

    def __init__(self, writer: StoreWriter) -> None:
        self.writer = writer

    async def create_run(self, run: RunRow) -> None:
        """Await ``_writes.create_run`` through group commit."""
        return await self.writer.awrite(_writes.create_run(run))

    async def start_run(
        self,
        run: RunRow,
        owner: str,
        *,
        ttl_s: float = LEASE_TTL_S,
        now: float | None = None,
        owner_alive: Callable[[str], bool] | None = None,
    ) -> Lease:
        """Await ``_writes.start_run`` through group commit."""
        return await self.writer.awrite(
            _writes.start_run(run, owner, ttl_s=ttl_s, now=now, owner_alive=owner_alive)
        )

    async def commit_step(
        self,
        run_id: str,
        step: StepRow,
        *,
        attempts: Sequence[AttemptRow],
        tool_calls: Sequence[ToolCallRow],
        stalls: Sequence[StallRow],
        checkpoint: Mapping[str, Any],
        lease: Lease | None = None,
        finish: Finish | None = None,
    ) -> None:
        """Await ``_writes.commit_step`` through group commit."""
        return await self.writer.awrite(
            _writes.commit_step(
                run_id,
                step,
                attempts=attempts,
                tool_calls=tool_calls,
                stalls=stalls,
                checkpoint=checkpoint,
                lease=lease,
                finish=finish,
            )
        )

    async def finish_run(
        self,
        run_id: str,
        *,
        outcome: str,
        finished_at: float,
        error: Mapping[str, Any] | None = None,
        stalls: Sequence[StallRow] | None = None,
        lease: Lease | None = None,
        release: bool = False,
    ) -> None:
        """Await ``_writes.finish_run`` through group commit."""
        return await self.writer.awrite(
            _writes.finish_run(
                run_id,
                outcome=outcome,
                finished_at=finished_at,
                error=error,
                stalls=stalls,
                lease=lease,
                release=release,
            )
        )

    async def add_attempts(
        self, run_id: str, attempts: Sequence[AttemptRow], *, linger_s: float = 0.0
    ) -> None:
        """Await ``_writes.add_attempts`` through group commit."""
        return await self.writer.awrite(_writes.add_attempts(run_id, attempts, linger_s=linger_s))

    async def add_marker(self, run_id: str, kind: str, detail: str, at: float) -> None:
        """Await ``_writes.add_marker`` through group commit."""
        return await self.writer.awrite(_writes.add_marker(run_id, kind, detail, at))

    async def record_intent(
        self,
        run_id: str,
        tool_call: ToolCallRow,
        *,
        lease: Lease | None = None,
        pending: Mapping[str, Any] | None = None,
    ) -> None:
        """Await ``_writes.record_intent`` through group commit."""
        return await self.writer.awrite(
            _writes.record_intent(run_id, tool_call, lease=lease, pending=pending)
        )

    async def keep_begun_step(
        self,
        run_id: str,
        step: int,
        pending: Mapping[str, Any],
        tool_calls: Sequence[ToolCallRow],
        *,
        lease: Lease | None = None,
    ) -> None:
        """Await ``_writes.keep_begun_step`` through group commit."""
        return await self.writer.awrite(
            _writes.keep_begun_step(run_id, step, pending, tool_calls, lease=lease)
        )

    async def settle_tool_call(
        self,
        run_id: str,
        step: int,
        seq: int,
        *,
        status: str,
        output: str | None = None,
        sandbox: str | None = None,
    ) -> None:
        """Await ``_writes.settle_tool_call`` through group commit."""
        return await self.writer.awrite(
            _writes.settle_tool_call(
                run_id, step, seq, status=status, output=output, sandbox=sandbox
            )
        )

    async def acquire_lease(
        self,
        run_id: str,
        owner: str,
        *,
        ttl_s: float = LEASE_TTL_S,
        now: float | None = None,
        owner_alive: Callable[[str], bool] | None = None,
    ) -> Lease:
        """Await ``_writes.acquire_lease`` through group commit."""
        return await self.writer.awrite(
            _writes.acquire_lease(run_id, owner, ttl_s=ttl_s, now=now, owner_alive=owner_alive)
        )

    async def renew_lease(self, lease: Lease, *, ttl_s: float = LEASE_TTL_S) -> Lease:
        """Await ``_writes.renew_lease`` through group commit."""
        return await self.writer.awrite(_writes.renew_lease(lease, ttl_s=ttl_s))

    async def release_lease(self, lease: Lease) -> None:
        """Await ``_writes.release_lease`` through group commit."""
        return await self.writer.awrite(_writes.release_lease(lease))

    async def put_recording(self, key: str, seq: int, response: Mapping[str, Any]) -> None:
        """Await ``_writes.put_recording`` through group commit."""
        return await self.writer.awrite(_writes.put_recording(key, seq, response))

    async def bind_agent_session(
        self, workspace: str, name: str, *, agent: str, session_id: str | None, run_id: str
    ) -> None:
        """Await ``_writes.bind_agent_session`` through group commit."""
        return await self.writer.awrite(
            _writes.bind_agent_session(
                workspace, name, agent=agent, session_id=session_id, run_id=run_id
            )
        )
