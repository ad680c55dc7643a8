"""What every bench prints beside its figures: the load it ran under, and ratios over rounds.

These machines are noisy and absolute times drift, so a bench measures the two sides of a
ratio alternately, round by round, and reports the ratio of each round's pair: its
minimum, median and maximum. A target is judged on the median; the spread says how much
the load moved it. ``load_line()`` is printed at the start and the end of a bench.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence


def load_line() -> str:
    """The 1, 5 and 15 minute load averages and the number of CPUs, as one line."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:  # not every platform has it
        return "load average: unknown"
    return f"load average: {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Each round's ratio: the i-th numerator over the i-th denominator."""
    if len(numerators) != len(denominators) or not numerators:
        raise ValueError("ratios need the same number of rounds on both sides, at least one")
    return [n / d for n, d in zip(numerators, denominators, strict=True)]


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(min, median, max) of the values."""
    return min(values), statistics.median(values), max(values)


def ratio_line(
    name: str, per_round: Sequence[float], target: float | None = None, *, at_least: bool = False
) -> str:
    """``name  median x (min a, max b over n rounds)`` and, with a target, OK or MISS.

    The target is met when the median is at most it (at least it with ``at_least``).
    """
    low, mid, high = spread(per_round)
    text = f"{name}  {mid:.2f}x (min {low:.2f}, max {high:.2f} over {len(per_round)} rounds)"
    if target is None:
        return text
    met = mid >= target if at_least else mid <= target
    sign = ">=" if at_least else "<="
    return f"{text}  target {sign} {target:.2f}x  {'OK' if met else 'MISS'}"
