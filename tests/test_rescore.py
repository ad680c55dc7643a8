"""A sweep run keeps its final workspace files (capped) in the store, and ``hn.rescore``
scores a sweep's stored runs again from them with no model: in a fresh process with no
provider configured, with the same scores the live scorers gave; a hostile store's
paths refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pandas as pd
import pytest

import harnessnb as hn
from harnessnb.demo import demo_server
from harnessnb.demo._model import provider_for
from harnessnb.sweeps import _sweep_run
from harnessnb.sweeps._sweep_run import kept_files
from tests.files_helpers import folder
from tests.test_sweep_scores import notes_mention_target, samples

ROOT = Path(__file__).resolve().parents[1]
POLICY = hn.Policy.default().layer("sweep").allow_write("NOTES.md")


@pytest.fixture
def swept(tmp_path: Path) -> tuple[Path, hn.SweepResult]:
    """A sweep of three samples on a good and a 503-only provider, scored live."""
    path = tmp_path / "runs.duckdb"
    ws = folder(tmp_path / "template", {"README.md": "# Template\n"})
    with demo_server() as good, demo_server(rates={"server": 1.0}) as down:
        providers = {"good": provider_for(good, name="good"),
                     "down": provider_for(down, name="down")}  # fmt: skip
        result = hn.sweep_sync(samples(), providers, workspace=ws, store=path, policy=POLICY,
                               scorers=[notes_mention_target])  # fmt: skip
    result.store.close()
    return path, result


def test_each_sweep_run_keeps_its_final_files_slot_and_sample(
    swept: tuple[Path, hn.SweepResult],
) -> None:
    path, result = swept
    with hn.Store(path) as store:
        slots = store.sql("SELECT * FROM sweep_runs ORDER BY provider, sample_id")
        good = result.runs[result.runs["provider"] == "good"].set_index("task")
        run_id = str(good.loc["summarise data0.md into NOTES.md", "run_id"])
        files = store.sql("SELECT path, content, link FROM run_files WHERE run_id = ?", [run_id])
    assert len(slots) == 6 and set(slots["sweep_id"]) == {result.sweep_id}
    assert set(slots["provider"]) == {"good", "down"} and set(slots["repeat"]) == {0}
    sample = json.loads(slots["sample"].iloc[0])
    assert sample["input"] == "summarise data0.md into NOTES.md" and sample["target"] == "Topic 0"
    kept = {p: bytes(c) for p, c in zip(files["path"], files["content"], strict=True)}
    # The template's file, the sample's file and what the agent wrote.
    assert set(kept) == {"README.md", "data0.md", "NOTES.md"}
    assert b"Topic 0" in kept["NOTES.md"] and kept["README.md"] == b"# Template\n"


def test_the_kept_files_are_capped_and_the_cut_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = folder(tmp_path / "ws", {"a.txt": "a" * 10, "b/c.txt": "c" * 10})
    (ws / "big.bin").write_bytes(b"\x00" * (_sweep_run.MAX_FILE_BYTES + 1))
    (ws / "z.bin").write_bytes(bytes(range(256)))
    os.symlink("/etc/passwd", ws / "out")  # kept as a link, never followed
    monkeypatch.setattr(_sweep_run, "MAX_RUN_BYTES", 20 + 100)  # z.bin (256) no longer fits
    rows, cut = kept_files(str(ws))
    assert [r["path"] for r in rows] == ["a.txt", "out", "b/c.txt"]
    assert rows[1].get("link") == "/etc/passwd" and "content" not in rows[1]
    assert cut is not None and cut["count"] == 2 and cut["paths"] == ["big.bin", "z.bin"]
    assert cut["caps"]["file_bytes"] == _sweep_run.MAX_FILE_BYTES


_RESCORE = """
import json, sys
import harnessnb as hn
from tests.test_sweep_scores import notes_mention_target
result = hn.rescore_sync(sys.argv[1], [notes_mention_target], store=sys.argv[2])
rows = result.scores[["run_id", "value", "explanation", "infra_failure"]]
print(json.dumps([[r, None if v is None else float(v), e or '', bool(i)] for r, v, e, i in
                  rows.astype(object).where(rows.notna(), None).itertuples(index=False)]))
"""


def test_rescore_in_a_fresh_process_without_a_provider_gives_the_live_scores(
    swept: tuple[Path, hn.SweepResult],
) -> None:
    path, result = swept
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", _RESCORE, result.sweep_id, str(path)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    again = {r: (v, e, i) for r, v, e, i in json.loads(done.stdout.splitlines()[-1])}
    live = result.scores
    assert len(again) == len(live) == 6
    for row in live.itertuples():
        value = None if pd.isna(row.value) else float(row.value)
        explanation = "" if pd.isna(row.explanation) else row.explanation
        assert again[row.run_id] == (value, explanation, bool(row.infra_failure))
    # The good provider's runs were judged from their kept files; the 503 ones not at all.
    assert sorted(v for v, _, i in again.values() if not i) == [0.0, 1.0, 1.0]
    assert sum(i for _, _, i in again.values()) == 3


def test_a_new_scorer_adds_rows_and_the_same_name_replaces_its_own(
    swept: tuple[Path, hn.SweepResult],
) -> None:
    path, result = swept

    def has_readme(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        return hn.Score((workspace / "README.md").read_text() == "# Template\n", "README kept")

    def notes_mention_target(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        return hn.Score(0.25, "replaced")

    notes_mention_target.version = "2"  # type: ignore[attr-defined]
    again = hn.rescore_sync(result.sweep_id, [has_readme], store=path)
    assert again.scorers == (("has_readme", "1"),)
    scored = again.scores
    assert len(scored) == 6
    assert scored[~scored["infra_failure"]]["value"].tolist() == [1.0, 1.0, 1.0]
    again.store.close()
    replaced = hn.rescore_sync(result.sweep_id, [notes_mention_target], store=path)
    replaced.store.close()
    with hn.Store(path) as store:
        rows = store.scores(sweep_id=result.sweep_id)
    assert len(rows) == 12  # 6 runs x 2 scorer names: the old rows of the name replaced
    mine = rows[(rows["scorer"] == "notes_mention_target") & ~rows["infra_failure"]]
    assert set(mine["scorer_version"]) == {"2"} and set(mine["value"]) == {0.25}


def test_rescore_of_an_unknown_sweep_or_without_scorers_is_a_clear_error(
    swept: tuple[Path, hn.SweepResult],
) -> None:
    path, result = swept
    with pytest.raises(hn.ConfigError, match="keeps no finished run of the sweep 'nope'"):
        hn.rescore_sync("nope", [notes_mention_target], store=path)
    with pytest.raises(hn.ConfigError, match="at least one scorer"):
        hn.rescore_sync(result.sweep_id, [], store=path)


@pytest.mark.parametrize(
    "planted", ["../escaped.txt", "/tmp/harnessnb-abs-planted.txt", "a/../../x"]
)
def test_a_hostile_store_path_is_refused_and_nothing_is_written_outside(
    swept: tuple[Path, hn.SweepResult], tmp_path: Path, planted: str
) -> None:
    path, result = swept
    run_id = str(result.runs[result.runs["provider"] == "good"]["run_id"].iloc[0])
    con = duckdb.connect(str(path))  # the attacker's connection
    con.execute("INSERT INTO run_files VALUES (?, ?, NULL, ?, 5)", [run_id, planted, b"owned"])
    con.close()
    # Where each path would land from a temporary folder: /tmp/escaped.txt, /tmp/x...
    landing = Path(tempfile.gettempdir()) / Path(planted).name
    landing.unlink(missing_ok=True)
    with pytest.raises(hn.StoreError, match="not a relative path inside the workspace") as got:
        hn.rescore_sync(result.sweep_id, [notes_mention_target], store=path)
    assert got.value.kind == "foreign"
    assert not landing.exists() and not Path("/tmp/harnessnb-abs-planted.txt").exists()


def test_kept_symlinks_are_made_only_when_they_stay_inside(
    swept: tuple[Path, hn.SweepResult],
) -> None:
    path, result = swept
    run_id = str(result.runs[result.runs["provider"] == "good"]["run_id"].iloc[0])
    con = duckdb.connect(str(path))  # the attacker's connection
    for rel, link in [("inside", "README.md"), ("abs", "/etc"), ("up", "../../etc"),
                      ("sub/up", "../../x"), ("sub/ok", "../README.md")]:  # fmt: skip
        con.execute("INSERT INTO run_files VALUES (?, ?, ?, NULL, NULL)", [run_id, rel, link])
    con.close()
    seen: dict[str, str | None] = {}

    def links(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        if run.run_id == run_id:
            for name in ("inside", "abs", "up", "sub/up", "sub/ok"):
                where = workspace / name
                seen[name] = os.readlink(where) if where.is_symlink() else None
        return hn.Score(True)

    hn.rescore_sync(result.sweep_id, [links], store=path).store.close()
    assert seen == {"inside": "README.md", "abs": None, "up": None, "sub/up": None,
                    "sub/ok": "../README.md"}  # fmt: skip


async def test_a_rescore_cancelled_while_files_are_written_removes_them_after_not_during(
    swept: tuple[Path, hn.SweepResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept files are written into a temporary folder in a thread a cancel cannot
    stop: the folder is removed once that thread is done with it, never under it, and
    nothing is left."""
    import asyncio
    import threading

    from harnessnb.sweeps import _rescore

    path, result = swept
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    entered, release = threading.Event(), threading.Event()
    intact: list[bool] = []
    real = _rescore.materialise

    def held(store: hn.Store, run_id: str, folder: str) -> None:
        entered.set()
        release.wait(10)  # until the rescore was cancelled
        intact.append(os.path.isdir(folder))
        real(store, run_id, folder)

    monkeypatch.setattr(_rescore, "materialise", held)

    def other(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        return hn.Score(1.0, "never reached")

    task = asyncio.create_task(hn.rescore(result.sweep_id, [other], store=path))
    assert await asyncio.to_thread(entered.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    for _ in range(500):  # the thread ends on its own; bounded
        if intact and not list(temp.glob("harnessnb-rescore-*")):
            break
        await asyncio.sleep(0.02)
    assert intact == [True]  # not removed while it was being written
    assert list(temp.glob("harnessnb-rescore-*")) == []
