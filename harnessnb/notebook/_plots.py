"""``plot_failures``: failure rate by provider and kind, as a bar chart."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from ..rules._errors import ConfigError

__all__ = ["plot_failures"]


def plot_failures(source: Any = None, *, ax: Any = None) -> Any:
    """Plot ``store.failure_rates()`` as bars: one group per provider, one bar per kind.

    Args:
        source: A ``Store``, a store path, a frame from ``failure_rates()`` (with
            ``provider``, ``kind`` and ``failure_rate`` columns), or None for the
            default store.
        ax: A matplotlib Axes to draw on (default: a new figure).

    Returns:
        The matplotlib Axes.

    Raises:
        ConfigError: matplotlib is not installed (``pip install matplotlib``).
    """
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(
            "plot_failures draws with pandas' plotting, which needs matplotlib: "
            "pip install matplotlib (the numbers are in store.failure_rates())",
            code="CONFIG_MATPLOTLIB",
        )
    frame = _rates(source)
    if frame.empty:  # nothing recorded yet: an empty chart that says so
        import matplotlib.pyplot as plt

        axes = ax if ax is not None else plt.figure().gca()
        axes.set_title("provider failures by kind: no attempts recorded")
        return axes
    failed = frame[frame["kind"].notna()] if "kind" in frame.columns else frame
    if failed.empty:
        table = frame.assign(kind="none").pivot_table(
            index="provider", columns="kind", values="failure_rate", aggfunc="sum"
        )
    else:
        table = failed.pivot_table(
            index="provider", columns="kind", values="failure_rate", aggfunc="sum"
        ).fillna(0.0)
    axes = table.plot.bar(ax=ax, rot=0)
    axes.set_ylabel("failure rate (share of attempts)")
    axes.set_title("provider failures by kind")
    return axes


def _rates(source: Any) -> Any:
    if hasattr(source, "columns"):
        return source
    if source is None or isinstance(source, str | os.PathLike):
        from ..store._open import open_store

        return open_store(source).failure_rates(by=("provider", "kind"))
    return source.failure_rates(by=("provider", "kind"))
