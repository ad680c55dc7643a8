"""The %harness / %%harness magics in a real IPython InteractiveShell."""

from __future__ import annotations

import _thread
import contextlib
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.notebook import _magics
from harnessnb.notebook._args import help_text
from tests.chaos_helpers import NOTES, writes_notes
from tests.files_helpers import folder

# `shell` (the suite's notebook shell) and `srv` (the chaos server) are conftest.py's.


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "ws", {"README.md": "# Title\n\n## Usage\n"})


def opts(srv: ChaosServer, ws: Path, tmp_path: Path) -> str:
    return (
        f"--provider openai --base-url {srv.openai_url} --workspace {ws} "
        f"--store {tmp_path / 'runs.duckdb'}"
    )


def runs(tmp_path: Path) -> Any:
    return _magics._store(str(tmp_path / "runs.duckdb")).runs()


# ------------------------------------------------------------------ run


def test_cell_magic_runs_the_body_and_assigns_out(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    with capture_output() as cap:
        shell.run_cell_magic("harness", f"run {opts(srv, ws, tmp_path)} --out R", "say hi\n")
    result = shell.user_ns["R"]
    assert isinstance(result, hn.RunResult)
    assert (result.outcome, result.text, result.steps) == (hn.RunOutcome.FINISHED, "say hi", 1)
    assert result.step_summaries[0].decision == "answer"
    assert srv.requests[0].messages[-1]["content"] == "say hi"
    assert "[harnessnb] started" in cap.stdout  # text progress: no widget frontend here
    (card,) = [o for o in cap.outputs if "text/html" in o.data]
    assert "harnessnb-run" in card.data["text/html"]
    assert card.data["text/plain"].startswith(f"run {result.run_id}: finished")
    assert runs(tmp_path)["outcome"].tolist() == ["finished"]


def test_line_magic_takes_the_task_from_the_line(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    with capture_output():
        shell.run_line_magic("harness", f"run say hello there {opts(srv, ws, tmp_path)} --out R")
    assert shell.user_ns["R"].text == "say hello there"


def test_body_interpolates_names_from_the_notebook(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    shell.user_ns["who"] = "world"
    with capture_output():
        shell.run_cell_magic("harness", f"run {opts(srv, ws, tmp_path)} --out R",
                             "greet {who} {{literally}}")
    assert shell.user_ns["R"].text == "greet world {literally}"


def test_missing_name_in_body_is_a_one_line_usage_error(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match="'nowhere' is not defined") as err:
        shell.run_cell_magic("harness", f"run {opts(srv, ws, tmp_path)}", "greet {nowhere}")
    assert "\n" not in str(err.value)
    assert srv.requests == []


@pytest.mark.parametrize("field", ["{items[a]}", "{items:d}", "{items!z}", "{items.nope}"])
def test_a_field_the_value_cannot_fill_is_a_one_line_usage_error(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path, field: str
) -> None:
    shell.user_ns["items"] = [1, 2]  # a list: no str index, no int format
    with pytest.raises(UsageError, match="cannot fill in") as err:
        shell.run_cell_magic("harness", f"run {opts(srv, ws, tmp_path)}", f"list {field}")
    assert "\n" not in str(err.value)
    assert srv.requests == []


def test_the_magic_line_expands_names_like_the_body(
    shell: InteractiveShell, srv: ChaosServer, tmp_path: Path
) -> None:
    spaced = tmp_path / "my work"  # a value with a space stays one argument
    spaced.mkdir()
    shell.user_ns.update(who="world", place=spaced, db=str(tmp_path / "runs.duckdb"))
    line = (f"run --provider openai --base-url {srv.openai_url} --workspace {{place}} "
            "--store $db --out R greet {who} $who {{x}} $$who $nobody")  # fmt: skip
    with capture_output():
        shell.run_line_magic("harness", line)
    result = shell.user_ns["R"]
    assert result.text == "greet world world {x} $who $nobody"
    runs = _magics._store(str(tmp_path / "runs.duckdb")).runs()
    assert runs["workspace"].tolist() == [str(spaced)]
    shell.user_ns["rid"] = result.run_id
    for form in ("{rid}", "$rid", "{rid!s}"):
        with capture_output() as cap:
            shell.run_line_magic("harness", f"tb {form} --store {{db}}")
        assert cap.stdout == f"run {result.run_id} ended finished with no error\n"
    with pytest.raises(UsageError, match="'nowhere' is not defined") as err:
        shell.run_line_magic("harness", "tb {nowhere}")
    assert "\n" not in str(err.value)


def run_awaiting(shell: InteractiveShell, cell: str) -> Any:
    """``cell`` run (output captured) with the awaiting transformer the extension installs
    in a kernel, taken out again after."""
    shell.input_transformers_post.append(_magics.await_harness_cells)
    try:
        with capture_output():
            return shell.run_cell(cell)
    finally:
        shell.input_transformers_post.remove(_magics.await_harness_cells)


def test_the_awaiting_path_expands_the_line_too(shell: InteractiveShell, tmp_path: Path) -> None:
    shell.user_ns["rid"] = "run_nope"
    try:
        result = run_awaiting(shell, f"%harness tb {{rid}} --store {tmp_path / 'r.duckdb'}\n")
    finally:
        shell.user_ns.pop("rid", None)
    assert isinstance(result.error_in_exec, UsageError)
    assert "no run 'run_nope'" in str(result.error_in_exec)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("run --max-steps x task", "not a whole number"),
        ("run --max-steps 0 task", "at least 1"),
        ("run --max-seconds -1 task", "more than 0"),
        ("run --provider nope task", "invalid choice"),
        ("run --fallback nope task", "invalid choice"),
        ("run --verify nonsense task", "FILE contains TEXT"),
        ("run --verify 'a contains b' --verify-cmd true task", "not allowed with"),
        ("run --bogus task", "unrecognized arguments"),
        ('run "unbalanced', "cannot split"),
        ("run", "no task"),
        ("frobnicate", "unknown subcommand"),
        ("runs --nope", "unrecognized arguments"),
        ("failures --by nope", "failure_rates"),
        ("resume", "required: RUN_ID"),
        ("show no_such_run", "no run 'no_such_run'"),
        ("tb no_such_run", "no run 'no_such_run'"),
        ("run --provider local task", "needs --base-url"),
        ("run --out 1bad task", "'1bad' is not a Python variable name"),
        ("run --out class task", "'class' is not a Python variable name"),
        ("runs --out my-frame", "not a Python variable name"),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(
    shell: InteractiveShell, line: str, match: str
) -> None:
    with pytest.raises(UsageError, match=match) as err:
        shell.run_line_magic("harness", line)
    assert "\n" not in str(err.value)


def test_usage_error_through_run_cell_shows_no_traceback(shell: InteractiveShell) -> None:
    with capture_output() as cap:
        result = shell.run_cell("%harness run --max-steps x task")
    assert isinstance(result.error_in_exec, UsageError)
    assert "Traceback" not in cap.stdout + cap.stderr


@pytest.mark.parametrize("line", ["--help", "run --help", "", "failures -h"])
def test_help_lists_every_option(shell: InteractiveShell, line: str) -> None:
    with capture_output() as cap:
        assert shell.run_line_magic("harness", line) is None
    if line == "failures -h":
        assert all(o in cap.stdout for o in ("--by", "--store", "--out"))
        return
    for option in ("--provider", "--model", "--base-url", "--out"):
        assert option in cap.stdout
    if line in ("--help", "run --help", ""):
        for option in ("--workspace", "--verify", "--verify-cmd", "--max-steps",
                       "--max-seconds", "--store", "--allow-write", "--fallback", "--quiet"):
            assert option in cap.stdout


def test_magic_docstring_is_the_help() -> None:
    assert _magics.HarnessMagics.harness.__doc__ == help_text()
    for sub in ("run", "resume", "runs", "failures", "show", "replay", "tb"):
        assert f"%harness {sub}" in help_text()


# ------------------------------------------------------------------ providers


def _serve_all(monkeypatch: pytest.MonkeyPatch, srv: ChaosServer) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", srv.openai_url)
    monkeypatch.setenv("OPENROUTER_BASE_URL", srv.openai_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"OPENROUTER_API_KEY": "k", "ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"},
         "openrouter"),
        ({"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, "anthropic"),
        ({"OPENAI_API_KEY": "k"}, "openai"),
        ({"HARNESSNB_PROVIDER": "openai", "OPENROUTER_API_KEY": "k", "OPENAI_API_KEY": "k"},
         "openai"),
    ],
)
def test_provider_selection_order(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str,
) -> None:
    _serve_all(monkeypatch, srv)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with capture_output():
        shell.run_cell_magic("harness", f"run --workspace {ws} --out R", "hi")
    assert shell.user_ns["R"].providers == (expected,)
    assert srv.requests[0].protocol == ("anthropic" if expected == "anthropic" else "openai")


def test_no_key_uses_the_demo_model_with_a_visible_note(
    shell: InteractiveShell, ws: Path
) -> None:
    with capture_output() as cap:
        shell.run_cell_magic("harness", f"run --workspace {ws} --out R --quiet", "list files")
    assert shell.user_ns["R"].providers == ("demo",)
    notes = [o.data["text/plain"] for o in cap.outputs if "harnessnb-note" in
             o.data.get("text/html", "")]
    assert notes and "no API key found" in notes[0]
    assert "OPENROUTER_API_KEY, ANTHROPIC_API_KEY, OPENAI_API_KEY" in notes[0]


def test_a_named_provider_without_its_key_shows_a_config_card_and_fails(
    shell: InteractiveShell, ws: Path
) -> None:
    with capture_output() as cap, pytest.raises(hn.ConfigError, match="OPENAI_API_KEY") as err:
        shell.run_cell_magic("harness", f"run --provider openai --workspace {ws}", "hi")
    assert len(err.value._render_traceback_()) <= 3
    assert any("harnessnb-error" in o.data.get("text/html", "") for o in cap.outputs)


def test_a_run_whose_store_is_inside_its_workspace_is_refused_before_the_store_is_made(
    shell: InteractiveShell, srv: ChaosServer, ws: Path
) -> None:
    """The agent must not reach its own record (``--workspace .`` with the default store)."""
    line = f"run --provider openai --base-url {srv.openai_url} --workspace {ws} --store {ws}/r.db"
    with capture_output() as cap, pytest.raises(hn.ConfigError, match="inside the workspace"):
        shell.run_cell_magic("harness", line, "hi")
    assert any("harnessnb-error" in o.data.get("text/html", "") for o in cap.outputs)
    assert sorted(p.name for p in ws.iterdir()) == ["README.md"]
    assert srv.requests == []


def test_fallback_serves_the_step_after_a_retryable_failure(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "k")
    monkeypatch.setenv("OPENROUTER_BASE_URL", srv.openai_url)
    srv.push(Fault.status(503))
    with capture_output():
        shell.run_cell_magic(
            "harness", f"run {opts(srv, ws, tmp_path)} --fallback openrouter --out R", "hi"
        )
    result = shell.user_ns["R"]
    assert result.providers == ("openrouter",)
    assert result.fallbacks == 1


# ------------------------------------------------------------------ policy, verify


def test_allow_write_and_verify_make_a_successful_run(
    shell: InteractiveShell, ws: Path, tmp_path: Path
) -> None:
    with ChaosServer(responder=writes_notes) as server, capture_output():
        shell.run_cell_magic(
            "harness",
            f'run {opts(server, ws, tmp_path)} --allow-write NOTES.md '
            '--verify "NOTES.md contains # Notes" --max-steps 3 --out R',
            "write notes",
        )
    result = shell.user_ns["R"]
    assert (result.outcome, result.verified) == (hn.RunOutcome.SUCCESS, True)
    assert (ws / "NOTES.md").read_text() == NOTES
    assert [(c.name, c.status) for c in result.step_summaries[0].tool_calls] == [
        ("write_file", "ok")
    ]


def test_without_allow_write_the_write_is_refused_with_a_hint(
    shell: InteractiveShell, ws: Path, tmp_path: Path
) -> None:
    with ChaosServer(responder=writes_notes) as server, capture_output():
        shell.run_cell_magic(
            "harness", f"run {opts(server, ws, tmp_path)} --verify-cmd 'test -f NOTES.md' "
            "--max-steps 2 --out R", "write notes",
        )
        refused = [m for m in server.requests[1].messages if m.get("role") == "tool"]
    assert not (ws / "NOTES.md").exists()
    assert "refused" in refused[0]["content"]
    assert shell.user_ns["R"].verified is not True


def test_max_steps_caps_the_run(
    shell: InteractiveShell, ws: Path, tmp_path: Path
) -> None:
    def reader(request: ChaosRequest) -> Reply:
        n = len(request.messages)
        return Reply(tool_calls=[{"name": "list_dir", "arguments": {"path": "." * (1 + n % 2)}}])

    with ChaosServer(responder=reader) as server, capture_output():
        shell.run_cell_magic("harness", f"run {opts(server, ws, tmp_path)} --max-steps 2 "
                             "--out R --quiet", "look around")
    assert shell.user_ns["R"].steps == 2


# ------------------------------------------------------------------ failures


def test_rate_limited_run_shows_card_then_raises_short_error(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    srv.push(Fault.status(429, retry_after="100"))
    with capture_output() as cap, pytest.raises(hn.ProviderError) as err:
        shell.run_cell_magic("harness", f"run {opts(srv, ws, tmp_path)} --max-seconds 5", "hi")
    assert err.value.kind is hn.ProviderErrorKind.RATE_LIMITED
    lines = err.value._render_traceback_()
    assert 1 <= len(lines) <= 3
    assert lines[-1] == "rate_limited, HTTP 429, retryable, retry after 100 s"
    (card,) = [o for o in cap.outputs if "harnessnb-run" in o.data.get("text/html", "")]
    assert "retry after 100 s" in card.data["text/html"]
    assert "status: 429" in card.data["text/plain"]
    assert runs(tmp_path)["outcome"].tolist() == ["escalated_retryable"]


def test_failed_cell_through_run_cell_prints_at_most_three_lines(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    srv.set_default(Fault.status(401))
    with capture_output() as cap:
        result = shell.run_cell(f"%harness run hi {opts(srv, ws, tmp_path)}")
    assert isinstance(result.error_in_exec, hn.ProviderError)
    err_lines = [ln for ln in (cap.stdout + cap.stderr).splitlines() if "ProviderError" in ln
                 or "auth, HTTP 401" in ln]
    assert err_lines and len(err_lines) <= 3


def run_hi(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path, *, failing: bool = False
) -> str:
    """The run id of a ``%%harness run ... --out R`` cell saying hi (output captured);
    ``failing``: its provider answers 401 and the cell raises the ProviderError."""
    if failing:
        srv.set_default(Fault.status(401))
    raised = pytest.raises(hn.ProviderError) if failing else contextlib.nullcontext()
    with capture_output(), raised:
        shell.run_cell_magic("harness", f"run {opts(srv, ws, tmp_path)} --out R", "hi")
    return str(shell.user_ns["R"].run_id)


def test_tb_prints_the_full_traceback_of_a_failed_run(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    run_id = run_hi(shell, srv, ws, tmp_path, failing=True)
    assert run_id == runs(tmp_path)["run_id"].iloc[0]
    with capture_output() as cap:
        shell.run_line_magic("harness", f"tb {run_id} --store {tmp_path / 'runs.duckdb'}")
    assert "Traceback (most recent call last)" in cap.stdout
    assert "ProviderError" in cap.stdout
    _magics._ERRORS.clear()  # a new kernel: only the stored error is left
    with capture_output() as cap:
        shell.run_line_magic("harness", f"tb {run_id} --store {tmp_path / 'runs.duckdb'}")
    assert "ProviderError [PROVIDER_AUTH]" in cap.stdout
    assert "status: 401" in cap.stdout


# ------------------------------------------------------------------ interrupt + resume


def test_interrupt_cancels_the_run_and_resume_continues_it(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    srv.push(Fault.hang(5.0))
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        with capture_output(), pytest.raises(KeyboardInterrupt) as interrupted:
            shell.run_cell_magic("harness", f"run {opts(srv, ws, tmp_path)}", "hi")
    finally:
        timer.cancel()
    frame = runs(tmp_path)
    assert frame["outcome"].tolist() == ["cancelled"]
    run_id = frame["run_id"].iloc[0]
    # IPython shows the interrupt as its one line, in place of frames.
    shown = interrupted.value._render_traceback_()  # type: ignore[attr-defined]
    assert shown == [f"cancelled at step 1 — %harness resume {run_id}"]
    with capture_output():
        shell.run_line_magic(
            "harness",
            f"resume {run_id} --provider openai --base-url {srv.openai_url} "
            f"--store {tmp_path / 'runs.duckdb'} --out R",
        )
    assert shell.user_ns["R"].outcome is hn.RunOutcome.FINISHED
    assert runs(tmp_path)["outcome"].tolist() == ["finished"]


# ------------------------------------------------------------------ tables


def test_runs_and_failures_return_frames_and_assign_out(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    srv.push(Fault.status(503))
    with capture_output():
        shell.run_cell_magic("harness", f"run {opts(srv, ws, tmp_path)}", "hi")
    store = f"--store {tmp_path / 'runs.duckdb'}"
    frame = shell.run_line_magic("harness", f"runs {store} --out frame")
    assert frame is shell.user_ns["frame"]
    assert frame["outcome"].tolist() == ["finished"]
    assert "contract" not in frame.columns
    # a typed answer's JSON is hidden like the contract; its mode is shown
    assert "output" not in frame.columns and "output_mode" in frame.columns
    rates = shell.run_line_magic("harness", f"failures {store} --by provider,kind")
    assert rates[["provider", "kind", "failures"]].values.tolist() == [["openai", "server", 1]]
    by_provider = shell.run_line_magic("harness", f"failures {store} --by provider --out frame")
    assert by_provider["attempts"].tolist() == [2]
    assert shell.user_ns["frame"] is by_provider


def test_show_displays_the_card_and_the_tables(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    run_id = run_hi(shell, srv, ws, tmp_path)
    with capture_output() as cap:
        shell.run_line_magic("harness", f"show {run_id} --store {tmp_path / 'runs.duckdb'}")
    html = [o.data.get("text/html", "") for o in cap.outputs]
    assert "harnessnb-run" in html[0] and "<details" in html[0]
    assert [h for h in html if h.startswith("<b>")] == [
        "<b>steps</b>", "<b>attempts</b>", "<b>tool calls</b>"
    ]


def test_show_counts_what_the_store_holds(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    srv.push(Fault.status(503))
    srv.push(Fault.status(503))
    run_id = run_hi(shell, srv, ws, tmp_path)
    with capture_output() as cap:
        shell.run_line_magic("harness", f"show {run_id} --store {tmp_path / 'runs.duckdb'}")
    card = cap.outputs[0].data["text/plain"]
    attempts = _magics._store(str(tmp_path / "runs.duckdb")).attempts(run_id)
    assert len(attempts) == 3  # two 503s, then the answer
    assert "attempts 3, retries 2" in card and "providers openai;" in card
    assert "answer: hi" in card


def test_show_of_a_failed_run_shows_its_error_card(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    run_id = run_hi(shell, srv, ws, tmp_path, failing=True)
    with capture_output() as cap:
        shell.run_line_magic("harness", f"show {run_id} --store {tmp_path / 'runs.duckdb'}")
    text, html = cap.outputs[0].data["text/plain"], cap.outputs[0].data["text/html"]
    assert "escalated_terminal" in text
    assert "ProviderError [PROVIDER_AUTH]" in text and "status: 401" in text
    assert "harnessnb-error" in html and "auth, HTTP 401, not retryable" in html


def test_the_failures_table_scrolls_in_its_own_box(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    with capture_output():
        shell.run_cell_magic("harness", f"run {opts(srv, ws, tmp_path)}", "hi")
    rates = shell.run_line_magic("harness", f"failures --store {tmp_path / 'runs.duckdb'}")
    html = rates._repr_html_()
    assert html.startswith("<div class='harnessnb-scroll' style='overflow-x:auto;max-width:100%'>")
    assert "<table" in html and "failure_rate_high" in html
    assert type(rates[["provider"]]) is pd.DataFrame  # what is made from it is plain again


def test_replay_runs_a_recorded_run_again_without_the_network(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    store = _magics._store(str(tmp_path / "runs.duckdb"))
    recorded = hn.run_sync(
        hn.TaskContract("say hi", ws), hn.Record(hn.OpenAI("m", base_url=srv.openai_url), store),
        store=store,
    )
    srv.set_default(Fault.status(500))  # the replay must not call the server
    with capture_output():
        shell.run_line_magic(
            "harness", f"replay {recorded.run_id} --store {tmp_path / 'runs.duckdb'} "
            f"--workspace {ws} --out R",
        )
    again = shell.user_ns["R"]
    assert (again.outcome, again.text) == (hn.RunOutcome.FINISHED, "say hi")
    assert len(srv.requests) == 1


def test_replay_of_a_run_never_recorded_says_so_and_how_to_record(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    run_id = run_hi(shell, srv, ws, tmp_path)
    with capture_output() as cap, pytest.raises(hn.ProviderError) as info:
        shell.run_line_magic("harness", f"replay {run_id} --store {tmp_path / 'runs.duckdb'}")
    assert "the run was not recorded" in info.value.message
    assert "hn.Record(provider, store)" in info.value.message
    assert "the conversation differs" not in info.value.message
    assert any("was not recorded" in o.data.get("text/plain", "") for o in cap.outputs)
    assert len(srv.requests) == 1  # the original run's only request: the replay sent none


def test_only_run_takes_a_cell_body(shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="only `run` and `sweep` take a cell body"):
        shell.run_cell_magic("harness", "runs", "body")


# ------------------------------------------------------------------ awaiting cells


def test_harness_cells_become_awaiting_cells_in_a_kernel() -> None:
    lines = [
        "get_ipython().run_cell_magic('harness', 'run --quiet', 'task\\n')\n",
        "    get_ipython().run_line_magic('harness', 'runs')\n",
        "x = get_ipython().run_line_magic('harness', 'runs')\n",
    ]
    out = _magics.await_harness_cells(lines)
    assert out[0].startswith("await __import__('harnessnb.notebook._magics'")
    assert out[0].endswith(".harness_async(get_ipython(), 'run --quiet', 'task\\n')\n")
    assert out[1:] == lines[1:]  # nested or assigned: left as they are


def test_the_awaiting_path_runs_in_a_shell_with_the_transformer(
    shell: InteractiveShell, srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    result = run_awaiting(shell, f"%%harness run {opts(srv, ws, tmp_path)} --out R\nhi\n")
    assert result.error_in_exec is None
    assert shell.user_ns["R"].outcome is hn.RunOutcome.FINISHED
