"""Every error renders as str, repr, HTML card and short traceback; no key ever shows."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import harnessnb as hn
from harnessnb import AttemptRecord
from harnessnb.chaos import ChaosServer, Fault
from harnessnb.providers import _http
from harnessnb.providers._fallback import FallbackError
from harnessnb.rules import _errors
from harnessnb.rules._errors import MCPErrorKind

KEY = "sk-SECRET-canary-12345"
SCRIPT = "<script>alert('x')</script>"

FACTORIES: dict[type[hn.HarnessError], Callable[[str], hn.HarnessError]] = {
    hn.HarnessError: lambda m: hn.HarnessError(m),
    hn.ProviderError: lambda m: hn.ProviderError(
        m,
        kind=hn.ProviderErrorKind.RATE_LIMITED,
        status=429,
        retry_after_s=12.0,
        provider="openai",
        request_id="req_1",
        model="gpt",
    ),
    hn.ConfigError: lambda m: hn.ConfigError(m),
    hn.RefusedError: lambda m: hn.RefusedError(
        m, act="write", target="a.txt", rule="write ask", layer="default"
    ),
    hn.ResumeError: lambda m: hn.ResumeError(m, reason="finished"),
    hn.SandboxError: lambda m: hn.SandboxError(m, reason="timeout"),
    hn.StoreError: lambda m: hn.StoreError(m, kind="busy", path="runs.duckdb"),
    hn.ConflictError: lambda m: hn.ConflictError(m, run_id="r1", owner="pid 1"),
    hn.ToolError: lambda m: hn.ToolError(m),
    hn.MCPError: lambda m: hn.MCPError(
        m, kind=MCPErrorKind.EXITED, server="git", exit_code=3, stderr="bad config"
    ),
    hn.OutputError: lambda m: hn.OutputError(
        m, kind="schema_violation", mode="tool", reasons=[f"answer: {m}", "population: bad"]
    ),
    FallbackError: lambda m: FallbackError(
        [
            hn.ProviderError("first", kind=hn.ProviderErrorKind.SERVER, status=503, provider="a"),
            hn.ProviderError(m, kind=hn.ProviderErrorKind.TIMEOUT, provider="b"),
        ],
        provider="fallback(a,b)",
    ),
}


def test_every_error_class_in_the_package_has_a_factory() -> None:
    classes = {
        obj
        for name in _errors.__all__
        if isinstance(obj := getattr(_errors, name), type) and issubclass(obj, hn.HarnessError)
    }
    assert classes | {FallbackError} == set(FACTORIES)


def renderings(err: hn.HarnessError) -> dict[str, str]:
    bundle = err._repr_mimebundle_()
    lines = err._render_traceback_()
    assert 1 <= len(lines) <= 3
    assert set(bundle) == {"text/plain", "text/html"}
    return {
        "str": str(err),
        "repr": repr(err),
        "text/plain": bundle["text/plain"],
        "text/html": bundle["text/html"],
        "traceback": "\n".join(lines),
        "to_dict": json.dumps(err.to_dict()),
    }


@pytest.mark.parametrize("cls", list(FACTORIES), ids=lambda c: c.__name__)
def test_error_renders_everywhere_and_html_escapes(cls: type[hn.HarnessError]) -> None:
    cause = ValueError("root cause")
    try:
        try:
            raise cause
        except ValueError as exc:
            raise FACTORIES[cls](f"it broke {SCRIPT}\nsecond line") from exc
    except hn.HarnessError as caught:
        err = caught
    out = renderings(err)
    assert type(err).__name__ in out["repr"] and err.code in out["repr"]
    assert "it broke" in out["str"] and "it broke" in out["traceback"]
    assert "second line" not in out["traceback"]  # one line of message, not the wall
    assert "<script>" not in out["text/html"]
    assert "&lt;script&gt;" in out["text/html"]
    assert "root cause" in out["text/plain"] and "root cause" in out["text/html"]
    assert err.to_dict()["causes"] == ["ValueError: root cause"]
    if isinstance(err, hn.ProviderError):
        assert err.kind.value in out["text/html"]
        assert ("not retryable" in out["traceback"]) is (not err.retryable)


def test_provider_card_says_kind_status_retry_after_provider_request_id() -> None:
    err = FACTORIES[hn.ProviderError]("slow down")
    text = err._repr_mimebundle_()["text/plain"]
    for needle in ("rate_limited", "429", "12", "openai", "req_1", "PROVIDER_RATE_LIMITED"):
        assert needle in text
    assert "retry after 12 s" in err._render_traceback_()[1]
    assert "retry after 12 s" in err._repr_mimebundle_()["text/html"]


# ---------------------------------------------- real errors with a key configured


@pytest.fixture(autouse=True)
async def srv(module_srv: ChaosServer) -> AsyncIterator[ChaosServer]:
    module_srv.reset()  # one server for the module, as new for each test
    yield module_srv
    await _http.aclose_client()


def providers(srv: ChaosServer) -> list[Any]:
    return [
        hn.OpenAI("gpt", api_key=KEY, base_url=srv.openai_url, timeout_s=0.2),
        hn.OpenRouter("or", api_key=KEY, base_url=srv.openai_url, timeout_s=0.2),
        hn.Anthropic("claude", api_key=KEY, base_url=srv.anthropic_url, timeout_s=0.2),
    ]


FAULTS = [
    Fault.status(401, body=f"Incorrect API key provided: {KEY}"),  # a server echoing the key
    Fault.status(429, retry_after="1"),
    Fault.status(400, body="maximum context length exceeded"),
    Fault.malformed(),
    Fault.empty(),
    Fault.error_in_200({"code": 402, "message": f"key {KEY} is out of credits"}),
    Fault.stream_error({"type": "overloaded_error", "message": f"overloaded for {KEY}"}),
    Fault.drop_mid_stream(),
    Fault.hang(2.0),
]


def assert_no_key(err: hn.HarnessError, attempts: list[AttemptRecord], provider: Any) -> None:
    for where, text in renderings(err).items():
        assert KEY not in text, where
        assert "canary" not in text, where
    for attempt in attempts:
        assert "canary" not in repr(attempt)
    assert "canary" not in repr(provider) and "canary" not in str(provider)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.kind + str(f.http_status))
async def test_real_provider_errors_never_show_the_key(
    srv: ChaosServer, fault: Fault, stream: bool
) -> None:
    for provider in providers(srv):
        srv.push(fault)
        with pytest.raises(hn.ProviderError) as info:
            await provider.complete([{"role": "user", "content": "hi"}], stream=stream)
        attempts = list(info.value.attempts)
        assert attempts, "every attempt is reported"
        assert_no_key(info.value, attempts, provider)
    # The key did reach the server, so the absence above is redaction, not luck.
    assert all(
        r.headers.get("authorization", r.headers.get("x-api-key")) == "REDACTED"
        for r in srv.requests
    )


async def test_fallback_error_from_real_providers_never_shows_the_key(srv: ChaosServer) -> None:
    a, _, c = providers(srv)
    srv.push(Fault.status(503, body=f"down, {KEY}"), Fault.error_in_200({"code": 502}))
    with pytest.raises(FallbackError) as info:
        await hn.Fallback(a, c).complete([{"role": "user", "content": "hi"}])
    assert len(info.value.failures) == 2
    assert len(info.value.attempts) == 2
    assert_no_key(info.value, list(info.value.attempts), hn.Fallback(a, c))
