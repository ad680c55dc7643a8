"""The ``harnessnb`` command: the README's main job, exit codes, errors as cards, the
store commands, resume, and the provider choice it shares with the magics."""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb import cli
from harnessnb.demo import DEMO_LABEL, demo_server, make_demo_workspace, provider_for
from harnessnb.launch._choose import choose_provider, parse_verify, parse_verify_cmd

KEYS = ("OPENROUTER_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "HARNESSNB_PROVIDER")


def keyless_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KEYS and k != "HARNESSNB_STORE"}
    # Any attempt to leave the machine would go to a dead proxy; loopback is exempt.
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
               NO_PROXY="127.0.0.1,localhost")
    return env


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (*KEYS, "HARNESSNB_STORE"):
        monkeypatch.delenv(key, raising=False)


def test_main_job_command_succeeds_without_keys_and_prints_a_failure_table(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "harnessnb", "demo", "--store", "demo.duckdb"],
        cwd=tmp_path, env=keyless_env(), capture_output=True, text=True, timeout=60,
    )
    elapsed = time.monotonic() - started
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert re.search(r"^run run_\w+: success$", out.stdout, re.M)
    assert DEMO_LABEL in out.stdout
    table = out.stdout.split("failures of this run, from the store")[1]
    rows = {m[0]: int(m[1]) for m in re.findall(r"^\s+demo\s+(\w+)\s+\d+\s+(\d+)", table, re.M)}
    assert rows == {"rate_limited": 1, "server": 1, "malformed": 1}
    assert "\n  rate_limited (HTTP 429) - retrying in 1 s, attempt 2/5\n" in out.stdout
    with hn.Store(tmp_path / "demo.duckdb") as store:
        assert store.failure_rates()["failures"].sum() == 3
        assert store.runs()["outcome"].tolist() == ["success"]
    assert elapsed < 15


def test_the_default_store_is_runs_duckdb_in_the_working_directory(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harnessnb", "demo", "--no-chaos"],
        cwd=tmp_path, env=keyless_env(), capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "runs.duckdb").exists()
    listed = subprocess.run(
        [sys.executable, "-m", "harnessnb", "runs"],
        cwd=tmp_path, env=keyless_env(), capture_output=True, text=True, timeout=60,
    )
    assert listed.returncode == 0 and "success" in listed.stdout


def test_every_outcome_has_an_exit_code_and_the_groups_are_distinct() -> None:
    assert set(cli.EXIT_CODES) == {o.value for o in hn.RunOutcome}
    codes = cli.EXIT_CODES
    assert codes["success"] == codes["finished"] == 0
    groups = [
        {"escalated_retryable"}, {"escalated_terminal"}, {"stalled"},
        {"step_cap", "time_budget", "token_budget", "cost_budget"}, {"needs_reconciliation"},
        {"denied", "awaiting_approval"}, {"unverified"}, {"cancelled"},
    ]
    per_group = [{codes[o] for o in g} for g in groups]
    assert all(len(s) == 1 for s in per_group)
    values = [s.pop() for s in per_group]
    assert len(set(values)) == len(values)
    assert not {0, 1, 2} & set(values) and codes["cancelled"] == 130


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for word in ("130 cancelled", "7 needs_reconciliation", "5 stalled", "2 usage", "9 unverified"):
        assert word in text.replace("\n", " ")


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the parser tree: the command itself, then each subcommand."""
    found = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _commands(child, (*path, name))
    return found


def test_every_help_of_the_command_tree_works_in_a_real_process(tmp_path: Path) -> None:
    paths = _commands(cli.build_parser())
    assert sorted(p[0] for p in paths if p) == ["demo", "failures", "resume", "run", "runs",
                                               "sweep"]
    for path in paths:
        out = subprocess.run(
            [sys.executable, "-m", "harnessnb", *path, "--help"],
            cwd=tmp_path, env=keyless_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert (out.returncode, out.stderr) == (0, ""), (path, out.stderr)
        assert out.stdout.startswith(f"usage: {' '.join(('harnessnb', *path))}"), path
        if path in [(), ("demo",), ("run",), ("resume",)]:  # the commands that run something
            assert "9 unverified" in " ".join(out.stdout.split()), path
    assert not list(tmp_path.iterdir())  # --help made no store, no folder


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    import tomllib
    from importlib.metadata import version

    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    expected = pyproject["project"]["version"]
    assert hn.__version__ == expected == version("harnessnb")
    out = subprocess.run(
        [sys.executable, "-m", "harnessnb", "--version"],
        cwd=tmp_path, env=keyless_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (out.returncode, out.stdout, out.stderr) == (0, f"harnessnb {expected}\n", "")


def test_demo_help_shows_the_chaos_rates(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    assert "rate_limited 20%" in capsys.readouterr().out


def test_a_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "--workspace"])
    assert info.value.code == 2


def test_an_unknown_option_is_named_with_its_commands_usage(tmp_path: Path) -> None:
    bogus = subprocess.run(
        [sys.executable, "-m", "harnessnb", "--bogus"],
        cwd=tmp_path, env=keyless_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bogus.returncode == 2
    assert bogus.stderr.startswith("usage: harnessnb [-h]")
    assert bogus.stderr.endswith("harnessnb: error: unrecognized arguments: --bogus\n")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("argv", "usage", "said"),
    [
        (["failures", "--every", "1h"], "usage: harnessnb failures",
         "harnessnb failures: error: unrecognized arguments: --every 1h"),
        (["runs", "--bogus"], "usage: harnessnb runs",
         "harnessnb runs: error: unrecognized arguments: --bogus"),
        (["run", "x", "--workspace", ".", "--nope"], "usage: harnessnb run",
         "harnessnb run: error: unrecognized arguments: --nope"),
        ([], "usage: harnessnb [-h]",
         "harnessnb: error: the following arguments are required: COMMAND"),
    ],
)  # fmt: skip
def test_a_usage_error_is_told_by_the_command_it_was_given_to(
    argv: list[str], usage: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.startswith(usage) and err.rstrip().endswith(said)


def test_failures_help_lists_the_columns_by_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    from harnessnb.notebook._args import PARSERS
    from harnessnb.store._failures import FAILURE_GROUPS

    with pytest.raises(SystemExit):
        cli.main(["failures", "--help"])
    for text in (capsys.readouterr().out, PARSERS["failures"].format_help()):  # both faces
        assert f"among {', '.join(FAILURE_GROUPS)} (default provider,kind)" in " ".join(
            text.split()
        )


def test_the_stall_demo_exits_5_and_shows_the_stalls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["demo", "--stall", "--no-chaos", "--store", str(tmp_path / "s.duckdb"),
                     "--workspace", str(tmp_path / "ws")])
    out = capsys.readouterr().out
    assert code == 5
    assert "stall (repetition)" in out and "told the model to change approach" in out
    assert re.search(r"^\s+7\s+repetition\s+stalled", out, re.M)


def _demo_run(tmp_path: Path, *options: str) -> tuple[Path, int]:
    """``harnessnb run`` of the demo task in a fresh demo workspace (``tmp_path/ws``, the
    store ``tmp_path/s.duckdb``) with ``options``: the workspace and the exit code."""
    ws = make_demo_workspace(tmp_path / "ws")
    task = "summarise README.md into NOTES.md"
    store = str(tmp_path / "s.duckdb")
    return ws, cli.main(["run", task, "--workspace", str(ws), *options, "--store", store])


def test_run_with_a_budget_exits_6(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, code = _demo_run(tmp_path, "--provider", "demo", "--max-steps", "1")
    assert code == 6
    assert "step_cap" in capsys.readouterr().out


def test_run_verifies_and_allows_the_named_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    verify = "NOTES.md contains - Usage"
    _, code = _demo_run(tmp_path, "--verify", verify, "--allow-write", "NOTES.md")
    out = capsys.readouterr().out
    assert code == 0
    assert "note: no API key found" in out and DEMO_LABEL in out  # no key: the demo model
    assert '\n  write_file("path": "NOTES.md", "content": "<' in out
    assert "\n  step 3/12: 1 tool call, " in out and "success" in out


def test_a_list_option_before_the_task_does_not_swallow_it(tmp_path: Path) -> None:
    ws = make_demo_workspace(tmp_path / "ws")
    out = subprocess.run(
        [sys.executable, "-m", "harnessnb", "run", "--allow-write", "NOTES.md",
         "summarise README.md into NOTES.md", "--workspace", str(ws), "--provider", "demo",
         "--verify", "NOTES.md contains #", "--store", "s.duckdb"],
        cwd=tmp_path, env=keyless_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert (ws / "NOTES.md").read_text().startswith("# Notes")


@pytest.mark.parametrize(
    "words",
    [
        ["--allow-write", "A.md", "--allow-write", "b/*", "--fallback", "demo",
         "--fallback", "openai"],
        ["--allow-write", "A.md,b/*", "--fallback", "demo,openai"],
        ["--allow-write", "A.md", "--fallback", "demo,openai", "--allow-write", "b/*"],
    ],
)  # fmt: skip
def test_list_options_repeat_or_take_commas_alike_in_both_faces(words: list[str]) -> None:
    from harnessnb.notebook._args import parse

    line = ["run", *words, "the", "task", "--workspace", "ws"]
    _, magic = parse(" ".join(line))
    command = cli.build_parser().parse_args([line[0], *words, "the task", "--workspace", "ws"])
    for args in (magic, command):
        assert (args.allow_write, args.fallback) == (["A.md", "b/*"], ["demo", "openai"])
    assert command.task == "the task" and magic.task == ["the", "task"]


def test_a_bad_list_value_is_a_usage_error_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from IPython.core.error import UsageError

    from harnessnb.notebook._args import parse

    for words, said in ((["--fallback", "demo,nope"], "invalid choice: 'nope'"),
                        (["--allow-write", "A.md,"], "'A.md,' has an empty value")):  # fmt: skip
        with pytest.raises(SystemExit) as info:
            cli.main(["run", "x", "--workspace", ".", *words])
        assert info.value.code == 2 and said in capsys.readouterr().err
        with pytest.raises(UsageError, match=re.escape(said)):
            parse(" ".join(["run", *words, "x"]))


def test_a_config_error_is_a_short_card_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["run", "x", "--workspace", str(tmp_path), "--provider", "openai",
                     "--store", str(tmp_path / "s.duckdb")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("ConfigError [CONFIG_MISSING_KEY]: openai: environment variable "
                          "OPENAI_API_KEY is not set")
    assert "Traceback" not in err and len(err.splitlines()) <= 3


def test_a_refused_connection_prints_its_cause_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "ws").mkdir()  # the store beside it: never inside its workspace
    code = cli.main(["run", "say hi", "--workspace", str(tmp_path / "ws"), "--provider", "local",
                     "--base-url", f"http://127.0.0.1:{port}/v1",
                     "--store", str(tmp_path / "s.duckdb")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 3 and "ProviderError [PROVIDER_TRANSPORT]" in out
    card = out[out.index("ProviderError") :]
    assert card.count("All connection attempts failed") == 1, card


def test_an_unknown_run_is_a_resume_error_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["resume", "run_nope", "--store", str(tmp_path / "s.duckdb")])
    assert code == 1
    out, err = capsys.readouterr()
    assert "ResumeError [RESUME_UNKNOWN_RUN]" in err
    assert "note:" not in out  # no provider chosen for a run that is not there


def test_resume_continues_an_escalated_run_to_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = make_demo_workspace(tmp_path / "ws")
    path = tmp_path / "s.duckdb"
    contract = hn.TaskContract("summarise README.md into NOTES.md", ws, max_retries=0,
                               verification=hn.FileContains("NOTES.md", "#"))
    policy = hn.Policy.default().layer("t").allow_write("NOTES.md")
    with hn.Store(path) as store, demo_server(rates={"server": 1.0}) as down:
        first = hn.run_sync(contract, provider_for(down), store=store, policy=policy)
    assert first.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    code = cli.main(["resume", first.run_id, "--provider", "demo", "--store", str(path)])
    out = capsys.readouterr().out
    assert code == 0
    assert f"resumed {first.run_id} with demo" in out and "success" in out
    assert (ws / "NOTES.md").exists()


def test_runs_and_failures_read_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "s.duckdb")
    assert cli.main(["demo", "--store", path, "--workspace", str(tmp_path / "ws")]) == 0
    capsys.readouterr()
    assert cli.main(["runs", "--store", path]) == 0
    assert re.search(r"run_\w+ .* demo .* success\s+3", capsys.readouterr().out)
    assert cli.main(["failures", "--store", path, "--by", "provider"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["provider", "attempts", "failures", "failure_rate"]
    assert lines[1].split()[:3] == ["demo", "6", "3"]
    # a column that is no group is a usage error (exit 2), told before the store opens
    missing = str(tmp_path / "typo.duckdb")
    assert cli.main(["failures", "--store", missing, "--by", "provider,nope"]) == 2
    err = capsys.readouterr().err
    assert "ConfigError" in err and "'nope'" in err and "provider, model, kind" in err
    assert not os.path.exists(missing)


def test_reading_a_missing_store_says_so_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for words in (["runs", "--store", "missing.duckdb"], ["failures"]):
        out = subprocess.run(
            [sys.executable, "-m", "harnessnb", *words],
            cwd=tmp_path, env=keyless_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert (out.returncode, out.stderr) == (0, ""), out.stderr
        store = "missing.duckdb" if "--store" in words else "runs.duckdb"
        assert out.stdout.startswith(f"no store at {store}: nothing has been recorded there")
        assert os.listdir(tmp_path) == []  # no store file, no lock file
    with hn.Store(tmp_path / "empty.duckdb"):
        pass  # a store with no runs is there: it says so
    assert cli.main(["runs", "--store", str(tmp_path / "empty.duckdb")]) == 0
    assert capsys.readouterr().out.startswith("no runs in ")


def test_the_magics_reading_a_missing_store_say_so_and_create_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "harnessnb")
    for line in ("runs", "failures --by provider", "show run_x", "tb run_x"):
        sub = line.split()[0]
        run = "no run 'run_x': " if "run_x" in line else ""
        for store, shown in (("--store gone.duckdb", "gone.duckdb"), ("", "runs.duckdb")):
            said = rf"^%harness {sub}: {run}no store at {shown}: nothing has been recorded there"
            with pytest.raises(UsageError, match=said + r" \(%%harness run makes one\)$"):
                shell.run_line_magic("harness", f"{line} {store}")
    assert os.listdir(tmp_path) == []


def _harnessnb(args: list[str], cwd: Path, typed: str) -> subprocess.CompletedProcess[str]:
    """The command in a real process whose input stays open after ``typed`` (as a
    terminal nobody else types into): its output is read once it has exited."""
    with subprocess.Popen(
        [sys.executable, "-m", "harnessnb", *args], cwd=cwd, env=keyless_env(), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as proc:  # fmt: skip
        assert proc.stdin and proc.stdout and proc.stderr
        proc.stdin.write(typed)
        proc.stdin.flush()
        try:
            proc.wait(timeout=60)
        finally:
            proc.kill()
        return subprocess.CompletedProcess(
            proc.args, proc.returncode, proc.stdout.read(), proc.stderr.read()
        )


def test_approval_timeout_stops_awaiting_approval_and_resume_asks_again(
    tmp_path: Path,
) -> None:
    ws = make_demo_workspace(tmp_path / "ws")
    run = ["run", "summarise README.md into NOTES.md", "--workspace", str(ws),
           "--provider", "demo", "--store", "s.duckdb", "--approval-timeout", "1"]  # fmt: skip
    started = time.monotonic()
    waited = _harnessnb(run, tmp_path, typed="")  # nobody answers
    assert waited.returncode == 8, waited.stdout + waited.stderr
    assert 1 <= time.monotonic() - started < 20
    assert "harnessnb asks: write NOTES.md via write_file" in waited.stdout
    assert re.search(r"^run run_\w+: awaiting_approval$", waited.stdout, re.M)
    assert not (ws / "NOTES.md").exists()
    with hn.Store(tmp_path / "s.duckdb") as store:
        assert store.runs()["outcome"].tolist() == ["awaiting_approval"]
        run_id = store.runs()["run_id"][0]

    # The resume asks the same question again; answered, the write is made once and the
    # model is not asked again for the step that waited (one more call: the answer).
    resume = ["resume", run_id, "--store", "s.duckdb", "--approval-timeout", "30"]
    resumed = _harnessnb(resume, tmp_path, typed="y\n")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "harnessnb asks: write NOTES.md via write_file" in resumed.stdout
    assert (ws / "NOTES.md").read_text().startswith("# Notes")
    with hn.Store(tmp_path / "s.duckdb") as store:
        assert store.runs()["outcome"].tolist() == ["finished"]
        assert store.attempts()["step"].tolist() == [1, 2, 3, 4]
        assert store.tool_calls()["status"].tolist() == ["ok", "ok", "ok"]


def test_approval_timeout_takes_the_answer_typed_in_time(tmp_path: Path) -> None:
    ws = make_demo_workspace(tmp_path / "ws")
    run = ["run", "summarise README.md into NOTES.md", "--workspace", str(ws),
           "--provider", "demo", "--store", "s.duckdb", "--approval-timeout", "30"]  # fmt: skip
    answered = _harnessnb(run, tmp_path, typed="y\n")
    assert answered.returncode == 0, answered.stdout + answered.stderr
    assert "approval: approve" in answered.stdout
    assert (ws / "NOTES.md").read_text().startswith("# Notes")


def test_without_approval_timeout_the_command_asks_nobody(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws, code = _demo_run(tmp_path, "--provider", "demo", "--max-steps", "3")
    out = capsys.readouterr().out
    assert code == 6  # the refusal went to the model, which ran out of steps
    assert "refused: write NOTES.md" in out and "harnessnb asks" not in out
    assert not (ws / "NOTES.md").exists()


def test_a_refusals_hint_names_the_command_it_is_read_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.duckdb"
    ws, code = _demo_run(tmp_path, "--provider", "demo")
    assert code == 0
    assert "To allow it, pass `--allow-write GLOB` to harnessnb run, or" in capsys.readouterr().out
    with hn.Store(path) as store:
        refused = store.tool_calls().query("status == 'refused'")["output"].tolist()
    assert len(refused) == 1 and "`--allow-write GLOB` to harnessnb run, or" in refused[0]
    assert "%%harness" not in refused[0]
    # Outside the command (hn.run, the magic) the hint names the magic again; a command
    # needing approval is told the one way there is (no face has an --allow-exec).
    acts = iter([{"tool": "write_file", "args": {"path": "N.md", "content": "x"}},
                 {"tool": "run_command", "args": {"argv": ["true"]}}, "done"])  # fmt: skip
    scripted = hn.ScriptedProvider(lambda m: next(acts))
    result = hn.run_sync(hn.TaskContract("write N.md", ws), scripted, store=path)
    with hn.Store(path) as store:
        write, run = store.tool_calls(result.run_id)["output"].tolist()
    assert "`--allow-write GLOB` to %%harness run, or" in write
    assert run.endswith('To allow it, pass policy=hn.Policy.default().layer("app")'
                        '.allow_exec("GLOB") to hn.run.')  # fmt: skip


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_runs", interrupted)
    assert cli.main(["runs"]) == 130


# ------------------------------------------------------------------ shared choices


def test_provider_choice_order() -> None:
    def chosen(env: dict[str, str], **kw: Any) -> tuple[str, str]:
        provider, note = choose_provider(env=env, **kw)
        return provider.name, note

    every = {"OPENROUTER_API_KEY": "k1", "ANTHROPIC_API_KEY": "k2", "OPENAI_API_KEY": "k3"}
    assert chosen({**every, "HARNESSNB_PROVIDER": "anthropic"})[0] == "anthropic"
    assert chosen(every) == ("openrouter", "provider openrouter: OPENROUTER_API_KEY is set")
    assert chosen({"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"})[0] == "anthropic"
    assert chosen({"OPENAI_API_KEY": "k"})[0] == "openai"
    assert chosen({}, base_url="http://127.0.0.1:1/v1")[0] == "local"  # its own name
    name, note = chosen({})
    assert name == "demo" and note.startswith("no API key found") and DEMO_LABEL in note
    assert choose_provider("openai", env={}, base_url="http://127.0.0.1:1/v1")[1] == ""


def test_provider_choice_errors() -> None:
    with pytest.raises(hn.ConfigError, match="unknown provider 'nope'"):
        choose_provider("nope", env={})
    with pytest.raises(hn.ConfigError, match="OPENROUTER_API_KEY is not set"):
        choose_provider("openrouter", env={})
    with pytest.raises(hn.ConfigError, match="needs a base URL"):
        choose_provider("local", env={})


def test_fallbacks_build_a_fallback() -> None:
    provider, _ = choose_provider("demo", fallbacks=["openai"], env={"OPENAI_API_KEY": "k"})
    assert provider.name == "fallback(demo,openai)"


def test_verify_text() -> None:
    assert parse_verify("NOTES.md contains #") == hn.FileContains("NOTES.md", "#")
    assert parse_verify('NOTES.md contains "two words"') == hn.FileContains("NOTES.md", "two words")
    with pytest.raises(hn.ConfigError, match="FILE contains TEXT"):
        parse_verify("NOTES.md has #")
    assert parse_verify_cmd("pytest -q 'a b'") == hn.Command(["pytest", "-q", "a b"])


def test_resume_uses_the_provider_the_run_was_recorded_with() -> None:
    from harnessnb.launch._choose import provider_for_resume

    env = {"OPENROUTER_API_KEY": "sk-or", "ANTHROPIC_API_KEY": "sk-ant"}
    run = {"provider": "anthropic", "model": "claude-x"}
    provider, note = provider_for_resume(run, env=env)
    assert (provider.name, provider.model) == ("anthropic", "claude-x")
    assert "recorded" in note
    # a provider the caller names wins; an unknown or fallback run uses the usual order
    assert provider_for_resume(run, "openrouter", env=env)[0].name == "openrouter"
    fallback_run = {"provider": "fallback(openai,anthropic)", "model": "m"}
    assert provider_for_resume(fallback_run, env=env)[0].name == "openrouter"
    assert provider_for_resume(None, env=env)[0].name == "openrouter"


def test_resume_of_a_local_run_asks_its_server_again_with_no_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harnessnb.chaos import ChaosServer, Fault

    path, ws = str(tmp_path / "s.duckdb"), make_demo_workspace(tmp_path / "ws")
    with hn.set_testing(True), ChaosServer() as srv:
        srv.set_default(Fault.status(503))
        code = cli.main(["run", "say hi", "--provider", "local", "--base-url", srv.openai_url,
                         "--workspace", str(ws), "--store", path])  # fmt: skip
        assert code == 3  # escalated_retryable: resumable
        run_id = re.search(r"started (run_\w+)", capsys.readouterr().out).group(1)  # type: ignore[union-attr]
        srv.set_default(None)
        asked = len(srv.requests)
        assert cli.main(["resume", run_id, "--store", path]) == 0  # no --provider, no key
        out = capsys.readouterr().out
        assert len(srv.requests) > asked
    assert "recorded with: local" in out and f"resumed {run_id} with local" in out
    with hn.Store(path) as store:
        attempts = store.attempts(run_id)
    assert set(attempts["base_url"]) == {srv.openai_url}
