"""Wire fidelity for Gemini: the official ``google-genai`` SDK and ``hn.Gemini`` read the
same chaos-server answers, healthy and faulty, streamed and not, and agree on what they
say (the text, the calls, the usage, the status word, the wait, the block reason)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
from google import genai
from google.genai import errors, types

import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply, google_error
from harnessnb.demo._chaos_gemini import thought_signature
from harnessnb.providers import _http

KEY = "AIzaSyD-sdk-parity-0123456789abcdefghij"
TEXT = "Hello from chaos, in several fragments."
TOOL_ARGS = {"path": "notes/ü b.md", "limit": 20, "flags": ["a", "b"]}
DAILY = "GenerateRequestsPerDayPerProjectPerModel-FreeTier"
K = hn.ProviderErrorKind


def responder(request: ChaosRequest) -> Reply:
    if request.tools:
        return Reply(tool_calls=[{"name": request.tools[0], "arguments": TOOL_ARGS}])
    return Reply(text=TEXT, input_tokens=11, output_tokens=9)


@pytest.fixture(scope="module")
def srv() -> Iterator[ChaosServer]:
    with ChaosServer(seed=0, responder=responder) as server:
        yield server


@pytest.fixture(autouse=True)
async def _reset(srv: ChaosServer) -> AsyncIterator[None]:
    srv.reset()
    yield
    await _http.aclose_client()


@pytest.fixture
def sdk(srv: ChaosServer) -> Iterator[genai.Client]:
    options = types.HttpOptions(
        base_url=srv.gemini_url, retry_options=types.HttpRetryOptions(attempts=1)
    )
    with genai.Client(api_key=KEY, http_options=options) as client:
        yield client


@pytest.fixture
def ours(srv: ChaosServer) -> hn.Gemini:
    return hn.Gemini("gemini-test", api_key=KEY, base_url=srv.gemini_url)


TOOL = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="read_file", parameters_json_schema={"type": "object", "properties": {}}
        )
    ]
)
OUR_TOOLS = [{"name": "read_file", "parameters": {"type": "object", "properties": {}}}]
HI = [{"role": "user", "content": "hi"}]


def sdk_call(sdk: genai.Client, stream: bool, tools: bool = False) -> list[Any]:
    """What the SDK reads: the response, or each streamed chunk."""
    config = types.GenerateContentConfig(tools=[TOOL]) if tools else None
    if stream:
        return list(
            sdk.models.generate_content_stream(model="gemini-test", contents="hi", config=config)
        )
    return [sdk.models.generate_content(model="gemini-test", contents="hi", config=config)]


async def ours_fail(ours: hn.Gemini, stream: bool) -> hn.ProviderError:
    with pytest.raises(hn.ProviderError) as info:
        await ours.complete(HI, stream=stream)
    return info.value


@pytest.mark.parametrize("stream", [False, True])
async def test_both_read_the_same_text_usage_and_finish(
    sdk: genai.Client, ours: hn.Gemini, srv: ChaosServer, stream: bool
) -> None:
    chunks = sdk_call(sdk, stream)
    assert srv.requests[-1].protocol == "gemini"
    assert srv.requests[-1].headers["x-goog-api-key"] == "REDACTED"  # the SDK's header too
    last = chunks[-1]
    sdk_text = "".join(c.text or "" for c in chunks)
    usage = last.usage_metadata
    assert usage is not None and last.candidates
    mine = await ours.complete(HI, stream=stream)
    assert mine.text == sdk_text == TEXT
    if stream:
        assert sum(1 for c in chunks if c.text) >= 3
    assert (
        (mine.usage.input_tokens, mine.usage.output_tokens)
        == (
            usage.prompt_token_count,
            usage.candidates_token_count,
        )
        == (11, 9)
    )
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert mine.finish_reason == "stop"
    assert srv.requests[-1].path == srv.requests[0].path  # the same route, the same version


@pytest.mark.parametrize("stream", [False, True])
async def test_both_read_the_same_function_call(
    sdk: genai.Client, ours: hn.Gemini, srv: ChaosServer, stream: bool
) -> None:
    chunks = sdk_call(sdk, stream, tools=True)
    sdk_request = srv.requests[-1].request_id
    calls = [c for chunk in chunks for c in chunk.function_calls or ()]
    mine = await ours.complete(HI, tools=OUR_TOOLS, stream=stream)
    assert (
        [(c.name, c.args) for c in calls]
        == [(t.name, t.arguments) for t in mine.tool_calls]
        == [("read_file", TOOL_ARGS)]
    )
    assert mine.finish_reason == "tool_calls"
    # The signature the SDK reads (bytes) is what harnessnb keeps (text) to send back.
    parts = [p for c in chunks for p in c.candidates[0].content.parts if p.function_call]
    signature = parts[0].thought_signature
    assert signature is not None
    assert base64.b64encode(signature).decode() == thought_signature(sdk_request)
    ours_request = srv.requests[-1].request_id
    assert list(ours._signatures.items()) == [
        (mine.tool_calls[0].id, thought_signature(ours_request))
    ]


STATUS_CASES = [
    # (fault, SDK error class, its code and status word, our kind, our retry_after_s)
    (google_error(429, retry_delay="30s"), errors.ClientError, 429, "RESOURCE_EXHAUSTED",
     K.RATE_LIMITED, 30.0),
    (google_error(429, retry_delay="37s", quota_id=DAILY, quota_value="50"), errors.ClientError,
     429, "RESOURCE_EXHAUSTED", K.RATE_LIMITED, 37.0),
    (google_error(400, reason="API_KEY_INVALID", message="API key not valid."),
     errors.ClientError, 400, "INVALID_ARGUMENT", K.AUTH, None),
    (google_error(400, message="The input token count (2000000) exceeds the maximum number "
                  "of tokens allowed (1048576)."), errors.ClientError, 400, "INVALID_ARGUMENT",
     K.CONTEXT_OVERFLOW, None),
    (google_error(403), errors.ClientError, 403, "PERMISSION_DENIED", K.AUTH, None),
    (google_error(503), errors.ServerError, 503, "UNAVAILABLE", K.SERVER, None),
    (google_error(500), errors.ServerError, 500, "INTERNAL", K.SERVER, None),
    (google_error(504), errors.ServerError, 504, "DEADLINE_EXCEEDED", K.TIMEOUT, None),
]  # fmt: skip


def _retry_delay(details: Any) -> str | None:
    for d in (details or {}).get("error", {}).get("details", ()):
        if d.get("@type", "").endswith("RetryInfo"):
            return str(d["retryDelay"])
    return None


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", STATUS_CASES, ids=lambda c: f"{c[2]}-{c[3]}-{c[4].value}")
async def test_both_read_the_same_error_status(
    sdk: genai.Client, ours: hn.Gemini, srv: ChaosServer, case: tuple[Any, ...], stream: bool
) -> None:
    body, sdk_error, code, word, kind, wait = case
    srv.push(Fault.status(code, body=body))
    with pytest.raises(sdk_error) as info:
        sdk_call(sdk, stream)
    assert (info.value.code, info.value.status) == (code, word)
    srv.push(Fault.status(code, body=body))
    err = await ours_fail(ours, stream)
    assert err.kind is kind and err.status == code
    said = _retry_delay(info.value.details)
    assert err.retry_after_s == wait == (None if said is None else float(said.rstrip("s")))
    assert KEY not in str(err)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_blocked_prompt_the_sdk_sees_unanswered_is_our_request_failure(
    sdk: genai.Client, ours: hn.Gemini, srv: ChaosServer, stream: bool
) -> None:
    srv.push(Fault.blocked("SAFETY"))
    (response,) = sdk_call(sdk, stream)
    assert response.prompt_feedback.block_reason == types.BlockedReason.SAFETY
    assert response.text is None and not response.candidates
    srv.push(Fault.blocked("SAFETY"))
    err = await ours_fail(ours, stream)
    assert err.kind is K.REQUEST and "SAFETY" in err.message and not err.retryable


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("reason", "kind"),
    [("SAFETY", K.REQUEST), ("RECITATION", K.REQUEST), ("MAX_TOKENS", K.MALFORMED)],
)
async def test_a_candidate_ended_with_no_content(
    sdk: genai.Client,
    ours: hn.Gemini,
    srv: ChaosServer,
    reason: str,
    kind: hn.ProviderErrorKind,
    stream: bool,
) -> None:
    srv.push(Fault.finish_empty(reason))
    chunks = sdk_call(sdk, stream)
    last = chunks[-1]
    assert last.candidates and last.candidates[0].finish_reason == types.FinishReason(reason)
    assert last.candidates[0].content is None and not "".join(c.text or "" for c in chunks)
    srv.push(Fault.finish_empty(reason))
    err = await ours_fail(ours, stream)
    assert err.kind is kind and reason in err.message


async def test_an_error_mid_stream(sdk: genai.Client, ours: hn.Gemini, srv: ChaosServer) -> None:
    fault = Fault.stream_error(google_error(503)["error"], after_events=1)
    srv.push(fault)
    with pytest.raises(errors.ServerError) as info:
        sdk_call(sdk, True)
    assert (info.value.code, info.value.status) == (503, "UNAVAILABLE")
    srv.push(fault)
    err = await ours_fail(ours, True)
    assert err.kind is K.SERVER and info.value.message is not None
    assert info.value.message in err.message  # the same words reach the card


async def test_an_error_in_a_200_the_sdk_reads_as_no_answer(
    sdk: genai.Client, ours: hn.Gemini, srv: ChaosServer
) -> None:
    # The SDK hands back an empty response; harnessnb reads the error it carries.
    srv.push(Fault.error_in_200(google_error(429)["error"]))
    (response,) = sdk_call(sdk, False)
    assert not response.candidates and response.text is None
    srv.push(Fault.error_in_200(google_error(429)["error"]))
    err = await ours_fail(ours, False)
    assert err.kind is K.RATE_LIMITED and err.status == 200


BROKEN = [
    # (fault, what the SDK raises, our kind)
    (Fault.malformed(), (ValueError, errors.UnknownApiResponseError), K.MALFORMED),
    (Fault.drop_mid_body(), (httpx2.RemoteProtocolError,), K.TRANSPORT),
    (Fault.drop_mid_stream(after_events=1), (httpx2.RemoteProtocolError,), K.TRANSPORT),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", BROKEN, ids=lambda c: c[0].kind)
async def test_a_broken_answer_fails_both(
    sdk: genai.Client, ours: hn.Gemini, srv: ChaosServer, case: tuple[Any, ...], stream: bool
) -> None:
    fault, raised, kind = case
    srv.push(fault)
    with pytest.raises(raised):
        sdk_call(sdk, stream)
    srv.push(fault)
    err = await ours_fail(ours, stream)
    assert err.kind is kind and err.retryable


@pytest.mark.parametrize("stream", [False, True])
async def test_an_empty_answer_the_sdk_hands_back_is_our_malformed(
    sdk: genai.Client, ours: hn.Gemini, srv: ChaosServer, stream: bool
) -> None:
    srv.push(Fault.empty())
    chunks = sdk_call(sdk, stream)
    assert not "".join(c.text or "" for c in chunks)
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    srv.push(Fault.empty())
    err = await ours_fail(ours, stream)
    assert err.kind is K.MALFORMED and "neither text nor a tool call" in err.message


@pytest.mark.parametrize("stream", [False, True])
async def test_a_server_that_hangs_times_both_out(srv: ChaosServer, stream: bool) -> None:
    options = types.HttpOptions(
        base_url=srv.gemini_url, retry_options=types.HttpRetryOptions(attempts=1), timeout=300
    )
    srv.push(Fault.hang(3.0))
    with (
        genai.Client(api_key=KEY, http_options=options) as quick,
        pytest.raises(httpx2.TimeoutException),
    ):
        sdk_call(quick, stream)
    srv.push(Fault.hang(3.0))
    ours = hn.Gemini("gemini-test", api_key=KEY, base_url=srv.gemini_url, timeout_s=0.3)
    err = await ours_fail(ours, stream)
    assert err.kind is K.TIMEOUT and err.retryable
