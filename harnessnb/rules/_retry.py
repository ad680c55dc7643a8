"""Retry rules for provider calls, the run's clock, and the testing switch.

Pure decisions: ``RetryPolicy.delay`` says how long to wait before retry ``n``
given the latest failure, and ``retry_decision`` says whether to retry at all and
whether the wait fits the run's time budget. Time comes from a ``Clock`` so tests
use ``FakeClock`` (virtual time) or ``set_testing(True)`` (real clock, no sleeping).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Literal

from ._errors import ConfigError, ProviderError
from ._renamed import renamed, renamed_keywords

__all__ = [
    "Clock",
    "FakeClock",
    "RetryDecision",
    "RetryPolicy",
    "SystemClock",
    "TestingSwitch",
    "is_testing",
    "retry_decision",
    "seconds",
    "set_testing",
    "testing",
    "timeout_seconds",
]

_TESTING = False


class TestingSwitch:
    """What ``set_testing`` returns: the switch is already thrown; as a context
    manager it puts the previous setting back on exit."""

    __slots__ = ("_before",)

    def __init__(self, before: bool) -> None:
        self._before = before

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        global _TESTING
        _TESTING = self._before

    def __repr__(self) -> str:
        return f"<harnessnb testing {'on' if _TESTING else 'off'}>"


def set_testing(on: bool = True) -> TestingSwitch:
    """Turn real sleeping off (True) or back on, process-wide.

    With testing on, ``SystemClock.sleep`` returns at once: retries still happen and
    are recorded, but no test waits for wall-clock backoff. Takes effect at once;
    used as ``with hn.set_testing(True): ...`` it also restores the previous setting
    when the block ends.
    """
    global _TESTING
    switch = TestingSwitch(_TESTING)
    _TESTING = bool(on)
    return switch


def is_testing() -> bool:
    return _TESTING


@contextlib.contextmanager
def testing(on: bool = True) -> Iterator[None]:
    """``set_testing`` as a context manager, restoring the previous setting."""
    with set_testing(on):
        yield


def seconds(value: float | timedelta | None) -> float | None:
    """Accept float seconds or a ``timedelta``; None stays None."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def timeout_seconds(value: float | timedelta) -> float:
    """A timeout in seconds from a float or a ``timedelta``; ``ConfigError`` unless > 0."""
    out = seconds(value)
    if out is None or not out > 0:
        raise ConfigError(f"a timeout must be a positive number of seconds, got {value!r}")
    return out


class Clock:
    """Where the loop reads time and sleeps. Subclass for tests."""

    def monotonic(self) -> float:
        raise NotImplementedError

    def time(self) -> float:
        """Wall-clock Unix seconds, for timestamps in the store."""
        raise NotImplementedError

    async def sleep(self, delay: float) -> None:
        raise NotImplementedError


class SystemClock(Clock):
    """The real clock; sleeping is skipped while the testing switch is on."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, delay: float) -> None:
        if _TESTING or delay <= 0:
            await asyncio.sleep(0)
            return
        await asyncio.sleep(delay)

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock(Clock):
    """Virtual time: ``sleep`` advances it at once. Records every sleep in ``sleeps``."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = 0.0
        self._epoch = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._epoch + self._now

    def advance(self, delay: float) -> None:
        self._now += max(0.0, delay)

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.advance(delay)
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"FakeClock(t={self._now:.3f})"


@renamed(base="base_s", cap="cap_s", max_wait="max_wait_s")
@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Backoff for failed provider calls.

    Args:
        base_s: First wait in seconds (0.5): doubled per retry (was ``base``).
        cap_s: Longest computed wait (30 s; was ``cap``). A server's Retry-After is honoured as
            given even above the cap: the server knows its own limits.
        jitter: Fraction of the wait drawn at random and subtracted (0 = off, the
            default, so runs are reproducible).
        max_wait_s: The longest Retry-After a run waits out (300 s; was ``max_wait``). A
            server asking for more is not slept on, budget or not: the run ends
            ``escalated_retryable``
            at once, the error keeping its ``retry_after_s``, so a hostile or confused
            ``Retry-After: 100000000`` cannot hang a run for years.
    """

    base_s: float = 0.5
    cap_s: float = 30.0
    jitter: float = 0.0
    max_wait_s: float = 300.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_s", seconds(self.base_s))
        object.__setattr__(self, "cap_s", seconds(self.cap_s))
        object.__setattr__(self, "max_wait_s", seconds(self.max_wait_s))
        if self.base_s < 0 or self.cap_s < 0 or not 0.0 <= self.jitter <= 1.0:
            raise ValueError("RetryPolicy: base_s and cap_s must be >= 0, jitter in [0, 1]")
        if not self.max_wait_s >= 0:  # also refuses NaN
            raise ValueError("RetryPolicy: max_wait_s must be >= 0")

    @renamed_keywords(retry_after="retry_after_s")
    def delay(
        self, retry: int, retry_after_s: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry number ``retry`` (1-based).

        ``retry_after_s`` is the LATEST failure's Retry-After, used as given.
        """
        if retry_after_s is not None:
            return max(0.0, retry_after_s)
        wait: float = min(self.base_s * 2.0 ** max(0, retry - 1), self.cap_s)
        if self.jitter:
            wait *= 1.0 - self.jitter * (rng or random).random()
        return wait


@dataclasses.dataclass(frozen=True)
class RetryDecision:
    """What to do after a failed call: ``retry`` after ``delay``, or ``stop``."""

    action: Literal["retry", "stop"]
    delay: float = 0.0
    reason: Literal[
        "retry", "not_retryable", "retries_exhausted", "past_deadline", "beyond_max_wait"
    ] = "retry"


def retry_decision(
    error: ProviderError,
    *,
    retries_done: int,
    max_retries: int,
    policy: RetryPolicy,
    elapsed: float,
    max_seconds: float | None,
    rng: random.Random | None = None,
) -> RetryDecision:
    """Decide whether to retry a failed call and how long to wait.

    A wait that would end past the run's time budget, or a Retry-After above
    ``policy.max_wait_s``, is never slept: the caller stops at once (the error keeps its
    ``retry_after_s``).
    """
    if not error.retryable:
        return RetryDecision("stop", reason="not_retryable")
    if retries_done >= max_retries:
        return RetryDecision("stop", reason="retries_exhausted")
    if error.retry_after_s is not None and error.retry_after_s > policy.max_wait_s:
        return RetryDecision("stop", delay=error.retry_after_s, reason="beyond_max_wait")
    wait = policy.delay(retries_done + 1, error.retry_after_s, rng)
    if max_seconds is not None and elapsed + wait > max_seconds:
        return RetryDecision("stop", delay=wait, reason="past_deadline")
    return RetryDecision("retry", delay=wait)
