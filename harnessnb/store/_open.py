"""Which store a run, a resume, an agent run, the CLI and the magics use.

``store=None`` means the default store, ``$HARNESSNB_STORE`` or ``runs.duckdb`` in the
working directory, so every entry point writes to the same file unless told otherwise.
``Store`` is imported on first use: importing this module does not import DuckDB.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["default_store", "default_store_path", "open_store"]

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
