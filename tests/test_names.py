"""One name per idea, units as suffixes (docs/api.md, "Names and units"): each renamed
spelling still works for one release, warning ``DeprecationWarning`` with its new name;
the new names work without a warning."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
import warnings
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb import agents as ag

K = hn.ProviderErrorKind


def test_the_contract_budgets_new_names_work_without_a_warning(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = hn.TaskContract("t", tmp_path, max_time_s=10, max_total_tokens=500)
        assert (c.max_time_s, c.max_total_tokens) == (10.0, 500)
        assert c.to_dict()["max_time_s"] == 10.0 and c.to_dict()["max_total_tokens"] == 500


def test_max_seconds_and_max_tokens_still_work_as_keywords_and_attributes(
    tmp_path: Path,
) -> None:
    with pytest.warns(DeprecationWarning, match=r"max_seconds= .* use max_time_s=") as w:
        c = hn.TaskContract("t", tmp_path, max_seconds=10)
    assert w[0].filename == __file__  # the warning points at the caller's line
    assert c.max_time_s == 10.0
    with pytest.warns(DeprecationWarning, match=r"max_tokens= .* use max_total_tokens="):
        c = hn.TaskContract("t", tmp_path, max_tokens=500)
    assert c.max_total_tokens == 500
    with pytest.warns(DeprecationWarning, match=r"TaskContract: max_seconds .* use max_time_s"):
        assert hn.TaskContract("t", tmp_path, max_time_s=3).max_seconds == 3.0
    with pytest.warns(DeprecationWarning, match=r"budget_seconds .* use max_time_s"):
        assert hn.TaskContract("t", tmp_path, max_time_s=3).budget_seconds == 3.0
    with pytest.warns(DeprecationWarning, match=r"max_tokens .* use max_total_tokens"):
        assert hn.TaskContract("t", tmp_path, max_total_tokens=7).max_tokens == 7


def test_an_old_and_a_new_name_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="max_seconds= and max_time_s= name one thing"):
        hn.TaskContract("t", tmp_path, max_seconds=1, max_time_s=2)


def test_a_contract_stored_under_the_old_keys_reads_back(tmp_path: Path) -> None:
    stored = hn.TaskContract("t", tmp_path, max_time_s=5, max_total_tokens=9).to_dict()
    stored["max_seconds"], stored["max_tokens"] = (
        stored.pop("max_time_s"),
        stored.pop("max_total_tokens"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = hn.TaskContract.from_dict(stored)
    assert (back.max_time_s, back.max_total_tokens) == (5.0, 9)


def test_provider_error_retry_after_is_retry_after_s() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        err = hn.ProviderError("slow", kind=K.RATE_LIMITED, status=429, retry_after_s=3.0)
        assert err.retry_after_s == 3.0 and err.to_dict()["retry_after_s"] == 3.0
    with pytest.warns(DeprecationWarning, match=r"ProviderError: retry_after= .* retry_after_s="):
        old = hn.ProviderError("slow", kind=K.RATE_LIMITED, retry_after=4.0)
    with pytest.warns(DeprecationWarning, match=r"ProviderError: retry_after .* retry_after_s"):
        assert old.retry_after == 4.0
    assert old.retry_after_s == 4.0


@pytest.mark.parametrize("cls", [ag.RateLimited, ag.AgentError])
def test_agent_errors_retry_after_is_retry_after_s(cls: type[ag.RateLimited]) -> None:
    fields = {"agent": "codex", "bin": "codex", "detail": "429", "status": 429}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        err = cls("slow", **fields, retry_after_s=7.0)  # type: ignore[arg-type]
        assert err.retry_after_s == 7.0 and err.to_dict()["retry_after_s"] == 7.0
    with pytest.warns(DeprecationWarning, match=r"retry_after= .* use retry_after_s="):
        old = cls("slow", **fields, retry_after=8.0)  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning, match=r"retry_after .* use retry_after_s"):
        assert old.retry_after == 8.0


def test_an_error_stored_with_the_old_retry_after_key_still_shows_its_wait() -> None:
    from harnessnb.loop._result import StoredError

    old = StoredError.from_dict(
        {"name": "ProviderError", "code": "PROVIDER_RATE_LIMITED", "message": "slow",
         "kind": "rate_limited", "status": 429, "retryable": True, "retry_after": 6.0}
    )  # fmt: skip
    assert "retry after 6 s" in old._card_html()  # the card's badge


def test_run_and_agent_results_elapsed_is_elapsed_s() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = hn.RunResult("run_x", hn.RunOutcome.FINISHED, 1, 10, elapsed_s=2.5)
        agent = ag.AgentResult("run_y", "codex", hn.RunOutcome.FINISHED, elapsed_s=4.0)
        assert (run.elapsed_s, agent.elapsed_s) == (2.5, 4.0)
        assert "2.5 s" in run.summary_text()
    with pytest.warns(DeprecationWarning, match=r"RunResult: elapsed= .* use elapsed_s="):
        old = hn.RunResult("run_x", hn.RunOutcome.FINISHED, 1, 10, elapsed=3.5)
    with pytest.warns(DeprecationWarning, match=r"RunResult: elapsed .* use elapsed_s"):
        assert old.elapsed == 3.5
    with pytest.warns(DeprecationWarning, match=r"AgentResult: elapsed= .* use elapsed_s="):
        older = ag.AgentResult("run_y", "codex", hn.RunOutcome.FINISHED, elapsed=5.0)
    with pytest.warns(DeprecationWarning, match=r"AgentResult: elapsed .* use elapsed_s"):
        assert older.elapsed == 5.0


def test_a_sweeps_seconds_is_elapsed_s_and_its_old_column_stays_one_release() -> None:
    from harnessnb.sweeps._sweep_result import SweepRun

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = SweepRun("t", "p", "m", 0, outcome="finished", elapsed_s=1.5, run_id="run_x")
    with pytest.warns(DeprecationWarning, match=r"SweepRun: seconds .* use elapsed_s"):
        assert row.seconds == 1.5
    swept = hn.SweepResult("sweep_x", None, (row,))  # type: ignore[arg-type]
    frame = swept.runs
    assert frame["elapsed_s"].tolist() == [1.5] and frame["seconds"].tolist() == [1.5]
    assert list(frame.columns)[-1] == "seconds"  # the deprecated copy, last


def test_retry_policy_waits_are_in_seconds_by_name() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy = hn.RetryPolicy(base_s=1.0, cap_s=3.0, max_wait_s=60)
        assert (policy.base_s, policy.cap_s, policy.max_wait_s) == (1.0, 3.0, 60.0)
        assert [policy.delay(n) for n in (1, 2, 3)] == [1.0, 2.0, 3.0]
        assert policy.delay(1, retry_after_s=9.0) == 9.0
    with pytest.warns(DeprecationWarning) as caught:
        old = hn.RetryPolicy(base=2.0, cap=5.0, max_wait=10)
    said = [str(w.message) for w in caught]
    for name in ("base", "cap", "max_wait"):
        assert any(f"RetryPolicy: {name}= " in m and f"use {name}_s=" in m for m in said), said
    assert (old.base_s, old.cap_s, old.max_wait_s) == (2.0, 5.0, 10.0)
    with pytest.warns(DeprecationWarning, match=r"RetryPolicy: cap .* use cap_s"):
        assert old.cap == 5.0
    with pytest.warns(DeprecationWarning, match=r"retry_after= .* use retry_after_s="):
        assert old.delay(1, retry_after=7.0) == 7.0


def test_a_contract_stored_with_the_old_retry_keys_reads_back(tmp_path: Path) -> None:
    stored = hn.TaskContract("t", tmp_path, retry=hn.RetryPolicy(base_s=0.2)).to_dict()
    assert stored["retry"]["base_s"] == 0.2
    stored["retry"] = {"base": 0.2, "cap": 4.0, "jitter": 0.0, "max_wait": 50.0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = hn.TaskContract.from_dict(stored)
    assert back.retry == hn.RetryPolicy(base_s=0.2, cap_s=4.0, max_wait_s=50.0)


def test_provider_timeouts_are_in_seconds_by_name() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = hn.OpenAI("m", base_url="http://127.0.0.1:1/v1", timeout_s=5, idle_timeout_s=2)
        assert (p.timeout_s, p.idle_timeout_s) == (5.0, 2.0)
        q = p.with_timeout(7, idle_timeout_s=3, first_event_timeout_s=9)
        assert (q.timeout_s, q.idle_timeout_s, q.first_event_timeout_s) == (7.0, 3.0, 9.0)
        r = hn.OpenRouter("m", base_url="http://127.0.0.1:1/v1", timeout_s=4)
        assert r.timeout_s == 4.0 and hn.REQUEST_TIMEOUT_S == 600.0
    with pytest.warns(DeprecationWarning, match=r"OpenAI: timeout= .* use timeout_s="):
        old = hn.OpenAI("m", base_url="http://127.0.0.1:1/v1", timeout=6)
    assert old.timeout_s == 6.0
    with pytest.warns(DeprecationWarning, match=r"OpenRouter: idle_timeout= .* idle_timeout_s="):
        hn.OpenRouter("m", base_url="http://127.0.0.1:1/v1", idle_timeout=6)
    with pytest.warns(DeprecationWarning, match=r"timeout .* use timeout_s"):
        assert old.timeout == 6.0
    with pytest.warns(DeprecationWarning, match=r"first_event_timeout= .* first_event_timeout_s="):
        later = old.with_timeout(8, first_event_timeout=11)
    assert later.first_event_timeout_s == 11.0
    with pytest.warns(DeprecationWarning, match=r"harnessnb: REQUEST_TIMEOUT .* REQUEST_TIMEOUT_S"):
        assert hn.REQUEST_TIMEOUT == 600.0


def test_from_env_takes_the_new_timeout_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-names")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hn.OpenAI.from_env(timeout_s=9, idle_timeout_s=3).timeout_s == 9.0
    with pytest.warns(DeprecationWarning, match=r"from_env: timeout= .* use timeout_s="):
        assert hn.OpenAI.from_env(timeout=8).timeout_s == 8.0


def test_agent_and_approver_timeouts_are_timeout_s() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ag.Codex(timeout_s=30).timeout_s == 30
        assert hn.WidgetApprover(timeout_s=2, widgets=False).timeout_s == 2.0
    for cls in (ag.ClaudeCode, ag.Codex, ag.Copilot):
        with pytest.warns(DeprecationWarning, match=rf"{cls.__name__}: timeout= .* timeout_s="):
            agent = cls(timeout=40)
        assert agent.timeout_s == 40
        with pytest.warns(DeprecationWarning, match=rf"{cls.__name__}: timeout .* timeout_s"):
            assert agent.timeout == 40
    with pytest.warns(DeprecationWarning, match=r"WidgetApprover: timeout= .* timeout_s="):
        approver = hn.WidgetApprover(timeout=3, widgets=False)
    with pytest.warns(DeprecationWarning, match=r"WidgetApprover: timeout .* timeout_s"):
        assert approver.timeout == 3.0


# A name that holds a duration or money says its unit (docs/api.md, "Names and units").
_HOLDS_A_QUANTITY = re.compile(
    r"(timeout|seconds|elapsed|retry_after|wait|delay|duration|latency|ttft|ttl|interval|cost)$"
)
_SAYS_ITS_UNIT = re.compile(r"_(s|ms|usd)$")
# Kept as the standard library spells them: Clock.sleep(delay) is asyncio.sleep(delay).
_AS_THE_STANDARD_LIBRARY = {
    "Clock.sleep(delay)",
    "FakeClock.sleep(delay)",
    "FakeClock.advance(delay)",
}


def _public_names(owner: str, obj: object) -> set[str]:
    """Parameters, fields and properties a user of ``obj`` spells (deprecated aliases,
    documented "Deprecated:", left out: they go in the next release)."""
    names: set[str] = set()
    if callable(obj):
        with contextlib.suppress(TypeError, ValueError):
            names |= {f"{owner}({p})" for p in inspect.signature(obj).parameters}
    if inspect.isclass(obj):
        for cls in obj.__mro__:
            if not cls.__module__.startswith("harnessnb"):
                continue
            for key, value in vars(cls).items():
                if key.startswith("_"):
                    continue
                if isinstance(value, property):
                    if not (value.__doc__ or "").startswith("Deprecated:"):
                        names.add(f"{owner}.{key}")
                    continue
                func = getattr(value, "__func__", value)
                if inspect.isfunction(func):
                    with contextlib.suppress(TypeError, ValueError):
                        params = inspect.signature(func).parameters
                        names |= {f"{obj.__name__}.{key}({p})" for p in params
                                  if p not in ("self", "cls")}  # fmt: skip
        if dataclasses.is_dataclass(obj):
            names |= {f"{owner}.{f.name}" for f in dataclasses.fields(obj)}
    return names


def test_every_public_duration_and_amount_names_its_unit() -> None:
    spelled: set[str] = set()
    for module, listed in ((hn, hn.__all__), (ag, ag.__all__)):
        for name in listed:
            spelled |= _public_names(name, getattr(module, name))
    wrong = sorted(
        n for n in spelled
        if _HOLDS_A_QUANTITY.search(n.rstrip(")").split("(")[-1].split(".")[-1])
        and not _SAYS_ITS_UNIT.search(n.rstrip(")").split("(")[-1].split(".")[-1])
        and n not in _AS_THE_STANDARD_LIBRARY
    )  # fmt: skip
    assert wrong == [], "name the unit (_s, _ms, _usd), keeping the old name as an alias"


def test_wrapping_providers_with_timeout_takes_timeout_s() -> None:
    leaf = hn.OpenAI("m", base_url="http://127.0.0.1:1/v1")
    scripted = hn.ScriptedProvider(["hi"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        both = hn.Fallback(leaf, scripted).with_timeout(timeout_s=12)
        assert scripted.with_timeout(timeout_s=3) is scripted
    with pytest.warns(DeprecationWarning, match=r"with_timeout: timeout= .* use timeout_s="):
        hn.Fallback(leaf, scripted).with_timeout(timeout=12)
    with pytest.warns(DeprecationWarning, match=r"with_timeout: seconds= .* use timeout_s="):
        scripted.with_timeout(seconds=3)
    assert "timeout_s=12" in repr(both)


def test_an_agent_runs_usage_is_a_usage_and_its_dict_reads_warn() -> None:
    from harnessnb.agents._result import usage_of

    counts = {"input_tokens": 420, "output_tokens": 40, "cached_input_tokens": 300}
    result = ag.AgentResult("run_y", "claude-code", hn.RunOutcome.FINISHED,
                            usage=usage_of(counts, 0.5), cost_usd=0.5)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert result.usage == hn.Usage(420, 40, cached_input_tokens=300)
        assert (result.usage.total_tokens, result.tokens, result.cost_usd) == (460, 460, 0.5)
        assert "cached 300" in result.summary_text() and "$0.5000" in result.summary_text()
    read = r"usage\['input_tokens'\] .* use AgentResult.usage.input_tokens"
    with pytest.warns(DeprecationWarning, match=read):
        assert result.usage["input_tokens"] == 420
    with pytest.warns(DeprecationWarning, match=r"usage\['cost_usd'\] .* AgentResult.cost_usd"):
        assert result.usage.get("cost_usd") == 0.5
    with pytest.warns(DeprecationWarning):
        assert result.usage.get("no_such_key", 7) == 7
