"""A stalled server is bounded (issue 25, item 9): progress is a complete server-sent
event, not a byte. Before, headers then nothing held a run for 30 minutes with the
defaults (3 attempts x the 600 s deadline), and one byte or one empty chunk every few
seconds defeated the 60 s idle timeout until the deadline.

Each test is a raw HTTP server on 127.0.0.1 that sends exactly what it says.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

import harnessnb as hn
from harnessnb.providers._http import DEFAULT_FIRST_EVENT_TIMEOUT, DEFAULT_IDLE_TIMEOUT

HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event(obj: object) -> bytes:
    return chunk(f"data: {json.dumps(obj)}\n\n".encode())


FIRST = event({"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant",
                                                             "content": "Hel"}}]})  # fmt: skip
LAST = {"id": "x", "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}
REST = event(LAST) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"

Script = Callable[[asyncio.StreamWriter], Awaitable[None]]


async def serve(script: Script) -> AsyncIterator[str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))  # fmt: skip
        await reader.readexactly(length)
        writer.write(HEAD)
        try:
            await script(writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()


Outcome = tuple[hn.Completion | hn.ProviderError, float]


async def call(script: Script, **timeouts: float) -> Outcome:
    async for url in serve(script):
        provider = hn.OpenAI("m", base_url=url).with_timeout(5.0, **timeouts)
        started = time.monotonic()
        try:
            result: hn.Completion | hn.ProviderError = await provider.complete(
                [{"role": "user", "content": "hi"}]
            )
        except hn.ProviderError as exc:
            result = exc
        return result, time.monotonic() - started
    raise AssertionError("unreachable")


async def test_headers_then_silence_ends_at_the_first_event_timeout() -> None:
    async def silent(writer: asyncio.StreamWriter) -> None:
        await writer.drain()
        await asyncio.sleep(30)

    result, took = await call(silent, first_event_timeout_s=0.4, idle_timeout_s=0.2)
    assert isinstance(result, hn.ProviderError), result
    assert result.kind is hn.ProviderErrorKind.TIMEOUT and result.retryable
    assert "first-event timeout" in result.message
    assert took < 4.0  # not the 5 s deadline


@pytest.mark.parametrize(
    ("opening", "first_byte", "byte", "first_event_timeout", "idle_timeout", "timeout"),
    [
        # before the first event: a comment byte by byte, never an event
        pytest.param(b"", b":", b":", 0.4, 0.2, "first-event timeout", id="before-first-event"),
        # after it: an event begun and never finished, one byte at a time
        pytest.param(FIRST, b"d", b"a", 2.0, 0.3, "idle timeout", id="after-first-event"),
    ],
)
async def test_bytes_that_complete_no_event_are_silence(
    opening: bytes,
    first_byte: bytes,
    byte: bytes,
    first_event_timeout: float,
    idle_timeout: float,
    timeout: str,
) -> None:
    async def trickle(writer: asyncio.StreamWriter) -> None:
        writer.write(opening)
        for i in range(200):
            writer.write(chunk(first_byte if i == 0 else byte))
            await writer.drain()
            await asyncio.sleep(0.05)

    result, took = await call(
        trickle, first_event_timeout_s=first_event_timeout, idle_timeout_s=idle_timeout
    )
    assert isinstance(result, hn.ProviderError), result
    assert timeout in result.message
    assert took < 4.0


async def test_a_model_that_thinks_before_its_first_event_still_answers() -> None:
    async def thinker(writer: asyncio.StreamWriter) -> None:
        await writer.drain()
        for _ in range(6):  # comments while it thinks: not progress, but no harm
            await asyncio.sleep(0.1)
            writer.write(chunk(b": thinking\n\n"))
        writer.write(FIRST + REST)
        await writer.drain()

    result, _ = await call(thinker, first_event_timeout_s=2.0, idle_timeout_s=0.3)
    assert isinstance(result, hn.Completion), result
    assert result.text == "Hello"


def test_the_defaults_wait_out_three_minutes_of_thought_and_end_silence_in_ten() -> None:
    # The decision behind the defaults, as numbers: a reasoning model's 3 minutes of
    # silence before its first event pass; three attempts at a server that sends its
    # headers and then nothing (the default 2 retries, their backoff) end within 600 s.
    contract = hn.TaskContract("x", ".")
    attempts = contract.max_retries + 1
    backoff = sum(min(contract.retry.cap_s, contract.retry.base_s * 2**i)
                  for i in range(contract.max_retries))  # fmt: skip
    assert DEFAULT_FIRST_EVENT_TIMEOUT > 180
    assert attempts * DEFAULT_FIRST_EVENT_TIMEOUT + backoff <= 600
    assert DEFAULT_IDLE_TIMEOUT == 60.0
    provider = hn.OpenAI("m", base_url="http://127.0.0.1:9/v1")
    assert provider.first_event_timeout_s == DEFAULT_FIRST_EVENT_TIMEOUT
    assert provider.with_timeout(900, first_event_timeout_s=600).first_event_timeout_s == 600
