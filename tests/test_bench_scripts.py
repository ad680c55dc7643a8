"""The bench scripts still import after code moves (they reach a few internals)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


SCRIPTS = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_imports(script: Path) -> None:
    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # runs no benchmark: each is behind __main__
    assert callable(getattr(module, "main", None))


def test_the_floor_commits_one_row_per_table_a_step_writes(tmp_path: Path) -> None:
    """bench/loop.py's floor (and bench/gil.py's writer) commit what a read-only step
    commits: one row each into tool_calls, steps and attempts, durable per transaction."""
    import duckdb

    spec = importlib.util.spec_from_file_location("bench_loop_floor", BENCH / "loop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path / "floor.duckdb"
    con, transaction = module.floor_statements(path)
    for n in range(3):
        transaction(n)
    con.close()
    with duckdb.connect(str(path), read_only=True) as check:
        for table in ("tool_calls", "steps", "attempts"):
            assert check.execute(f"SELECT count(*) FROM {table}").fetchone() == (3,)
    con, transaction = module.floor_statements(path)  # an existing floor file goes on
    transaction(0)
    con.close()
    with duckdb.connect(str(path), read_only=True) as check:
        assert check.execute("SELECT max(step) FROM steps").fetchone() == (3,)


def test_the_mcp_bench_runs_in_its_quick_mode() -> None:
    """bench/mcp.py --quick: both sides call the real time server, the harnessnb one in
    the sandbox; run as a script, its own name does not shadow the SDK."""
    import subprocess
    import sys

    pytest.importorskip("mcp.client", reason="the mcp extra is not installed")
    pytest.importorskip("mcp_server_time", reason="mcp-server-time is not installed")
    done = subprocess.run(
        [sys.executable, str(BENCH / "mcp.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "harnessnb: sandboxed (sandbox:" in done.stdout
    assert "4 calls each side" in done.stdout
    assert "per call (calls only): harnessnb median" in done.stdout


def test_the_report_judges_a_target_on_the_median_of_round_ratios() -> None:
    """bench/_report.py: each round's pair is a ratio; the line gives min, median, max
    and judges the target on the median (at least it for throughput targets)."""
    spec = importlib.util.spec_from_file_location("bench_report", BENCH / "_report.py")
    assert spec is not None and spec.loader is not None
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    per_round = report.ratios([3.0, 2.0, 9.0], [2.0, 2.0, 3.0])
    assert per_round == [1.5, 1.0, 3.0]
    line = report.ratio_line("step", per_round, 1.6)
    assert "1.50x (min 1.00, max 3.00 over 3 rounds)" in line and line.endswith("OK")
    assert report.ratio_line("step", per_round, 1.4).endswith("MISS")
    assert report.ratio_line("runs", per_round, 1.6, at_least=True).endswith("MISS")
    assert report.load_line().startswith("load average: ")
    with pytest.raises(ValueError):
        report.ratios([1.0], [])


def _bench_module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_{name}_pure", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_peers_bench_skips_a_side_not_installed_and_rotates_its_order() -> None:
    """bench/peers.py: a side whose modules are absent is named missing (skipped with a
    note), a present one is not; no side always goes first; the fifths of the steps."""
    peers = _bench_module("peers")
    assert peers.missing("harnessnb") == []
    peers.NEEDS["absent"] = ("harnessnb", "no_such_peer_pkg", "no_such_peer_pkg.sub")
    assert peers.missing("absent") == ["no_such_peer_pkg", "no_such_peer_pkg.sub"]
    names = ["a", "b", "c"]
    assert [peers.rotated(names, r)[0] for r in range(4)] == ["a", "b", "c", "a"]
    assert peers.fifths([1.0] * 5 + [2.0] * 10 + [9.0] * 5) == (1.0, 9.0)


def test_the_peers_bench_times_harnessnb_one_step_a_model_call() -> None:
    """bench/peers.py --child harnessnb: a real run in a fresh process, each step a read
    of the small file committed to a file store, timed between the model's calls."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(BENCH / "peers.py"), "--child", "harnessnb", "--steps", "6"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(out) == {
        "step_ms",
        "cpu_step_ms",
        "first_fifth_ms",
        "last_fifth_ms",
        "loop_s",
        "peak_rss_mb",
    }
    assert all(value > 0 for value in out.values())


def test_the_import_bench_times_imports_with_their_bytecode_compiled(tmp_path: Path) -> None:
    """bench/import_time.py where no bytecode is written and none exists yet (a fresh
    PYTHONPYCACHEPREFIX): it compiles first, so no timed child imports from source."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCH / "import_time.py"), "--runs", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "bytecode: compiled first" in done.stdout, done.stderr[-2000:]
    assert "modules imported without bytecode: 0" in done.stdout
    assert done.stdout.startswith("load average: ")
