"""Arithmetic questions, the demo model's tasks with a right answer: what a question
asks (``solve``), and a seeded draw of right and wrong answers at a known rate
(``AnswerDraw``), so a sweep's scores can be checked against the truth."""

from __future__ import annotations

import random
import re
import threading

from ..rules._errors import ConfigError

__all__ = ["AnswerDraw", "solve", "written_answer"]

# An arithmetic question: "What is 17 + 25?", "Compute 6 * 7", "calculate 12 - 30".
_QUESTION = re.compile(
    r"\b(?:what\s+is|what's|compute|calculate)\s+(-?\d{1,9})\s*([-+*×])\s*(-?\d{1,9})\b",
    re.IGNORECASE,
)
# The number an earlier step of the run wrote as its answer.
_NUMBER = re.compile(r"-?\d+")


def solve(task: str) -> int | None:
    """The answer to the arithmetic question in ``task`` ("What is 17 + 25?": 42), or
    None when it asks none."""
    match = _QUESTION.search(task)
    if match is None:
        return None
    a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    return a * b


def written_answer(content: object) -> int | None:
    """The answer a file written earlier in the run holds (its first number), or None."""
    found = _NUMBER.search(str(content or ""))
    return int(found.group(0)) if found else None


class AnswerDraw:
    """Right or wrong answers, wrong with probability ``wrong_rate``, from a generator
    seeded with ``seed``: the same seed gives the same sequence of draws.

    Raises:
        ConfigError: ``wrong_rate`` is not a number in [0, 1].
    """

    def __init__(self, wrong_rate: float = 0.0, seed: int = 0) -> None:
        if isinstance(wrong_rate, bool) or not isinstance(wrong_rate, (int, float)):
            raise ConfigError(f"wrong_rate must be a number in [0, 1], not {wrong_rate!r}")
        if not 0.0 <= wrong_rate <= 1.0:
            raise ConfigError(f"wrong_rate must be in [0, 1], not {wrong_rate!r}")
        self.wrong_rate = float(wrong_rate)
        # Its own stream, apart from the chaos server's fault draw of the same seed.
        self._rng = random.Random(f"harnessnb-demo-answers:{seed}")
        self._lock = threading.Lock()

    def answer(self, right: int) -> int:
        """``right``, or (at the configured rate) a wrong answer near it."""
        with self._lock:
            if self.wrong_rate > 0 and self._rng.random() < self.wrong_rate:
                return _wrong(right, self._rng)
            return right


def _wrong(right: int, rng: random.Random) -> int:
    """A wrong answer near ``right`` whose digits do not contain it (so a scorer that
    looks for the right number in the answer cannot find it there by accident)."""
    offsets = [d for d in range(-10, 11) if d]
    rng.shuffle(offsets)
    for offset in offsets:
        if str(right) not in str(right + offset):
            return right + offset
    return right + 1  # not reached: right + 1 never has right's digits in it
