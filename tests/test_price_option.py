"""``--price MODEL=IN,OUT`` (both faces) and ``--prices VAR`` (the magics): a model the
catalogue lacks priced from the command line or a notebook variable, on ``run`` and
``sweep``; the prices reach the stored ``attempts.cost_usd`` and ``--max-cost``."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import harnessnb as hn
from harnessnb import cli
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.launch._choose import build_provider
from harnessnb.notebook import _magics

MODEL = "acme-custom-7b"  # no catalogue has it
IN_TOKENS, OUT_TOKENS = 1000, 200
ENV_KEYS = (
    "HARNESSNB_PROVIDER", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY",
    "OPENROUTER_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "HARNESSNB_STORE",
)  # fmt: skip


def _looker(request: ChaosRequest) -> Reply:
    """Lists the folder once, then answers; every reply the same usage."""
    done = any(m.get("role") == "tool" for m in request.messages)
    if done:
        return Reply(text="done", input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS)
    return Reply(tool_calls=[{"name": "list_dir", "arguments": {"path": "."}}],
                 input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS)  # fmt: skip


def _spender(request: ChaosRequest) -> Reply:
    """Never stops on its own: a run only a budget ends."""
    step = sum(1 for m in request.messages if m.get("role") == "tool")
    return Reply(tool_calls=[{"name": "read_file", "arguments": {"path": f"f{step}.txt"}}],
                 input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS)  # fmt: skip


def _price(inp: float, out: float) -> float:
    return (IN_TOKENS * inp + OUT_TOKENS * out) / 1_000_000


@pytest.fixture
def looker() -> Iterator[ChaosServer]:
    with ChaosServer(responder=_looker) as server:
        yield server


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
               NO_PROXY="127.0.0.1,localhost")  # fmt: skip
    return env


def _command(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harnessnb", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def _server(server: ChaosServer) -> list[str]:
    """A local OpenAI-compatible server and a model the catalogue lacks."""
    return ["--provider", "local", "--base-url", server.openai_url, "--model", MODEL]


def _attempt_costs(path: Path) -> list[tuple[str, list[float | None]]]:
    """Each run's outcome and its attempts' ``cost_usd`` (None for NULL), in run order."""
    with hn.Store(path) as store:
        runs = store.runs().sort_values("started_at")
        return [(row.outcome, [None if pd.isna(c) else c for c in
                               store.attempts(row.run_id)["cost_usd"].astype(object)])
                for row in runs.itertuples()]  # fmt: skip


# ------------------------------------------------------------------ the command


def test_the_command_prices_a_model_with_price_even_on_a_local_server(
    tmp_path: Path, ws: Path, looker: ChaosServer
) -> None:
    store = tmp_path / "s.duckdb"
    base = ["run", "look around", "--workspace", str(ws), "--store", str(store), *_server(looker)]
    priced = _command([*base, "--price", f"{MODEL}=2,10", "--price", "other=1,1"], tmp_path)
    assert priced.returncode == 0, priced.stdout + priced.stderr
    one = _price(2, 10)
    assert f"cost ${2 * one:.6f}" in priced.stdout
    unpriced = _command(base, tmp_path)  # the same local server, not told: free
    assert unpriced.returncode == 0, unpriced.stderr
    assert _attempt_costs(store) == [("finished", [one, one]), ("finished", [0.0, 0.0])]
    with hn.Store(store) as opened:
        assert opened.runs().sort_values("started_at")["cost_usd"].tolist() == [2 * one, 0.0]


def test_the_command_stops_at_max_cost_priced_with_price(tmp_path: Path, ws: Path) -> None:
    store = tmp_path / "s.duckdb"
    for i in range(12):
        (ws / f"f{i}.txt").write_text("x")
    one = _price(2, 10)  # $0.004 a step
    with ChaosServer(responder=_spender) as server:
        out = _command(["run", "read everything", "--workspace", str(ws), "--store", str(store),
                        *_server(server), "--price", f"{MODEL}=2,10", "--max-cost", "0.01"],
                       tmp_path)  # fmt: skip
    assert out.returncode == cli.EXIT_CODES["cost_budget"] == 6, out.stdout + out.stderr
    assert _attempt_costs(store) == [("cost_budget", [one, one, one])]


def _bad() -> list[tuple[list[str], str]]:
    fix = "write it as MODEL=IN,OUT, e.g. --price my-model=0.5,1.5"
    return [
        (["--price", "x"], f"argument --price: 'x': {fix}"),
        (["--price", "m=1"], f"argument --price: 'm=1': {fix}"),
        (["--price", "m=1,2,3"], f"argument --price: 'm=1,2,3': {fix}"),
        (["--price", "m=a,b"], f"'m=a,b': 'a' is not a number of dollars; {fix}"),
        (["--price", "m=-1,2"], "'m=-1,2': '-1' is no price (a finite number of dollars, 0 or"),
        (["--price", "m=1,inf"], "'inf' is no price (a finite number of dollars"),
        (["--price", "m=nan,1"], "'nan' is no price (a finite number of dollars"),
        (["--price", "=1,2"], f"argument --price: '=1,2' names no model: {fix}"),
        (["--price", " =1,2"], f"names no model: {fix}"),
        (["--price", "m=1,2", "--price", "m=3,4"], "--price: 'm' is priced twice"),
        (["--agent", "claude", "--price", "m=1,2"], "--price applies to harnessnb's own loop"),
    ]


@pytest.mark.parametrize(("options", "message"), _bad())
def test_a_bad_price_is_a_usage_error_of_the_command_and_nothing_runs(
    tmp_path: Path,
    ws: Path,
    options: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = tmp_path / "s.duckdb"
    for sub in (["run", "task"], ["sweep", "task", "--providers", "demo"]):
        if "--agent" in options and sub[0] == "sweep":
            continue
        try:
            code = cli.main([*sub, "--workspace", str(ws), "--store", str(store), *options])
        except SystemExit as exc:  # argparse's usage error
            code = exc.code  # type: ignore[assignment]
        err = capsys.readouterr().err
        assert code == 2, err
        assert message in " ".join(err.split()) and "Traceback" not in err
        assert not store.exists()  # no run recorded: the store was never opened


def test_a_bad_price_exits_2_from_the_real_command(tmp_path: Path, ws: Path) -> None:
    out = _command(["run", "task", "--workspace", str(ws), "--price", "m=1"], tmp_path)
    assert out.returncode == 2
    assert "argument --price: 'm=1': write it as MODEL=IN,OUT" in out.stderr
    assert not (tmp_path / "runs.duckdb").exists()


def test_the_command_sweep_prices_each_run_with_price(
    tmp_path: Path, ws: Path, looker: ChaosServer
) -> None:
    store = tmp_path / "s.duckdb"
    out = _command(["sweep", "look around", "look again", "--providers", "local",
                    "--base-url", looker.openai_url, "--model", MODEL, "--workspace", str(ws),
                    "--store", str(store), "--price", f"{MODEL}=2,10"], tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    one = _price(2, 10)
    assert sorted(_attempt_costs(store)) == [("finished", [one, one])] * 2
    assert f"${4 * one:.6f}" in out.stdout  # the sweep's spend


def _escalated(server: ChaosServer, ws: Path, store: Any) -> str:
    """A run of MODEL on ``server`` that a 503 escalated (resumable); its id."""
    server.push(Fault.status(503))
    contract = hn.TaskContract("look around", ws, max_retries=0)
    provider = build_provider("local", model=MODEL, base_url=server.openai_url)
    result = hn.run_sync(contract, provider, store=store)
    assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    return result.run_id


def test_the_command_resume_prices_with_price(
    tmp_path: Path, ws: Path, looker: ChaosServer
) -> None:
    store = tmp_path / "s.duckdb"
    with hn.Store(store) as opened:
        run_id = _escalated(looker, ws, opened)
    out = _command(["resume", run_id, "--store", str(store), *_server(looker),
                    "--price", f"{MODEL}=2,10"], tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    one = _price(2, 10)
    # the 503 reported no usage (NULL); the resumed attempts are priced
    assert _attempt_costs(store) == [("finished", [None, one, one])]


# ------------------------------------------------------------------ the magics


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[InteractiveShell]:
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HARNESSNB_STORE", str(tmp_path / "runs.duckdb"))
    monkeypatch.setenv("HARNESSNB_NO_WIDGETS", "1")
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "harnessnb")
    yield sh


def _magic_costs(store: str, run_id: str) -> list[float]:
    return list(_magics._store(store).attempts(run_id)["cost_usd"])


def test_the_run_magic_prices_with_price_and_with_a_prices_variable(
    shell: InteractiveShell, tmp_path: Path, ws: Path, looker: ChaosServer
) -> None:
    store = str(tmp_path / "m.duckdb")
    line = shlex.join(["run", "--workspace", str(ws), "--store", store, *_server(looker)])
    shell.user_ns["mine"] = hn.Prices({MODEL: (1.0, 1.0), "other": (5.0, 5.0)})
    results: dict[str, Any] = {}
    for key, options in [("price", f"--price {MODEL}=2,10"), ("prices", "--prices mine"),
                         ("both", f"--prices mine --price {MODEL}=3,0")]:  # fmt: skip
        with capture_output():
            shell.run_cell_magic("harness", f"{line} {options} --out {key}", "look around")
        results[key] = shell.user_ns[key]
    assert _magic_costs(store, results["price"].run_id) == [_price(2, 10)] * 2
    assert _magic_costs(store, results["prices"].run_id) == [_price(1, 1)] * 2
    # Together they merge: --price wins for its model.
    assert _magic_costs(store, results["both"].run_id) == [_price(3, 0)] * 2
    assert results["price"].cost_usd == pytest.approx(2 * _price(2, 10))


def test_the_resume_magic_prices_with_a_prices_variable(
    shell: InteractiveShell, tmp_path: Path, ws: Path, looker: ChaosServer
) -> None:
    store = str(tmp_path / "m.duckdb")
    run_id = _escalated(looker, ws, _magics._store(store))
    shell.user_ns["mine"] = hn.Prices({MODEL: (1.0, 1.0)})
    with capture_output():
        shell.run_line_magic(
            "harness",
            shlex.join(["resume", run_id, "--store", store, *_server(looker), "--prices", "mine"]),
        )
    one = _price(1, 1)
    assert _magic_costs(store, run_id)[1:] == [one, one]
    with pytest.raises(UsageError, match="--prices: 'nowhere' is not defined"):
        shell.run_line_magic("harness", f"resume {run_id} --store {store} --prices nowhere")


def test_a_prices_variable_keeps_its_local_free_setting(
    shell: InteractiveShell, tmp_path: Path, ws: Path
) -> None:
    store = str(tmp_path / "m.duckdb")

    def gpt(request: ChaosRequest) -> Reply:
        return Reply(text="done", input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS)

    shell.user_ns["simulated"] = hn.Prices(local_free=False)  # the catalogue's gpt-4o
    with ChaosServer(responder=gpt) as server, capture_output():
        shell.run_cell_magic("harness", shlex.join(
            ["run", "--workspace", str(ws), "--store", store, "--provider", "openai",
             "--base-url", server.openai_url, "--model", "gpt-4o", "--prices", "simulated",
             "--price", f"{MODEL}=1,1", "--out", "r"]), "look")  # fmt: skip
    # gpt-4o at the catalogue's $2.50 / $10 per million, the loopback server not free
    assert _magic_costs(store, shell.user_ns["r"].run_id) == [pytest.approx(_price(2.5, 10))]


@pytest.mark.parametrize(("options", "message"), [
    *_bad(),
    (["--prices", "nowhere"], "--prices: 'nowhere' is not defined in the notebook; define"),
    (["--prices", "text"], "--prices: 'text' is a str, not an hn.Prices; e.g. text = hn."),
    (["--agent", "claude", "--prices", "text"], "--prices applies to harnessnb's own loop"),
])  # fmt: skip
def test_a_bad_price_is_a_usage_error_of_the_magics_and_nothing_runs(
    shell: InteractiveShell,
    tmp_path: Path,
    ws: Path,
    looker: ChaosServer,
    options: list[str],
    message: str,
) -> None:
    store = str(tmp_path / "m.duckdb")
    shell.user_ns["text"] = "not prices"
    base = ["--workspace", str(ws), "--store", store]
    subs = [["run", "--provider", "local"], ["sweep", "--providers", "local"]]
    if "--agent" in options:
        subs = [["run"]]  # the coding-agent options are run's alone
    for sub in subs:
        if sub[0] != "run" or "--provider" in sub:
            sub = [*sub, "--base-url", looker.openai_url]
        with pytest.raises(UsageError) as err:
            shell.run_cell_magic("harness", shlex.join([*sub, *base, *options]), "look")
        assert message in str(err.value) and "\n" not in str(err.value)
        assert str(err.value).startswith(("%harness", "%%harness"))
    assert looker.requests == []  # nothing ran
    assert not Path(store).exists()


def test_the_sweep_magic_prices_each_run_with_price_and_prices(
    shell: InteractiveShell, tmp_path: Path, ws: Path, looker: ChaosServer
) -> None:
    store = str(tmp_path / "m.duckdb")
    shell.user_ns["mine"] = hn.Prices({MODEL: (1.0, 1.0)})
    line = shlex.join(["sweep", "--providers", "local", "--base-url", looker.openai_url,
                       "--model", MODEL, "--workspace", str(ws), "--store", store,
                       "--repeats", "2"])  # fmt: skip
    with capture_output():
        shell.run_cell_magic("harness", f"{line} --price {MODEL}=2,10 --out a", "look around\n")
        shell.run_cell_magic("harness", f"{line} --prices mine --out b", "look around\n")
    one, other = 2 * _price(2, 10), 2 * _price(1, 1)
    assert shell.user_ns["a"].runs["cost_usd"].tolist() == [pytest.approx(one)] * 2
    assert shell.user_ns["a"].cost_usd == pytest.approx(2 * one)
    assert shell.user_ns["b"].runs["cost_usd"].tolist() == [pytest.approx(other)] * 2
