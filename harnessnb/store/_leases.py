"""Leases: the right of one process to drive a run, kept in the ``leases`` table.

A lease row holds the owner (``host:pid:token``), a generation bumped by every
acquire, an expiry and a ``released`` flag. A write under a lease applies only while
its generation is current and unreleased; a lease held by another owner is taken
over once it has expired or its process is gone (``owner_alive``). The deferred
guards that ride on a batch's merged statements live with the batch (``_batch``);
the rules and the plain statements are here.

Importing this module does not import DuckDB: the loop reads ``LEASE_TTL_S`` and the
owner functions at import time.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..rules._errors import ConflictError
from ._rows import from_ts, to_ts

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "LEASE_TTL_S",
    "Lease",
    "acquire",
    "check_lease",
    "check_lease_of",
    "lease_blocks",
    "owner_alive",
    "owner_identity",
    "renew",
]

# How long a lease lasts without renewal; a driver renews it every third of that.
LEASE_TTL_S: Final = 30.0
_OWNER_TOKEN: Final = uuid.uuid4().hex[:8]


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to drive one run: valid while ``generation`` is current in the store."""

    run_id: str
    owner: str
    generation: int
    expires_at: float


def owner_identity() -> str:
    """host:pid:token of this process, the owner written on a run's lease."""
    return f"{socket.gethostname()}:{os.getpid()}:{_OWNER_TOKEN}"


def owner_alive(owner: str) -> bool:
    """False when ``owner`` is a process of this host that no longer exists."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True  # another machine: only the lease's expiry can tell
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lease_blocks(
    held: tuple[Any, ...],
    owner: str,
    now: float,
    owner_alive: Callable[[str], bool] | None,
) -> bool:
    """True when the held lease belongs to another live owner and has not expired."""
    holder, _generation, expires_at, released = held
    if released or holder == owner:
        return False
    if (from_ts(expires_at) or 0.0) <= now:
        return False
    return owner_alive is None or owner_alive(str(holder))


def acquire(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    owner: str,
    ttl_s: float,
    now: float,
    owner_alive: Callable[[str], bool] | None,
) -> Lease:
    """Take ``run_id``'s lease for ``owner``, one generation past the last.

    Raises:
        ConflictError: another live owner holds an unexpired lease.
    """
    held = con.execute(
        "SELECT owner, generation, expires_at, released FROM leases WHERE run_id = ?",
        [run_id],
    ).fetchone()
    generation = 1 if held is None else int(held[1]) + 1
    if held is not None and lease_blocks(held, owner, now, owner_alive):
        raise ConflictError(
            f"run {run_id!r} is driven by {held[0]!r} (lease generation {held[1]}, "
            f"expires in {(from_ts(held[2]) or now) - now:.0f} s)",
            run_id=run_id,
            owner=str(held[0]),
        )
    con.execute(
        "INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?, false) ON CONFLICT (run_id) DO "
        "UPDATE SET owner = excluded.owner, generation = excluded.generation, "
        "acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at, "
        "expires_at = excluded.expires_at, released = false",
        [run_id, owner, generation, to_ts(now), to_ts(now), to_ts(now + ttl_s)],
    )
    return Lease(run_id, owner, generation, now + ttl_s)


def renew(con: duckdb.DuckDBPyConnection, lease: Lease, ttl_s: float, now: float) -> Lease:
    """Extend a current lease to ``now + ttl_s``. Raises ``ConflictError`` when stale."""
    check_lease_of(con, lease.run_id, lease)
    con.execute(
        "UPDATE leases SET renewed_at = ?, expires_at = ? WHERE run_id = ?",
        [to_ts(now), to_ts(now + ttl_s), lease.run_id],
    )
    return Lease(lease.run_id, lease.owner, lease.generation, now + ttl_s)


def check_lease_of(con: duckdb.DuckDBPyConnection, run_id: str, lease: Lease | None) -> None:
    """``check_lease`` for a ``Lease`` (None: no lease, nothing to check)."""
    if lease is not None:
        check_lease(con, run_id, lease.generation, lease.owner)


def check_lease(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    generation: int | None,
    holder: str = "this process",
) -> None:
    """Raise ``ConflictError`` unless ``generation`` is ``run_id``'s current lease."""
    if generation is None:
        return
    held = con.execute(
        "SELECT owner, generation, released FROM leases WHERE run_id = ?", [run_id]
    ).fetchone()
    if held is None or int(held[1]) != generation or held[2]:
        owner = None if held is None or held[2] else str(held[0])
        raise ConflictError(
            f"the lease of {holder!r} on run {run_id!r} (generation {generation}) "
            "is no longer current" + (f": {owner!r} drives the run now" if owner else ""),
            run_id=run_id,
            owner=owner,
        )
