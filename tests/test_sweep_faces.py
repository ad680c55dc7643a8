"""``harnessnb sweep`` and ``%%harness sweep`` with ``--samples FILE``, ``--score SPEC``
and ``--sweep-id ID`` (issue #27 item 6's flags): one parser in ``launch/``, the real
command in a subprocess and the magic in a real IPython shell, on the demo model (no key).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.demo import demo_provider, make_demo_workspace
from harnessnb.launch._scorer_specs import scorer_from

FORMS = ("includes[:TEXT], exact[:TEXT], regex[:PATTERN], json_schema:FILE.json, "
         "file_contains:PATH[:TEXT], command:ARGV, tests[:ARGV]")  # fmt: skip
# The demo model answers these two tasks alike ("I can't handle that ... harnessnb demo
# model (rule-based, not an LLM)"): the first sample's target is in it, the second's not.
SAMPLES_CSV = "input,target,id\nlist the files,demo model,right\nsay hello,Paris,wrong\n"
# Each sample x 2 repeats x 2 scorers; includes by the target, the regex by its pattern.
EXPECTED = {
    ("right", "includes"): [1.0, 1.0],
    ("right", "regex('rule-based')"): [1.0, 1.0],
    ("wrong", "includes"): [0.0, 0.0],
    ("wrong", "regex('rule-based')"): [1.0, 1.0],
}
VERIFY = "README.md contains harnessnb demo project"  # true of the demo workspace


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "samples.csv").write_text(SAMPLES_CSV)
    (tmp_path / "title.json").write_text(json.dumps({"title": "answer", "type": "object"}))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "unschema.json").write_text(json.dumps({"type": "nope"}))
    return {
        "ws": make_demo_workspace(tmp_path / "ws"),
        "csv": tmp_path / "samples.csv",
        "store": tmp_path / "runs.duckdb",
    }


def scores_by_sample(store_path: Path, sweep_id: str) -> dict[tuple[str, str], list[float]]:
    with hn.Store(store_path) as store:
        scores = store.scores(sweep_id=sweep_id)
        runs = store.runs(sweep=sweep_id)
    assert len(runs) == 4 and set(runs["outcome"]) == {"success"}  # --verify reached them
    found: dict[tuple[str, str], list[float]] = {}
    for row in scores.itertuples():
        found.setdefault((str(row.sample_id), str(row.scorer)), []).append(float(row.value))
    return found


def harnessnb(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command, keyless, in its own process."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("HARNESSNB_PROVIDER", None)
    return subprocess.run([sys.executable, "-m", "harnessnb", "sweep", *argv], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip


def test_the_sweep_command_runs_a_samples_file_scores_it_and_prints_the_summary(
    files: dict[str, Path], tmp_path: Path
) -> None:
    done = harnessnb(
        "--samples", str(files["csv"]), "--providers", "demo", "--repeats", "2",
        "--workspace", str(files["ws"]), "--verify", VERIFY, "--store", str(files["store"]),
        "--score", "includes", "--score", "regex:rule-based", "--sweep-id", "sweep_faces",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "sweep sweep_faces: 4/4 runs, 4 succeeded" in done.stdout
    table = done.stdout.split("scores (mean with its 95% interval, clustered by sample):")[1]
    header, *rows = table.strip().splitlines()
    assert header.split()[:5] == ["provider", "scorer", "runs", "scored", "infra_failures"]
    means = {row.split()[1]: float(row.split()[6]) for row in rows}
    assert means == {"includes": 0.5, "regex('rule-based')": 1.0}
    assert scores_by_sample(files["store"], "sweep_faces") == EXPECTED


def test_the_sweep_command_refuses_a_bad_spec_and_tasks_beside_samples(
    files: dict[str, Path], tmp_path: Path
) -> None:
    base = ("--providers", "demo", "--workspace", str(files["ws"]), "--store", str(files["store"]))
    bad = harnessnb("--samples", str(files["csv"]), "--score", "bogus:x", *base, cwd=tmp_path)
    assert bad.returncode == 2
    assert f"argument --score: 'bogus:x': no scorer kind 'bogus'; write one of {FORMS}" in (
        bad.stderr
    )
    both = harnessnb("say hi", "--samples", str(files["csv"]), *base, cwd=tmp_path)
    assert both.returncode == 2
    assert "gives the sweep's tasks: no TASK arguments beside it" in both.stderr
    targetless = harnessnb("say hi", "--score", "regex", *base, cwd=tmp_path)
    assert targetless.returncode == 2
    assert ("--score regex compares each run with its sample's target, and tasks written out "
            "(TASK arguments) have none: write regex:PATTERN") in targetless.stderr  # fmt: skip
    neither = harnessnb(*base, cwd=tmp_path)
    assert neither.returncode == 2
    assert "give the tasks (TASK arguments) or --samples FILE" in neither.stderr
    assert not files["store"].exists()  # nothing ran, no store made


def test_the_sweep_line_magic_runs_a_samples_file_with_two_scorers(
    shell: Any, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.utils.capture import capture_output

    monkeypatch.setenv("HARNESSNB_NO_WIDGETS", "1")  # a line per run, not a live display
    line = (
        f"sweep --samples {files['csv']} --providers demo --repeats 2 --workspace "
        f"{files['ws']} --verify '{VERIFY}' --store {files['store']} --score includes "
        "--score regex:rule-based --sweep-id sweep_cell --out swept"
    )
    with capture_output() as out:
        shell.run_line_magic("harness", line)  # the samples are its tasks: no cell body
    result = shell.user_ns.pop("swept")
    assert isinstance(result, hn.SweepResult) and result.sweep_id == "sweep_cell"
    assert len([text for text in out.stdout.splitlines() if " · " in text]) == 4  # live lines
    assert set(result.scores["sample_id"]) == {"right", "wrong"}
    assert list(result.summary()["mean"]) == [0.5, 1.0]
    result.store.close()
    assert scores_by_sample(files["store"], "sweep_cell") == EXPECTED


BAD_SPECS = [
    ("bogus", f"no scorer kind 'bogus'; write one of {FORMS}"),
    ("Includes:x", "no scorer kind 'Includes'"),
    ("includes:", "nothing after the colon: write includes[:TEXT]"),
    ("command", "command needs its argument: write command:ARGV"),
    ("json_schema", "json_schema needs its argument: write json_schema:FILE.json"),
    ("command:python 'unclosed", "cannot split \"python 'unclosed\" into words"),
    ("tests:", "nothing after the colon: write tests[:ARGV]"),
    ("regex:(", "regex"),
    ("json_schema:missing.json", "cannot read the schema file 'missing.json'"),
    ("json_schema:broken.json", "'broken.json' is not JSON"),
    ("json_schema:unschema.json", "not a valid JSON Schema"),
    ("file_contains:/etc/passwd", "must be a relative path inside the workspace"),
    ("file_contains:out.txt:", "nothing after PATH's colon"),
]


@pytest.mark.parametrize(("spec", "said"), BAD_SPECS)
def test_a_bad_spec_is_an_error_naming_it(
    spec: str, said: str, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(files["csv"].parent)
    with pytest.raises(hn.ConfigError) as caught:
        scorer_from(spec)
    assert caught.value.message.startswith(f"--score {spec!r}: ") and said in caught.value.message


def test_the_sweep_magic_shows_each_bad_spec_as_one_usage_line(
    shell: Any, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.error import UsageError
    from IPython.utils.capture import capture_output

    monkeypatch.chdir(files["csv"].parent)
    monkeypatch.setenv("HARNESSNB_NO_WIDGETS", "1")
    for spec, said in BAD_SPECS:
        with pytest.raises(UsageError) as caught:
            shell.run_line_magic(
                "harness", f'sweep --samples samples.csv --providers demo --score "{spec}"'
            )
        assert f"%harness sweep: argument --score: {spec!r}: " in str(caught.value)
        assert said in str(caught.value)
    with pytest.raises(UsageError, match=r"gives the sweep's tasks: no cell body beside it \(write "
                       "the line magic: %harness sweep --samples FILE"):  # fmt: skip
        shell.run_cell_magic("harness", "sweep --samples samples.csv --providers demo", "x\n")
    for spec, form in (("includes", "includes:TEXT"), ("file_contains:out.txt", "PATH:TEXT")):
        with pytest.raises(UsageError, match=rf"written out \(cell body\) have none: .*{form}"):
            shell.run_cell_magic("harness", f"sweep --providers demo --score {spec}", "say hi\n")
    with capture_output():  # a scorer with its own text needs no target
        shell.run_cell_magic("harness", "sweep --providers demo --workspace ws --score "
                             "includes:demo --score file_contains:README.md:demo --out own",
                             "say hi\n")  # fmt: skip
    assert list(shell.user_ns.pop("own").scores["value"]) == [1.0, 1.0]
    with pytest.raises(UsageError, match=r"one task per line of the cell body \(or --samples"):
        shell.run_cell_magic("harness", "sweep --providers demo", "\n")
    with pytest.raises(UsageError, match="argument --sweep-id: ' ' is no sweep id"):
        shell.run_line_magic("harness", "sweep --providers demo --sweep-id ' '")
    with pytest.raises(UsageError, match=r"^%%harness sweep: --samples nosuch\.csv: no such file"):
        shell.run_line_magic("harness", "sweep --samples nosuch.csv --providers demo")


def test_each_spec_builds_the_scorer_the_api_builds(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(files["csv"].parent)
    sc = hn.scorers
    built = {
        "includes": sc.includes(),
        "includes:Paris": sc.includes("Paris"),
        "exact": sc.exact(),
        "exact: 42 ": sc.exact(" 42 "),
        "regex": sc.regex(),
        "regex:a:b{2}": sc.regex("a:b{2}"),  # a pattern may hold colons
        "json_schema:title.json": sc.json_schema({"title": "answer", "type": "object"}),
        "file_contains:out.txt": sc.file_contains("out.txt"),
        "file_contains:out.txt:a: b": sc.file_contains("out.txt", "a: b"),
        "command:python -c 'print(1)'": sc.command(["python", "-c", "print(1)"]),
        "tests": sc.tests(),
        "tests:pytest -x tests": sc.tests(["pytest", "-x", "tests"]),
    }
    for spec, scorer in built.items():
        assert scorer_from(spec) == scorer, spec
        assert scorer_from(spec).name == scorer.name, spec


async def test_a_sample_with_its_own_contract_runs_with_that_contract(
    tmp_path: Path,
) -> None:
    ws = make_demo_workspace(tmp_path / "ws")
    store = tmp_path / "s.duckdb"
    sample = hn.Sample("list the files", "demo model", id="one")
    checked = hn.TaskContract(sample.input, ws, verification=hn.FileContains("README.md", "demo"))
    result = await hn.sweep(
        [(checked, sample)], [demo_provider()], store=store, scorers=[hn.scorers.includes()]
    )
    assert list(result.runs["outcome"]) == ["success"]  # the contract's check ran
    assert list(result.scores["sample_id"]) == ["one"] and list(result.scores["value"]) == [1.0]
    result.store.close()
    other = hn.TaskContract("say hello", ws)
    with pytest.raises(hn.ConfigError, match="is not its sample's input"):
        await hn.sweep([(other, sample)], [demo_provider()], store=store)
    with pytest.raises(hn.ConfigError, match="two samples have the id 'one'"):
        await hn.sweep([(checked, sample), sample], [demo_provider()], workspace=ws)
    with pytest.raises(hn.ConfigError, match="tasks must be a list"):
        await hn.sweep((checked, sample), [demo_provider()], store=store)  # type: ignore[arg-type]
