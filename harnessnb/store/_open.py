"""Which store a run, a resume, an agent run, the CLI and the magics use: the one rule
that decides which ``Store`` object a path means, for every face.

``store=None`` means the default store, ``$HARNESSNB_STORE`` or ``runs.duckdb`` in the
working directory, so every entry point writes to the same file unless told otherwise.
A path opens a new ``Store`` (its caller closes it), except with ``keep=True`` (a
kernel's magics, which reuse one store per file across cells, DuckDB allowing one
writer per process): the store kept for that file, opened under its absolute path the
first time (and again once closed). ``:memory:`` is a new store every time. ``Store``
is imported on first use: importing this module does not import DuckDB.

A run's store is never inside its workspace (``refuse_store_inside``): there the agent
could erase or rewrite its own record (``write_file runs.duckdb``, or a command), so a
run whose store file (the default one included: ``--workspace .``) lies in the
workspace is refused before the file is made or opened. The store is not moved
elsewhere silently: a record must be where the person looks for it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from ..rules._errors import ConfigError

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["default_store", "default_store_path", "open_store", "refuse_store_inside"]

_DEFAULT_PATH: Final = "runs.duckdb"
_MEMORY: Final = ":memory:"

# The stores kept open by ``open_store(..., keep=True)``, by absolute path.
_KEPT: dict[str, Store] = {}


def default_store_path() -> str:
    """The file of the default store: ``$HARNESSNB_STORE``, else ./runs.duckdb."""
    return os.environ.get("HARNESSNB_STORE") or _DEFAULT_PATH


def default_store() -> Store:
    """The store used when ``store=None``: ``$HARNESSNB_STORE`` or ./runs.duckdb."""
    from ._store import Store

    return Store(default_store_path())


def open_store(
    store: Store | str | os.PathLike[str] | None,
    *,
    keep: bool = False,
    workspace: str | os.PathLike[str] | None = None,
) -> Store:
    """A store from a ``Store``, a path, or None (the default store).

    Args:
        keep: Reuse the store this process keeps open for the file (made the first
            time, or when the kept one was closed), which the caller must not close.
        workspace: Refuse a store inside it first (``refuse_store_inside``).

    Raises:
        ConfigError: the store lies inside ``workspace``.
    """
    from ._store import Store

    refuse_store_inside(store, workspace)
    if isinstance(store, Store):
        return store
    if not keep:
        return default_store() if store is None else Store(store)
    path = default_store_path() if store is None else os.fspath(store)
    if path == _MEMORY:
        return Store(_MEMORY)
    key = os.path.abspath(path)
    kept = _KEPT.get(key)
    if kept is None or kept._db is None:
        kept = _KEPT[key] = Store(key)
    return kept


def refuse_store_inside(
    store: Store | str | os.PathLike[str] | None, workspace: str | os.PathLike[str] | None
) -> None:
    """Refuse a store file that lies inside ``workspace`` (``:memory:`` never does; no
    workspace, nothing to refuse).

    Raises:
        ConfigError: naming the store, the workspace and how to put the store elsewhere.
    """
    if workspace is None:
        return
    if store is None:
        path = default_store_path()
    elif isinstance(store, str | os.PathLike):
        path = os.fspath(store)
    else:
        path = store.path
    if path == _MEMORY:
        return
    where = os.path.realpath(path)
    folder = os.path.realpath(workspace)
    if os.path.commonpath([where, folder]) != folder:
        return
    default = " (the default store: $HARNESSNB_STORE, else ./runs.duckdb)" if store is None else ""
    raise ConfigError(
        f"the store {path}{default} is inside the workspace {os.fspath(workspace)}, where "
        "the agent could erase or rewrite the run's record; keep it outside: pass "
        "store=/--store a path outside the workspace, or set HARNESSNB_STORE"
    )
