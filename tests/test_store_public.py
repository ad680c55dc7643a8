"""``hn.Store`` is the reader users see: every public attribute documented in docs/api.md,
the writes on its internal writer (old spellings warn for one release), and one rule in
``store/_open.py`` for which ``Store`` object a path means, the magics' included."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb.store._open import open_store
from harnessnb.store._writer import store_writer
from tests.store_helpers import ROOT, run_row

WRITES = ("start_run", "acquire_lease", "record_intent", "keep_begun_step", "settle_tool_call",
          "commit_step", "add_attempts", "write", "submit", "awrite", "queued")  # fmt: skip


def _store_section() -> str:
    """docs/api.md from ``### `hn.Store``` to the next store-unrelated heading."""
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    start = page.index("### `hn.Store`")
    return page[start : page.index("### `hn.plot_failures`", start)]


def test_every_public_attribute_of_a_store_is_documented(tmp_path: Path) -> None:
    documented = set(re.findall(r"`(?:Store\.|store\.)?([a-z_]+)[(`]", _store_section()))
    with hn.Store(tmp_path / "runs.duckdb") as store:
        public = {name for name in dir(store) if not name.startswith("_")}
    assert public <= documented, sorted(public - documented)
    assert {"runs", "attempts", "steps", "tool_calls", "stalls", "failure_rates", "sql",
            "combine", "merge", "close"} <= public  # fmt: skip
    assert not public & set(WRITES)


def test_the_writes_are_on_the_writer_and_the_old_spellings_warn(tmp_path: Path) -> None:
    with hn.Store(tmp_path / "runs.duckdb") as store:
        store_writer(store).create_run(run_row("r1"))
        with pytest.warns(DeprecationWarning, match=r"Store\.add_marker is deprecated"):
            store.add_marker("r1", "resume", "at step 1", 1.0)  # type: ignore[attr-defined]
        assert store.markers("r1")["kind"].tolist() == ["resume"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(AttributeError, match="no attribute 'commit_stpe'"):
                store.commit_stpe  # type: ignore[attr-defined]  # noqa: B018


def test_a_combined_store_writer_refuses_every_write(tmp_path: Path) -> None:
    with hn.Store(tmp_path / "a.duckdb") as shard:
        store_writer(shard).create_run(run_row("r1"))
    combined = hn.Store.combine(tmp_path)
    with pytest.raises(hn.StoreError) as refused:
        store_writer(combined).create_run(run_row("r2"))
    assert refused.value.kind == "read_only"
    assert combined.runs()["run_id"].tolist() == ["r1"]


def test_one_rule_decides_which_store_a_path_means(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harnessnb.notebook import _magics

    monkeypatch.chdir(tmp_path)
    kept = open_store("runs.duckdb", keep=True)
    try:
        assert open_store(str(tmp_path / "runs.duckdb"), keep=True) is kept
        assert _magics._store("runs.duckdb") is kept  # the magics use the same rule
        assert kept.path == str(tmp_path / "runs.duckdb")
        fresh = open_store("runs.duckdb")  # without keep: the caller's own, to close
        assert fresh is not kept
        fresh.close()
        assert open_store(":memory:", keep=True) is not open_store(":memory:", keep=True)
        kept.close()
        again = open_store("runs.duckdb", keep=True)
        assert again is not kept and again.runs().empty  # a closed one is opened anew
        assert _magics._store("runs.duckdb") is again
    finally:
        open_store("runs.duckdb", keep=True).close()
    with pytest.raises(hn.ConfigError, match="inside the workspace"):
        open_store("runs.duckdb", keep=True, workspace=tmp_path)
