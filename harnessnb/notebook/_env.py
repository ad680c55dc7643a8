"""Where are we running? Each environment quirk in one small function, named.

Nothing here imports IPython or ipywidgets at module level: the answers are
computed on call, so the core (and plain ``python``) never pays for them.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

__all__ = ["ipython_shell", "kernel_of", "no_widgets_requested", "widget_frontend"]


def ipython_shell() -> Any | None:
    """The running IPython shell, or None in plain Python (IPython not imported)."""
    import sys

    if "IPython" not in sys.modules:  # plain python: do not import IPython just to ask
        return None
    from ._ipython import get_ipython

    return get_ipython()


def kernel_of(shell: Any) -> Any | None:
    """The ipykernel kernel behind ``shell``; None for terminal IPython and plain shells.

    Quirk: terminal IPython and ``InteractiveShell`` have no ``kernel`` attribute;
    only ipykernel's ``ZMQInteractiveShell`` does, and only it can carry comms.
    """
    return getattr(shell, "kernel", None) if shell is not None else None


def no_widgets_requested() -> bool:
    """True when ``$HARNESSNB_NO_WIDGETS`` is set to anything but "", "0" or "false"."""
    value = os.environ.get("HARNESSNB_NO_WIDGETS", "").strip().lower()
    return value not in ("", "0", "false", "no")


def widget_frontend(shell: Any | None = None) -> bool:
    """True when live ipywidgets can be shown: an ipykernel kernel, ipywidgets installed,
    and ``$HARNESSNB_NO_WIDGETS`` not set.

    Quirk (no way to ask the frontend): a kernel cannot tell a browser that renders
    widgets from a headless client (nbclient, papermill) or a frontend without the
    widget extension. Both are treated as a frontend; nothing is lost, because the
    live panel is replaced by a static HTML card when the run ends, so saved
    notebooks show the result either way. Set ``HARNESSNB_NO_WIDGETS=1`` for plain
    text progress lines instead.
    """
    if no_widgets_requested():
        return False
    shell = shell if shell is not None else ipython_shell()
    if kernel_of(shell) is None:
        return False
    return importlib.util.find_spec("ipywidgets") is not None
