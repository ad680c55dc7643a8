"""Suite-wide switches: no test sleeps for real backoff, or leaves anything behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harnessnb import Store
from harnessnb.chaos import ChaosServer
from harnessnb.rules import _retry
from harnessnb.store._conn import SharedDb
from tests.files_helpers import folder


@pytest.fixture(autouse=True)
def _no_real_backoff() -> Iterator[None]:
    with _retry.testing():
        yield


@pytest.fixture(autouse=True, scope="session")
def _temporary_files_under_pytest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every temporary folder the code makes (``harnessnb demo``'s project, an agent's
    scratch folder), in this process or a child, lands under pytest's own temporary
    base, which pytest prunes, instead of piling up in /tmp."""
    scratch = tmp_path_factory.mktemp("tmp")
    saved, saved_dir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = None  # re-read TMPDIR on next use
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        tempfile.tempdir = saved_dir


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """A test that sets a variable for a child process gets it taken back afterwards."""
    before = dict(os.environ)
    yield
    if os.environ != before:
        os.environ.clear()
        os.environ.update(before)


# A store on a real file, and the op names of every transaction it runs (the store's
# test modules use both; a module's own `store` fixture overrides this one).


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "runs.duckdb")
    yield s
    s.close()


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The op names of every transaction the store runs, in order."""
    seen: list[list[str]] = []
    original = SharedDb._transact

    def transact(self: SharedDb, ops: list[Any], busy_timeout_s: float) -> list[Any]:
        seen.append([op.name for op in ops])
        return original(self, ops, busy_timeout_s)

    monkeypatch.setattr(SharedDb, "_transact", transact)
    return seen


# The fixtures many modules share (a module's own fixture of the same name overrides one).


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace folder with a README."""
    return folder(tmp_path / "ws", {"README.md": "# Title\n"})


@pytest.fixture
def empty_ws(tmp_path: Path) -> Path:
    """A workspace folder with nothing in it."""
    return folder(tmp_path / "ws")


@pytest.fixture
def srv() -> Iterator[ChaosServer]:
    """The chaos server on loopback (seeded: its random faults repeat)."""
    with ChaosServer(seed=0) as server:
        yield server


@pytest.fixture(scope="module")
def module_srv() -> Iterator[ChaosServer]:
    """One chaos server for a whole module (seeded), for modules of many short tests."""
    with ChaosServer(seed=0) as server:
        yield server


# Every variable by which a face picks a provider or a store: cleared for a notebook test.
FACE_ENV_KEYS = (
    "HARNESSNB_PROVIDER", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY",
    "GEMINI_API_KEY", "GOOGLE_API_KEY",
    "OPENROUTER_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GEMINI_BASE_URL",
    "HARNESSNB_STORE",
    "HARNESSNB_NO_WIDGETS",
)  # fmt: skip


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """An IPython shell with ``%load_ext harnessnb``, no provider in the environment and
    its store in ``tmp_path``; the names tests bind are taken back afterwards."""
    from IPython.core.interactiveshell import InteractiveShell

    for key in FACE_ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HARNESSNB_STORE", str(tmp_path / "runs.duckdb"))
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "harnessnb")
    yield sh
    for name in ("R", "frame", "x", "who", "place", "db", "rid"):
        sh.user_ns.pop(name, None)
