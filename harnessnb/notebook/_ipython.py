"""Typed doors to the few IPython calls this layer makes (IPython is partly untyped)."""

from __future__ import annotations

from typing import Any

__all__ = ["display", "get_ipython", "html_object"]


def get_ipython() -> Any:
    """The running IPython shell, or None."""
    from IPython.core.getipython import get_ipython as current

    return current()  # type: ignore[no-untyped-call]


def display(obj: Any, *, display_id: bool = False) -> Any:
    """``IPython.display.display``; with ``display_id=True`` returns the handle."""
    from IPython.display import display as show

    if display_id:
        return show(obj, display_id=True)  # type: ignore[no-untyped-call]
    return show(obj)  # type: ignore[no-untyped-call]


def html_object(markup: str) -> Any:
    """An ``IPython.display.HTML`` of ``markup`` (already escaped by the caller)."""
    from IPython.core.display import HTML

    return HTML(markup)  # type: ignore[no-untyped-call]
