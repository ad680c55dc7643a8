"""Which store a run, a resume, an agent run, the CLI and the magics use.

``store=None`` means the default store, ``$HARNESSNB_STORE`` or ``runs.duckdb`` in the
working directory, so every entry point writes to the same file unless told otherwise.
``Store`` is imported on first use: importing this module does not import DuckDB.

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


def default_store_path() -> str:
    """The file of the default store: ``$HARNESSNB_STORE``, else ./runs.duckdb."""
    return os.environ.get("HARNESSNB_STORE") or _DEFAULT_PATH


def default_store() -> Store:
    """The store used when ``store=None``: ``$HARNESSNB_STORE`` or ./runs.duckdb."""
    from ._store import Store

    return Store(default_store_path())


def open_store(store: Store | str | os.PathLike[str] | None) -> Store:
    """A store from a ``Store``, a path, or None (the default store)."""
    from ._store import Store

    if store is None:
        return default_store()
    if isinstance(store, str | os.PathLike):
        return Store(store)
    return store


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
    if path == ":memory:":
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
