"""Client overhead: harnessnb ``complete()`` vs a raw httpx2 POST vs the official openai SDK.

Gemini's wire format too: ``hn.Gemini`` vs a raw POST of the same body to the chaos
server's ``generateContent``. All call the same healthy chaos server, which runs in its
own process so that its CPU time does not share the client's GIL: the numbers measure
the clients. The ratios
compare whole answers (``stream=False``, as the raw POST and the SDK ask); the
``harnessnb stream`` row is the default, streamed ``complete()``, measured against
``raw stream``: httpx2 sending the same streamed request and reading its server-sent
events minimally (lines iterated, each ``data:`` JSON-loaded, the content and tool-call
deltas accumulated, ``[DONE]`` ending the answer). Targets, on the median of the rounds'
CPU-per-call ratios: harnessnb streamed <= 1.15x raw streamed, whole answer <= 1.10x raw.
The sequential calls run on a loop and clients of their own (``SequentialLoop``), so
their pools never hold the concurrent bursts' idle connections.

``--api responses`` measures OpenAI's Responses API the same way (``OpenAI(api="responses")``,
a raw POST to ``/responses``, the SDK's ``responses.create``).

Run: ``python bench/providers.py [--api chat|responses] [--sequential 300] [--concurrent 1000]
[--rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import harnessnb as hn  # noqa: E402
from bench._report import load_line, ratio_line, ratios  # noqa: E402
from harnessnb.providers import _http  # noqa: E402

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a benchmark."},
    {"role": "user", "content": "Say hello in a sentence of moderate length, please."},
]
Call = Callable[[], Awaitable[str]]


def start_server() -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harnessnb.chaos", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.kill()
        raise SystemExit("chaos server did not start")
    return proc, url


def raw_client() -> httpx2.AsyncClient:
    """A plain httpx2 client configured as harnessnb's is (no redirects, only connect
    bounded, the same pool limits), so the ratio is the cost of harnessnb's layer
    (httpx2's default 5 s timeouts cost more). Plain: harnessnb's own client polls idle
    connections' sockets itself (providers/_client.py), which raw httpx2 does not."""
    return httpx2.AsyncClient(
        follow_redirects=False,
        timeout=httpx2.Timeout(None, connect=10.0),
        limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100),
    )


class SequentialLoop:
    """A second event loop, on a thread of its own, where the sequential calls run
    through clients of their own: their pools never see the concurrent bursts, whose
    100 idle connections httpcore2 would probe on every request joining or leaving the
    pool (raw httpx2 and the SDK do so expensively, harnessnb cheaply: see
    providers/_client.py), so the sequential figures are the calls' own, on one kept
    connection. The main loop waits, idle, while it runs."""

    def __init__(self, url: str, api: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.calls = self.run(clients(url, api))

    def run(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()  # type: ignore[arg-type]

    def close(self) -> None:
        self.run(_http.aclose_client())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


async def clients(url: str, api: str = "chat") -> dict[str, Call]:
    if api == "responses":
        return await responses_clients(url)
    base = url + "/v1"
    provider = hn.OpenAI("bench-model", base_url=base)
    raw = raw_client()
    sdk = openai.AsyncOpenAI(api_key="unused", base_url=base, max_retries=0)
    body = {"model": "bench-model", "messages": MESSAGES}

    async def harness() -> str:
        return (await provider.complete(MESSAGES, stream=False)).text

    async def streamed() -> str:
        return (await provider.complete(MESSAGES)).text

    async def raw_post() -> str:
        r = await raw.post(base + "/chat/completions", json=body)
        r.raise_for_status()
        return str(r.json()["choices"][0]["message"]["content"])

    async def official() -> str:
        r = await sdk.chat.completions.create(model="bench-model", messages=MESSAGES)  # type: ignore[arg-type]
        return str(r.choices[0].message.content)

    # The very body harnessnb streams with (usage asked for at the end).
    stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}

    async def raw_streamed() -> str:
        return await read_sse_minimally(raw, base + "/chat/completions", stream_body)

    gemini = hn.Gemini("bench-model", api_key="unused", base_url=url)
    gemini_url = url + "/v1/models/bench-model:generateContent"
    gemini_body = {
        "contents": [{"role": "user", "parts": [{"text": MESSAGES[1]["content"]}]}],
        "systemInstruction": {"parts": [{"text": MESSAGES[0]["content"]}]},
    }
    key = {"x-goog-api-key": "unused"}

    async def gemini_harness() -> str:
        return (await gemini.complete(MESSAGES, stream=False)).text

    async def gemini_raw() -> str:
        r = await raw.post(gemini_url, json=gemini_body, headers=key)
        r.raise_for_status()
        return str(r.json()["candidates"][0]["content"]["parts"][0]["text"])

    return {
        "harnessnb": harness,
        "raw httpx2": raw_post,
        "openai SDK": official,
        "harnessnb stream": streamed,
        "raw stream": raw_streamed,
        "gemini": gemini_harness,
        "gemini raw": gemini_raw,
    }


async def read_sse_minimally(
    client: Any, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> str:
    """A streamed chat completion read the least a client can: its lines iterated, each
    ``data:`` line JSON-loaded until ``[DONE]``, the content deltas and the tool calls'
    fragments (keyed by index) accumulated. The body is read to its end, so the
    connection goes back to the pool as harnessnb's does."""
    text: list[str] = []
    calls: dict[int, list[str]] = {}
    done = False
    async with client.stream("POST", url, json=body, headers=headers) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if done or not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                continue
            for choice in json.loads(data).get("choices") or ():
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                for frag in delta.get("tool_calls") or ():
                    call = calls.setdefault(frag.get("index", 0), ["", ""])
                    fn = frag.get("function") or {}
                    call[0] += fn.get("name") or ""
                    call[1] += fn.get("arguments") or ""
    assert done, "stream ended before [DONE]"
    return "".join(text)


async def responses_clients(url: str) -> dict[str, Call]:
    """The same four clients, speaking OpenAI's Responses API."""
    base = url + "/v1"
    provider = hn.OpenAI("bench-model", base_url=base, api="responses")
    raw = raw_client()
    sdk = openai.AsyncOpenAI(api_key="unused", base_url=base, max_retries=0)
    body = {"model": "bench-model", "input": MESSAGES}

    async def harness() -> str:
        return (await provider.complete(MESSAGES, stream=False)).text

    async def streamed() -> str:
        return (await provider.complete(MESSAGES)).text

    async def raw_post() -> str:
        r = await raw.post(base + "/responses", json=body)
        r.raise_for_status()
        items = r.json()["output"]
        return "".join(
            part["text"]
            for item in items
            if item["type"] == "message"
            for part in item["content"]
            if part["type"] == "output_text"
        )

    async def official() -> str:
        r = await sdk.responses.create(model="bench-model", input=MESSAGES)  # type: ignore[arg-type]
        return r.output_text

    return {
        "harnessnb": harness,
        "raw httpx2": raw_post,
        "openai SDK": official,
        "harnessnb stream": streamed,
    }


async def sequential(call: Call, n: int) -> tuple[float, float]:
    """Wall and CPU seconds of ``n`` calls one after another (CPU time is the client's
    own: the server is another process, and a busy machine inflates it far less)."""
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        await call()
    return time.perf_counter() - started, time.process_time() - cpu


async def concurrent(call: Call, n: int, width: int = 100) -> float:
    gate = asyncio.Semaphore(width)

    async def one() -> None:
        async with gate:
            await call()

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return time.perf_counter() - started


async def main(seq_n: int, conc_n: int, rounds: int, api: str = "chat") -> None:
    print(load_line())
    proc, url = start_server()
    try:
        calls = await clients(url, api)
        seq = SequentialLoop(url, api)
        print(f"API: {api}")
        for name, call in calls.items():  # warm up pools, imports and the server
            assert (await call()).startswith("Say hello")
            assert seq.run(seq.calls[name]()).startswith("Say hello")
            await concurrent(call, 200)
        results: dict[str, dict[str, list[float]]] = {
            name: {"seq": [], "conc": [], "cpu": []} for name in calls
        }
        names = list(calls)
        for r in range(rounds):
            # Interleaved and rotated, so drift and order hit every client alike; the
            # collector runs first so one client's garbage is not timed on the next.
            turn = r % len(names)
            for name in names[turn:] + names[:turn]:
                gc.collect()
                wall, cpu = seq.run(sequential(seq.calls[name], seq_n))
                results[name]["seq"].append(wall)
                results[name]["cpu"].append(cpu)
                gc.collect()
                results[name]["conc"].append(await concurrent(calls[name], conc_n))
        report(results, seq_n, conc_n, rounds)
        print(load_line())
        seq.close()
        await _http.aclose_client()
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def report(
    results: dict[str, dict[str, list[float]]], seq_n: int, conc_n: int, rounds: int
) -> None:
    # Best of the rounds: the machine is shared, and noise only ever adds time.
    med = {n: {k: min(v) for k, v in r.items()} for n, r in results.items()}
    print(f"best of {rounds} rounds; sequential {seq_n} calls, concurrent {conc_n} calls x100\n")
    raw, hnb, sdk = med["raw httpx2"], med["harnessnb"], med["openai SDK"]
    print(
        f"{'client':<12} {'seq us/call':>12} {'seq calls/s':>12} {'conc calls/s':>13} "
        f"{'seq vs raw':>11} {'conc vs raw':>12} {'seq cpu us/call':>16}"
    )
    for name, m in med.items():
        seq_ratio, conc_ratio = m["seq"] / raw["seq"], m["conc"] / raw["conc"]
        print(
            f"{name:<12} {m['seq'] / seq_n * 1e6:>12.0f} {seq_n / m['seq']:>12.0f} "
            f"{conc_n / m['conc']:>13.0f} {seq_ratio:>10.2f}x {conc_ratio:>11.2f}x "
            f"{m['cpu'] / seq_n * 1e6:>16.0f}"
        )
    print()
    print(
        f"harnessnb / raw httpx2 : seq {hnb['seq'] / raw['seq']:.2f}x, "
        f"conc {hnb['conc'] / raw['conc']:.2f}x   (target <= 1.15x)"
    )
    print(
        f"openai SDK / harnessnb : seq {sdk['seq'] / hnb['seq']:.2f}x, "
        f"conc {sdk['conc'] / hnb['conc']:.2f}x   (target >= 1.5x)"
    )
    if "gemini" in med:  # measured beside chat completions only (not with --api responses)
        gem, gem_raw = med["gemini"], med["gemini raw"]
        print(
            f"hn.Gemini / raw httpx2 : seq {gem['seq'] / gem_raw['seq']:.2f}x, "
            f"conc {gem['conc'] / gem_raw['conc']:.2f}x   (target: as harnessnb / raw httpx2)"
        )
    st = med["harnessnb stream"]
    print(
        f"streamed / whole answer: seq {st['seq'] / hnb['seq']:.2f}x, "
        f"conc {st['conc'] / hnb['conc']:.2f}x, seq CPU {st['cpu'] / hnb['cpu']:.2f}x   "
        "(what streaming costs per complete())"
    )
    print("\nCPU per call, each round's ratio (the two sides measured in the same round):")
    cpu = {name: r["cpu"] for name, r in results.items()}
    if "raw stream" in cpu:
        print(
            ratio_line(
                "harnessnb streamed / raw streamed",
                ratios(cpu["harnessnb stream"], cpu["raw stream"]),
                1.15,
            )
        )
    print(
        ratio_line(
            "harnessnb whole / raw whole      ", ratios(cpu["harnessnb"], cpu["raw httpx2"]), 1.10
        )
    )
    if "gemini" in cpu:
        print(
            ratio_line(
                "hn.Gemini whole / raw whole      ", ratios(cpu["gemini"], cpu["gemini raw"])
            )
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=300)
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--api", choices=("chat", "responses"), default="chat")
    a = parser.parse_args()
    asyncio.run(main(a.sequential, a.concurrent, a.rounds, a.api))
