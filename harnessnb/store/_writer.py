"""The store's writes and the reads resume needs: ``StoreWriter``, the loop's side of a
``Store`` (``store_writer(store)``), kept apart from the readers users see.

The run loop, the agent CLIs' runs, resume, ``Record`` and the tests write through it;
``hn.Store`` itself only reads. Each write is declared once in ``_writes`` as a typed
function that builds a ``WriteOp``; each method here is one line made from that function
(``_now``/``_queued``: mypy, ``inspect`` and ``help`` see its signature, and
go-to-definition lands on the line naming the declaration) and only runs that op: at
once in the calling thread and its own transaction (``StoreWriter.commit_step``...), or
queued for group commit and awaited from asyncio
(``store_writer(store).queued.commit_step``...). A combined store's writer refuses
every write (``StoreError(read_only)``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from . import _writes
from ._rows import from_ts
from ._threads import parallel

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import duckdb
    import pandas as pd

    from ._batch import WriteOp

__all__ = ["QueuedWriter", "StoreWriter", "store_writer"]

T = TypeVar("T")
P = ParamSpec("P")


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


def _as_method(method: Callable[..., Any], build: Callable[..., Any], doc: str) -> None:
    """Give ``method`` the name, docstring and signature (``self`` + ``build``'s) that
    ``help`` and ``inspect`` show."""
    name = build.__name__
    method.__name__ = name
    method.__doc__ = doc.format(name=name)
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    build_sig = inspect.signature(build)
    method.__signature__ = build_sig.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *build_sig.parameters.values()]
    )


def _now(build: Callable[P, WriteOp[T]]) -> Callable[Concatenate[StoreWriter, P], T]:
    """A ``StoreWriter`` method running the op ``build`` makes now, in its own
    transaction: the write is declared once, in ``_writes``, and mypy sees its
    signature here through ``P``."""

    def method(self: StoreWriter, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.write(build(*args, **kwargs))

    _as_method(method, build, "Run ``_writes.{name}`` now, in its own transaction.")
    return method


def _queued(
    build: Callable[P, WriteOp[T]],
) -> Callable[Concatenate[QueuedWriter, P], Coroutine[Any, Any, T]]:
    """A ``QueuedWriter`` coroutine method awaiting the op ``build`` makes through group
    commit (the same declaration as ``_now``'s)."""

    async def method(self: QueuedWriter, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.writer.awrite(build(*args, **kwargs))

    _as_method(method, build, "Await ``_writes.{name}`` through group commit.")
    return method


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
    # One line a write: the signature is ``_writes``' (mypy and ``inspect`` see it).

    create_run = _now(_writes.create_run)
    start_run = _now(_writes.start_run)
    commit_step = _now(_writes.commit_step)
    finish_run = _now(_writes.finish_run)
    add_attempts = _now(_writes.add_attempts)
    add_marker = _now(_writes.add_marker)
    record_intent = _now(_writes.record_intent)
    keep_begun_step = _now(_writes.keep_begun_step)
    settle_tool_call = _now(_writes.settle_tool_call)
    acquire_lease = _now(_writes.acquire_lease)
    renew_lease = _now(_writes.renew_lease)
    release_lease = _now(_writes.release_lease)
    put_recording = _now(_writes.put_recording)
    bind_agent_session = _now(_writes.bind_agent_session)
    add_scores = _now(_writes.add_scores)
    add_sweep_run = _now(_writes.add_sweep_run)
    record_mcp_servers = _now(_writes.record_mcp_servers)

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

    def mcp_servers_of(self, run_id: str) -> list[dict[str, Any]]:
        """What each MCP server offered run ``run_id``, for resume and replay: one dict
        per snapshot (``server``, ``transport``, ``target``, ``sandbox``, ``tools`` as
        a list, ``tools_hash``, ``at`` in Unix seconds), by server, oldest first (a
        server's last is the list it offered last)."""
        with self.store._connection() as con:
            cur = con.execute(
                'SELECT * FROM mcp_servers WHERE run_id = ? ORDER BY server, "at", tools_hash',
                [run_id],
            )
            names = [d[0] for d in cur.description or []]
            rows = cur.fetchall()
        out = []
        for values in rows:
            item = dict(zip(names, values, strict=True))
            item["tools"] = [] if item["tools"] is None else json.loads(item["tools"])
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

    create_run = _queued(_writes.create_run)
    start_run = _queued(_writes.start_run)
    commit_step = _queued(_writes.commit_step)
    finish_run = _queued(_writes.finish_run)
    add_attempts = _queued(_writes.add_attempts)
    add_marker = _queued(_writes.add_marker)
    record_intent = _queued(_writes.record_intent)
    keep_begun_step = _queued(_writes.keep_begun_step)
    settle_tool_call = _queued(_writes.settle_tool_call)
    acquire_lease = _queued(_writes.acquire_lease)
    renew_lease = _queued(_writes.renew_lease)
    release_lease = _queued(_writes.release_lease)
    put_recording = _queued(_writes.put_recording)
    bind_agent_session = _queued(_writes.bind_agent_session)
    add_scores = _queued(_writes.add_scores)
    add_sweep_run = _queued(_writes.add_sweep_run)
    record_mcp_servers = _queued(_writes.record_mcp_servers)
