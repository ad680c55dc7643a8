"""Suite-wide switches: no test ever sleeps for real backoff."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harnessnb.rules import _retry


@pytest.fixture(autouse=True)
def _no_real_backoff() -> Iterator[None]:
    with _retry.testing():
        yield
