"""The bench scripts still import after code moves (they reach a few internals)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
