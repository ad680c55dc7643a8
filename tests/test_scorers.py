"""The built-in scorers judge a real RunResult, real files and real subprocesses."""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.rules._secrets import register
from harnessnb.sweeps._scorers import pytest_counts

PY = sys.executable


def _run(text: str) -> hn.RunResult:
    return hn.RunResult("run_1", hn.RunOutcome.FINISHED, 1, 10, text=text)


def _score(scorer: Any, text: str, sample: hn.Sample, workspace: Path) -> hn.Score:
    """A scorer's verdict, awaited when it is a coroutine function."""
    got = scorer(_run(text), sample, workspace)
    score = asyncio.run(got) if asyncio.iscoroutine(got) else got
    assert isinstance(score, hn.Score)
    return score


SAMPLE = hn.Sample("the capital of France?", "Paris", id="q1")
NO_TARGET = hn.Sample("say anything", id="q2")


@pytest.mark.parametrize(
    ("scorer", "answer", "passed"),
    [
        (hn.scorers.includes(), "It is PARIS.", True),  # the target, any case
        (hn.scorers.includes(), "It is Lyon.", False),
        (hn.scorers.includes(case_sensitive=True), "It is PARIS.", False),
        (hn.scorers.includes("Lyon"), "It is Lyon.", True),
        (hn.scorers.exact(), "  Paris\n", True),  # stripped
        (hn.scorers.exact(), "Paris is it", False),
        (hn.scorers.exact(strip=False), "Paris\n", False),
        (hn.scorers.exact(), "paris", False),
        (hn.scorers.exact(case_sensitive=False), "paris", True),
        (hn.scorers.regex(), "so: Paris", True),  # the target as the pattern
        (hn.scorers.regex(r"^\d+$"), "42", True),
        (hn.scorers.regex(r"^\d+$"), "42 apples", False),
    ],
)
def test_the_text_scorers_judge_the_last_answer(
    scorer: Any, answer: str, passed: bool, tmp_path: Path
) -> None:
    score = _score(scorer, answer, SAMPLE, tmp_path)
    assert score.value is passed
    assert score.explanation


def test_the_explanation_says_what_was_compared(tmp_path: Path) -> None:
    assert _score(hn.scorers.includes(), "Lyon", SAMPLE, tmp_path).explanation == (
        "the answer does not contain 'Paris'"
    )
    assert _score(hn.scorers.regex(r"\d+"), "take 42", SAMPLE, tmp_path).explanation == (
        r"'\\d+' matched '42'"
    )


@pytest.mark.parametrize(
    "scorer",
    [hn.scorers.includes(), hn.scorers.exact(), hn.scorers.regex(),
     hn.scorers.file_contains("out.txt")],
)
def test_a_scorer_needing_a_target_the_sample_lacks_names_both(scorer: Any, tmp_path: Path) -> None:
    (tmp_path / "out.txt").write_text("x")
    with pytest.raises(hn.ConfigError, match=rf"scorer {scorer.name.split('(')[0]}.*'q2'"):
        _score(scorer, "anything", NO_TARGET, tmp_path)


@pytest.mark.parametrize("pattern", ["(unclosed", r"(a)\1", "(?=ahead)"])
def test_a_bad_pattern_is_refused_when_the_scorer_is_built(pattern: str) -> None:
    with pytest.raises(hn.ConfigError, match="RE2"):
        hn.scorers.regex(pattern)


def test_a_target_that_is_a_bad_pattern_is_a_scoring_error(tmp_path: Path) -> None:
    with pytest.raises(hn.ConfigError, match=r"scorer regex, sample 'q3': invalid regex"):
        _score(hn.scorers.regex(), "x", hn.Sample("t", "(oops", id="q3"), tmp_path)


SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
}


@pytest.mark.parametrize(
    ("answer", "passed", "why"),
    [
        ('{"answer": 4}', True, "valid against the schema"),
        ('Here:\n```json\n{"answer": "x"}\n```\nthen\n```json\n{"answer": 4}\n```', True, "valid"),
        ('```json\n{"answer": "four"}\n```', False, "answer: expected integer, got string"),
        ('{"other": 1}', False, "the answer: missing required 'answer'"),
        ("four", False, "the answer is not JSON"),
    ],
)
def test_json_schema_parses_the_answer_or_its_last_json_block(
    answer: str, passed: bool, why: str, tmp_path: Path
) -> None:
    score = _score(hn.scorers.json_schema(SCHEMA), answer, NO_TARGET, tmp_path)
    assert (score.value, why in score.explanation) == (passed, True), score.explanation


def test_a_bad_schema_is_refused_when_the_scorer_is_built() -> None:
    with pytest.raises(hn.ConfigError, match="not a valid JSON Schema"):
        hn.scorers.json_schema({"type": "no-such-type"})


def test_file_contains_reads_the_workspace_copy(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.txt").write_text("result: Paris\n")
    assert _score(hn.scorers.file_contains("out/report.txt"), "", SAMPLE, tmp_path).value is True
    lyon = _score(hn.scorers.file_contains("out/report.txt", "Lyon"), "", SAMPLE, tmp_path)
    assert (lyon.value, lyon.explanation) == (False, "out/report.txt does not contain 'Lyon'")
    gone = _score(hn.scorers.file_contains("missing.txt"), "", SAMPLE, tmp_path)
    assert (gone.value, gone.explanation) == (False, "missing.txt does not exist")


def test_file_contains_does_not_follow_a_symlink_out_of_the_workspace(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("Paris")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.symlink(outside, workspace / "answer.txt")
    score = _score(hn.scorers.file_contains("answer.txt"), "", SAMPLE, workspace)
    assert score.value is False
    assert "outside the workspace" in score.explanation


@pytest.mark.parametrize("path", ["../up.txt", "/etc/hostname", "a/../../b"])
def test_file_contains_refuses_a_path_outside_when_built(path: str) -> None:
    with pytest.raises(hn.ConfigError, match="relative path inside the workspace"):
        hn.scorers.file_contains(path, "x")


def test_command_passes_on_exit_zero_and_explains_with_its_output(tmp_path: Path) -> None:
    (tmp_path / "flag").write_text("on")
    code = "import pathlib,sys;print('checked'); sys.exit(pathlib.Path('flag').read_text() != 'on')"
    ok = _score(hn.scorers.command([PY, "-c", code]), "", NO_TARGET, tmp_path)
    assert ok.value is True
    assert ok.explanation.endswith("exited 0\nchecked")
    (tmp_path / "flag").write_text("off")
    failed = _score(hn.scorers.command([PY, "-c", code]), "", NO_TARGET, tmp_path)
    assert failed.value is False
    assert failed.explanation.endswith("exited 1\nchecked")


def test_command_output_is_scrubbed_and_cut_to_its_tail(tmp_path: Path) -> None:
    key = "sk-scorer-test-" + "q" * 24
    register(key)
    code = f"print('x' * 5000); print({key!r}); print('the end')"
    score = _score(hn.scorers.command([PY, "-c", code]), "", NO_TARGET, tmp_path)
    assert key not in score.explanation
    assert key not in hn.scorers.command([PY, "-c", code]).name
    assert score.explanation.endswith("the end")
    assert len(score.explanation) < 2_500


def test_command_that_outlives_its_timeout_fails_saying_so(tmp_path: Path) -> None:
    code = "import time; print('started', flush=True); time.sleep(30)"
    score = _score(hn.scorers.command([PY, "-c", code], timeout_s=0.5), "", NO_TARGET, tmp_path)
    assert score.value is False
    assert score.explanation.endswith("timed out after 0.5 s\nstarted")


def _project(root: Path, tests: str) -> Path:
    root.mkdir()
    (root / "test_it.py").write_text(tests)
    return root


PYTEST = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def test_tests_gives_partial_credit_from_pytest_run_for_real(tmp_path: Path) -> None:
    project = _project(
        tmp_path / "p",
        "def test_one():\n    assert 1\n\ndef test_two():\n    assert 2\n\n"
        "def test_three():\n    assert 0, 'wrong'\n",
    )
    score = _score(hn.scorers.tests(PYTEST), "", NO_TARGET, project)
    assert score.value == pytest.approx(2 / 3)
    assert score.explanation.startswith("2 of 3 tests passed (1 failed, 2 passed in ")
    assert "FAILED test_it.py::test_three" in score.explanation


def test_tests_with_none_collected_scores_zero_saying_so(tmp_path: Path) -> None:
    project = _project(tmp_path / "p", "x = 1\n")
    score = _score(hn.scorers.tests(PYTEST), "", NO_TARGET, project)
    assert (score.value, score.explanation.startswith("no tests ran")) == (0.0, True)


def test_tests_without_a_pytest_summary_is_a_scoring_error(tmp_path: Path) -> None:
    with pytest.raises(hn.ConfigError, match=r"no pytest summary line .*\(exit 0\):\nnot pytest"):
        _score(hn.scorers.tests([PY, "-c", "print('not pytest')"]), "", NO_TARGET, tmp_path)


def test_tests_that_outlive_their_timeout_score_zero_saying_so(tmp_path: Path) -> None:
    slow = hn.scorers.tests([PY, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
    score = _score(slow, "", NO_TARGET, tmp_path)
    assert (score.value, score.explanation) == (0.0, "the tests timed out after 0.5 s")


@pytest.mark.parametrize(
    ("output", "counts"),
    [
        ("..F\n1 failed, 2 passed in 0.05s\n", {"failed": 1, "passed": 2}),
        ("==== 3 passed, 1 warning in 1.20s (0:00:01) ====", {"passed": 3, "warning": 1}),
        ("E\n1 error in 0.10s", {"error": 1}),
        ("2 passed, 2 errors, 1 skipped in 3s", {"passed": 2, "error": 2, "skipped": 1}),
        ("\nno tests ran in 0.01s\n", {}),
        ("12 passed in 0.1s\nthen a line printed after\n", {"passed": 12}),
    ],
)
def test_pytest_summary_lines_are_read(output: str, counts: dict[str, int]) -> None:
    found = pytest_counts(output)
    assert found is not None and found[1] == counts


def test_a_test_named_like_a_summary_is_not_one() -> None:
    assert pytest_counts("test_2 passed in the end\nPASSED 3 passed in x\n") is None


def test_scorers_carry_a_name_from_how_they_were_built_and_a_version() -> None:
    names = [s.name for s in (
        hn.scorers.includes(), hn.scorers.includes("Paris", case_sensitive=True),
        hn.scorers.exact(strip=False), hn.scorers.regex("a+"),
        hn.scorers.file_contains("out.txt"), hn.scorers.command(["make", "test"]),
        hn.scorers.tests(), hn.scorers.tests(["pytest", "-x"]),
        hn.scorers.json_schema({"title": "Answer", "type": "object"}),
    )]
    assert names == [
        "includes", "includes('Paris', case_sensitive=True)", "exact(strip=False)",
        "regex('a+')", "file_contains('out.txt')", "command(['make', 'test'])", "tests",
        "tests(['pytest', '-x'])", "json_schema('Answer')",
    ]
    assert hn.scorers.includes().version == "1"


def test_a_scorer_survives_pickling_as_a_dask_worker_needs(tmp_path: Path) -> None:
    for scorer in (hn.scorers.regex(r"P\w+"), hn.scorers.json_schema(SCHEMA)):
        again = pickle.loads(pickle.dumps(scorer))
        assert again == scorer and again.name == scorer.name
    assert _score(pickle.loads(pickle.dumps(hn.scorers.regex())), "Paris", SAMPLE, tmp_path).value
