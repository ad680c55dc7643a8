"""The example notebooks run top to bottom with no key and no network (nbclient, with a
kernel on this interpreter), and are kept in git with the outputs of such a run
(``scripts/build_notebooks.py``), so GitHub and nbviewer show the results."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

import harnessnb as hn

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "harnessnb-tests"
KEYS = ("OPENROUTER_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "HARNESSNB_PROVIDER",
        "HARNESSNB_STORE")


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A kernelspec on THIS interpreter (whatever `python3` means elsewhere), an
    environment without keys, and proxies that go nowhere: only loopback can work."""
    home = tmp_path_factory.mktemp("jupyter")
    spec = home / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "harnessnb tests",
        "language": "python",
    }))
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(home))
    for key in KEYS:
        mp.delenv(key, raising=False)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        mp.setenv(var, "http://127.0.0.1:9")
    mp.setenv("NO_PROXY", "127.0.0.1,localhost")
    mp.setenv("no_proxy", "127.0.0.1,localhost")
    yield
    mp.undo()


def execute(name: str, where: Path) -> nbformat.NotebookNode:
    """Copy notebooks/ (with its data) to ``where`` and run ``name`` there."""
    shutil.copytree(ROOT / "notebooks", where, dirs_exist_ok=True)
    nb = nbformat.read(where / name, as_version=4)
    client = NotebookClient(nb, timeout=120, kernel_name=KERNEL,
                            resources={"metadata": {"path": str(where)}})
    client.execute()
    return nb


def outputs(nb: nbformat.NotebookNode) -> str:
    """Every text and HTML output of the notebook, joined."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            data = out.get("data", {})
            parts += [data.get("text/plain", ""), data.get("text/html", "")]
    return "\n".join(parts)


def test_there_are_eight_notebooks() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01-quickstart.ipynb", "02-failure-analysis.ipynb", "03-durable-runs.ipynb",
        "04-replay.ipynb", "05-sweep.ipynb", "06-mcp.ipynb", "07-compare.ipynb",
        "08-providers.ipynb",
    ]


WIRES = ("openai-chat", "openai-responses", "anthropic", "gemini")


def cell_text(nb: nbformat.NotebookNode, marker: str) -> str:
    """The plain text of the outputs of the one code cell whose source has ``marker``."""
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    return "\n".join(out.get("text", "") + out.get("data", {}).get("text/plain", "")
                     for out in cell.outputs)  # fmt: skip


def check_providers(nb: nbformat.NotebookNode) -> None:
    """08-providers' outputs: the task answered on each of the four wires, with the
    seeded 429s and 503s retried on the way; the typed answer from hn.ask on each; the
    mode each provider answered a run in; a schema violation asked again and fixed; a
    rejected schema fallen back to tool mode; a refusal not retried, its card shown;
    and the failure tables."""
    plain = cell_text(nb, "plain[name] = ")
    for wire in WIRES:
        assert re.search(rf"{wire}\s+finished\s+The answer is 42\.", plain), plain
    attempts = cell_text(nb, "attempts = store.attempts()")
    assert re.search(r"rate_limited\s+429", attempts) and re.search(r"server\s+503", attempts)
    asked = cell_text(nb, "schema_field(server")
    assert asked.count("Answer(value=42, sentence='The answer is 42.')") == len(WIRES)
    # each wire asked natively, in its own field
    for field in ("response_format", "text.format", "output_config.format",
                  "generationConfig.responseJsonSchema"):
        assert field in asked, asked
    modes = cell_text(nb, "typed.append")
    for wire in WIRES:
        for kind, asked_in, mode in (("Answer", "auto", "native"), ("Sketch", "auto", "tool"),
                                     ("Answer", "prompted", "prompted")):
            assert re.search(rf"{wire}\s+{kind}\s+{asked_in}\s+{mode}\s+finished", modes), modes
    fixed = cell_text(nb, "Fault.schema_violation()")
    assert "Answer(value=42" in fixed
    assert re.search(r"1\s+\S+\s+schema_violation\s+200", fixed)  # the first answer...
    assert re.search(r"2\s+\S+\s+NaN\s+200", fixed)  # ... asked again, and fixed
    assert "value: Field required" in fixed
    rejected = cell_text(nb, "Fault.schema_rejected()")
    assert "output_mode: tool; output: Answer(value=42" in rejected
    assert re.search(r"request\s+400", rejected)
    refused = cell_text(nb, "Fault.refusal()")
    assert "kind: refusal; requests made: 1" in refused  # not retried
    assert "OUTPUT_REFUSAL" in refused and "attempt 1: the model refused" in refused
    html = "".join(out.get("data", {}).get("text/html", "")
                   for c in nb.cells if "Fault.refusal()" in c.source for out in c.outputs)
    assert "harnessnb-error" in html  # the error's card
    table = cell_text(nb, 'by=("provider", "kind")')
    for wire in WIRES:
        assert wire in table
    for kind in ("rate_limited", "server", "request", "schema_violation", "refusal"):
        assert kind in table
    assert "failure_rate_low" in table
    assert "output_mode" in cell_text(nb, 'by=("provider", "output_mode", "kind")')


# Where 06 looks for the npm "everything" server (as tests/mcp does).
NPM_BINS = Path(os.environ.get("HARNESSNB_MCP_SERVERS", "/opt/harnessnb-mcp/node_modules/.bin"))


def check_mcp(text: str, *, everything: bool) -> None:
    """06-mcp's outputs: a read allowed, a destructive call asked and denied with a note,
    the everything server (or the sentence saying it is skipped), a dead server's card
    with its stderr, a call on a server that died mid-call typed, the failure table,
    and a replay that answered every tool call from the store with the servers gone."""
    assert "Repository status:" in text and "Commit history:" in text  # git_status, git_log
    assert "the MCP tool git_reset of server git" in text and "nobody answered within" in text
    assert "refused" in text and "M  hello.txt" in text  # denied: still staged
    if everything:
        assert "Echo: hello from harnessnb" in text and "The sum of 2 and 3 is 5." in text
    else:
        assert "its part below is skipped" in text
    assert "MCP_EXITED" in text and "harnessnb-error" in text
    assert "app.db is missing" in text  # the dead server's stderr, on its card
    assert "exited" in text and "failure_rate_low" in text
    assert "the repository exists: False" in text
    assert "same tool calls and answers: True" in text


def check_table(nb: nbformat.NotebookNode) -> str:
    """The plain text of the output of 07's cell that checks accuracy against the truth."""
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and "inside" in c.source]
    return "\n".join(out.get("data", {}).get("text/plain", "") for out in cell.outputs)


def sweep_counts(text: str) -> list[tuple[int, int]]:
    """(runs done, runs planned) of each sweep whose full table the outputs show (a
    budget-stopped sweep's says so and is left out)."""
    found = re.findall(r"sweep sweep_\w+: (\d+)/(\d+) runs, \d+ succeeded(?! \(stopped)", text)
    return [(int(done), int(planned)) for done, planned in dict.fromkeys(found)]


def test_the_saved_sweep_notebook_reports_200_runs() -> None:
    nb = nbformat.read(ROOT / "notebooks" / "05-sweep.ipynb", as_version=4)
    text = outputs(nb)
    # the big sweep first, then the magic's small one (2 tasks x the notebook's four
    # providers and the demo), then the cluster's (the same 200 runs)
    assert sweep_counts(text) == [(200, 200), (10, 10)]
    assert "limited: 2/2" in text and "demo: 2/2" in text
    assert "200 runs" in text and "reliable: 50/50" in text


# Failure kinds a notebook's text may name in code (`rate_limited`): a claim its outputs
# must show. HTTP statuses it names ("HTTP 503", "503s") likewise.
KINDS = {kind.value for kind in hn.ProviderErrorKind}


def claims(nb: nbformat.NotebookNode) -> list[str]:
    """What the notebook's text says happened: each HTTP status (``HTTP 503``, ``503s``,
    ``429 (...)``) and each failure kind in code, as a word its outputs must contain."""
    text = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    statuses = re.findall(r"\b(?:HTTP )?([45]\d\d)(?=s\b|\b)", text)
    kinds = [k for k in re.findall(r"`(\w+)`", text) if k in KINDS]
    return sorted(set(statuses) | set(kinds))


def unshown_claims(nb: nbformat.NotebookNode) -> list[str]:
    text = outputs(nb)
    return [c for c in claims(nb) if not re.search(rf"(?<![\w.]){c}(?![\w.])", text)]


def test_claims_are_found_in_text_and_checked_against_outputs() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("15% are HTTP 503, and 429s with `rate_limited`; "
                                      "`kind` is no kind, nor 2024 a status"),
        nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output(
            "stream", name="stdout", text="local rate_limited 429 2.503")]),
    ]  # fmt: skip
    assert claims(nb) == ["429", "503", "rate_limited"]
    assert unshown_claims(nb) == ["503"]  # 2.503 is not a 503


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_texts_claim_only_what_their_saved_outputs_show(path: Path) -> None:
    # 01 said its flaky server's 503s were counted; its seed never sent one.
    nb = nbformat.read(path, as_version=4)
    assert unshown_claims(nb) == [], path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_are_stored_with_the_outputs_of_a_clean_run(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    # every code cell ran, once, top to bottom, and none failed
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), path.name
    kinds = [out.get("output_type") for cell in code for out in cell.outputs]
    assert "error" not in kinds and kinds, path.name
    text = outputs(nb)
    assert "Traceback" not in text
    assert "/tmp/" not in text  # the build's temporary folders are shown as <work>
    # ... in the saved widget state too (06's approval panel shows the call's arguments)
    assert "/tmp/" not in json.dumps(nb.metadata.get("widgets", {})), path.name
    if path.stem.startswith("01"):
        # a live retry, an error card and the approval (its record) are in the saved page
        assert "rate_limited" in text and re.search(r"retries [1-9]", text)
        assert "PROVIDER_AUTH" in text
        assert "harnessnb-error" in text and "no answer within" in text
        assert "sk-demo-not-a-key" not in text  # the key in the source never reaches output
    if path.stem.startswith("02"):
        assert "failure_rate_low" in text and "period" in text
        assert any("image/png" in out.get("data", {}) for cell in code for out in cell.outputs)
    if path.stem.startswith("05"):
        # the configured rates sat inside the intervals, the runs cost something, a
        # budget stopped a sweep and a cancelled one left its runs recorded so
        assert "failure_rate_low" in text and "cost per successful run" in text
        assert "stopped launching: max_cost_usd" in text
        assert "outcomes: {'cancelled': 4}" in text
        assert any("image/png" in out.get("data", {}) for cell in code for out in cell.outputs)
        # the same sweep on a two-worker LocalCluster, read back from its shards
        headings = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown"]
        assert "## On a Dask cluster" in headings
        assert "2 shard files, one per worker process" in text
        assert "200 runs merged into cluster-runs.duckdb" in text
        assert text.count("200/200 runs") >= 2
    if path.stem.startswith("06"):
        check_mcp(text, everything="Echo: hello from harnessnb" in text)
        assert "harnessnb-approval" in text  # the approval panel's record, saved
    if path.stem.startswith("08"):
        check_providers(nb)
    if path.stem.startswith("07"):
        # 30 samples from the CSV x 3 providers x 3 repeats, three scorers; every configured
        # accuracy inside its interval, the 429s unscored, every pair compared (Holm)
        assert "30 samples" in text and "270/270 runs" in text
        assert "includes" in text and "file_contains('ANSWER.txt')" in text
        assert "ci_low" in text and "ci_high" in text and "infra_failure_rate" in text
        assert "inside" in text and "False" not in check_table(nb)
        assert "runs not scored" in text and "rate_limited" in text
        assert "p_holm" in text and "paired_t" in text
        assert "harnessnb-sweep" in text  # the result's card, as HTML
        # the LLM judge (a scripted provider) scored beside them; the rescore, with no
        # provider, replayed every grading as it was and scored a new scorer
        assert "judge" in text and "answer_file_exact" in text
        assert "judge calls made by the rescore: 0" in text
        graded = re.search(r"runs graded again the same: (\d+) of (\d+)", text)
        assert graded is not None and graded.group(1) == graded.group(2) != "0"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_headless_without_a_key(path: Path, tmp_path: Path, kernel_env: None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    temp = tmp_path / "tmp"  # the kernel's temporary folder (it inherits TMPDIR)
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    where = tmp_path / "notebooks"
    nb = execute(path.name, where)
    text = outputs(nb)
    assert "Traceback" not in text
    assert unshown_claims(nb) == []  # what the text says happened, the outputs show
    # Notebooks 02-05 once left harnessnb-* folders (up to 21 MB) in the temp folder.
    assert sorted(p.name for p in temp.glob("harnessnb-*")) == []
    # Each notebook its own store: only 01 uses the default runs.duckdb (05's sweep
    # magic once put its runs there too, into 01's tables).
    made = sorted(p.name for p in where.glob("*.duckdb"))
    assert made == (["runs.duckdb"] if path.stem.startswith("01") else [])
    if path.stem.startswith("05"):
        assert sweep_counts(text) == [(200, 200), (10, 10)]  # every planned run ran
    if path.stem.startswith("06"):
        check_mcp(text, everything=(NPM_BINS / "mcp-server-everything").exists())
    if path.stem.startswith("07"):
        assert sweep_counts(text) == [(270, 270)]
        assert "False" not in check_table(nb)  # every configured accuracy inside
    if path.stem.startswith("08"):
        check_providers(nb)
    if path.stem.startswith("01"):
        assert "success" in text and "harnessnb-run" in text  # the card, as HTML
        assert "awaiting_approval" in text and "PROVIDER_AUTH" in text
        assert (where / "runs.duckdb").exists()  # the default store, in the cwd


def test_the_recording_is_small_and_made_by_its_script() -> None:
    data = ROOT / "notebooks" / "data" / "recorded-run.duckdb"
    assert data.stat().st_size < 512 * 1024
    assert (ROOT / "scripts" / "make_recording.py").exists()


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("HARNESSNB_CHECK_BINDER"),
                    reason="builds a fresh venv from binder/requirements.txt (minutes); "
                           "set HARNESSNB_CHECK_BINDER=1 to run it")
def test_binder_requirements_alone_run_every_notebook() -> None:
    # pip needs the registries: drop the dead proxies the notebook fixture may have set
    # (the script sets its own for the notebooks, after installing).
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "check_binder.sh")],
                         capture_output=True, text=True, timeout=1800, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
