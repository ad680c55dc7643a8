"""``hn.sweep``: many runs across providers, tagged in the store, bounded and cancellable."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosServer
from harnessnb.demo import demo_server
from harnessnb.demo._model import provider_for
from tests.files_helpers import folder
from tests.store_helpers import old_store

# Three simulated providers, each failing its attempts at its own configured rates.
PROFILES: dict[str, dict[str, float]] = {
    "steady": {"server": 0.05},
    "limited": {"rate_limited": 0.3},
    "flaky": {"server": 0.2, "malformed": 0.1},
}
COLUMNS = ["task", "provider", "model", "repeat", "outcome", "steps", "tokens", "cost_usd",
           "elapsed_s", "error_kind", "retries", "run_id", "seconds"]  # fmt: skip
WRITE = {"tool": "write_file", "args": {"path": "OUT.md", "content": "# out\n"}}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "template", {"README.md": "# Title\n\n## Usage\n"})


@pytest.fixture
def servers() -> Iterator[dict[str, ChaosServer]]:
    started = {name: demo_server(seed=i + 2, rates=rates).start()
               for i, (name, rates) in enumerate(PROFILES.items())}  # fmt: skip
    try:
        yield started
    finally:
        for server in started.values():
            server.stop()


def write_then_answer(messages: Sequence[dict[str, Any]]) -> Any:
    """Write OUT.md, then answer once the tool result is back."""
    return "done" if messages[-1].get("role") == "tool" else WRITE


def writer_policy() -> hn.Policy:
    return hn.Policy.default().layer("sweep").allow_write("OUT.md")


class Waiting:
    """A provider that never answers: a run waits on it until cancelled."""

    name = "waiting"
    model = "never"

    def hosts(self) -> list[str]:
        return []

    async def complete(self, messages: Any, tools: Any = None, max_tokens: Any = None,
                       stream: Any = None) -> hn.Completion:  # fmt: skip
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_three_providers_ten_tasks_three_repeats(
    ws: Path, store: hn.Store, servers: dict[str, ChaosServer]
) -> None:
    providers = {name: provider_for(srv, name=name) for name, srv in servers.items()}
    tasks = [f"say hello {i}" for i in range(10)]
    result = await hn.sweep(tasks, providers, workspace=ws, repeats=3, concurrency=8,
                            store=store)  # fmt: skip
    stored = store.runs(sweep=result.sweep_id)
    assert len(stored) == 90 and set(stored["sweep_id"]) == {result.sweep_id}
    assert len(store.runs()) == 90
    runs = result.runs
    assert list(runs.columns) == COLUMNS and len(runs) == 90
    assert isinstance(runs["outcome"].dtype, pd.CategoricalDtype)
    assert str(runs["tokens"].dtype) == "Int64" and str(runs["cost_usd"].dtype) == "Float64"
    assert set(runs["run_id"]) == set(stored["run_id"])
    counts = runs.groupby(["provider", "task"], observed=True).size()
    assert set(counts) == {3} and len(counts) == 30
    assert sorted(set(runs["repeat"])) == [0, 1, 2]
    # The sweep's failure rates match each server's configured rates within the interval.
    rates = result.failure_rates(by="provider").set_index("provider")
    for name, configured in PROFILES.items():
        row = rates.loc[name]
        assert row["attempts"] >= 30
        assert row["failure_rate_low"] <= sum(configured.values()) <= row["failure_rate_high"]
    retries = runs.groupby("provider", observed=True)["retries"].sum()
    for name in PROFILES:  # each failure was retried, but a last one with no retries left
        assert 0 < retries[name] <= rates.loc[name, "failures"]
    by_kind = result.failure_rates()
    flaky = by_kind[by_kind["provider"] == "flaky"].set_index("kind")
    for kind, configured in PROFILES["flaky"].items():
        assert flaky.loc[kind, "failure_rate_low"] <= configured
        assert configured <= flaky.loc[kind, "failure_rate_high"]
    bundle = result._repr_mimebundle_()
    assert f"sweep {result.sweep_id}: 90/90 runs" in bundle["text/plain"]
    assert "harnessnb-sweep" in bundle["text/html"] and "flaky" in bundle["text/html"]


async def test_a_sweeps_failure_rates_leave_other_runs_out(ws: Path, store: hn.Store) -> None:
    with demo_server(rates={"server": 1.0}) as down:
        alone = hn.TaskContract("say hello", ws, max_retries=3)
        await hn.run(alone, provider_for(down, name="down"), store=store)
    good = hn.ScriptedProvider(lambda m: "done", name="good")
    result = await hn.sweep(["say hello"], [good], workspace=ws, store=store)
    assert set(store.failure_rates(by="provider")["provider"]) == {"down", "good"}
    rates = result.failure_rates(by="provider")
    assert rates["provider"].tolist() == ["good"] and rates["failures"].tolist() == [0]


async def test_a_failed_run_never_stops_the_sweep(ws: Path, store: hn.Store) -> None:
    def crash(messages: Any) -> Any:
        raise RuntimeError("a bug in the provider")

    with demo_server(rates={"auth": 1.0}) as locked:
        providers = {
            "locked": provider_for(locked, name="locked"),
            "crashing": hn.ScriptedProvider(crash, name="crashing"),
            "fine": hn.ScriptedProvider(lambda m: "done", name="fine"),
        }
        result = await hn.sweep(["a", "b"], providers, workspace=ws, repeats=2, store=store)
    runs = result.runs.set_index("provider")
    assert len(result.runs) == 12 and len(store.runs(sweep=result.sweep_id)) == 12
    assert set(runs.loc["fine", "outcome"]) == {"finished"}
    assert set(runs.loc["locked", "outcome"]) == {"escalated_terminal"}
    assert set(runs.loc["locked", "error_kind"]) == {"auth"}
    assert set(runs.loc["crashing", "outcome"]) == {"escalated_terminal"}
    assert set(runs.loc["crashing", "error_kind"]) == {"UNKNOWN"}  # a crash, typed
    assert "locked: 4/4" in result.summary_text()


async def test_every_run_writes_its_own_copy_of_the_workspace(ws: Path, store: hn.Store) -> None:
    before = sorted(os.listdir(ws))
    writer = hn.ScriptedProvider(write_then_answer, name="writer")
    kept = await hn.sweep(["write OUT.md"], [writer], workspace=ws, repeats=5, store=store,
                          policy=writer_policy(), keep_workspaces=True)  # fmt: skip
    assert set(kept.runs["outcome"]) == {"finished"}
    folders = store.runs(sweep=kept.sweep_id)["workspace"].tolist()
    assert len(set(folders)) == 5 and str(ws) not in folders
    for kept_ws in folders:
        assert (Path(kept_ws) / "OUT.md").read_text() == "# out\n"
        assert (Path(kept_ws) / "README.md").read_text() == "# Title\n\n## Usage\n"
    assert sorted(os.listdir(ws)) == before  # the template is unchanged
    removed = await hn.sweep(["write OUT.md"], [writer], workspace=ws, repeats=2, store=store,
                             policy=writer_policy())  # fmt: skip
    assert set(removed.runs["outcome"]) == {"finished"}
    for gone in store.runs(sweep=removed.sweep_id)["workspace"]:
        assert not os.path.exists(gone)


async def test_a_run_that_cannot_start_is_a_row_and_its_reason_is_logged(
    ws: Path, store: hn.Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No copy of the workspace can be made: the temporary folder's parent is gone.
    # (A FIFO in the template is refused before any run: tests/security.)
    monkeypatch.setattr(tempfile, "tempdir", str(ws.parent / "no-such-folder"))
    with caplog.at_level("WARNING", logger="harnessnb"):
        result = await hn.sweep(["a", "b"], [hn.ScriptedProvider(lambda m: "done")],
                                workspace=ws, store=store)  # fmt: skip
    assert result.runs["error_kind"].tolist() == ["UNKNOWN", "UNKNOWN"]
    told = [r.getMessage() for r in caplog.records if "could not run" in r.getMessage()]
    assert len(told) == 2 and all("No such file or directory" in line for line in told)


async def test_max_cost_usd_stops_launching_runs(ws: Path, store: hn.Store) -> None:
    # One attempt per run, a million input tokens at $1 per million: each run costs $1.
    paid = hn.ScriptedProvider(lambda m: "done", name="paid", model="paid-model",
                               tokens_per_reply=(10**6, 0))  # fmt: skip
    prices = hn.Prices({"paid-model": (1.0, 0.0)})
    tasks = [f"task {i}" for i in range(5)]
    result = await hn.sweep(
        tasks, [paid], workspace=ws, concurrency=1, store=store, prices=prices, max_cost_usd=2.5
    )
    assert result.runs["cost_usd"].tolist() == [1.0, 1.0, 1.0]
    assert result.stopped == "max_cost_usd" and result.cost_usd == 3.0
    assert [r.outcome for r in result.records][3:] == [None, None]
    assert len(store.runs(sweep=result.sweep_id)) == 3
    assert "3/5" in result.summary_text() and "max_cost_usd" in result.summary_text()


async def test_a_spend_that_cannot_be_priced_stops_launching_under_max_cost_usd(
    ws: Path, store: hn.Store
) -> None:
    # A model with no known price: its runs' cost is NULL, so the sweep cannot tell its
    # spend. Under max_cost_usd it starts no more runs rather than spend unbounded (as
    # a run's own max_cost_usd does); a run that used no tokens spent nothing.
    unpriced = hn.ScriptedProvider(lambda m: "done", name="acme", model="mystery-model",
                                   tokens_per_reply=(10**6, 0))  # fmt: skip
    prices = hn.Prices(local_free=False)  # "scripted" would be free otherwise
    tasks = [f"task {i}" for i in range(4)]
    result = await hn.sweep(
        tasks, [unpriced], workspace=ws, concurrency=1, store=store, prices=prices,
        max_cost_usd=100.0,
    )  # fmt: skip
    assert result.runs["cost_usd"].isna().all() and len(result.runs) == 1
    assert result.stopped == "max_cost_usd"
    assert [r.outcome for r in result.records][1:] == [None, None, None]
    free = await hn.sweep(["a", "b"], [hn.ScriptedProvider(lambda m: hn.ProviderError(
        "down", kind=hn.ProviderErrorKind.TERMINAL))], workspace=ws, concurrency=1,
        store=store, max_cost_usd=1.0)  # fmt: skip
    assert free.stopped is None and len(free.runs) == 2  # failed runs: no tokens, no spend


async def test_cancelling_a_sweep_cancels_the_runs_in_flight(ws: Path, store: hn.Store) -> None:
    started: list[str] = []
    both = asyncio.Event()

    def seen(event: hn.RunEvent) -> None:
        if event.kind == "started":
            started.append(event.run_id)
            if len(started) == 2:
                both.set()

    sweep = asyncio.create_task(hn.sweep(
        ["a", "b", "c"], [Waiting()], workspace=ws, repeats=2, concurrency=2, store=store,
        on_event=seen, sweep_id="sweep_cancelled",
    ))  # fmt: skip
    await asyncio.wait_for(both.wait(), 10)
    sweep.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sweep
    runs = store.runs(sweep="sweep_cancelled")
    assert sorted(runs["run_id"]) == sorted(started)
    assert set(runs["outcome"]) == {"cancelled"}
    assert len(store.runs()) == 2  # the other four never started


async def test_a_run_cancelled_while_its_workspace_is_copied_leaves_no_copy(
    tmp_path: Path, store: hn.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy is made in a thread that a cancel cannot stop: once made, it is removed."""
    big = tmp_path / "big"
    big.mkdir()
    for i in range(3000):
        (big / f"f{i}.txt").write_text("x\n")
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    sweep = asyncio.create_task(hn.sweep(["a"], [Waiting()], workspace=big, store=store))
    while not list(temp.iterdir()):  # the copy has begun
        await asyncio.sleep(0.002)
    (copy,) = temp.iterdir()
    sweep.cancel()
    assert len(list(copy.iterdir())) < 3000  # cancelled mid-copy
    with pytest.raises(asyncio.CancelledError):
        await sweep
    for _ in range(1500):
        if not copy.exists():
            break
        await asyncio.sleep(0.02)
    assert list(temp.iterdir()) == [] and len(store.runs()) == 0


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"tasks": ["x"]}, "pass workspace="),
        ({"repeats": 0}, "repeats must be"),
        ({"concurrency": 0}, "concurrency must be"),
        ({"max_cost_usd": -1}, "max_cost_usd must be"),
        ({"providers": []}, "no providers"),
        ({"tasks": []}, "no tasks"),
        ({"workspace": "/no/such/folder"}, "not a folder"),
    ],
)
async def test_bad_arguments_are_config_errors(
    ws: Path, store: hn.Store, kwargs: dict[str, Any], words: str
) -> None:
    good = hn.ScriptedProvider(lambda m: "done")
    args: dict[str, Any] = {"tasks": ["x"], "providers": [good], "workspace": ws,
                            "store": store, **kwargs}  # fmt: skip
    if kwargs == {"tasks": ["x"]}:
        args.pop("workspace")
    with pytest.raises(hn.ConfigError, match=words):
        await hn.sweep(args.pop("tasks"), args.pop("providers"), **args)
    assert len(store.runs()) == 0


def test_two_providers_with_one_name_need_a_dict(ws: Path, store: hn.Store) -> None:
    twins = [hn.ScriptedProvider(lambda m: "a"), hn.ScriptedProvider(lambda m: "b")]
    with pytest.raises(hn.ConfigError, match="pass a dict"):
        hn.sweep_sync(["x"], twins, workspace=ws, store=store)
    named = {"a": twins[0], "<i>b</i>": twins[1]}
    result = hn.sweep_sync(["x"], named, workspace=ws, store=store)
    assert sorted(result.runs["provider"]) == ["<i>b</i>", "a"]
    page = result._repr_mimebundle_()["text/html"]
    assert "&lt;i&gt;b&lt;/i&gt;" in page and "<i>" not in page  # names are escaped


async def test_two_models_of_one_provider_are_named_by_model(ws: Path, store: hn.Store) -> None:
    # The most common sweep, models of one provider given as a list: each is named by
    # what tells it apart, in the rows and in the failure rates (real HTTP: the first
    # model's server fails every attempt).
    with demo_server(rates={"server": 1.0}) as down, demo_server() as up:
        big = hn.OpenAI("gpt-4o", base_url=down.openai_url, api_key="sk-test")
        small = hn.OpenAI("gpt-4o-mini", base_url=up.openai_url, api_key="sk-test")
        other = hn.ScriptedProvider(lambda m: "done", name="scripted")
        result = await hn.sweep(["say hello"], [big, small, other], workspace=ws,
                                repeats=2, store=store)  # fmt: skip
    names = ["openai/gpt-4o", "openai/gpt-4o-mini", "scripted"]
    assert sorted(result.runs["provider"]) == sorted(names * 2)
    rates = result.failure_rates(by="provider").set_index("provider")
    assert sorted(rates.index) == names and not {"model", "base_url"} & set(rates.columns)
    assert rates.loc["openai/gpt-4o", "failure_rate"] == 1.0
    assert rates.loc["openai/gpt-4o-mini", "failures"] == 0
    by_kind = result.failure_rates()
    assert by_kind.loc[by_kind["provider"] == "openai/gpt-4o", "kind"].tolist() == ["server"]
    assert "  openai/gpt-4o-mini: 2/2 |" in result.summary_text()
    # the store's own table keeps what the attempts recorded
    assert set(store.failure_rates(by="provider")["provider"]) == {"openai", "scripted"}


async def test_one_model_on_two_servers_is_named_by_server_and_twins_are_refused(
    ws: Path, store: hn.Store
) -> None:
    with demo_server(rates={"server": 1.0}) as down, demo_server() as up:
        there = hn.OpenAI("m", base_url=down.openai_url, api_key="sk-test")
        here = hn.OpenAI("m", base_url=up.openai_url, api_key="sk-test")
        result = await hn.sweep(["say hello"], [there, here], workspace=ws, store=store)
        names = [f"openai/m@{down.openai_url}", f"openai/m@{up.openai_url}"]
        assert list(result.runs["provider"]) == names
        rates = result.failure_rates(by=("provider", "model")).set_index("provider")
        assert rates.loc[names[0], "failure_rate"] == 1.0
        assert rates.loc[names[1], "failures"] == 0
        assert list(rates.columns[:2]) == ["model", "attempts"]  # no column added
        twin = hn.OpenAI("m", base_url=up.openai_url, api_key="sk-other")
        with pytest.raises(hn.ConfigError, match=r"two providers are the same \(name "
                           r"'openai', model 'm', base URL .*pass a dict"):  # fmt: skip
            await hn.sweep(["say hello"], [here, twin], workspace=ws, store=store)
    assert len(store.runs()) == 2  # the refused sweep ran nothing


def test_a_store_from_before_sweeps_migrates_its_runs_untagged(tmp_path: Path) -> None:
    path = tmp_path / "v6.duckdb"
    con = old_store(path, 6)
    con.execute("INSERT INTO run_rows (run_id, task) VALUES ('old', 'before sweeps')")
    con.close()
    with hn.Store(path) as store:
        runs = store.runs()
        assert runs["run_id"].tolist() == ["old"] and runs["sweep_id"].isna().all()
        assert len(store.runs(sweep="sweep_x")) == 0


def test_the_sweep_command_runs_every_task_with_every_provider(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harnessnb import cli
    from harnessnb.demo import make_demo_workspace

    template = make_demo_workspace(tmp_path / "ws")
    path = tmp_path / "s.duckdb"
    with demo_server(seed=3) as srv:
        code = cli.main([
            "sweep", "summarise README.md into NOTES.md", "list the files",
            "--providers", "demo,local", "--base-url", srv.openai_url, "--repeats", "2",
            "--workspace", str(template), "--allow-write", "NOTES.md", "--store", str(path),
        ])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert re.search(r"sweep (sweep_\w+): 8/8 runs, 8 succeeded", out)
    assert "demo: 4/4" in out and "local: 4/4" in out
    assert not (template / "NOTES.md").exists()
    sweep_id = re.search(r"sweep (sweep_\w+):", out).group(1)  # type: ignore[union-attr]
    with hn.Store(path) as store:
        runs = store.runs(sweep=sweep_id)
    # --provider local is recorded as local
    assert len(runs) == 8 and sorted(set(runs["provider"])) == ["demo", "local"]
    assert cli.main(["sweep", "x", "--providers", "demo,demo", "--workspace", str(template),
                     "--store", str(path)]) == 2  # fmt: skip
    assert "'demo' is given twice" in capsys.readouterr().err


def test_the_sweep_command_sweeps_two_models_of_one_provider(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harnessnb import cli

    path = tmp_path / "s.duckdb"
    with demo_server(seed=3) as srv:
        code = cli.main(["sweep", "list the files", "--providers", "local/m1,local/m2",
                         "--base-url", srv.openai_url, "--workspace", str(tmp_path),
                         "--store", str(path)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "  local/m1: 1/1 |" in out and "  local/m2: 1/1 |" in out
    with hn.Store(path) as store:
        runs = store.runs()
        assert sorted(runs["model"]) == ["m1", "m2"] and set(runs["provider"]) == {"local"}
        assert sorted(store.attempts()["model"].unique()) == ["m1", "m2"]
    for words in ("demo/other", "local/"):
        assert cli.main(["sweep", "x", "--providers", words, "--workspace", str(tmp_path),
                         "--store", str(path)]) == 2  # fmt: skip
        assert "write PROVIDER/MODEL, e.g. openai/gpt-4o" in capsys.readouterr().err


def test_the_sweep_cell_magic_runs_one_task_per_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from harnessnb.demo import make_demo_workspace

    for key in ("HARNESSNB_PROVIDER", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HARNESSNB_STORE", str(tmp_path / "runs.duckdb"))
    monkeypatch.setenv("HARNESSNB_NO_WIDGETS", "1")
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "harnessnb")
    template = make_demo_workspace(tmp_path / "ws")
    shell.user_ns["what"] = "the files"
    with demo_server(seed=5) as srv, capture_output() as out:
        shell.run_cell_magic(
            "harness",
            f"sweep --providers demo,local --base-url {srv.openai_url} --repeats 2 "
            f"--concurrency 3 --workspace {template} --allow-write NOTES.md --out swept",
            "summarise README.md into NOTES.md\n\nlist {what}\n",
        )
    result = shell.user_ns["swept"]
    assert isinstance(result, hn.SweepResult) and len(result.runs) == 8
    assert set(result.runs["task"]) == {"summarise README.md into NOTES.md", "list the files"}
    assert len([line for line in out.stdout.splitlines() if " · " in line]) == 8
    assert len(result.store.runs(sweep=result.sweep_id)) == 8
    assert not (template / "NOTES.md").exists()
    # Providers built in Python, named by the notebook's variables: one, and a dict.
    with demo_server(seed=6) as one, demo_server(seed=7) as two, capture_output():
        shell.user_ns["mine"] = provider_for(one, name="mine")
        shell.user_ns["servers"] = {
            "a": provider_for(two, name="two"),
            "b": hn.ScriptedProvider(lambda m: "done", name="s"),
        }
        shell.run_cell_magic("harness", f"sweep --providers mine,servers,demo --workspace "
                             f"{template} --out named", "list the files\n")  # fmt: skip
    named = shell.user_ns["named"]
    assert sorted(named.runs["provider"]) == ["a", "b", "demo", "mine"]
    assert len(one.requests) >= 1 and len(two.requests) >= 1  # the runs used those servers
    # A list of them: named as hn.sweep names a list (two models of one provider).
    shell.user_ns["models"] = [hn.ScriptedProvider(lambda m: "done", model=model)
                               for model in ("m1", "m2")]  # fmt: skip
    with capture_output():
        shell.run_cell_magic("harness", f"sweep --providers models --workspace {template} "
                             "--out listed", "list the files\n")  # fmt: skip
    assert sorted(shell.user_ns["listed"].runs["provider"]) == ["scripted/m1", "scripted/m2"]
    shell.user_ns["text"] = "not a provider"
    with pytest.raises(UsageError, match="'text' is a str, not a provider"):
        shell.run_cell_magic("harness", f"sweep --providers text --workspace {template}", "x")
    with pytest.raises(UsageError, match=r"'nosuch' is neither a built-in provider .* nor a "
                       "variable of the notebook"):  # fmt: skip
        shell.run_cell_magic("harness", f"sweep --providers nosuch --workspace {template}", "x")
    with pytest.raises(UsageError, match="one task per line"):
        shell.run_cell_magic("harness", "sweep --providers demo", "\n  \n")
    with pytest.raises(UsageError, match="given twice"):
        shell.run_cell_magic("harness", "sweep --providers demo,demo", "x")


async def test_on_run_sees_every_row_and_its_errors_stop_nothing(
    ws: Path, store: hn.Store, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str | None] = []

    def broken(row: Any) -> None:
        seen.append(row.run_id)
        raise ValueError("a display bug")

    good = hn.ScriptedProvider(lambda m: "done")
    result = await hn.sweep(["a", "b", "c"], [good], workspace=ws, store=store, on_run=broken)
    assert sorted(seen) == sorted(result.runs["run_id"]) and len(seen) == 3
    assert set(result.runs["outcome"]) == {"finished"}
    assert "on_run raised" in caplog.text


_INTERRUPTED_SWEEP = """
import sys
import harnessnb as hn

class Waiting:
    name, model = "waiting", "never"
    def hosts(self): return []
    async def complete(self, messages, tools=None, max_tokens=None, stream=None):
        import asyncio
        await asyncio.Event().wait()

started = []
def seen(event):
    if event.kind == "started":
        started.append(event.run_id)
        if len(started) == 2:
            print("READY", flush=True)

try:
    hn.sweep_sync(["a", "b", "c"], [Waiting()], workspace=sys.argv[1], repeats=2,
                  concurrency=2, store=sys.argv[2], on_event=seen, sweep_id="sweep_int")
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
"""


def test_ctrl_c_in_sweep_sync_cancels_the_runs_in_flight(ws: Path, tmp_path: Path) -> None:
    script, path, scratch = tmp_path / "sweep.py", tmp_path / "s.duckdb", tmp_path / "tmp"
    script.write_text(_INTERRUPTED_SWEEP)
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    child = subprocess.Popen([sys.executable, str(script), str(ws), str(path)], env=env,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "READY"
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert "INTERRUPTED" in out
    with hn.Store(path) as store:
        runs = store.runs()
    assert len(runs) == 2 and set(runs["outcome"]) == {"cancelled"}
    assert set(runs["sweep_id"]) == {"sweep_int"}
    assert list(scratch.iterdir()) == []  # the two copies were removed


def test_ctrl_c_in_the_sweep_command_exits_130_and_names_the_sweep(
    ws: Path, tmp_path: Path
) -> None:
    from harnessnb.chaos import Fault

    path, scratch = tmp_path / "s.duckdb", tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    with ChaosServer() as srv:
        srv.set_default(Fault.hang(seconds=60))
        child = subprocess.Popen(
            [sys.executable, "-m", "harnessnb", "sweep", "a", "b", "c", "--providers", "local",
             "--base-url", srv.openai_url, "--concurrency", "2", "--workspace", str(ws),
             "--store", str(path)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while len(srv.requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # both runs in flight: waiting on the server
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
    assert child.returncode == 130 and "Traceback" not in err
    sweep_id = re.search(r"cancelled: sweep (sweep_\w+):", err).group(1)  # type: ignore[union-attr]
    with hn.Store(path) as store:
        runs = store.runs(sweep=sweep_id)
    assert len(runs) == 2 and set(runs["outcome"]) == {"cancelled"}  # the third never started
    assert list(scratch.iterdir()) == []  # the two copies were removed


async def test_failure_rates_name_providers_as_the_sweep_does(ws: Path, store: hn.Store) -> None:
    # The dict's keys name the providers in .runs; the failure table uses the same names
    # (not each provider's own), so the two can be joined.
    with demo_server(rates={"server": 1.0}) as down:
        providers = {
            "cheap": hn.ScriptedProvider(lambda m: "done", name="scripted"),
            "broken": provider_for(down, name="local"),
        }
        result = await hn.sweep(["a", "b"], providers, workspace=ws, repeats=2, store=store)
    rates = result.failure_rates(by="provider").set_index("provider")
    assert set(rates.index) == set(result.runs["provider"]) == {"cheap", "broken"}
    assert rates.loc["cheap", "failures"] == 0 and rates.loc["cheap", "attempts"] == 4
    assert rates.loc["broken", "failure_rate"] == 1.0
    by_kind = result.failure_rates()
    assert set(by_kind["provider"]) == {"cheap", "broken"}
    assert by_kind.loc[by_kind["provider"] == "broken", "kind"].tolist() == ["server"]
    # the store's own table keeps the names the attempts recorded
    assert set(store.failure_rates(by="provider")["provider"]) == {"scripted", "local"}


async def test_failure_rates_keep_names_the_sweep_cannot_tell_apart(
    ws: Path, store: hn.Store
) -> None:
    # Two providers recording one name share its rows (the store cannot split them);
    # a Fallback's attempts keep its leaves' names.
    first = hn.ScriptedProvider(lambda m: "done", name="scripted")
    second = hn.ScriptedProvider(lambda m: "done", name="scripted")
    chain = hn.Fallback(hn.ScriptedProvider(lambda m: "done", name="leaf"),
                        hn.ScriptedProvider(lambda m: "done", name="spare"))  # fmt: skip
    result = await hn.sweep(["a"], {"one": first, "two": second, "chain": chain},
                            workspace=ws, store=store)  # fmt: skip
    rates = result.failure_rates(by="provider").set_index("provider")
    assert set(rates.index) == {"scripted", "leaf"}
    assert rates.loc["scripted", "attempts"] == 2 and rates.loc["leaf", "attempts"] == 1

    # names that swap places are swapped, not merged: each costs its own price
    fast = hn.ScriptedProvider(lambda m: "done", name="slow", model="m1",
                               tokens_per_reply=(10**6, 0))  # fmt: skip
    slow = hn.ScriptedProvider(lambda m: "done", name="fast", model="m2",
                               tokens_per_reply=(10**6, 0))  # fmt: skip
    swapped = await hn.sweep(["a"], {"fast": fast, "slow": slow}, workspace=ws, store=store,
                             prices=hn.Prices({"m1": (1.0, 0.0), "m2": (2.0, 0.0)}))  # fmt: skip
    costs = swapped.failure_rates(by="provider").set_index("provider")["cost_usd"]
    assert costs.to_dict() == {"fast": 1.0, "slow": 2.0}
