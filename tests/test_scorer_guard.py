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
