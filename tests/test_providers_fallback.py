"""Fallback over real providers and chaos servers: falls through only on retryable failures."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosServer, Fault, Reply
from harnessnb.providers import _http
from harnessnb.providers._completion import Provider
from harnessnb.providers._fallback import FallbackError

HI = [{"role": "user", "content": "hi"}]
Servers = tuple[ChaosServer, ChaosServer, ChaosServer]


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ChaosServer, ChaosServer, ChaosServer]]:
    with (
        ChaosServer(seed=1) as a,
        ChaosServer(seed=2, responder=lambda r: Reply(text="from b")) as b,
        ChaosServer(seed=3, responder=lambda r: Reply(text="from c")) as c,
    ):
        yield a, b, c


@pytest.fixture(autouse=True)
async def _fresh(servers: tuple[ChaosServer, ...]) -> AsyncIterator[None]:
    for s in servers:
        s.reset()
    yield
    await _http.aclose_client()


def leaves(
    servers: tuple[ChaosServer, ChaosServer, ChaosServer],
) -> tuple[hn.OpenAI, hn.Anthropic, hn.OpenRouter]:
    a, b, c = servers
    return (
        hn.OpenAI("model-a", base_url=a.openai_url),
        hn.Anthropic("model-b", api_key="k-b", base_url=b.anthropic_url),
        hn.OpenRouter("model-c", api_key="k-c", base_url=c.openai_url),
    )


async def test_always_503_primary_falls_back_to_healthy_secondary(servers: Servers) -> None:
    servers[0].set_default(Fault.status(503))
    a, b, _ = leaves(servers)
    fb = hn.Fallback(a, b)
    done = await fb.complete(HI)
    assert (done.text, done.provider, done.model) == ("from b", "anthropic", "model-b")
    assert [(x.provider, x.kind, x.status, x.fell_back) for x in done.attempts] == [
        ("openai", "server", 503, True),
        ("anthropic", None, 200, False),
    ]


async def test_non_retryable_primary_failure_is_raised_without_trying_secondary(
    servers: Servers,
) -> None:
    servers[0].push(Fault.status(401))
    a, b, _ = leaves(servers)
    with pytest.raises(hn.ProviderError) as info:
        await hn.Fallback(a, b).complete(HI)
    assert not isinstance(info.value, FallbackError)
    assert info.value.kind is hn.ProviderErrorKind.AUTH and info.value.provider == "openai"
    assert servers[1].requests == []
    assert [(x.provider, x.fell_back) for x in info.value.attempts] == [("openai", False)]


async def test_all_failing_raises_fallback_error_holding_every_failure(servers: Servers) -> None:
    servers[0].push(Fault.status(503))
    servers[1].push(Fault.status(429, retry_after="4"))
    a, b, _ = leaves(servers)
    fb = hn.Fallback(a, b)
    try:
        await fb.complete(HI)
    except hn.ProviderError as caught:  # the group is caught as a ProviderError
        err = caught
    else:
        pytest.fail("no error")
    assert isinstance(err, FallbackError)
    assert [(f.provider, f.kind.value) for f in err.failures] == [
        ("openai", "server"),
        ("anthropic", "rate_limited"),
    ]
    assert err.exceptions == tuple(err.failures)
    kind = hn.ProviderErrorKind.RATE_LIMITED
    assert (err.kind, err.status, err.retry_after_s) == (kind, 429, 4.0)
    assert err.retryable is True
    assert err.provider == "fallback(openai,anthropic)"
    assert err.request_id == servers[1].requests[-1].request_id
    assert err.__cause__ is err.failures[-1]
    assert [x.fell_back for x in err.attempts] == [True, False]


async def test_fallback_error_not_retryable_when_last_is_not(servers: Servers) -> None:
    servers[0].push(Fault.status(500))
    servers[1].push(Fault.status(400, should_retry=False))
    a, b, _ = leaves(servers)
    with pytest.raises(hn.ProviderError) as info:
        await hn.Fallback(a, b).complete(HI)
    # A non-retryable last leaf is raised as itself, at once.
    assert info.value.kind is hn.ProviderErrorKind.REQUEST and not info.value.retryable


async def test_retryable_by_header_moves_on_and_group_follows_last(servers: Servers) -> None:
    servers[0].push(Fault.status(400, should_retry=True))
    servers[1].push(Fault.status(500, should_retry=False))
    a, b, _ = leaves(servers)
    with pytest.raises(hn.ProviderError) as info:
        await hn.Fallback(a, b).complete(HI)
    assert info.value.kind is hn.ProviderErrorKind.SERVER and not info.value.retryable
    assert len(servers[1].requests) == 1


async def test_three_nested_fall_through_in_order(servers: Servers) -> None:
    servers[0].push(Fault.malformed())
    servers[1].push(Fault.drop_mid_body())
    a, b, c = leaves(servers)
    fb = hn.Fallback(hn.Fallback(a, b), c)
    assert fb.name == "fallback(fallback(openai,anthropic),openrouter)"
    assert fb.model == "model-a"
    assert fb.hosts() == ["127.0.0.1"]
    done = await fb.complete(HI, stream=True)
    assert done.text == "from c" and done.provider == "openrouter"
    assert [(x.provider, x.kind, x.fell_back) for x in done.attempts] == [
        ("openai", "malformed", True),
        ("anthropic", "transport", True),
        ("openrouter", None, False),
    ]


async def test_three_nested_all_failing_flattens_failures(servers: Servers) -> None:
    for s in servers:
        s.push(Fault.status(502))
    a, b, c = leaves(servers)
    with pytest.raises(FallbackError) as info:
        await hn.Fallback(a, hn.Fallback(b, c)).complete(HI)
    assert [f.provider for f in info.value.failures] == ["openai", "anthropic", "openrouter"]
    assert info.value.kind is hn.ProviderErrorKind.SERVER


def test_hosts_union_and_with_timeout_applies_to_all() -> None:
    a = hn.OpenAI("a", api_key="sk-SECRET-canary-12345")
    b = hn.Anthropic("b", api_key="sk-SECRET-canary-12345")
    c = hn.OpenAI("c", base_url="http://127.0.0.1:9/v1")
    fb = hn.Fallback(a, hn.Fallback(b, c), a)
    assert fb.hosts() == ["api.openai.com", "api.anthropic.com", "127.0.0.1"]
    short = fb.with_timeout(3)
    assert short is not fb and isinstance(short, hn.Fallback)
    timeouts = []
    stack = list(short.providers)
    while stack:
        p = stack.pop()
        if isinstance(p, hn.Fallback):
            stack.extend(p.providers)
        else:
            timeouts.append(p.timeout_s)  # type: ignore[attr-defined]
    assert timeouts == [3.0, 3.0, 3.0, 3.0]
    assert a.timeout_s == hn.REQUEST_TIMEOUT_S
    assert isinstance(fb, Provider)
    assert "canary" not in repr(fb)  # no key in the nested reprs
