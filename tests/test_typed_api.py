"""mypy sees the public API's parameters: a misspelled keyword is a type error, and so
is a deprecated spelling (its new name is the one mypy knows).

One ``mypy --strict`` run (the venv's pinned mypy, from the repository root so the
package checked is this one and its cache is reused) on one generated file holding every
case; each case's line is matched to the errors mypy reports for it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HEADER = """\
import harnessnb as hn

K = hn.ProviderErrorKind.SERVER


def cases(
    c: hn.TaskContract, p: hn.Provider, s: hn.Store, a: hn.agents.AgentCLI
) -> None:
"""

# (case, a statement in `cases`, the misspelled keyword mypy must name; None: no error)
CASES: list[tuple[str, str, str | None]] = [
    ("run_sync", "hn.run_sync(c, p, polcy=None)", "polcy"),
    ("resume_sync", 'hn.resume_sync("run_x", p, stor=s)', "stor"),
    ("replay_sync", 'hn.replay_sync("run_x", s, workspce="w")', "workspce"),
    ("sweep_sync", 'hn.sweep_sync(["t"], [p], repeets=2)', "repeets"),
    ("agents.run_sync", 'hn.agents.run_sync(a, "t", "w", sesion="x")', "sesion"),
    ("run_sync typed", "r1: hn.RunResult = hn.run_sync(c, p, store=s, policy=None)", None),
    ("resume_sync typed", 'r2: hn.RunResult = hn.resume_sync("run_x", p, store=s)', None),
    ("replay_sync typed", 'r3: hn.RunResult = hn.replay_sync("run_x", s, workspace="w")', None),
    ("sweep_sync typed", 'r4: hn.SweepResult = hn.sweep_sync(["t"], [p], repeats=2)', None),
    (
        "agents.run_sync typed",
        'r5: hn.agents.AgentResult = hn.agents.run_sync(a, "t", "w", session="x")',
        None,
    ),
    ("run_sync wrong type", "hn.run_sync(c, p, run_id=3)", "run_id"),
    # Names and units (docs/api.md): mypy knows the new names, not the deprecated ones.
    (
        "contract new names",
        'k1 = hn.TaskContract("t", "w", max_time_s=1, max_total_tokens=5)',
        None,
    ),
    ("contract max_seconds", 'hn.TaskContract("t", "w", max_seconds=1.0)', "max_seconds"),
    ("contract max_tokens", 'hn.TaskContract("t", "w", max_tokens=9)', "max_tokens"),
    ("error retry_after_s", "k3: float | None = hn.ProviderError('x', kind=K).retry_after_s", None),
    ("error retry_after", 'hn.ProviderError("x", kind=K, retry_after=1.0)', "retry_after"),
    ("retry policy new names", "hn.RetryPolicy(base_s=1, cap_s=2, max_wait_s=3)", None),
    ("retry policy base", "hn.RetryPolicy(base=1)", "base"),
    ("provider timeout_s", 'hn.OpenAI("m", timeout_s=1).with_timeout(3, idle_timeout_s=4)', None),
    ("provider timeout", 'hn.OpenAI("m", timeout=1)', "timeout"),
    ("provider idle_timeout", 'hn.OpenAI.from_env(idle_timeout=1)', "idle_timeout"),
    ("agent timeout_s", "k7: float | None = hn.agents.Codex(timeout_s=1).timeout_s", None),
    ("agent timeout", "hn.agents.Codex(timeout=1)", "timeout"),
    ("approver timeout", "hn.WidgetApprover(timeout=1)", "timeout"),
    ("agent usage", 'k8: int = hn.agents.run_sync(a, "t", "w").usage.cached_input_tokens', None),
    ("agent cost", 'k9: float | None = hn.agents.run_sync(a, "t", "w").cost_usd', None),
    ("result elapsed_s", "k5: float = hn.run_sync(c, p).elapsed_s", None),
    ("result elapsed", "hn.run_sync(c, p).elapsed", "elapsed"),
    ("agent result elapsed_s", 'k6: float = hn.agents.run_sync(a, "t", "w").elapsed_s', None),
    (
        "agent error retry_after_s",
        'k4: float | None = hn.agents.RateLimited("", agent="", bin="", detail="").retry_after_s',
        None,
    ),
]


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[str]]:
    """mypy's errors on the generated file, by line."""
    folder = tmp_path_factory.mktemp("typed")
    source = HEADER + "".join(f"    {code}\n" for _, code, _ in CASES)
    path = folder / "cases.py"
    path.write_text(source)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    errors: dict[int, list[str]] = {}
    for line in done.stdout.splitlines():
        found = re.match(r".*cases\.py:(\d+): error: (.*)", line)  # mypy may name a cached path
        if found:
            errors.setdefault(int(found[1]), []).append(found[2])
        else:
            assert ": note: " in line, line  # nothing but errors and their notes
    return errors


@pytest.mark.parametrize(("case", "code", "wrong"), CASES, ids=[c[0] for c in CASES])
def test_mypy_checks_the_public_keywords(
    mypy_errors: dict[int, list[str]], case: str, code: str, wrong: str | None
) -> None:
    line = HEADER.count("\n") + 1 + [c[0] for c in CASES].index(case)
    errors = mypy_errors.get(line, [])
    if wrong is None:
        assert errors == [], f"{code}: {errors}"
    else:
        assert any(f'"{wrong}"' in e for e in errors), f"{code}: mypy said {errors}"
