"""The demo model: the quickstart task over both protocols, stall mode, seeded chaos."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosRequest
from harnessnb.demo import (
    DEMO_LABEL,
    DEMO_MARKER,
    DEMO_MODEL,
    DemoModel,
    demo_provider,
    demo_server,
    make_demo_workspace,
    provider_for,
)

TASK = "summarise README.md into NOTES.md"
NOTES = f"""\
# Notes

Summary of README.md, written by the {DEMO_LABEL}.

- harnessnb demo project
  - Install
  - Usage
  - Design
    - Greeting rules
  - License
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_demo_workspace(tmp_path / "project")


@pytest.fixture
def store() -> hn.Store:
    return hn.Store(":memory:")


def allow_notes() -> hn.Policy:
    return hn.Policy.default().layer("demo").allow_write("NOTES.md")


def contract(ws: Path, task: str = TASK, **kw: Any) -> hn.TaskContract:
    kw.setdefault("verification", hn.FileContains("NOTES.md", "#"))
    return hn.TaskContract(task, ws, **kw)


def tools_used(store: hn.Store, run_id: str) -> list[str]:
    return list(store.tool_calls(run_id).sort_values(["step", "seq"])["tool"])


@pytest.mark.parametrize("protocol", ["openai", "responses", "anthropic", "gemini"])
async def test_summarises_the_readme_into_notes_over_every_protocol(
    ws: Path, store: hn.Store, protocol: Any
) -> None:
    with demo_server() as srv:
        provider = provider_for(srv, protocol=protocol)
        result = await hn.run(contract(ws), provider, store=store, policy=allow_notes())
        assert {r.protocol for r in srv.requests} == {protocol}
    assert (result.outcome, result.verified, result.steps) == (hn.RunOutcome.SUCCESS, True, 3)
    assert (ws / "NOTES.md").read_text() == NOTES
    assert tools_used(store, result.run_id) == ["list_dir", "read_file", "write_file"]
    attempts = store.attempts(result.run_id)
    assert set(attempts["provider"]) == {"demo"}
    assert set(attempts["model"]) == {DEMO_MODEL}
    assert DEMO_LABEL == "harnessnb demo model (rule-based, not an LLM)"


async def test_without_a_verification_it_stops_with_a_labelled_summary(
    ws: Path, store: hn.Store
) -> None:
    c = contract(ws, verification=None)
    result = await hn.run(c, demo_provider(), store=store, policy=allow_notes())
    assert (result.outcome, result.steps) == (hn.RunOutcome.FINISHED, 4)
    assert result.text.startswith("Done: wrote NOTES.md with 6 heading(s) from README.md.")
    assert DEMO_LABEL in result.text


async def test_finds_the_readme_in_the_listing_when_the_task_names_no_file(
    ws: Path, store: hn.Store
) -> None:
    c = contract(ws, "summarise the README into NOTES.md")
    result = await hn.run(c, demo_provider(), store=store, policy=allow_notes())
    assert result.outcome is hn.RunOutcome.SUCCESS
    assert (ws / "NOTES.md").read_text() == NOTES


async def test_a_missing_file_is_reported_not_retried_forever(ws: Path, store: hn.Store) -> None:
    c = contract(ws, "summarise MISSING.md into NOTES.md", verification=None)
    result = await hn.run(c, demo_provider(), store=store, policy=allow_notes())
    assert (result.outcome, result.steps) == (hn.RunOutcome.FINISHED, 3)
    assert "I could not read MISSING.md" in result.text
    assert not (ws / "NOTES.md").exists()


async def test_a_refused_write_ends_with_a_plain_answer(ws: Path, store: hn.Store) -> None:
    c = contract(ws, verification=None)
    result = await hn.run(c, demo_provider(), store=store, policy=hn.Policy.default())
    assert result.outcome is hn.RunOutcome.FINISHED
    assert result.text.startswith("I could not write NOTES.md: ERROR [REFUSED]")
    assert list(store.tool_calls(result.run_id)["status"])[-1] == "refused"


async def test_stall_mode_is_caught_by_stall_detection(ws: Path, store: hn.Store) -> None:
    result = await hn.run(
        contract(ws), demo_provider(stall=True), store=store, policy=allow_notes()
    )
    assert (result.outcome, result.steps, result.replans) == (hn.RunOutcome.STALLED, 7, 1)
    stalls = store.stalls(result.run_id)
    assert stalls[["step", "signal", "action"]].values.tolist() == [
        [4, "repetition", "replan"],
        [7, "repetition", "stalled"],
    ]
    assert tools_used(store, result.run_id) == ["list_dir"] + ["read_file"] * 6


RATES = {"rate_limited": 0.25, "server": 0.15, "malformed": 0.1}


async def kinds_of_a_chaotic_run(ws: Path, seed: int) -> list[str | None]:
    store = hn.Store(":memory:")
    c = contract(ws, max_retries=6)
    with demo_server(seed=seed, rates=RATES) as srv:
        result = await hn.run(c, provider_for(srv), store=store, policy=allow_notes())
    assert result.outcome is hn.RunOutcome.SUCCESS
    (ws / "NOTES.md").unlink()
    attempts = store.attempts(result.run_id).sort_values("attempt")
    return [None if k is None or k != k else str(k) for k in attempts["kind"].astype(object)]


async def test_chaos_rates_reproduce_with_the_same_seed(ws: Path) -> None:
    first = await kinds_of_a_chaotic_run(ws, seed=9)
    again = await kinds_of_a_chaotic_run(ws, seed=9)
    other = await kinds_of_a_chaotic_run(ws, seed=6)
    assert first == again
    assert first != other
    assert first == ["malformed", "server", "rate_limited", None, "rate_limited", None, None]
    assert first.count(None) == 3  # three answered attempts: one per step


async def test_a_429_carries_retry_after_into_the_store(ws: Path, store: hn.Store) -> None:
    c = contract(ws, max_retries=6)
    with demo_server(seed=9, rates=RATES) as srv:
        result = await hn.run(c, provider_for(srv), store=store, policy=allow_notes())
    rows = store.attempts(result.run_id)
    limited = rows[rows["kind"] == "rate_limited"]
    assert len(limited) and set(limited["status"]) == {429}
    assert set(limited["retry_after_s"]) == {1.0}


async def test_answers_in_plain_text_when_no_tools_are_offered() -> None:
    provider = demo_provider()
    completion = await provider.complete([{"role": "user", "content": "hello there"}])
    assert completion.tool_calls == ()
    assert DEMO_LABEL in completion.text
    assert completion.model == DEMO_MODEL


def request(body: Any) -> ChaosRequest:
    return ChaosRequest("openai", "/v1/chat/completions", body, {}, "req_1")


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"messages": "not a list"},
        {"messages": [{"role": "assistant", "tool_calls": [{"function": "broken"}]}]},
        {"messages": [{"role": "user", "content": [{"type": "image"}]}], "tools": ["x"]},
        {"messages": [{"role": "user", "content": "what is the weather?"}],
         "tools": [{"type": "function", "function": {"name": "list_dir"}}]},
    ],
)
def test_never_raises_on_unexpected_input(body: Any) -> None:
    reply = DemoModel()(request(body))
    assert DEMO_LABEL in reply.text
    assert not reply.tool_calls or reply.tool_calls[0]["name"] == "list_dir"


def test_unexpected_input_gets_i_cant_handle_that() -> None:
    body = {"messages": [{"role": "assistant", "tool_calls": [{"function": "broken"}]}],
            "tools": [{"type": "function", "function": {"name": "list_dir"}}]}
    assert DemoModel()(request(body)).text.startswith("I can't handle that")


def test_demo_provider_shares_one_server_per_settings() -> None:
    a, b = demo_provider(seed=4), demo_provider(seed=4, protocol="anthropic")
    c = demo_provider(seed=4, stall=True)
    assert a.hosts() == b.hosts() == ["127.0.0.1"]
    assert a.base_url.removesuffix("/v1") == b.base_url  # type: ignore[attr-defined]
    assert c.base_url != a.base_url  # type: ignore[attr-defined]


def test_make_demo_workspace_reuses_its_own_folder_and_keeps_other_files(tmp_path: Path) -> None:
    root = make_demo_workspace(tmp_path / "project")  # a new folder: made, with the marker
    (root / "mine.txt").write_text("keep me")
    (root / "README.md").write_text("changed by a run")
    assert make_demo_workspace(root) == root  # the marker: its own folder, refreshed
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == [
        DEMO_MARKER, "README.md", "mine.txt", "src/cli.py", "src/greet.py",
    ]
    assert (root / "mine.txt").read_text() == "keep me"
    assert (root / "README.md").read_text().startswith("# ")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (make_demo_workspace(empty) / DEMO_MARKER).is_file()


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    def one(p: Path) -> tuple[bytes, int]:
        return (p.read_bytes() if p.is_file() else b"", p.stat().st_mtime_ns)

    return {p.relative_to(root).as_posix(): one(p) for p in [root, *root.rglob("*")]}


@pytest.mark.parametrize("mine", [{"README.md": "# Mine\n", "src/x.py": "x = 1\n"}, {"a": ""}])
def test_make_demo_workspace_refuses_a_folder_it_did_not_make(
    tmp_path: Path, mine: dict[str, str]
) -> None:
    for name, text in mine.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    before = _snapshot(tmp_path)
    with pytest.raises(hn.ConfigError, match="not made by the harnessnb demo"):
        make_demo_workspace(tmp_path)
    assert _snapshot(tmp_path) == before
    with pytest.raises(hn.ConfigError, match="not a folder"):
        make_demo_workspace(tmp_path / next(iter(mine)))


def _demo_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from harnessnb import cli

    code = cli.main(["demo", "--no-chaos", *args])
    return code, capsys.readouterr().out


def test_the_demo_removes_its_temporary_workspace_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every `harnessnb demo` once left a harnessnb-demo-* folder in the temp folder.
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    code, out = _demo_cli(["--store", str(tmp_path / "s.duckdb")], capsys)
    assert code == 0
    (line,) = [x for x in out.splitlines() if x.startswith("  workspace  ")]
    assert line.startswith(f"  workspace  {temp}{os.sep}harnessnb-demo-")
    assert line.endswith(" (temporary: removed at the end)")
    assert "Summary of README.md" in out  # the notes were shown before the folder went
    assert list(temp.iterdir()) == []


def test_a_workspace_given_to_the_demo_is_kept_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "mine"
    code, out = _demo_cli(["--store", str(tmp_path / "s.duckdb"), "--workspace", str(ws)], capsys)
    assert code == 0
    assert f"  workspace  {ws}\n" in out
    assert (ws / "NOTES.md").read_text() == NOTES


def test_the_next_line_points_at_the_notebook_only_where_it_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harnessnb.demo._model import QUICKSTART_URL, quickstart_notebook

    assert quickstart_notebook(tmp_path) == QUICKSTART_URL  # a wheel: no notebooks/
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01-quickstart.ipynb").write_text("{}")
    assert quickstart_notebook(tmp_path) == str(tmp_path / "notebooks" / "01-quickstart.ipynb")
    # this source checkout has the notebook: the demo names it by a path that exists
    code, out = _demo_cli(["--store", str(tmp_path / "s.duckdb")], capsys)
    assert code == 0
    (line,) = [x for x in out.splitlines() if x.startswith("next: ")]
    shown = Path(line.rsplit(" or open ", 1)[1])
    assert shown.is_file() and shown.name == "01-quickstart.ipynb"
