"""``plot_failures``: failure rate by provider and kind, as a bar chart."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from ..rules._errors import ConfigError

__all__ = ["plot_failures"]


def plot_failures(source: Any = None, *, ax: Any = None) -> None:
    """Plot ``store.failure_rates()`` as bars: one group per provider, one bar per kind.

    Args:
        source: A ``Store``, a store path, a frame from ``failure_rates()`` (with
            ``provider``, ``kind`` and ``failure_rate`` columns), or None for the
            default store.
        ax: A matplotlib Axes to draw on (default: a new figure, which pyplot shows
            once at the end of the cell, or with ``plt.show()``; ``plt.gca()`` is it).

    Returns None, so a cell ending in ``hn.plot_failures(...)`` shows the chart and no
    ``<Axes ...>`` line.

    Raises:
        ConfigError: matplotlib is not installed (``pip install matplotlib``).
    """
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(
            "plot_failures draws with pandas' plotting, which needs matplotlib: "
            "pip install matplotlib (the numbers are in store.failure_rates())",
            code="CONFIG_MATPLOTLIB",
        )
    import matplotlib.pyplot as plt

    frame = _rates(source)
    axes = ax if ax is not None else plt.figure().gca()
    if frame.empty:  # nothing recorded yet: an empty chart that says so
        _empty(axes, "no attempts recorded yet")
        return
    providers = list(dict.fromkeys(frame["provider"].astype(object).fillna("(none)")))
    failed = frame[frame["kind"].notna()].copy()
    seen = set(failed["kind"].astype(object))
    order = frame["kind"].cat.categories if hasattr(frame["kind"], "cat") else sorted(seen)
    kinds = [k for k in order if k in seen]
    if not kinds:
        attempts = int(frame.groupby("provider", dropna=False)["attempts"].max().sum())
        _empty(axes, f"no failures in {attempts} attempts", providers)
        return
    failed["provider"] = failed["provider"].astype(object).fillna("(none)")
    failed["kind"] = failed["kind"].astype(object)

    def table(column: str) -> Any:
        wide = failed.pivot_table(
            index="provider", columns="kind", values=column, aggfunc="sum"
        ).astype(float)
        return wide.reindex(index=providers, columns=kinds).fillna(0.0)

    rates, low, high = table("failure_rate"), table("failure_rate_low"), table("failure_rate_high")
    # A provider with no failure of a kind still has an interval: 0 of n.
    totals = frame.groupby(frame["provider"].astype(object).fillna("(none)"))["attempts"].max()
    for name in providers:
        n = float(totals[name])
        upper = _wilson_upper_of_zero(n)
        for kind in kinds:
            if rates.loc[name, kind] == 0.0:
                high.loc[name, kind] = upper
    errors = [[(rates - low)[k].to_numpy(), (high - rates)[k].to_numpy()] for k in kinds]
    rates.plot.bar(ax=axes, rot=0, yerr=errors, capsize=3)
    axes.set_ylim(bottom=0.0)
    axes.set_ylabel("failure rate (share of attempts, 95% interval)")
    axes.set_title("provider failures by kind")


def _wilson_upper_of_zero(n: float) -> float:
    """The upper end of the 95% Wilson interval of 0 failures in ``n`` attempts."""
    z2 = 1.959963984540054**2
    return z2 / n / (1 + z2 / n) if n > 0 else 1.0


def _empty(axes: Any, message: str, providers: list[str] | None = None) -> None:
    """A chart that says there is nothing to draw; providers (if any) at zero."""
    if providers:
        axes.bar(providers, [0.0] * len(providers))
    else:
        axes.set_xticks([])
    axes.set_ylim(0.0, 1.0)
    axes.set_ylabel("failure rate (share of attempts)")
    axes.text(0.5, 0.5, message, ha="center", va="center", transform=axes.transAxes)
    axes.set_title(f"provider failures by kind: {message}")


def _rates(source: Any) -> Any:
    if hasattr(source, "columns"):
        if "failure_rate_low" in source.columns:
            return source
        from ..store._frames import with_intervals  # a frame made by hand or by an old version

        return with_intervals(source)
    if source is None or isinstance(source, str | os.PathLike):
        from ..store._open import open_store

        return open_store(source).failure_rates(by=("provider", "kind"))
    return source.failure_rates(by=("provider", "kind"))
