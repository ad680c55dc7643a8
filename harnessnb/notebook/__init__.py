"""The notebook layer: ``%harness`` magics, live progress, cards, approval in the page.

The only part of harnessnb that imports IPython or ipywidgets, and only when used:
importing this package stays cheap; ``%load_ext harnessnb`` loads the magics.

- ``_magics``: ``%harness`` / ``%%harness``; ``_sweep_magic``: ``%%harness sweep``;
  ``_args``: the magic's parsers;
- ``_progress``: live progress; ``_approver``: ``WidgetApprover``; ``_wait``: how a
  cell waits for a run; ``_tables``, ``_plots``: tables that scroll, ``plot_failures``;
- ``_env``: which frontend is there; ``_ipython``: typed doors to IPython.

May import: everything (it is a face, like ``cli``). Nothing imports it but
``harnessnb/__init__`` (for ``hn.WidgetApprover`` and ``hn.plot_failures``, lazily).
"""

from __future__ import annotations

from typing import Any

from ._approver import WidgetApprover
from ._plots import plot_failures

__all__ = ["WidgetApprover", "load_ipython_extension", "plot_failures", "unload_ipython_extension"]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext harnessnb``: register ``%harness`` and ``%%harness``."""
    from ._magics import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext harnessnb``: drop the awaiting-cell transformer and widget approver."""
    from ._magics import unload

    unload(ipython)
