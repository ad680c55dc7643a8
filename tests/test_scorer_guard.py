"""A scorer cannot hang a sweep, and hostile input to the sweep's new surfaces (samples
files, scorer specs, schemas, the tests scorer's output) is refused or held."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb.sweeps._sweep_run import SCORER_GRACE_S
from tests.files_helpers import folder


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "template", {"README.md": "# Template\n"})


class HangsSync:
    """A sync scorer that blocks until released (the test releases it at its end)."""

    name = "hangs_sync"
    timeout_s = 0.2

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self, run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        self.release.wait()
        return hn.Score(True)


class HangsAsync:
    """A coroutine scorer that never returns."""

    name = "hangs_async"
    timeout_s = 0.2

    async def __call__(self, run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        await asyncio.Event().wait()
        return hn.Score(True)


def answered(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
    return hn.Score(run.text == "done", "read the answer")


async def test_a_scorer_that_never_returns_is_a_scoring_error_and_the_sweep_goes_on(
    ws: Path, tmp_path: Path
) -> None:
    sync = HangsSync()
    try:
        swept = hn.sweep(["a", "b"], [hn.ScriptedProvider(lambda m: "done", name="p")],
                         workspace=ws, store=tmp_path / "s.duckdb",
                         scorers=[sync, HangsAsync(), answered])  # fmt: skip
        # Today's code hangs: the wait fails the test rather than stalling the suite.
        result = await asyncio.wait_for(swept, timeout=60)
    finally:
        sync.release.set()
    assert set(result.runs["outcome"]) == {"finished"}  # never a failed run
    scores = result.scores.set_index(["sample_id", "scorer"])
    late = f"TimeoutError: the scorer did not finish in {0.2 + SCORER_GRACE_S:g} s"
    for sample in {s for s, _ in scores.index}:
        for name in ("hangs_sync", "hangs_async"):
            row = scores.loc[(sample, name)]
            assert row["error"] == late and pd_na(row["value"])
        assert scores.loc[(sample, "answered"), "value"] == 1.0  # the next scorer ran


def pd_na(value: object) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


async def test_a_scorers_own_timeout_error_keeps_its_message(ws: Path) -> None:
    async def raises(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        raise TimeoutError("the grader's server timed out")

    result = await hn.sweep(["a"], [hn.ScriptedProvider(lambda m: "done")], workspace=ws,
                            scorers=[raises])  # fmt: skip
    assert result.scores["error"].tolist() == ["TimeoutError: the grader's server timed out"]


def test_a_scorers_deadline_is_its_own_timeout_and_a_grace_else_the_default() -> None:
    from harnessnb.sweeps._sweep_run import SCORER_TIMEOUT_S, scorer_deadline_s

    assert scorer_deadline_s(hn.scorers.tests(timeout_s=7)) == 7 + SCORER_GRACE_S
    assert scorer_deadline_s(HangsAsync()) == 0.2 + SCORER_GRACE_S
    assert scorer_deadline_s(answered) == SCORER_TIMEOUT_S == 300
    for odd in (True, -1, 0, float("inf"), float("nan"), "5", None):
        scorer = HangsAsync()
        scorer.timeout_s = odd  # type: ignore[assignment]
        assert scorer_deadline_s(scorer) == SCORER_TIMEOUT_S, odd


async def test_a_command_scorer_past_its_timeout_says_so_itself_in_a_sweep(ws: Path) -> None:
    slow = hn.scorers.command([sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=0.5)
    result = await asyncio.wait_for(
        hn.sweep(["a"], [hn.ScriptedProvider(lambda m: "done")], workspace=ws, scorers=[slow]),
        timeout=60,
    )
    row = result.scores.iloc[0]
    assert row["value"] == 0.0 and pd_na(row["error"])  # its own verdict, not the deadline's
    assert "timed out after 0.5 s" in row["explanation"]


_STUCK_THREAD = """
import sys, threading
import harnessnb as hn

class Stuck:
    timeout_s = 0.2
    def __call__(self, run, sample, workspace):
        threading.Event().wait()  # never released: only a daemon thread lets us exit

result = hn.sweep_sync(["a"], [hn.ScriptedProvider(lambda m: "done")], workspace=sys.argv[1],
                       store=sys.argv[2], scorers=[Stuck()])
print(result.scores["error"].tolist()[0], flush=True)
"""


def test_a_stuck_sync_scorer_does_not_hold_interpreter_exit(ws: Path, tmp_path: Path) -> None:
    script = tmp_path / "stuck.py"
    script.write_text(_STUCK_THREAD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, str(script), str(ws), str(tmp_path / "s.duckdb")],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)  # fmt: skip
    try:
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    assert "did not finish in" in out


# ------------------------------------------------------------------ hn.samples, hostile files


def refused(path: Path) -> str:
    with pytest.raises(hn.ConfigError) as caught:
        hn.samples(path)
    return caught.value.message


def test_a_line_over_the_cap_is_refused_naming_it_not_read_whole(tmp_path: Path) -> None:
    from harnessnb.sweeps._samples_io import MAX_LINE_CHARS

    path = tmp_path / "huge.jsonl"
    path.write_text('{"input": "q"}\n{"input": "' + "a" * (MAX_LINE_CHARS + 10) + '"}\n')
    cap = f"is longer than {MAX_LINE_CHARS} characters (the cap on a line)"
    assert refused(path) == f"hn.samples: {path} line 2 {cap}"
    csv_path = tmp_path / "huge.csv"
    csv_path.write_text("input\nq\n" + "a" * (MAX_LINE_CHARS + 10))  # no line end at all
    assert f"{csv_path} line 3 is longer than" in refused(csv_path)


def test_json_too_deep_or_an_integer_too_long_is_a_config_error_naming_the_row(
    tmp_path: Path,
) -> None:
    deep = tmp_path / "deep.jsonl"
    nested = "[" * 100_000 + "]" * 100_000
    deep.write_text('{"input": "q"}\n{"input": "r", "metadata": ' + nested + "}\n")
    assert refused(deep) == f"hn.samples: {deep} line 2: not JSON: nested too deeply"
    digits = tmp_path / "digits.csv"
    digits.write_text('input,metadata\nq,"{""n"": ' + "9" * 5000 + '}"\n')
    assert refused(digits).startswith(f"hn.samples: {digits} line 2: metadata is not JSON: Exceeds")


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "tasks.csv"
    os.mkfifo(fifo)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.append(refused(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # today's code blocks in open(): let it go, then fail
        with open(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK), "w") as writer:
            writer.write("input\nq\n")
        reader.join(10)
        pytest.fail("hn.samples waited on a FIFO")
    assert said == [f"hn.samples: {fifo} is not a regular file"]


def test_a_files_path_with_a_nul_byte_is_refused_naming_the_row(tmp_path: Path) -> None:
    path = tmp_path / "nul.jsonl"
    path.write_text('{"input": "q"}\n{"input": "r", "files": {"a\\u0000b": "x"}}\n')
    assert refused(path) == f"hn.samples: {path} line 2: a file's path holds a NUL byte"


INSIDE = "a sample's file must be a relative path inside the workspace"


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("array.jsonl", b'{"input": "q"}\n["a"]\n', "line 2: a JSON object, not an array"),
        ("number.jsonl", b'{"input": "q"}\n5\n', "line 2: a JSON object, not a number"),
        ("meta.jsonl", b'{"input": "q", "metadata": [1]}\n',
         "line 1: metadata must be a JSON object, not list"),
        ("meta.csv", b'input,metadata\nq,"""s"""\n',
         "line 2: metadata must be a JSON object, not str"),
        ("abs.jsonl", b'{"input": "q", "files": {"/etc/passwd": "x"}}\n',
         f"line 1: {INSIDE}: '/etc/passwd'"),
        ("up.jsonl", b'{"input": "q"}\n{"input": "r", "files": {"../x": "x"}}\n',
         f"line 2: {INSIDE}: '../x'"),
        ("value.jsonl", b'{"input": "q", "files": {"a.txt": {"b": 1}}}\n',
         "line 1: a sample's file 'a.txt' must be text or bytes"),
    ],
)  # fmt: skip
def test_hostile_rows_are_refused_naming_the_row(
    tmp_path: Path, name: str, content: bytes, said: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert refused(path) == f"hn.samples: {path} {said}"


def test_a_bom_crlf_and_nul_in_text_are_read_as_text(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfinput,target\r\nab\x00c,x\r\n")
    jsonl = tmp_path / "crlf.jsonl"
    jsonl.write_bytes(b'\xef\xbb\xbf{"input": "ab\\u0000c", "target": "x"}\r\n')
    for got in (hn.samples(path), hn.samples(jsonl)):
        assert [(s.input, s.target) for s in got] == [("ab\x00c", "x")]


# ------------------------------------------------------------------ scorers, hostile specs


PY = sys.executable
PYTEST = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def verdict(scorer: object, workspace: Path, text: str = "") -> hn.Score:
    run = hn.RunResult("run_1", hn.RunOutcome.FINISHED, 1, 10, text=text)
    got = scorer(run, hn.Sample("q"), workspace)  # type: ignore[operator]
    score = asyncio.run(got) if asyncio.iscoroutine(got) else got
    assert isinstance(score, hn.Score)
    return score


def test_a_schemas_strings_with_quotes_and_newlines_never_run_as_code(tmp_path: Path) -> None:
    # fastjsonschema compiles a schema to Python source: every string must stay a literal.
    marker = tmp_path / "PWNED"
    code = f"__import__('os').system('touch {marker}')"
    payloads = [f"'\"\n{code}\n#", f"\\'\"\"\"\n{code}\n#", f"\n{code}"]
    for bad in payloads:
        schema = {"$id": bad, "title": bad, "type": "object", "required": [bad],
                  "properties": {bad: {"type": "string", "pattern": bad, "const": bad}},
                  "patternProperties": {bad: {"enum": [bad]}}}  # fmt: skip
        scorer = hn.scorers.json_schema(schema)
        assert verdict(scorer, tmp_path, '{"x": 1}').value == 0.0  # checked, not run
    assert not marker.exists()


def test_a_schemas_ref_to_a_url_is_refused_without_fetching_it() -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        url = f"http://127.0.0.1:{server.getsockname()[1]}/schema.json"
        with pytest.raises(hn.ConfigError, match="names another document \\(not fetched\\)"):
            hn.scorers.json_schema({"$ref": url})
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected


@pytest.mark.parametrize("depth", [25, 80, 3000])
def test_a_schema_nested_too_deeply_is_a_config_error(depth: int) -> None:
    # Python's compiler refuses fastjsonschema's code of a schema ~20 levels deep.
    schema: dict[str, object] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    with pytest.raises(hn.ConfigError, match="not a valid JSON Schema: the schema is nested too"):
        hn.scorers.json_schema(schema)


def test_a_spec_naming_a_schema_file_too_deep_is_a_config_error_naming_the_spec(
    tmp_path: Path,
) -> None:
    from harnessnb.launch._scorer_specs import scorer_from

    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(hn.ConfigError) as caught:
        scorer_from(f"json_schema:{path}")
    said = f"{str(path)!r} is not JSON: nested too deeply"
    assert caught.value.message == f"--score 'json_schema:{path}': {said}"


@pytest.mark.parametrize(
    ("answer", "said"),
    [("[" * 100_000 + "]" * 100_000, "the answer is not JSON: nested too deeply"),
     ('{"n": ' + "9" * 5000 + "}", "the answer is not JSON: Exceeds the limit (4300 digits)")],
)  # fmt: skip
def test_an_answer_json_cannot_parse_is_a_wrong_answer_not_an_error(
    tmp_path: Path, answer: str, said: str
) -> None:
    score = verdict(hn.scorers.json_schema({"type": "object"}), tmp_path, answer)
    assert score.value == 0.0 and score.explanation.startswith(said)


def test_a_command_spec_with_shell_metacharacters_runs_no_shell(tmp_path: Path) -> None:
    from harnessnb.launch._scorer_specs import scorer_from

    marker = tmp_path / "PWNED"
    scorer = scorer_from(f"command:echo hi; touch {marker} && echo $(id) `id` | cat > x")
    score = verdict(scorer, tmp_path)
    assert score.value == 1.0 and f"hi; touch {marker} && echo $(id) `id` | cat > x" in (
        score.explanation or ""
    )  # echo's words, every metacharacter literal
    assert not marker.exists() and not (tmp_path / "x").exists()


def test_a_regex_spec_with_catastrophic_backtracking_runs_in_linear_time(tmp_path: Path) -> None:
    from harnessnb.launch._scorer_specs import scorer_from

    scorer = scorer_from("regex:^(a+)+$")  # Python's re takes ages on a...ab
    got: list[hn.Score] = []
    matching = threading.Thread(
        target=lambda: got.append(verdict(scorer, tmp_path, "a" * 100_000 + "b")), daemon=True
    )
    matching.start()
    matching.join(30)  # RE2 answers at once; a backtracking engine would not in a lifetime
    assert not matching.is_alive() and got[0].value == 0.0


def _project(root: Path, conftest: str) -> Path:
    return folder(root, {"conftest.py": conftest, "test_it.py": "def test_a():\n    assert 0\n"})


def test_tests_refuses_a_fake_summary_line_a_conftest_prints(tmp_path: Path) -> None:
    fake = "def pytest_unconfigure(config):\n    print('999 passed in 0.01s')\n"
    with pytest.raises(hn.ConfigError, match=r"2 lines shaped as pytest's summary .*'999 passed"):
        verdict(hn.scorers.tests(PYTEST), _project(tmp_path / "p", fake))


def test_tests_refuses_a_summary_at_odds_with_pytests_exit_code(tmp_path: Path) -> None:
    # The real summary silenced (no terminal reporter), a fake one printed: pytest exits 1.
    fake = ("import pytest\n\n@pytest.hookimpl(trylast=True)\n"
            "def pytest_configure(config):\n"
            "    config.pluginmanager.unregister(name='terminalreporter')\n\n"
            "def pytest_unconfigure(config):\n    print('999 passed in 0.01s')\n")  # fmt: skip
    with pytest.raises(hn.ConfigError, match="pytest exited 1 but its summary line says"):
        verdict(hn.scorers.tests(PYTEST), _project(tmp_path / "p", fake))


def test_tests_whose_conftest_never_exits_time_out_scoring_zero(tmp_path: Path) -> None:
    stuck = "import time\n\ndef pytest_configure(config):\n    time.sleep(3600)\n"
    score = verdict(hn.scorers.tests(PYTEST, timeout_s=1), _project(tmp_path / "p", stuck))
    assert score.value == 0.0
    assert (score.explanation or "").startswith("the tests timed out after 1 s")
