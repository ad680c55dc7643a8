"""Pure rules: backoff, the deadline check, the testing switch, stall detection."""

from __future__ import annotations

import asyncio
import random
import time
from datetime import timedelta

import pytest

import harnessnb as hn
from harnessnb import FakeClock, RetryPolicy, StallPolicy
from harnessnb.rules import _retry
from harnessnb.rules._retry import SystemClock, retry_decision
from harnessnb.rules._stall import StallDetector, call_signature, replan_directive

K = hn.ProviderErrorKind


def err(kind: hn.ProviderErrorKind, retry_after: float | None = None) -> hn.ProviderError:
    return hn.ProviderError("x", kind=kind, retry_after_s=retry_after)


@pytest.mark.parametrize(
    ("retry", "expected"), [(1, 0.5), (2, 1.0), (3, 2.0), (6, 16.0), (7, 30.0), (50, 30.0)]
)
def test_backoff_doubles_from_base_up_to_cap(retry: int, expected: float) -> None:
    assert RetryPolicy().delay(retry) == expected


def test_retry_after_above_cap_is_honoured() -> None:
    assert RetryPolicy(cap_s=30.0).delay(1, retry_after_s=100.0) == 100.0
    assert RetryPolicy().delay(3, retry_after_s=0.0) == 0.0


def test_times_accept_timedelta() -> None:
    pol = RetryPolicy(base_s=timedelta(milliseconds=250), cap_s=timedelta(seconds=1))
    assert pol.delay(1) == 0.25 and pol.delay(5) == 1.0


def test_jitter_only_shortens_and_is_seeded() -> None:
    pol = RetryPolicy(jitter=0.25)
    a = [pol.delay(3, rng=random.Random(7)) for _ in range(3)]
    b = [pol.delay(3, rng=random.Random(7)) for _ in range(3)]
    assert a == b
    assert all(1.5 <= d <= 2.0 for d in a)


@pytest.mark.parametrize(
    ("error", "done", "elapsed", "max_seconds", "action", "reason", "delay"),
    [
        (err(K.SERVER), 0, 0.0, None, "retry", "retry", 0.5),
        (err(K.SERVER), 1, 0.0, None, "retry", "retry", 1.0),
        (err(K.SERVER), 2, 0.0, None, "stop", "retries_exhausted", 0.0),
        (err(K.AUTH), 0, 0.0, None, "stop", "not_retryable", 0.0),
        (err(K.CONTEXT_OVERFLOW), 0, 0.0, None, "stop", "not_retryable", 0.0),
        (err(K.RATE_LIMITED, 1.0), 0, 0.0, None, "retry", "retry", 1.0),
        (err(K.RATE_LIMITED, 100.0), 0, 0.0, 5.0, "stop", "past_deadline", 100.0),
        (err(K.RATE_LIMITED, 4.0), 0, 2.0, 5.0, "stop", "past_deadline", 4.0),
        (err(K.RATE_LIMITED, 3.0), 0, 2.0, 5.0, "retry", "retry", 3.0),
        (err(K.TIMEOUT), 1, 4.5, 5.0, "stop", "past_deadline", 1.0),
    ],
)
def test_retry_decision_table(
    error: hn.ProviderError,
    done: int,
    elapsed: float,
    max_seconds: float | None,
    action: str,
    reason: str,
    delay: float,
) -> None:
    d = retry_decision(
        error,
        retries_done=done,
        max_retries=2,
        policy=RetryPolicy(),
        elapsed=elapsed,
        max_seconds=max_seconds,
    )
    assert (d.action, d.reason, d.delay) == (action, reason, delay)


def test_x_should_retry_false_stops_a_retryable_kind() -> None:
    e = hn.ProviderError("x", kind=K.SERVER, should_retry=False)
    d = retry_decision(
        e, retries_done=0, max_retries=2, policy=RetryPolicy(), elapsed=0, max_seconds=None
    )
    assert d.reason == "not_retryable"


def test_testing_switch_makes_system_sleep_instant() -> None:
    clock = SystemClock()
    with _retry.testing():
        t0 = time.monotonic()
        asyncio.run(clock.sleep(30.0))
        assert time.monotonic() - t0 < 1.0


def test_set_testing_takes_effect_at_once_and_restores_as_a_context_manager() -> None:
    before = _retry.is_testing()
    try:
        hn.set_testing(False)
        assert not _retry.is_testing()
        with hn.set_testing(True):
            assert _retry.is_testing()
            with hn.set_testing(False):
                assert not _retry.is_testing()
            assert _retry.is_testing()
        assert not _retry.is_testing()  # the setting before the outer block
        hn.set_testing(True)  # a plain call stays thrown
        assert _retry.is_testing()
    finally:
        hn.set_testing(before)


def test_fake_clock_advances_on_sleep() -> None:
    clock = FakeClock()
    asyncio.run(clock.sleep(7.5))
    assert clock.monotonic() == 7.5 and clock.sleeps == [7.5]


# ------------------------------------------------------------------------ stalls


def run_detector(
    steps: list[tuple[list[str], bool]], policy: StallPolicy | None = None
) -> list[tuple[int, str, str]]:
    det = StallDetector(policy or StallPolicy())
    out = []
    for i, (calls, changed) in enumerate(steps, start=1):
        sig = det.observe(i, calls, changed)
        if sig:
            out.append((sig.step, sig.signal, sig.action))
            if sig.action == "stalled":
                break
    return out


READ_A = call_signature("read_file", {"path": "a.txt"})


def test_same_read_repeated_replans_at_third_and_stalls_at_sixth() -> None:
    assert run_detector([([READ_A], False)] * 10) == [
        (3, "repetition", "replan"),
        (6, "repetition", "stalled"),
    ]


def test_four_different_reads_are_exploration() -> None:
    steps = [([call_signature("read_file", {"path": f"f{i}"})], False) for i in range(4)]
    assert run_detector(steps) == []


def test_rewriting_same_bytes_is_caught_by_repetition() -> None:
    write = call_signature("write_file", {"path": "n.md", "content": "x"})
    # the first write changes the workspace; later identical writes do not
    steps = [([write], True)] + [([write], False)] * 5
    assert run_detector(steps)[0] == (3, "repetition", "replan")


def test_appending_loop_is_caught_by_repetition_whatever_changed() -> None:
    append = call_signature("append", {"line": "x"})
    assert run_detector([([append], True)] * 3) == [(3, "repetition", "replan")]


def test_alternating_repeats_trip_the_window_signal() -> None:
    b = call_signature("read_file", {"path": "b.txt"})
    steps = [([READ_A], False), ([b], False), ([READ_A], False), ([b], False), ([READ_A], False)]
    assert run_detector(steps) == [(5, "window", "replan")]


def test_productive_step_resets_the_window() -> None:
    b = call_signature("read_file", {"path": "b.txt"})
    w = call_signature("write_file", {"path": "c", "content": "1"})
    steps = [
        ([READ_A], False),
        ([b], False),
        ([READ_A], False),
        ([w], True),
        ([READ_A], False),
        ([b], False),
    ]
    assert run_detector(steps) == []


def test_window_zero_disables() -> None:
    assert run_detector([([READ_A], False)] * 10, StallPolicy(window=0)) == []


def test_max_replans_zero_stalls_at_once() -> None:
    assert run_detector([([READ_A], False)] * 5, StallPolicy(max_replans=0)) == [
        (3, "repetition", "stalled")
    ]


def test_state_round_trip_keeps_counting() -> None:
    det = StallDetector(StallPolicy())
    det.observe(1, [READ_A], False)
    det.observe(2, [READ_A], False)
    det2 = StallDetector.from_state(StallPolicy(), det.state())
    sig = det2.observe(3, [READ_A], False)
    assert sig is not None and sig.action == "replan"


def test_replan_directive_names_what_was_tried() -> None:
    det = StallDetector(StallPolicy())
    sig = None
    for i in range(3):
        sig = det.observe(i + 1, [READ_A], False)
    assert sig is not None
    text = replan_directive(sig)
    assert "read_file" in text and "a.txt" in text and "end the run" in text


def test_only_interruptions_are_resumable() -> None:
    resumable = {o.value for o in hn.RunOutcome if o.resumable}
    assert resumable == {
        "cancelled", "escalated_retryable", "needs_reconciliation", "awaiting_approval"
    }
