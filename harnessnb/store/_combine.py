"""Many store files read as one (``Store.combine``) and written into one (``Store.merge``).

A sweep on a cluster writes one shard file per worker process (DuckDB lets one process
write a file at a time). ``CombinedStore`` reads them as one store: each reader call
opens an in-memory DuckDB database, ATTACHes every shard READ_ONLY in its turn
(``_turn``: the OFD lock on ``<shard>.lock`` that writers take too, so a writer in
another process is never broken and a reader waits for a busy writer rather than
failing), and names views after the store's tables that ``UNION ALL BY NAME`` the
shards; ``runs`` is the store's own view over those. So every reader (``runs``,
``attempts``, ``failure_rates``, ``sql``, ``get_run``...) answers from what the shards
hold at the time of the call, as one store holding all their runs would. The turns are
held for the call (taken in path order, so two readers never wait on each other) and
given back after it.

A shard written by an older harnessnb is refused with how to upgrade it (opening it
once as ``hn.Store(path)`` migrates it): a read-only view never writes a shard. A run
id in two shards is refused (``StoreError(duplicate)`` naming the shards): a sweep
claims each run once, so two copies mean the same shard was combined twice under two
names, or runs copied by hand, and neither copy may silently win.

``merge`` writes every row of a store (combined or not) into one ordinary store file:
a new file, or a harnessnb store holding none of those run ids, in one transaction
(on any error nothing is written).
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterator, Sequence
from typing import Final

import duckdb

from ..rules._errors import ConfigError, StoreError
from ._conn import MEMORY, acquire_shared, release_shared, store_error
from ._files import check_header
from ._journal import recover
from ._schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    check_catalog,
    check_catalog_table,
    connect,
)
from ._turn import FileTurn

__all__ = ["BASE_TABLES", "merge_into", "read_only_error", "shard_paths", "shards_as_one"]

# The tables of a store at SCHEMA_VERSION that hold rows (``runs`` is a view over
# ``run_rows``, ``steps`` and ``attempts``; ``schema_version`` is each file's own).
BASE_TABLES: Final = (
    "run_rows", "steps", "attempts", "tool_calls", "stalls", "markers", "pending_steps",
    "leases", "recordings", "agent_sessions", "scores", "sweep_runs", "run_files", "mcp_servers",
)  # fmt: skip
# Shard files whose macros and types were checked whole (``check_catalog``), with the
# state they were in: a reader call skips that slow part for a shard unchanged since.
_CHECKED: dict[str, tuple[tuple[int, ...], ...]] = {}
# How long a reader waits for each shard's turn (a writer hands over within ~1 s).
_TURN_WAIT_S: Final = 30.0


def _runs_view() -> str:
    """The newest ``CREATE VIEW runs`` of the migrations (the view at SCHEMA_VERSION)."""
    for version in range(SCHEMA_VERSION, 0, -1):
        for statement in reversed(MIGRATIONS[version]):
            if statement.startswith("CREATE VIEW runs"):
                return statement
    raise AssertionError("no runs view in the migrations")  # pragma: no cover


def shard_paths(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The shard files of a folder (every ``*.duckdb`` in it, sorted) or of a list.

    Raises:
        ConfigError: A missing folder or file, an empty folder or list, a file named twice.
    """
    if isinstance(source, str | os.PathLike):
        folder = os.fspath(source)
        if not os.path.isdir(folder):
            if os.path.isfile(folder):
                return shard_paths([folder])
            raise ConfigError(f"Store.combine: {folder!r} is not a folder or a file that exists")
        paths = sorted(glob.glob(os.path.join(glob.escape(folder), "*.duckdb")))
        if not paths:
            raise ConfigError(f"Store.combine: the folder {folder!r} holds no *.duckdb file")
        return paths
    if not isinstance(source, Sequence) or not source:
        raise ConfigError("Store.combine: pass a folder, or a non-empty list of store files")
    paths = [os.fspath(p) for p in source]
    for path in paths:
        if not os.path.isfile(path):
            raise ConfigError(
                f"Store.combine: {path!r} is no store file (missing, or not a regular file)"
            )
    real = [os.path.realpath(p) for p in paths]
    if len(set(real)) != len(real):
        raise ConfigError("Store.combine: a store file is named twice")
    return paths


@contextlib.contextmanager
def shards_as_one(
    paths: Sequence[str], wait_s: float, label: str
) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory database with every shard of ``paths`` attached read-only, each in
    its turn (held until the block ends), under views named after the store's tables.

    Raises:
        StoreError: see ``Store.combine``; driver errors of the block as StoreError.
    """
    # External access is on only while the shards are attached (ATTACH reads a file),
    # then off for good: no view, and no query a caller sends through ``sql``, reads
    # another file or reaches the network.
    con = connect(MEMORY, attach=True)
    turns: list[FileTurn] = []
    try:
        con.execute("SET threads = 1")
        names = [_attach(con, path, i, turns, wait_s) for i, path in enumerate(paths)]
        con.execute("SET enable_external_access = false")
        for path, name in zip(paths, names, strict=True):
            if name is not None:
                _check_shard(con, path, name, turns)
        names = [n if n is None else _settled(con, p, n) for p, n in zip(paths, names, strict=True)]
        _union_views(con, [n for n in names if n is not None])
        _refuse_duplicates(con, paths, names)
        yield con
    except duckdb.Error as exc:
        raise store_error(exc, label) from exc
    finally:
        con.close()
        for turn in turns:
            turn.give()


def read_only_error(count: int, label: str) -> StoreError:
    """What a write on a combined store raises."""
    return StoreError(
        f"read-only: combined from {count} shards ({label}); Store.merge(into=path) "
        "writes them into one store you can add to",
        kind="read_only",
        path=label,
    )


def _attach(
    con: duckdb.DuckDBPyConnection, path: str, i: int, turns: list[FileTurn], wait_s: float
) -> str | None:
    """ATTACH shard ``path`` read-only as ``shard<i>`` in its turn; its name, or None for
    an empty file (a shard that was never written holds no rows)."""
    turn = FileTurn(path)
    turn.take(wait_s)
    turns.append(turn)
    if os.path.getsize(path) == 0:
        return None
    name = f"shard{i}"
    with _discarding_on_refusal(turn, turns):
        with contextlib.suppress(FileNotFoundError):  # check_header removes empty files
            check_header(path)
        literal = "'" + path.replace("'", "''") + "'"
        try:
            con.execute(f"ATTACH {literal} AS {name} (READ_ONLY)")
        except duckdb.Error as exc:
            raise store_error(exc, path) from exc
    return name


def _check_shard(
    con: duckdb.DuckDBPyConnection, path: str, name: str, turns: list[FileTurn]
) -> None:
    turn = next(t for t in turns if t.store_path == path)
    with _discarding_on_refusal(turn, turns):
        _check_store(con, path, name)


@contextlib.contextmanager
def _discarding_on_refusal(turn: FileTurn, turns: list[FileTurn]) -> Iterator[None]:
    try:
        yield
    except StoreError as exc:
        if exc.kind in ("corrupt", "foreign", "newer"):
            turns.remove(turn)
            turn.discard()  # not a store of ours: leave nothing beside it
        raise


def _check_store(con: duckdb.DuckDBPyConnection, path: str, name: str) -> None:
    """Refuse shard ``name`` unless it is a harnessnb store at SCHEMA_VERSION holding
    only harnessnb's own objects (``check_catalog``)."""
    found = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' "
        "AND table_name IN ('schema_version', 'attempts')",
        [name],
    ).fetchone()
    if not found or found[0] != 2:
        raise StoreError(
            f"{path} is a DuckDB database but not a harnessnb store; it was left untouched",
            kind="foreign",
            path=path,
        )
    check_catalog_table(con, path, name, "schema_version")
    row = con.execute(f"SELECT max(version) FROM {name}.schema_version").fetchone()
    version = int(row[0]) if row and row[0] is not None else 0
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the store {path} has schema version {version}, newer than the "
            f"{SCHEMA_VERSION} this harnessnb understands; upgrade harnessnb to read it",
            kind="newer",
            path=path,
        )
    if version < SCHEMA_VERSION:
        raise StoreError(
            f"the shard {path} has schema version {version}, older than {SCHEMA_VERSION}: "
            f"open it once as hn.Store({path!r}) (which migrates it in place), then combine",
            kind="query",
            path=path,
        )
    state = _file_state(path)
    check_catalog(con, path, version, name, functions=_CHECKED.get(path) != state)
    _CHECKED[path] = state


def _settled(con: duckdb.DuckDBPyConnection, path: str, name: str) -> str:
    """Shard ``name``, or where its writer was killed with steps still journaled (their
    attempt and tool-call rows not yet in their tables, ``_journal``), an in-memory
    copy of it with them settled: read, never written."""
    if not con.execute(f"SELECT 1 FROM {name}.steps WHERE journal IS NOT NULL LIMIT 1").fetchone():
        return name
    copy = f"{name}_settled"
    con.execute(f"ATTACH ':memory:' AS {copy}")
    con.execute(f"COPY FROM DATABASE {name} TO {copy}")
    con.execute(f"USE {copy}")
    try:
        recover(con, path)
    finally:
        con.execute("USE memory")
    return copy


def _file_state(path: str) -> tuple[tuple[int, ...], ...]:
    """What changes when a shard file (or its WAL) is written or replaced."""
    found: list[tuple[int, ...]] = []
    for name in (path, path + ".wal"):
        try:
            st = os.stat(name)
        except OSError:
            found.append(())
            continue
        found.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(found)


def _union_views(con: duckdb.DuckDBPyConnection, names: list[str]) -> None:
    """Views named after the store's tables over every attached shard, and ``runs``."""
    if not names:
        # Only empty files: the views over one empty in-memory store's tables.
        for version in range(1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                con.execute(statement)
        return
    for table in BASE_TABLES:
        union = " UNION ALL BY NAME ".join(f"SELECT * FROM {n}.main.{table}" for n in names)
        con.execute(f"CREATE VIEW {table} AS {union}")
    con.execute(_runs_view())


def _refuse_duplicates(
    con: duckdb.DuckDBPyConnection, paths: Sequence[str], names: Sequence[str | None]
) -> None:
    found = con.execute(
        "SELECT run_id FROM run_rows GROUP BY run_id HAVING count(*) > 1 ORDER BY run_id LIMIT 1"
    ).fetchone()
    if found is None:
        return
    run_id = found[0]
    holders = [
        path
        for path, name in zip(paths, names, strict=True)
        if name is not None
        and con.execute(f"SELECT 1 FROM {name}.main.run_rows WHERE run_id = ?", [run_id]).fetchone()
    ]
    raise StoreError(
        f"the run {run_id} is in more than one shard ({', '.join(holders)}): the same shard "
        "combined twice, or rows copied by hand; combine each shard once",
        kind="duplicate",
        path=holders[0] if holders else None,
    )


def merge_into(con: duckdb.DuckDBPyConnection, sources: Sequence[str], target: str) -> None:
    """Write every row readable through ``con`` into the store file ``target`` (whose
    schema exists), in ``target``'s turn and one transaction.

    The rows travel as DataFrames from ``con`` to the target's own connection: neither
    connection ATTACHes the other's file, so both keep external access off.

    Raises:
        ConfigError: ``target`` is one of ``sources``.
        StoreError: ``duplicate`` when ``target`` holds one of the runs (nothing written);
            ``read_only`` when ``target`` cannot be written.
    """
    if target == MEMORY or any(os.path.realpath(target) == os.path.realpath(p) for p in sources):
        raise ConfigError(f"Store.merge: into={target!r} must be another store file")
    db = acquire_shared(target, linger_s=0.0)
    try:
        with db.connection(_TURN_WAIT_S) as into:
            if db.read_only:
                raise StoreError(
                    f"Store.merge: {target} cannot be written (a read-only file or folder)",
                    kind="read_only",
                    path=target,
                )
            _copy_rows(con, into, target)
    finally:
        release_shared(db)


def _copy_rows(
    con: duckdb.DuckDBPyConnection, into: duckdb.DuckDBPyConnection, target: str
) -> None:
    ours = {row[0] for row in con.execute("SELECT run_id FROM run_rows").fetchall()}
    theirs = {row[0] for row in into.execute("SELECT run_id FROM run_rows").fetchall()}
    clash = sorted(ours & theirs)
    if clash:
        raise StoreError(
            f"Store.merge: {target} already holds the run {clash[0]}; nothing was "
            "written (merge into a new file, or a store without these runs)",
            kind="duplicate",
            path=target,
        )
    name = "_harnessnb_merge"
    into.execute("BEGIN TRANSACTION")
    try:
        for table in BASE_TABLES:
            frame = con.execute(f"SELECT * FROM {table}").df()
            into.register(name, frame)
            try:
                into.execute(f"INSERT INTO main.{table} BY NAME SELECT * FROM {name}")
            finally:
                into.unregister(name)
        into.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            into.execute("ROLLBACK")
        raise
