"""The Pythons the package says it supports are the ones CI tests: the oldest and the newest
classifier are .ci/run's OLDEST and NEWEST, requires-python starts at the oldest, and Binder's
runtime is one of them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _classified() -> list[tuple[int, int]]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = []
    for c in meta["classifiers"]:
        m = re.fullmatch(r"Programming Language :: Python :: (\d+)\.(\d+)", c)
        if m:
            found.append((int(m[1]), int(m[2])))
    return sorted(found)


def test_ci_runs_the_oldest_and_newest_classified_python() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    oldest = re.search(r"^OLDEST=(\d+)\.(\d+)$", ci, re.M)
    newest = re.search(r"^NEWEST=(\d+)\.(\d+)$", ci, re.M)
    assert oldest and newest, "the CI script names no OLDEST/NEWEST Python"
    versions = _classified()
    assert versions, "pyproject lists no Python version classifiers"
    assert (int(oldest[1]), int(oldest[2])) == versions[0]
    assert (int(newest[1]), int(newest[2])) == versions[-1]
    # both are actually run: each version gets its own venv and a pytest run
    assert 'make_venv "$OLDEST"' in ci and 'make_venv "$NEWEST"' in ci
    assert ci.count("python -m pytest") == 2


def test_requires_python_starts_at_the_oldest_and_binder_is_supported() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    versions = _classified()
    major, minor = versions[0]
    assert meta["requires-python"] == f">={major}.{minor}"
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    m = re.fullmatch(r"python-(\d+)\.(\d+)", runtime)
    assert m and (int(m[1]), int(m[2])) in versions
