"""Samples and scores as values: ids, files kept inside the workspace, values in range."""

from __future__ import annotations

import pytest

from harnessnb import ConfigError, RunOutcome, Sample, Score
from harnessnb.sweeps._sample import INFRA_OUTCOMES, sample_id


def test_a_sample_without_an_id_gets_one_from_its_input_the_same_every_time() -> None:
    a, b = Sample("add 2 and 2", "4"), Sample("add 2 and 2", "5")
    assert a.id == b.id == sample_id("add 2 and 2")
    assert len(a.id) == 12
    assert Sample("add 3 and 3").id != a.id
    assert Sample("x", id="q1").id == "q1"


@pytest.mark.parametrize("path", ["../up.txt", "/etc/passwd", "a/../../b", ""])
def test_a_sample_file_outside_the_workspace_is_refused(path: str) -> None:
    with pytest.raises(ConfigError, match="relative path inside the workspace"):
        Sample("task", files={path: "x"})


def test_a_sample_keeps_its_files_by_relative_path() -> None:
    sample = Sample("task", files={"data/in.csv": "a,b\n", "bin.dat": b"\x00"})
    assert sample.files == {"data/in.csv": "a,b\n", "bin.dat": b"\x00"}


@pytest.mark.parametrize("bad", [{"input": ""}, {"input": "  "}, {"input": "x", "target": 4}])
def test_a_sample_with_no_input_or_a_target_not_text_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        Sample(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "number", "passed"), [(True, 1.0, True), (False, 0.0, False),
                                                         (0.5, 0.5, False), (1, 1.0, True)])
def test_a_score_is_a_bool_or_a_number_in_range(value: float, number: float, passed: bool) -> None:
    score = Score(value, "why")
    assert (score.number, score.passed, score.explanation) == (number, passed, "why")


@pytest.mark.parametrize("value", [1.5, -0.1, float("nan"), "1"])
def test_a_score_out_of_range_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="bool or a number in"):
        Score(value)  # type: ignore[arg-type]


def test_infrastructure_outcomes_are_not_the_agents_doing() -> None:
    assert RunOutcome.ESCALATED_RETRYABLE in INFRA_OUTCOMES
    assert RunOutcome.CANCELLED in INFRA_OUTCOMES
    for scored in (RunOutcome.SUCCESS, RunOutcome.FINISHED, RunOutcome.UNVERIFIED,
                   RunOutcome.STALLED, RunOutcome.DENIED):
        assert scored not in INFRA_OUTCOMES
