"""The real CLIs against a fake model endpoint (fake_model.py), as a person runs them.

Each CLI is pointed at a real HTTP server on 127.0.0.1 with its own settings (Claude
Code: ANTHROPIC_BASE_URL; Codex: a custom provider in $CODEX_HOME/config.toml;
Copilot: COPILOT_PROVIDER_BASE_URL with COPILOT_OFFLINE) and the server answers each
model request as the scenario says. What the driver returns, and what the store keeps,
must follow the cause: transient where waiting helps, stopped at once where it cannot.

Scenarios run concurrently inside a test (the CLIs mostly wait). The long test runs
every scenario of every CLI with the driver's timeout at 45 s and none of the CLIs'
retry knobs set; the short ones use a knob (CLAUDE_CODE_MAX_RETRIES, Codex's
``stream_max_retries``) to reach the path where the CLI gives up by itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fake_model import RETRY_AFTER, FakeModel

import harnessnb as hn
from harnessnb.events import RetryEvent
from harnessnb.store._writer import store_writer

ag = hn.agents
BIN = Path(os.environ.get("HARNESSNB_REAL_CLIS", "/opt/harnessnb-clis/node_modules/.bin"))
KEY = "sk-test-0123456789abcdef"  # what the fake endpoint accepts is anything but a 401
CLIS = ("claude", "codex", "copilot")
OVERLOAD = {"claude": "529", "codex": "503", "copilot": "529"}
KIND = {"429": "rate_limited", "quota": "rate_limited", "529": "server", "503": "server",
        "401": "auth",
        "overflow": "context_overflow", "cut": "transport", "hang": "timeout"}  # fmt: skip


def need(name: str) -> str:
    exe = BIN / name
    if not exe.exists():
        pytest.skip(f"the real {name} CLI is not installed (npm install it under {BIN})")
    return str(exe)


@dataclasses.dataclass
class Rig:
    """One CLI's folders: a HOME per scenario, a shared cache (Copilot unpacks itself)."""

    cli: str
    root: Path
    cache: Path

    def agent(
        self, fake: FakeModel, name: str, *, timeout: float, knobs: bool = False
    ) -> tuple[ag.AgentCLI, Path]:
        home = self.root / name / "home"
        ws = self.root / name / "ws"
        home.mkdir(parents=True)
        ws.mkdir()
        env = {"HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        exe = need(self.cli)
        if self.cli == "claude":
            env |= {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": KEY}
            if knobs:
                env["CLAUDE_CODE_MAX_RETRIES"] = "1"
            return ag.ClaudeCode(bin=exe, model="fake-model", timeout_s=timeout, env=env), ws
        if self.cli == "codex":
            codex_home = home / ".codex"
            codex_home.mkdir()
            retries = "request_max_retries = 0\nstream_max_retries = 0\n" if knobs else ""
            (codex_home / "config.toml").write_text(
                'model = "fake-model"\nmodel_provider = "fake"\n[model_providers.fake]\n'
                f'name = "fake"\nbase_url = "{fake.url}/v1"\nenv_key = "FAKE_MODEL_KEY"\n'
                f'wire_api = "responses"\n{retries}'
            )
            env |= {"CODEX_HOME": str(codex_home), "FAKE_MODEL_KEY": KEY}
            return ag.Codex(bin=exe, timeout_s=timeout, env=env), ws
        env |= {"COPILOT_PROVIDER_BASE_URL": f"{fake.url}/v1", "COPILOT_PROVIDER_API_KEY": KEY,
                "COPILOT_OFFLINE": "true", "COPILOT_MODEL": "fake-model",
                "XDG_CACHE_HOME": str(self.cache)}  # fmt: skip
        return ag.Copilot(bin=exe, timeout_s=timeout, env=env), ws


@pytest.fixture(scope="module")
def rigs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rig]:
    root = tmp_path_factory.mktemp("real-endpoint")
    cache = root / "cache"
    cache.mkdir()
    if (BIN / "copilot").exists():  # unpack once, not in every scenario at once
        subprocess.run([str(BIN / "copilot"), "--version"], capture_output=True, timeout=120,
                       env={"PATH": os.environ.get("PATH", ""), "HOME": str(root),
                            "XDG_CACHE_HOME": str(cache)})  # fmt: skip
    return {cli: Rig(cli, root / cli, cache) for cli in CLIS}


@dataclasses.dataclass
class Outcome:
    cli: str
    mode: str
    result: ag.AgentResult
    events: list[hn.RunEvent]
    attempts: list[dict[str, Any]]
    requests: int
    seconds: float

    @property
    def error(self) -> Any:
        return self.result.error

    def row(self) -> str:
        err = self.error
        if err is None:
            return f"{self.cli:8} {self.mode:9} ok {self.result.text!r} ({self.seconds:.0f} s)"
        return (f"{self.cli:8} {self.mode:9} {type(err).__name__} kind={err.kind.value} "
                f"retryable={err.retryable} status={getattr(err, 'status', None)} "
                f"retry_after={getattr(err, 'retry_after_s', None)} "
                f"attempt rows={len(self.attempts)} requests={self.requests} "
                f"({self.seconds:.0f} s)")  # fmt: skip


async def scenario(
    rig: Rig, store: hn.Store, mode: str, *, timeout: float, knobs: bool = False, tag: str = ""
) -> Outcome:
    with FakeModel(mode) as fake:
        agent, ws = rig.agent(fake, f"{mode}{tag}", timeout=timeout, knobs=knobs)
        events: list[hn.RunEvent] = []
        start = time.monotonic()
        result = await ag.run(agent, "say hi", ws, store=store, on_event=events.append)
        took = time.monotonic() - start
        requests = len(fake.model_requests())
    attempts = store.attempts(result.run_id).to_dict("records")
    return Outcome(rig.cli, mode, result, events, attempts, requests, took)


def check(o: Outcome, *, timeout: float) -> None:
    """What every scenario must come out as, whichever path the CLI took."""
    err, where = o.error, o.row()
    assert [e.kind for e in o.events].count("started") == 1, where
    assert all(a["provider"] == ag.driver(o.cli).name for a in o.attempts), where
    assert all(a["model"] == "fake-model" for a in o.attempts), (where, o.attempts)
    if o.mode == "ok":
        assert o.result.ok and o.result.text == "answer 1", where
        assert o.result.usage.input_tokens > 0 and o.result.session_id, where
        assert len(o.attempts) == 1 and pd.isna(o.attempts[0]["kind"]), where
        return
    kind = KIND[o.mode]
    assert err is not None and err.kind.value == kind, where
    final = o.attempts[-1]
    assert final["kind"] == kind and final["error"] == err.code, (where, final)
    if o.mode == "hang":
        assert isinstance(err, ag.Timeout) and err.retryable, where
        return
    assert not isinstance(err, ag.Timeout), where  # a reported cause, never a bare timeout
    status = getattr(err, "status", None)
    want = {"429": 429, "529": 529, "503": 503, "401": 401}.get(o.mode)
    assert want is None or status == want, where
    assert want is None or final["status"] == want, (where, final)
    if o.mode == "429":
        assert isinstance(err, ag.RateLimited) and err.retryable and not err.quota, where
        if o.cli != "codex":  # codex's stream and logs never say the retry-after
            assert err.retry_after_s == RETRY_AFTER and final["retry_after_s"] == RETRY_AFTER
            assert err.resets_at is not None and err.resets_at > time.time() - timeout
    elif o.mode == "quota":  # used up: stopped (or given up) at once, not retryable
        assert isinstance(err, ag.RateLimited) and err.quota and not err.retryable, where
        assert o.seconds < 30, where
    elif o.mode == "401":
        assert isinstance(err, ag.NotAuthenticated) and not err.retryable, where
        assert o.seconds < 30, where  # stopped at once, not after minutes of retries
        want_hint = {"claude": "ANTHROPIC_API_KEY", "codex": "FAKE_MODEL_KEY",
                     "copilot": "COPILOT_PROVIDER_API_KEY"}[o.cli]  # fmt: skip
        assert want_hint in err.hint, err.hint
    elif o.mode == "overflow":
        assert isinstance(err, ag.AgentError) and not err.retryable, where
    else:  # 529/503, cut
        assert isinstance(err, ag.AgentError) and err.retryable, where
    # every failed request the CLI reported is a row of its own, the final one last
    retried = o.attempts[:-1]
    codes = {"auth": "AGENT_NOT_AUTHENTICATED", "rate_limited": "AGENT_RATE_LIMITED"}
    assert all(r["error"] == codes.get(r["kind"], "AGENT_TURN_FAILED") for r in retried), where
    assert [r["attempt"] for r in o.attempts] == list(range(1, len(o.attempts) + 1)), where
    assert len(o.attempts) <= max(1, o.requests), where


async def gather(*runs: Any) -> list[Outcome]:
    return list(await asyncio.gather(*runs))


def knob_outcomes(rig: Rig, tmp_path: Path, modes: tuple[str, ...]) -> list[Outcome]:
    """Every one of ``modes`` against ``rig`` at once, its retry knobs set and a 40 s
    timeout, each passed through ``check``."""
    with hn.Store(tmp_path / "runs.duckdb") as store:
        outcomes = asyncio.run(gather(
            *(scenario(rig, store, mode, timeout=40, knobs=True, tag="-knob")
              for mode in modes)))  # fmt: skip
    for o in outcomes:
        check(o, timeout=40)
    return outcomes


# ------------------------------------------------------------- a normal answer


@pytest.mark.parametrize("cli", CLIS)
def test_a_real_cli_answers_and_its_named_session_resumes(
    rigs: dict[str, Rig], cli: str, tmp_path: Path
) -> None:
    rig = rigs[cli]
    with FakeModel("ok") as fake, hn.Store(tmp_path / "runs.duckdb") as store:
        agent, ws = rig.agent(fake, f"session-{cli}", timeout=60)
        first = ag.run_sync(agent, "remember the word quince", ws, store=store, session="s")
        assert first.ok and first.text == "answer 1", first.error
        assert first.session_id and first.usage.input_tokens > 0
        assert first.model == "fake-model"
        runs = store.runs(first.run_id).to_dict("records")
        assert [r["model"] for r in runs] == ["fake-model"]
        second = ag.run_sync(agent, "which word?", ws, store=store, session="s")
        assert second.ok and second.text == "answer 2", second.error
        assert second.session_id == first.session_id
        # the second request carries the earlier conversation: the CLI resumed it
        bodies = [str(r["body"]) for r in fake.model_requests()]
        assert any("remember the word quince" in b and "answer 1" in b for b in bodies)
        bound = store_writer(store).agent_session(str(ws.resolve()), "s")
        assert bound is not None and bound["session_id"] == first.session_id


# ---------------------------------------------- the CLI gives up by itself (knobs)


def test_real_claude_with_one_retry_reports_its_final_error_by_cause(
    rigs: dict[str, Rig], tmp_path: Path
) -> None:
    for o in knob_outcomes(rigs["claude"], tmp_path, ("429", "529", "overflow", "cut")):
        if o.mode in ("429", "529"):  # one retry reported, then its own final error
            assert o.result.exit_code == 1 and len(o.attempts) == 2, o.row()
            assert o.attempts[0]["kind"] == KIND[o.mode], o.attempts


def test_real_claudes_status_less_retry_of_a_dropped_connection_is_transport(
    rigs: dict[str, Rig], tmp_path: Path
) -> None:
    # Claude Code reports each retry of a connection dropped before any answer as
    # {"error_status": null, "error": "unknown"}: no status, so the connection failed.
    with hn.Store(tmp_path / "runs.duckdb") as store:
        o = asyncio.run(scenario(rigs["claude"], store, "reset", timeout=40, knobs=True))
    rows = [(a["kind"], None if pd.isna(a["status"]) else a["status"]) for a in o.attempts]
    assert rows == [("transport", None), ("transport", None)], o.row()
    assert o.attempts[0]["error"] == "AGENT_TURN_FAILED", o.attempts
    retries = [e for e in o.events if isinstance(e, RetryEvent)]
    assert [(r.error_kind, r.status) for r in retries] == [("transport", None)], retries
    assert isinstance(o.error, ag.AgentError) and o.error.kind is hn.ProviderErrorKind.TRANSPORT
    assert o.error.retryable, o.row()


def test_real_codex_without_retries_reports_its_final_error_by_cause(
    rigs: dict[str, Rig], tmp_path: Path
) -> None:
    for o in knob_outcomes(rigs["codex"], tmp_path, ("429", "503", "cut")):
        assert o.result.exit_code == 1 and len(o.attempts) == 1, o.row()


# --------------------------- every scenario, default knobs, the driver's timeout at 45 s


@pytest.mark.real_cli_long
def test_every_real_cli_and_scenario_with_default_knobs_and_a_45_s_timeout(
    rigs: dict[str, Rig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for cli in CLIS:
        need(cli)
    modes = {cli: ("ok", "429", OVERLOAD[cli], "401", "overflow", "cut", "hang", "quota")
             for cli in CLIS}  # fmt: skip
    with hn.Store(tmp_path / "runs.duckdb") as store:
        outcomes = asyncio.run(gather(
            *(scenario(rigs[cli], store, mode, timeout=45, tag="-default")
              for cli in CLIS for mode in modes[cli])))  # fmt: skip
        rates = store.failure_rates(by=("provider", "kind"))
    with capsys.disabled():
        print("\n" + "\n".join(o.row() for o in outcomes))
    for o in outcomes:
        check(o, timeout=45)
    # the CLIs' own retries are counted: more attempt rows than runs for a 429
    counted = rates[(rates["provider"] == "claude-code") & (rates["kind"] == "rate_limited")]
    assert int(counted["failures"].iloc[0]) >= 2, rates
