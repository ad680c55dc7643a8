"""``%%harness run --agent ...`` in a real IPython InteractiveShell, with stand-in CLIs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agent_helpers import CLIs
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import harnessnb as hn
from harnessnb.notebook import _magics


@pytest.fixture
def shell(clis: CLIs, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("HARNESSNB_STORE", str(clis.store.path))
    monkeypatch.setenv("HARNESSNB_NO_WIDGETS", "1")
    clis.store.close()  # the magic opens the file itself (one store per file per kernel)
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "harnessnb")
    yield sh
    sh.user_ns.pop("R", None)


def test_an_agent_cell_runs_the_cli_and_shows_its_card(shell: InteractiveShell, clis: CLIs) -> None:
    clis.scenario(mode="ok", text="summary written")
    shell.user_ns["topic"] = "a.txt"
    with capture_output() as cap:
        shell.run_cell_magic(
            "harness", f"run --agent claude --workspace {clis.ws} --session notes --out R",
            "summarise {topic}",
        )
    result = shell.user_ns["R"]
    assert isinstance(result, hn.agents.AgentResult) and result.ok
    assert result.text == "summary written" and result.session == "notes"
    assert clis.calls()[-1]["argv"][-1] == "summarise a.txt"
    html = [o.data.get("text/html", "") for o in cap.outputs]
    assert any("harnessnb-agent-result" in h and "summary written" in h for h in html)
    text = cap.stdout
    assert "started" in text and "Read" in text  # live progress lines, no widget frontend
    store = _magics._store(None)
    runs = store.runs(result.run_id).to_dict("records")
    assert [(r["provider"], r["outcome"]) for r in runs] == [("claude-code", "finished")]


def test_a_failed_agent_cell_shows_the_error_card_and_raises(
    shell: InteractiveShell, clis: CLIs
) -> None:
    clis.scenario(mode="rate_limit")
    with capture_output() as cap, pytest.raises(hn.agents.RateLimited) as err:
        shell.run_cell_magic("harness", f"run --agent codex --workspace {clis.ws}", "go")
    assert "usage limit" in err.value.detail
    assert len(err.value._render_traceback_()) <= 3
    assert any("harnessnb-error" in o.data.get("text/html", "") for o in cap.outputs)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("--agent claude --verify 'a.txt contains x'", "--verify applies to harnessnb's own loop"),
        ("--agent codex --allow-write '*.md'", "use --permission edit"),
        ("--agent copilot --provider openai", "--provider applies to harnessnb's own loop"),
        ("--session s", "--session applies only with --agent"),
        ("--agent gemini", "invalid choice: 'gemini'"),
        ("--agent claude --permission yolo", "invalid choice: 'yolo'"),
        ("--agent claude --timeout -1", "--timeout"),
    ],
)
def test_wrong_agent_options_are_one_line_usage_errors(
    shell: InteractiveShell, clis: CLIs, options: str, message: str
) -> None:
    with pytest.raises(UsageError, match=message.replace("*", r"\*")):
        shell.run_cell_magic("harness", f"run {options} --workspace {clis.ws}", "task")
    assert clis.calls() == []


def test_max_steps_with_an_agent_that_has_no_turn_limit_is_unsupported(
    shell: InteractiveShell, clis: CLIs
) -> None:
    with capture_output(), pytest.raises(hn.agents.Unsupported):
        shell.run_cell_magic(
            "harness", f"run --agent codex --max-steps 3 --workspace {clis.ws}", "task"
        )
    assert clis.calls() == []


# ------------------------------------------------------------ the command


@pytest.mark.parametrize(
    ("mode", "code"), [("ok", 0), ("rate_limit", 3), ("not_logged_in", 4), ("hang", 3)]
)
def test_the_command_runs_an_agent_and_exits_by_its_outcome(
    clis: CLIs, mode: str, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    from harnessnb.cli import main

    clis.scenario(mode=mode, text="all done")
    store = str(clis.store.path)
    clis.store.close()
    argv = ["run", "read a.txt", "--workspace", str(clis.ws), "--agent", "claude",
            "--store", store, "--timeout", "1"]  # fmt: skip
    assert main(argv) == code
    out = capsys.readouterr().out
    assert out.startswith("started run_") and "with claude-code" in out
    if mode == "ok":
        assert "answer: all done" in out and "Read(" in out


def test_the_command_refuses_loop_options_with_an_agent(
    clis: CLIs, capsys: pytest.CaptureFixture[str]
) -> None:
    from harnessnb.cli import main

    argv = ["run", "t", "--workspace", str(clis.ws), "--agent", "codex", "--verify", "a contains b"]
    assert main(argv) == 2
    assert "--verify applies to harnessnb's own loop" in capsys.readouterr().err
    assert main(["run", "t", "--workspace", str(clis.ws), "--session", "s"]) == 2
    assert clis.calls() == []
