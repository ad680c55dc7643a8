"""The security tests' shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import harnessnb as hn


@pytest.fixture
def store() -> Iterator[hn.Store]:
    """An in-memory store, closed after the test."""
    s = hn.Store(":memory:")
    yield s
    s.close()
