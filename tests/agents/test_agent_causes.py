"""What a failed model request reported by a CLI means (``_cause``), and the run rules
around it: the child's environment, redaction, when a session name is bound.

The stream readers and the full runs are proven against the real CLIs in
test_real_endpoint.py; here the pure reading of the CLIs' words, and the stand-ins
(standin.py) for what needs a process but no model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_helpers import CLIs

import harnessnb as hn
from harnessnb.agents._cause import (
    cause_of,
    claude_retry_after,
    error_message,
    retry_cause,
    with_retry_after,
)
from harnessnb.store._writer import store_writer

ag = hn.agents
K = hn.ProviderErrorKind
LONG = " ".join(["while contacting the upstream service the request failed"] * 12)


# ------------------------------------------------------------------ causes


@pytest.mark.parametrize(
    ("detail", "status", "word", "kind", "fatal"),
    [
        # the CLIs' own words, as the real CLIs print them
        ("exceeded retry limit, last status: 429 Too Many Requests", None, None,
         K.RATE_LIMITED, False),
        ("unexpected status 401 Unauthorized: invalid x-api-key, url: http://127.0.0.1:9/v1",
         None, None, K.AUTH, True),
        ("unexpected status 529 <unknown status code>: Overloaded, url: http://h/v1", None,
         None, K.SERVER, False),
        ("stream disconnected before completion: stream closed before response.completed",
         None, None, K.TRANSPORT, False),
        ("Codex ran out of room in the model's context window. Start a new thread.", None,
         None, K.CONTEXT_OVERFLOW, True),
        ("The provider rejected the prompt as too long, but automatic recovery could not "
         "reduce it.", None, "query", K.CONTEXT_OVERFLOW, True),
        ("Prompt is too long · the request is ~250000 tokens (limit 200000)", 400, None,
         K.CONTEXT_OVERFLOW, True),
        ("API Error: API returned an empty or malformed response (HTTP 200)", None, "unknown",
         K.TRANSPORT, False),
        ("Failed to finalize chat-completions stream: missing finish_reason", None,
         "transport", K.TRANSPORT, False),
        # no status: the CLI's generic server word yields to words naming the connection
        ("API Error: Unable to connect to API (ECONNRESET)", None, "server_error",
         K.TRANSPORT, False),
        ("API Error: Overloaded", None, "server_error", K.SERVER, False),
        ("API Error: Internal server error", 500, "server_error", K.SERVER, False),
        ("rate_limit (HTTP 429)", 429, "rate_limit", K.RATE_LIMITED, False),
        ("overloaded (HTTP 529)", 529, "overloaded", K.SERVER, False),
        ("authentication_failed (HTTP 401)", 401, "authentication_failed", K.AUTH, True),
        ("You exceeded your current quota, please check your plan", 429, None,
         K.RATE_LIMITED, True),
        # 402 is auth, as in the one status table (rules._errors), said or only worded
        ("Payment required", 402, None, K.AUTH, True),
        ("API Error: 402 Payment Required", None, None, K.AUTH, True),
        ("Payment required", None, None, K.AUTH, True),
        ("Credit balance is too low", 400, None, K.RATE_LIMITED, True),
        ("Quota exceeded. Check your plan and billing details.", None, None,
         K.RATE_LIMITED, True),
        ("Claude AI usage limit reached|1900000000", None, None, K.RATE_LIMITED, False),
        ("the request timed out", None, None, K.TIMEOUT, False),
        ("Bad request: unknown parameter", 400, None, K.REQUEST, True),
        # the length of a message does not hide what it says
        (f"{LONG} 401 Unauthorized {LONG}", None, None, K.AUTH, True),
        (f"{LONG} insufficient_quota {LONG}", None, None, K.RATE_LIMITED, True),
        (f"{LONG} rate limit exceeded {LONG}", None, None, K.RATE_LIMITED, False),
    ],
)  # fmt: skip
def test_a_reported_failure_is_read_into_its_cause(
    detail: str, status: int | None, word: str | None, kind: K, fatal: bool
) -> None:
    cause = cause_of(detail, status, word)
    assert cause is not None and cause.kind is kind, cause
    assert cause.fatal is fatal
    assert cause.retryable is (not fatal)


def test_the_clis_words_are_the_providers_error_types_and_their_own() -> None:
    """A CLI passing on a provider's error type (``timeout_error``, ``not_found_error``)
    is read with the rules' table of them; a quota, there auth, is a fatal rate limit."""
    from harnessnb.rules._errors import BODY_TYPES

    for word, kind in BODY_TYPES.items():
        cause = cause_of("the request failed", None, word)
        quota = word in ("billing_error", "insufficient_quota")
        assert cause is not None, word
        assert cause.kind is (K.RATE_LIMITED if quota else kind), word
        assert cause.quota is quota, word


def test_a_failure_that_says_nothing_has_no_cause_until_the_cli_retried_it() -> None:
    assert cause_of("something odd happened") is None
    # retried with no status (Claude's "error_status": null, "error": "unknown"): no
    # answer arrived, the connection failed
    assert retry_cause("something odd happened").kind is K.TRANSPORT
    assert retry_cause("unknown", None, "unknown").kind is K.TRANSPORT
    # retried with a status nothing else explains: the server answered, and failed
    assert retry_cause("something odd happened", 200).kind is K.SERVER


def test_an_id_or_a_port_is_not_a_status() -> None:
    assert cause_of("request 6a1f-401b-9c2e failed: upstream said nothing") is None
    cause = cause_of("connection refused, url: http://127.0.0.1:5003/v1/responses")
    assert cause is not None and cause.status is None and cause.kind is K.TRANSPORT


def test_copilots_error_body_is_read_for_its_message() -> None:
    body = '{"message":"Rate limit exceeded","type":"rate_limit_error","code":"x"}'
    assert error_message(body) == "Rate limit exceeded"
    assert error_message('{"error": {"message": "bad key"}}') == "bad key"
    assert error_message("plain words") == "plain words"


def test_a_retry_after_from_the_log_goes_to_the_failure_of_the_same_status() -> None:
    reports = [(retry_cause("a", 503), 1.0), (retry_cause("b", 429), 2.0)]
    out = with_retry_after(reports, [(503, None), (429, 7.0)])
    assert [c.retry_after for c, _ in out] == [None, 7.0]


def test_claudes_wait_is_the_retry_after_only_when_it_is_whole_seconds() -> None:
    assert claude_retry_after(429, 7000) == 7.0  # the header's 7 s
    assert claude_retry_after(429, 532.72) is None  # its own jittered backoff
    assert claude_retry_after(503, 7000) is None  # only a 429 carries one here
    earlier = [retry_cause("rate_limit", 429, retry_after=7.0)]
    assert claude_retry_after(429, 17057.6, earlier) == 7.0  # backoff outgrew it


@pytest.mark.parametrize("name", ["claude", "codex", "copilot"])
def test_at_the_deadline_the_error_is_the_cause_still_being_retried(clis: CLIs, name: str) -> None:
    clis.scenario(mode="retry_hang")
    result = ag.run_sync(ag.driver(name, timeout_s=1.5), "hi", clis.ws, store=clis.store)
    err = result.error
    assert isinstance(err, ag.AgentError) and err.kind is K.SERVER and err.retryable, err
    assert err.status == 503 and "still retrying" in err.message
    rows = clis.store.attempts(result.run_id)[["attempt", "kind", "status"]].values.tolist()
    assert rows == [[1, "server", 503]]  # the request being retried is the final row


@pytest.mark.parametrize("name", ["claude", "codex", "copilot"])
def test_a_retry_the_cli_got_past_is_no_cause_at_the_deadline(clis: CLIs, name: str) -> None:
    clis.scenario(mode="retry_hang", recovered=True)
    result = ag.run_sync(ag.driver(name, timeout_s=1.5), "hi", clis.ws, store=clis.store)
    assert isinstance(result.error, ag.Timeout), result.error
    rows = clis.store.attempts(result.run_id)[["attempt", "kind"]].values.tolist()
    assert rows == [[1, "server"], [2, "timeout"]]


def test_codexs_final_error_is_no_retry(clis: CLIs) -> None:
    clis.scenario(mode="agent_error")  # an "error" line, then turn.failed: nothing retried
    seen: list[hn.RunEvent] = []
    result = ag.run_sync(ag.Codex(), "hi", clis.ws, store=clis.store, on_event=seen.append)
    assert isinstance(result.error, ag.AgentError) and result.error.status == 404
    assert [e for e in seen if e.kind == "retry"] == []
    assert len(clis.store.attempts(result.run_id)) == 1


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("kwargs", "kind", "retryable"),
    [
        ({"status": 503}, K.SERVER, True),
        ({"status": 529}, K.SERVER, True),
        ({"status": 400}, K.REQUEST, False),
        ({}, K.TRANSPORT, True),  # no status, no kind: no answer arrived
        ({"kind": K.TRANSPORT}, K.TRANSPORT, True),
        ({"kind": K.TIMEOUT}, K.TIMEOUT, True),
        ({"kind": K.CONTEXT_OVERFLOW}, K.CONTEXT_OVERFLOW, False),
        ({"status": 400, "detail": "prompt is too long"}, K.CONTEXT_OVERFLOW, False),
    ],
)
def test_an_agent_errors_kind_and_retryable_follow_its_cause(
    kwargs: dict[str, Any], kind: K, retryable: bool
) -> None:
    detail = kwargs.pop("detail", "x")
    err = ag.AgentError("failed", agent="codex", bin="codex", detail=detail, **kwargs)
    assert err.kind is kind and err.retryable is retryable
    assert err.to_dict()["retryable"] is retryable


def test_a_rate_limit_with_a_retry_after_knows_when_it_resets() -> None:
    err = ag.RateLimited("slow", agent="claude-code", bin="claude", detail="429",
                         status=429, retry_after_s=7.0)  # fmt: skip
    assert err.retryable and err.status == 429 and err.resets_at is not None
    assert err.to_dict()["retry_after_s"] == 7.0
    quota = ag.RateLimited("quota", agent="codex", bin="codex", detail="q", quota=True)
    assert not quota.retryable and quota.kind is K.RATE_LIMITED


# ------------------------------------------------------------- environment


def test_host_variables_that_change_the_clis_behaviour_are_not_passed_on() -> None:
    host = {"PATH": "/bin", "HOME": "/h", "ANTHROPIC_API_KEY": "k" * 20,
            "ANTHROPIC_BASE_URL": "http://proxy", "IS_SANDBOX": "1",
            "CLAUDE_CODE_MAX_RETRIES": "50", "COPILOT_ALLOW_ALL": "true",
            "COPILOT_PROVIDER_BASE_URL": "http://byok"}  # fmt: skip
    claude = ag.ClaudeCode().environment(host)
    assert "IS_SANDBOX" not in claude and "CLAUDE_CODE_MAX_RETRIES" not in claude
    assert claude["ANTHROPIC_BASE_URL"] == "http://proxy" and "ANTHROPIC_API_KEY" in claude
    copilot = ag.Copilot().environment(host)
    assert "COPILOT_ALLOW_ALL" not in copilot and "COPILOT_PROVIDER_BASE_URL" in copilot
    # asked for explicitly, they are passed
    chosen = ag.ClaudeCode(env={"IS_SANDBOX": "1"}).environment(host)
    assert chosen["IS_SANDBOX"] == "1"


def test_the_child_gets_no_is_sandbox_from_the_host(
    clis: CLIs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IS_SANDBOX", "1")
    clis.scenario(mode="ok")
    result = ag.run_sync(ag.ClaudeCode(), "hi", clis.ws, store=clis.store)
    assert result.ok and "IS_SANDBOX" not in clis.calls()[-1]["env"]


def test_copilots_auth_hint_names_the_provider_key_with_its_own_endpoint() -> None:
    byok = ag.Copilot().auth_hint({"COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:9/v1"})
    assert "COPILOT_PROVIDER_API_KEY" in byok and "copilot login" not in byok
    assert "copilot login" in ag.Copilot().auth_hint({})


def test_codex_names_its_model_and_the_key_of_its_custom_provider(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        'model = "m-config"\nmodel_provider = "local"\n[model_providers.local]\n'
        'base_url = "http://127.0.0.1:9/v1"\nenv_key = "LOCAL_KEY"\n'
    )
    env = {"CODEX_HOME": str(tmp_path)}
    assert ag.Codex().configured_model(env) == "m-config"
    assert ag.Codex(model="m-arg").configured_model(env) == "m-arg"
    assert ag.Codex(extra_args=["-c", 'model="m-c"']).configured_model(env) == "m-c"
    hint = ag.Codex().auth_hint(env)
    assert "LOCAL_KEY" in hint and "http://127.0.0.1:9/v1" in hint
    assert ag.Codex().auth_hint({"CODEX_HOME": str(tmp_path / "none")}).startswith("codex login")


def test_redaction_hides_keys_not_base_urls(clis: CLIs, monkeypatch: pytest.MonkeyPatch) -> None:
    url = "http://127.0.0.1:48213/anthropic-gateway"
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    clis.scenario(mode="crash", echo_env="ANTHROPIC_BASE_URL")
    result = ag.run_sync(ag.ClaudeCode(), "hi", clis.ws, store=clis.store)
    assert isinstance(result.error, ag.Failed)
    assert url in result.error.stderr and "[redacted]" not in result.error.stderr


# ----------------------------------------------------------------- sessions


def test_a_session_name_is_bound_only_once_the_cli_confirmed_the_session(clis: CLIs) -> None:
    # killed before it printed anything: the CLI never confirmed (or saved) the session
    clis.scenario(mode="ok", sleep=30)
    first = ag.run_sync(ag.ClaudeCode(timeout_s=1), "hi", clis.ws, store=clis.store,
                        session="early")  # fmt: skip
    assert isinstance(first.error, ag.Timeout)
    assert store_writer(clis.store).agent_session(str(clis.ws.resolve()), "early") is None
    # the next run with the name starts a new session, then binds it
    clis.scenario(mode="ok")
    second = ag.run_sync(ag.ClaudeCode(), "hi", clis.ws, store=clis.store, session="early")
    assert second.ok, second.error
    assert "--resume" not in clis.calls()[-1]["argv"]
    bound = store_writer(clis.store).agent_session(str(clis.ws.resolve()), "early")
    assert bound is not None and bound["session_id"] == second.session_id


@pytest.mark.parametrize("name", ["claude", "codex", "copilot"])
def test_a_run_emits_one_started_event(clis: CLIs, name: str) -> None:
    clis.scenario(mode="ok")
    seen: list[hn.RunEvent] = []
    result = ag.run_sync(ag.driver(name), "hi", clis.ws, store=clis.store, on_event=seen.append)
    assert result.ok and [e.kind for e in seen].count("started") == 1
