"""Typed doors to the few IPython calls this layer makes.

IPython is typed in some releases and not in others; each door takes the untyped object
as ``Any`` so mypy's verdict is the same under every IPython this package allows (a
``type: ignore`` that one release needs is an "unused ignore" error under the next).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["display", "get_ipython", "html_object", "magic_method"]

_F = TypeVar("_F", bound=Callable[..., Any])


def get_ipython() -> Any:
    """The running IPython shell, or None."""
    from IPython.core import getipython

    current: Any = getipython.get_ipython
    return current()


def display(obj: Any, *, display_id: bool = False) -> Any:
    """``IPython.display.display``; with ``display_id=True`` returns the handle."""
    import IPython.display

    show: Any = IPython.display.display
    if display_id:
        return show(obj, display_id=True)
    return show(obj)


def html_object(markup: str) -> Any:
    """An ``IPython.display.HTML`` of ``markup`` (already escaped by the caller)."""
    import IPython.core.display

    html: Any = IPython.core.display.HTML
    return html(markup)


def magic_method(func: _F) -> _F:
    """``@no_var_expand @line_cell_magic`` on a ``Magics`` method, with its type kept."""
    from IPython.core import magic

    line_cell: Any = magic.line_cell_magic
    no_expand: Any = magic.no_var_expand
    decorated: _F = no_expand(line_cell(func))
    return decorated
