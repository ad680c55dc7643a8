"""Cost budgets bind whatever a server says about usage (issue 25, item 6).

Attacks from the second round, each against a real HTTP server on 127.0.0.1: a server
that reports no usage (so every attempt was $0 and 20 steps ran past a $0.01 budget), an
empty answer that reports billed usage (counted NULL and $0 while the server billed $15
against a $2 budget), and usage of 10^400 tokens (a cost of ``inf``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from tests.files_helpers import folder

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "list_dir", "arguments": json.dumps({"path": "."})}}  # fmt: skip


class UsageServer:
    """An OpenAI-compatible server whose answers say what ``mode`` says about usage."""

    def __init__(self, mode: str, usage_text: str = "") -> None:
        self.mode = mode
        self.usage_text = usage_text  # raw JSON text of the usage object, when one is sent
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.requests.append(body)
                payload, ctype = outer.answer(bool(body.get("stream")))
                self.send_response(200)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, stream: bool) -> tuple[bytes, str]:
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [CALL]}
        if self.mode == "empty":
            message = {"role": "assistant", "content": ""}
        usage = f', "usage": {self.usage_text}' if self.usage_text else ""
        if not stream:
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            text = f'{{"id": "x", "choices": [{json.dumps(choice)}]{usage}}}'
            return text.encode(), "application/json"
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if "tool_calls" in message:
            delta["tool_calls"] = [{"index": 0, **CALL}]
        events = [
            {"id": "x", "choices": [{"index": 0, "delta": delta}]},
            {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        lines = [f"data: {json.dumps(e)}\n\n" for e in events]
        if usage:
            lines.append(f'data: {{"id": "x", "choices": []{usage}}}\n\n')
        lines.append("data: [DONE]\n\n")
        return "".join(lines).encode(), "text/event-stream"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "ws", {"README.md": "# a project\n" + "words " * 200})


def serve(mode: str, usage_text: str = "") -> Iterator[UsageServer]:
    srv = UsageServer(mode, usage_text)
    try:
        yield srv
    finally:
        srv.close()


# A price high enough that a few estimated attempts cross a one-cent budget.
PRICES = hn.Prices({"m": (100.0, 100.0)})


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_server_reporting_no_usage_is_priced_by_estimate_and_the_budget_binds(
    stream: bool, ws: Path
) -> None:
    for srv in serve("no_usage"):
        provider = hn.OpenAI("m", base_url=srv.url, stream=stream)
        contract = hn.TaskContract("look around", ws, max_steps=20, max_cost_usd=0.01,
                                   stall=hn.StallPolicy(window=0))  # fmt: skip
        with hn.Store(":memory:") as store:
            result = hn.run_sync(contract, provider, store=store, prices=PRICES)
            attempts = store.attempts()
        assert result.outcome is hn.RunOutcome.COST_BUDGET, result.error
        assert 1 <= len(srv.requests) < 20
        assert attempts["usage_estimated"].tolist() == [True] * len(srv.requests)
        assert attempts["input_tokens"].gt(0).all()
        costs = attempts["cost_usd"].tolist()
        assert all(c > 0 for c in costs)
        # stopped within one attempt of the limit
        assert sum(costs[:-1]) < 0.01 <= sum(costs)
        assert result.cost_usd == pytest.approx(sum(costs))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_empty_answer_with_billed_usage_is_priced_and_not_retried_past_the_budget(
    stream: bool, ws: Path
) -> None:
    usage = '{"prompt_tokens": 1000, "completion_tokens": 4000, "total_tokens": 5000}'
    for srv in serve("empty", usage):
        provider = hn.OpenAI("m", base_url=srv.url, stream=stream)
        prices = hn.Prices({"m": (1000.0, 1000.0)})  # 5,000 tokens: $5 an attempt
        contract = hn.TaskContract("say something", ws, max_cost_usd=2.0,
                                   retry=hn.RetryPolicy(base_s=0.0, cap_s=0.0))  # fmt: skip
        with hn.Store(":memory:") as store:
            result = hn.run_sync(contract, provider, store=store, prices=prices)
            attempts = store.attempts()
        assert result.outcome is hn.RunOutcome.COST_BUDGET
        assert len(srv.requests) == 1  # the first billed $5: no retry
        row = attempts.iloc[0]
        assert row["kind"] == "malformed"
        assert (row["input_tokens"], row["output_tokens"]) == (1000, 4000)
        assert row["cost_usd"] == pytest.approx(5.0)
        assert not row["usage_estimated"]
        assert result.cost_usd == pytest.approx(5.0)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    "usage",
    [
        '{"prompt_tokens": 1' + "0" * 400 + ', "completion_tokens": 3}',
        '{"prompt_tokens": NaN, "completion_tokens": 3}',
        '{"prompt_tokens": -5, "completion_tokens": 3}',
        '{"prompt_tokens": 2000000000, "completion_tokens": 3}',
        '{"prompt_tokens": 1e400, "completion_tokens": 3}',
    ],
    ids=["10^400", "NaN", "negative", "2e9", "inf"],
)
async def test_absurd_usage_is_malformed_and_never_an_infinite_cost(
    stream: bool, usage: str
) -> None:
    for srv in serve("no_usage", usage):
        provider = hn.OpenAI("m", base_url=srv.url, stream=stream)
        with pytest.raises(hn.ProviderError) as caught:
            await provider.complete([{"role": "user", "content": "hi"}])
    assert caught.value.kind is hn.ProviderErrorKind.MALFORMED
    assert "usage field 'prompt_tokens' is not a token count" in caught.value.message


def test_an_answer_reporting_its_usage_is_not_estimated(ws: Path) -> None:
    usage = '{"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}'
    for srv in serve("no_usage", usage):
        provider = hn.OpenAI("m", base_url=srv.url)
        contract = hn.TaskContract("look", ws, max_steps=1)
        with hn.Store(":memory:") as store:
            hn.run_sync(contract, provider, store=store, prices=PRICES)
            attempts = store.attempts()
    assert attempts["usage_estimated"].tolist() == [False]
    assert attempts[["input_tokens", "output_tokens"]].values.tolist() == [[10, 2]]


def test_the_estimate_is_four_characters_a_token_rounded_up() -> None:
    from harnessnb.providers._usage import estimate_usage

    assert estimate_usage(4001, 9) == hn.Usage(1001, 3, estimated=True)
    assert estimate_usage(0, 0) == hn.Usage(0, 0, estimated=True)
