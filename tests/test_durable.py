"""Durable runs: kill a real process at every commit boundary and resume; leases;
record and replay; every ResumeError reason."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from tests.store_helpers import altered

sys.path.insert(0, str(Path(__file__).parent / "durable"))
import reference_run as ref

from harnessnb import Record, Replay, Store, abandon, resolve, resume_sync
from harnessnb.store._writer import store_writer

CHILD = str(Path(__file__).parent / "durable" / "reference_run.py")


def snapshot(ws: Path) -> dict[str, str]:
    out = {}
    for path in sorted(ws.rglob("*")):
        if path.is_file():
            text = path.read_text()
            if path.parent.name == "kv":
                text = text.split(" (")[0]  # the idempotency key suffix is checked apart
            out[path.relative_to(ws).as_posix()] = text
    return out


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], list[str]]:
    """One uninterrupted reference run: its workspace at the end, and its trace (each
    store write's name as it committed, "ledger" where a ledger append ran)."""
    root = tmp_path_factory.mktemp("reference")
    ws = root / "ws"
    ref.seed_workspace(ws)
    out = subprocess.run([sys.executable, CHILD, str(root / "r.duckdb"), str(ws), "run_ref"],
                         capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert report["outcome"] == "success"
    return snapshot(ws), report["trace"]


@pytest.fixture(scope="module")
def reference(reference_run: tuple[dict[str, str], list[str]]) -> dict[str, str]:
    return reference_run[0]


def ledger_intents(trace: list[str]) -> list[int]:
    """The write numbers (from 1) after which a ledger append ran first: its intent."""
    writes = [i for i, name in enumerate(trace) if name != "ledger"]
    return [n for n, i in enumerate(writes, start=1)
            if trace[i] == "record_intent" and trace[i + 1:i + 2] == ["ledger"]]


def child(store: Path, ws: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, CHILD, str(store), str(ws), run_id, *extra],
                          capture_output=True, text=True, timeout=60)


def drive_to_the_end(store_path: Path, ws: Path, run_id: str) -> list[str]:
    """Resume until the run ends, playing the person who reconciles a dangling write:
    resolve it when its line is in the ledger, abandon it when not."""
    os.environ["HNB_WS"] = str(ws)
    outcomes = []
    store = Store(store_path)
    try:
        for _ in range(6):
            try:
                result = resume_sync(run_id, ref.provider(), store=store, tools=ref.TOOLS)
            except hn.ResumeError as exc:
                assert exc.reason == "unknown_run"  # killed before the run row landed
                result = hn.run_sync(ref.contract(str(ws)), ref.provider(), store=store,
                                     policy=ref.policy(), tools=ref.TOOLS, run_id=run_id)
            outcomes.append(result.outcome.value)
            if result.outcome is not hn.RunOutcome.NEEDS_RECONCILIATION:
                return outcomes
            (dangling,) = store_writer(store).unsettled_tool_calls(run_id)
            if landed(ws, dangling["tool"], dangling["args"]):
                resolve(run_id, output="done (checked by a person)", store=store)
            else:
                abandon(run_id, "not found in the workspace", store=store)
        raise AssertionError(f"run did not end: {outcomes}")
    finally:
        store.close()


def landed(ws: Path, tool: str, args: dict[str, Any]) -> bool:
    """What a person checks before resolving: did this write reach the workspace?"""
    if tool == "append_ledger":
        ledger = ws / "LEDGER.txt"
        return ledger.exists() and args["line"] + "\n" in ledger.read_text()
    path = ws / args["path"]
    if tool == "write_file":
        return path.exists() and path.read_text() == args["content"]
    if tool == "edit_file":
        return path.exists() and args["new"] in path.read_text()
    raise AssertionError(f"unexpected dangling write {tool}")


def check_against_reference(ws: Path, reference: dict[str, str], store_path: Path,
                            run_id: str) -> None:
    assert snapshot(ws) == reference
    ledger = (ws / "LEDGER.txt").read_text().splitlines()
    assert ledger == [f"entry {i}" for i in range(1, 5)]  # each line exactly once
    with Store(store_path) as store:
        run = store.get_run(run_id)
        assert run is not None and run["outcome"] == "success"
        keys = store.tool_calls(run_id)
        kv = keys[keys["tool"] == "put_value"]["idempotency_key"].tolist()
    # an IDEMPOTENT call keeps the key drawn for it, on every execution and on resume
    for i, key in enumerate(kv, start=1):
        assert (ws / "kv" / f"k{i}").read_text().endswith(f"({key[:9]})\n")


REFERENCE_WRITES = 69  # store writes in one uninterrupted reference run (20 of them attempt rows)


def test_reference_run_makes_the_expected_number_of_commits(
    tmp_path: Path, reference_run: tuple[dict[str, str], list[str]]
) -> None:
    ws = tmp_path / "ws"
    ref.seed_workspace(ws)
    out = child(tmp_path / "s.duckdb", ws, "run_count")
    assert json.loads(out.stdout)["writes"] == REFERENCE_WRITES
    assert len(ledger_intents(reference_run[1])) == 4  # one intent per ledger line


@pytest.mark.parametrize("k", range(1, REFERENCE_WRITES + 1), ids=lambda k: f"write{k:02d}")
def test_kill_at_every_commit_boundary_then_resume(
    tmp_path: Path, reference_run: tuple[dict[str, str], list[str]], k: int
) -> None:
    """Killed right after its kth store write (one test per commit boundary), the run
    resumes to the reference's end; killed right after a ledger intent, it leaves a
    write a person reconciles."""
    reference, trace = reference_run
    boundary = [name for name in trace if name != "ledger"][k - 1]
    ws, store = tmp_path / "ws", tmp_path / "s.duckdb"
    ref.seed_workspace(ws)
    out = child(store, ws, f"run_{k}", "--kill-at", str(k))
    assert out.returncode == -signal.SIGKILL, (boundary, out.stderr)
    outcomes = drive_to_the_end(store, ws, f"run_{k}")
    if k in ledger_intents(trace):
        assert "needs_reconciliation" in outcomes, (boundary, outcomes)
    check_against_reference(ws, reference, store, f"run_{k}")


def test_kill_inside_a_write_ends_needs_reconciliation_then_resolve_resume_success(
    tmp_path: Path, reference: dict[str, str]
) -> None:
    ws, store = tmp_path / "ws", tmp_path / "s.duckdb"
    ref.seed_workspace(ws)
    out = child(store, ws, "run_w", "--kill-in-ledger", "2")
    assert out.returncode == -signal.SIGKILL
    assert drive_to_the_end(store, ws, "run_w") == ["needs_reconciliation", "success"]
    check_against_reference(ws, reference, store, "run_w")
    with Store(store) as s:
        assert s.markers("run_w")["kind"].tolist() == ["resume", "resolved", "resume"]


def test_kill_at_random_moments_then_resume(tmp_path: Path, reference: dict[str, str]) -> None:
    rng = random.Random(20261129)
    for i in range(30):
        ws, store = tmp_path / f"ws{i}", tmp_path / f"s{i}.duckdb"
        ref.seed_workspace(ws)
        proc = subprocess.Popen([sys.executable, CHILD, str(store), str(ws), f"run_{i}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.15, 0.7))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        drive_to_the_end(store, ws, f"run_{i}")
        check_against_reference(ws, reference, store, f"run_{i}")


def test_resuming_a_finished_run_is_a_no_op_reporting_its_outcome(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ref.seed_workspace(ws)
    os.environ["HNB_WS"] = str(ws)
    store = Store(tmp_path / "s.duckdb")
    first = hn.run_sync(ref.contract(str(ws)), ref.provider(), store=store,
                        policy=ref.policy(), tools=ref.TOOLS)
    again = resume_sync(first.run_id, ref.provider(), store=store, tools=ref.TOOLS)
    assert (again.outcome, again.steps) == (first.outcome, first.steps)
    assert store.markers(first.run_id)["kind"].tolist() == ["skipped"]
    assert len(store.steps(first.run_id)) == first.steps
    store.close()


def test_attempt_numbers_continue_across_a_resume(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha")
    store = Store(tmp_path / "s.duckdb")

    def down() -> hn.ProviderError:
        return hn.ProviderError("down", kind=hn.ProviderErrorKind.SERVER, status=503)

    retry = hn.RetryPolicy(base_s=0.01, cap_s=0.01)
    contract = hn.TaskContract("t", ws, max_retries=1, retry=retry)
    read = {"tool": "read_file", "args": {"path": "a.txt"}}
    provider = hn.ScriptedProvider([read, down(), down()])
    first = hn.run_sync(contract, provider, store=store)
    # The two failed attempts of step 2 came after the last checkpoint (step 1).
    assert (first.outcome, first.attempts) == (hn.RunOutcome.ESCALATED_RETRYABLE, 3)
    again = resume_sync(first.run_id, hn.ScriptedProvider(["done"]), store=store)
    assert again.outcome is hn.RunOutcome.FINISHED
    rows = store.attempts(first.run_id)
    assert sorted(rows["attempt"]) == [1, 2, 3, 4]  # no number used twice
    assert again.attempts == len(rows)
    store.close()


# ------------------------------------------------------------------ ResumeError reasons


def test_unknown_run_id(tmp_path: Path) -> None:
    with pytest.raises(hn.ResumeError) as info:
        resume_sync("run_nope", ref.provider(), store=Store(":memory:"))
    assert info.value.reason == "unknown_run"


def test_store_newer_than_this_harnessnb(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store(path).close()
    altered(path, "INSERT INTO schema_version VALUES (99, now())")
    with pytest.raises(hn.StoreError) as opened:
        Store(path)
    assert opened.value.kind == "newer"
    with pytest.raises(hn.ResumeError) as info:
        resume_sync("run_x", ref.provider(), store=str(path))
    assert info.value.reason == "newer_store"


def _crashed_run(tmp_path: Path, kill_at: int = 20) -> tuple[Path, Path]:
    ws, store = tmp_path / "ws", tmp_path / "s.duckdb"
    ref.seed_workspace(ws)
    child(store, ws, "run_c", "--kill-at", str(kill_at))
    return ws, store


def test_a_looser_policy_than_recorded_is_refused(tmp_path: Path) -> None:
    ws, path = _crashed_run(tmp_path)
    os.environ["HNB_WS"] = str(ws)
    looser = hn.Policy.permissive()
    with Store(path) as store, pytest.raises(hn.ResumeError) as info:
        resume_sync("run_c", ref.provider(), store=store, policy=looser, tools=ref.TOOLS)
    assert info.value.reason == "weaker_policy"


def test_unreadable_checkpoint(tmp_path: Path) -> None:
    ws, path = _crashed_run(tmp_path)
    altered(path, "UPDATE steps SET checkpoint = '{not json' WHERE run_id = 'run_c'")
    os.environ["HNB_WS"] = str(ws)
    with Store(path) as store, pytest.raises(hn.ResumeError) as info:
        resume_sync("run_c", ref.provider(), store=store, tools=ref.TOOLS)
    assert info.value.reason == "unreadable_checkpoint"


# ------------------------------------------------------------------ one driver per run

SLOW_RESUMER = """
import os, sys, time
sys.path.insert(0, {durable!r})
os.environ["HNB_WS"] = {ws!r}
import harnessnb as hn
import reference_run as ref
from harnessnb import resume_sync
from harnessnb import Store

def slow(messages):
    time.sleep(0.3)
    return ref.brain(messages)

store = Store({store!r}, linger_s=0.05)
print(resume_sync("run_c", hn.ScriptedProvider(slow), store=store, tools=ref.TOOLS).outcome.value)
"""


def test_two_processes_resuming_one_run_exactly_one_drives(tmp_path: Path) -> None:
    ws, path = _crashed_run(tmp_path, kill_at=3)  # right after step 1 committed
    code = SLOW_RESUMER.format(durable=str(Path(CHILD).parent), ws=str(ws), store=str(path))
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 20
        while True:  # wait until the driver holds the lease
            with Store(path) as store:
                held = store.sql("select owner from leases where run_id = 'run_c' "
                                 "and not released")
                if len(held) and str(driver.pid) in held["owner"].iloc[0]:
                    break
            assert time.time() < deadline, "the driver never took the lease"
            time.sleep(0.05)
        os.environ["HNB_WS"] = str(ws)
        with Store(path) as store, pytest.raises(hn.ConflictError) as info:
            resume_sync("run_c", ref.provider(), store=store, tools=ref.TOOLS)
        assert str(driver.pid) in (info.value.owner or "")
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        with Store(path) as store:
            result = resume_sync("run_c", ref.provider(), store=store, tools=ref.TOOLS)
        assert result.outcome is hn.RunOutcome.SUCCESS
    finally:
        driver.kill()


LIVE_COMMAND_RUN = """
import harnessnb as hn
policy = hn.Policy.default().layer("t").allow_exec("sh slow.sh")
hn.run_sync(hn.TaskContract("go", {ws!r}), hn.OpenAI("m", base_url={url!r}), store={store!r},
            policy=policy, run_id="run_live")
"""


def test_resolve_and_abandon_refuse_a_run_another_live_process_drives(tmp_path: Path) -> None:
    """A person's decision is for a write left dangling, not for a command still running
    in another process: that would record 'resolved' for what the run then does itself
    (and a crash after would resume on the made-up output)."""
    from harnessnb.chaos import ChaosRequest, ChaosServer, Reply

    def responder(req: ChaosRequest) -> Reply:
        if any(m.get("role") == "tool" for m in req.messages):
            return Reply(text="ran it")
        return Reply(tool_calls=[{"name": "run_command", "arguments": {"argv": ["sh", "slow.sh"]}}])

    ws, path = tmp_path / "ws", tmp_path / "s.duckdb"
    ws.mkdir()
    (ws / "slow.sh").write_text("touch started\nexec sleep 60\n")
    with ChaosServer(responder=responder) as srv:
        code = LIVE_COMMAND_RUN.format(ws=str(ws), url=srv.openai_url, store=str(path))
        driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 20
            while not (ws / "started").exists():
                assert driver.poll() is None and time.time() < deadline, driver.stderr
                time.sleep(0.05)
            for settle in (lambda: resolve("run_live", output="made up", store=path),
                           lambda: abandon("run_live", "gave up", store=path)):
                with pytest.raises(hn.ConflictError) as info:
                    settle()
                assert str(driver.pid) in (info.value.owner or "")
            with Store(path) as store:
                assert store.tool_calls("run_live")["status"].tolist() == ["intent"]
                assert store.markers("run_live").empty
            driver.send_signal(signal.SIGKILL)  # now the command is truly left dangling
            driver.wait()
        finally:
            driver.kill()
        abandon("run_live", "the process was killed", store=path)
        with Store(path) as store:
            assert store.tool_calls("run_live")["status"].tolist() == ["abandoned"]
            again = resume_sync("run_live", hn.OpenAI("m", base_url=srv.openai_url), store=store)
        assert again.outcome is hn.RunOutcome.FINISHED


def test_a_stale_owner_is_refused_at_its_next_commit(tmp_path: Path) -> None:
    store = Store(":memory:")
    ws = tmp_path / "ws"
    ref.seed_workspace(ws)
    os.environ["HNB_WS"] = str(ws)
    taken: list[Any] = []

    def brain(messages: Any) -> Any:
        if len(messages) > 4 and not taken:  # another owner takes the run mid-way
            # ...as if our lease had expired while this process slept
            later = time.time() + 3600
            taken.append(store_writer(store).acquire_lease(run_id[0], "otherhost:1:x", now=later))
        return ref.brain(messages)

    run_id = ["run_stale"]
    with pytest.raises(hn.ConflictError):
        hn.run_sync(ref.contract(str(ws)), hn.ScriptedProvider(brain), store=store,
                    policy=ref.policy(), tools=ref.TOOLS, run_id=run_id[0])
    assert taken


# ------------------------------------------------------------------ record and replay

REPLAYER = """
import json
from harnessnb import Policy, Store, replay_sync
dst = Store({dst!r})
policy = Policy.default().layer("t").allow_write("*.txt")
result = replay_sync("run_rec", {src!r}, store=dst, workspace={ws!r}, policy=policy)
tools = dst.tool_calls("run_rec").sort_values(["step", "seq"])
cols = ["step", "seq", "tool", "args", "idempotency_key", "status"]
print(json.dumps({{"outcome": result.outcome.value, "steps": result.steps,
                  "run_id": result.run_id, "tools": tools[cols].astype(str).values.tolist()}}))
"""


def test_record_then_replay_in_a_fresh_process_without_the_server(tmp_path: Path) -> None:
    from harnessnb.chaos import ChaosRequest, ChaosServer, Reply

    def responder(req: ChaosRequest) -> Reply:
        done = sum(1 for m in req.messages if m.get("role") == "tool")
        if done == 0:
            return Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}}])
        if done == 1:
            return Reply(tool_calls=[{"name": "write_file",
                                      "arguments": {"path": "b.txt", "content": "copied"}}])
        return Reply(text="copied a to b")

    src_path = tmp_path / "rec.duckdb"
    for name in ("ws", "ws2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.txt").write_text("alpha\n")
    contract = hn.TaskContract("copy a.txt to b.txt", tmp_path / "ws")
    policy = hn.Policy.default().layer("t").allow_write("*.txt")
    with ChaosServer(responder=responder) as srv, Store(src_path) as store:
        provider = Record(hn.OpenAI("m", api_key="sk-canary-777", base_url=srv.openai_url),
                          store)
        original = hn.run_sync(contract, provider, store=store, policy=policy,
                               run_id="run_rec")
        tools = store.tool_calls("run_rec").sort_values(["step", "seq"])
        expected = tools[["step", "seq", "tool", "args", "idempotency_key", "status"]]
        expected_rows = expected.astype(str).values.tolist()
    assert original.outcome is hn.RunOutcome.FINISHED
    assert b"sk-canary-777" not in src_path.read_bytes()
    # the server is closed now: nothing answers on its port
    code = REPLAYER.format(src=str(src_path), dst=str(tmp_path / "replay.duckdb"),
                           ws=str(tmp_path / "ws2"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    replayed = json.loads(out.stdout)
    assert (replayed["outcome"], replayed["steps"]) == ("finished", original.steps)
    assert replayed["run_id"] == "run_rec"
    assert replayed["tools"] == expected_rows  # same calls, same args, same keys
    assert (tmp_path / "ws2" / "b.txt").read_text() == "copied"


def test_replay_of_a_run_replays_that_run_not_an_earlier_one_asked_the_same(
    tmp_path: Path,
) -> None:
    """Two runs of one task, recorded through one Record, ask the same first request and
    get different answers; replaying the second run makes the second run's write."""
    from harnessnb.chaos import ChaosRequest, ChaosServer, Reply

    answered = []

    def responder(req: ChaosRequest) -> Reply:
        if any(m.get("role") == "tool" for m in req.messages):
            return Reply(text="written")
        answered.append(1)
        name = f"run{len(answered)}.txt"
        return Reply(tool_calls=[{"name": "write_file",
                                  "arguments": {"path": name, "content": name}}])

    for name in ("ws", "ws1", "ws2"):
        (tmp_path / name).mkdir()
    contract = hn.TaskContract("write a file", tmp_path / "ws")
    policy = hn.Policy.default().layer("t").allow_write("*.txt")
    with ChaosServer(responder=responder) as srv, Store(tmp_path / "rec.duckdb") as store:
        provider = Record(hn.OpenAI("m", base_url=srv.openai_url), store)
        for run_id in ("run_one", "run_two"):
            done = hn.run_sync(contract, provider, store=store, policy=policy, run_id=run_id)
            assert done.outcome is hn.RunOutcome.FINISHED
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == ["run1.txt", "run2.txt"]
    for n, run_id in ((1, "run_one"), (2, "run_two")):
        again = hn.replay_sync(
            run_id, tmp_path / "rec.duckdb", workspace=tmp_path / f"ws{n}", policy=policy
        )
        assert again.outcome is hn.RunOutcome.FINISHED
        assert [p.name for p in (tmp_path / f"ws{n}").iterdir()] == [f"run{n}.txt"]


async def test_a_missing_recording_is_a_non_retryable_request_error() -> None:
    replay = Replay(Store(":memory:"))
    with pytest.raises(hn.ProviderError) as info:
        await replay.complete([{"role": "user", "content": "never recorded"}])
    assert info.value.kind is hn.ProviderErrorKind.REQUEST
    assert not info.value.retryable
    assert "never recorded" in info.value.message


async def test_identical_requests_replay_in_recorded_order() -> None:
    store = Store(":memory:")
    answers = iter(["first", "second"])
    inner = hn.ScriptedProvider(lambda m: next(answers))
    rec = Record(inner, store)
    msgs = [{"role": "user", "content": "same"}]
    assert (await rec.complete(msgs)).text == "first"
    assert (await rec.complete(msgs)).text == "second"
    replay = Replay(store, model="scripted")
    assert [(await replay.complete(msgs)).text for _ in range(2)] == ["first", "second"]
    replay = Replay(store)  # without the model: matched on messages and tools
    assert (await replay.complete(msgs)).text == "first"


def test_resolve_with_no_dangling_write_says_so(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ref.seed_workspace(ws)
    os.environ["HNB_WS"] = str(ws)
    with Store(tmp_path / "s.duckdb") as store:
        done = hn.run_sync(ref.contract(str(ws)), ref.provider(), store=store,
                           policy=ref.policy(), tools=ref.TOOLS)
        for call in (lambda: resolve(done.run_id, output="x", store=store),
                     lambda: abandon(done.run_id, "x", store=store)):
            with pytest.raises(hn.ResumeError) as info:
                call()
            assert info.value.reason == "nothing_to_resolve"
        with pytest.raises(hn.ResumeError) as unknown:
            resolve("run_nope", output="x", store=store)
        assert unknown.value.reason == "unknown_run"


async def test_resolve_and_abandon_take_a_path_and_read_the_same_awaited_or_not(
    tmp_path: Path, reference: dict[str, str]
) -> None:
    """Every form of resolve/abandon (awaited, called, _sync) settles the dangling write
    of a killed run, given the store as a path; resume then finishes the run."""
    forms = ["await resolve", "call resolve", "resolve_sync",
             "await abandon", "call abandon", "abandon_sync"]
    for i, form in enumerate(forms):
        ws, path = tmp_path / f"ws{i}", tmp_path / f"s{i}.duckdb"
        ref.seed_workspace(ws)
        out = child(path, ws, f"run_{i}", "--kill-in-ledger", "2")
        assert out.returncode == -signal.SIGKILL
        with Store(path) as store:
            (dangling,) = store_writer(store).unsettled_tool_calls(f"run_{i}")
        verb = form.split()[-1].removesuffix("_sync")
        args = (f"run_{i}", "landed" if verb == "resolve" else "not there")
        settle = getattr(hn, verb)
        if form.startswith("await"):
            assert await settle(*args, store=str(path)) is None
        elif form.startswith("call"):
            assert "Settled" in repr(settle(*args, store=path))
        else:
            assert getattr(hn, f"{verb}_sync")(*args, store=path) is None
        with Store(path) as store:
            rows = store.tool_calls(f"run_{i}")
            row = rows[(rows.step == dangling["step"]) & (rows.seq == dangling["seq"])]
            assert row.status.tolist() == ["ok" if verb == "resolve" else "abandoned"]
            assert store.markers(f"run_{i}")["kind"].tolist()[-1] == (
                "resolved" if verb == "resolve" else "abandoned")
        os.environ["HNB_WS"] = str(ws)
        again = await hn.resume(f"run_{i}", ref.provider(), store=str(path), tools=ref.TOOLS)
        assert again.outcome is hn.RunOutcome.SUCCESS, again.error


async def test_record_and_replay_take_a_store_path(tmp_path: Path) -> None:
    path = tmp_path / "rec.duckdb"
    msgs = [{"role": "user", "content": "hi"}]
    recorder = Record(hn.ScriptedProvider(["recorded answer"]), str(path))
    assert (await recorder.complete(msgs)).text == "recorded answer"
    recorder.store.close()
    replay = Replay(path)
    assert (await replay.complete(msgs)).text == "recorded answer"
    replay.store.close()


def _bubblewrap_here() -> bool:
    try:
        return hn.sandbox_backend() == "bubblewrap"
    except hn.ConfigError:
        return False


@pytest.mark.skipif(not _bubblewrap_here(), reason="bubblewrap cannot run here")
def test_a_run_recorded_in_bubblewrap_replays_where_there_is_no_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's text never names the backend (a Binder container may have none);
    the tool row does."""
    for name in ("ws", "ws2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text("hello\n")
    script = [
        {"tool": "run_command", "args": {"argv": ["cat", "README.md"]}},
        {"tool": "run_command", "args": {"argv": ["cat", "nothing"]}},
        "done",
    ]
    monkeypatch.setenv("HARNESSNB_SANDBOX", "bubblewrap")
    with Store(tmp_path / "rec.duckdb") as store:
        recorder = Record(hn.ScriptedProvider(script), store)
        contract = hn.TaskContract("read it", tmp_path / "ws", max_steps=4)
        original = hn.run_sync(
            contract, recorder, store=store, policy=hn.Policy.permissive(), run_id="run_bwrap"
        )
        rows = store.tool_calls("run_bwrap").sort_values("step")
    assert original.outcome is hn.RunOutcome.FINISHED, original.error
    assert rows["sandbox"].tolist() == ["bubblewrap", "bubblewrap"]
    assert rows["output"].tolist()[0] == "exit code 0\nhello\n"
    monkeypatch.setenv("HARNESSNB_SANDBOX", "none")
    with Store(":memory:") as target:
        again = hn.replay_sync(
            "run_bwrap", tmp_path / "rec.duckdb", store=target, workspace=tmp_path / "ws2"
        )
        replayed = target.tool_calls("run_bwrap").sort_values("step")
    assert again.outcome is hn.RunOutcome.FINISHED, again.error
    # Answered from the recording: no command ran, in any sandbox.
    assert replayed["sandbox"].isna().all()
    assert replayed["output"].tolist() == rows["output"].tolist()


@pytest.mark.parametrize("how", ["store", "path", "default"])
@pytest.mark.parametrize("doing", ["writing", "waiting"])
def test_the_interpreter_exiting_mid_run_cancels_the_run_and_exits_cleanly(
    tmp_path: Path, how: str, doing: str
) -> None:
    # A daemon thread inside DuckDB when the interpreter finalizes aborts the process
    # ("terminate called ... exception not rethrown", exit 134); the harness winds its
    # loop down at exit instead, and the run is recorded as cancelled: given an
    # hn.Store, a path or nothing (the default store), writing or waiting for its
    # model. No thread is started once the exit began (Python 3.12 refuses one: the
    # run waiting, its store idle, was recorded escalated_terminal); a store the run
    # opened itself was closed by the exit hook before the run could record its end
    # (no outcome at all). Run it on 3.11, 3.12 and 3.13.
    script = Path(ref.__file__).parent / "exit_mid_run.py"
    for attempt in range(2 if doing == "writing" and how == "store" else 1):
        path = tmp_path / f"s{attempt}.duckdb"
        argv = [str(path), str(tmp_path / f"ws{attempt}"), "0.5", how, doing]
        out = subprocess.run([sys.executable, str(script), *argv],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        assert "terminate called" not in out.stderr
        assert "Traceback" not in out.stderr, out.stderr[-2000:]
        report = json.loads(out.stdout.splitlines()[-1])
        assert report == {"started_at_exit": []}
        with Store(path) as store:
            runs = store.runs()
        assert runs["outcome"].astype(object).tolist() == ["cancelled"]
        assert int(runs["steps"].iloc[0]) > 0  # it was mid-run when the exit came
