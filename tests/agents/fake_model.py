"""A fake model endpoint for the real CLIs: a real HTTP server on 127.0.0.1.

It speaks the three wire formats the CLIs use, chosen by the request's path:
Anthropic messages (``/v1/messages``, Claude Code), OpenAI Responses
(``/v1/responses``, Codex) and OpenAI chat completions (``/chat/completions``,
Copilot with ``COPILOT_PROVIDER_TYPE=openai``). Each model request gets the answer
``mode`` names:

- ``ok``: a streamed answer "answer N", N-1 being the answers the conversation sent
  already holds (a resumed session's second answer is "answer 2"), with usage;
- ``429``: rate limited, ``retry-after: 7``;
- ``529`` / ``503``: overloaded / unavailable;
- ``401``: the key is refused;
- ``quota``: the quota is used up (OpenAI: 429 ``insufficient_quota``; Anthropic: 400,
  the credit balance is too low);
- ``overflow``: 400, the prompt is too long for the context window;
- ``cut``: the stream starts, then the connection is dropped mid-way;
- ``reset``: the request is read, then the connection is dropped with no answer at all;
- ``hang``: the request is read and never answered.

Every request is recorded (method, path, body) in ``requests``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RETRY_AFTER = 7
OVERFLOW = "prompt is too long: 250000 tokens > 200000 maximum"
QUOTA = "You exceeded your current quota, please check your plan and billing details."
CREDIT = "Your credit balance is too low to access the Anthropic API."


class FakeModel:
    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.closing = threading.Event()
        model = self

        class Handler(_Handler):
            fake = model

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def model_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == "POST" and _dialect(r["path"])]

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _turns(body: Any) -> int:
    """How many assistant messages the request's conversation holds."""
    if not isinstance(body, dict):
        return 0
    items = body.get("messages") or body.get("input") or []
    return sum(1 for m in items if isinstance(m, dict) and m.get("role") == "assistant")


def _dialect(path: str) -> str | None:
    path = path.split("?", 1)[0]
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/chat/completions"):
        return "chat"
    return None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeModel
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._record(b"")
        self._plain(200, b"", head=True)

    def do_GET(self) -> None:
        self._record(b"")
        path = self.path.split("?", 1)[0]
        if path.endswith("/models"):
            body = {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
            self._json(200, body)
        else:
            self._plain(404, b"not found")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = self._record(raw)
        dialect = _dialect(self.path)
        if dialect is None:
            self._plain(404, b"not found")
            return
        mode = self.fake.mode
        if mode == "hang":
            self.fake.closing.wait()
            self.close_connection = True
            return
        if mode == "reset":
            self.connection.shutdown(2)  # no status line: what a dropped connection gives
            self.close_connection = True
            return
        if mode in ("429", "529", "503", "401", "overflow", "quota"):
            self._error(dialect, mode)
            return
        _STREAMS[dialect](self, f"answer {_turns(body) + 1}", cut=mode == "cut")

    # ----------------------------------------------------------------- helpers

    def _record(self, raw: bytes) -> Any:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self.fake.lock:
            self.fake.requests.append({"method": self.command, "path": self.path, "body": body,
                                       "headers": dict(self.headers)})  # fmt: skip
        return body

    def _plain(self, status: int, body: bytes, *, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, dialect: str, mode: str) -> None:
        status, etype, message = {
            "429": (429, "rate_limit_error", "Rate limit exceeded: too many requests"),
            "529": (529, "overloaded_error", "Overloaded"),
            "503": (503, "server_error", "The service is temporarily unavailable"),
            "401": (401, "authentication_error", "invalid x-api-key"),
            "overflow": (400, "invalid_request_error", OVERFLOW),
            "quota": (429, "insufficient_quota", QUOTA),
        }[mode]
        if mode == "quota" and dialect == "anthropic":
            status, etype, message = 400, "invalid_request_error", CREDIT
        headers = {"retry-after": str(RETRY_AFTER)} if mode == "429" else {}
        if dialect == "anthropic":
            body: dict[str, Any] = {"type": "error", "error": {"type": etype, "message": message}}
        else:
            code = {"overflow": "context_length_exceeded", "429": "rate_limit_exceeded",
                    "401": "invalid_api_key", "quota": "insufficient_quota"}.get(mode)  # fmt: skip
            body = {"error": {"message": message, "type": etype, "code": code}}
        self._json(status, body, headers)

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, name: str | None, data: Any) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {name}\n" if name else ""
        self.wfile.write(f"{head}data: {text}\n\n".encode())
        self.wfile.flush()

    def _cut(self) -> None:
        """Drop the connection mid-stream, as a failing proxy does."""
        self.wfile.flush()
        self.connection.shutdown(2)
        self.close_connection = True


def _delta(text: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}}  # fmt: skip


def _anthropic(h: _Handler, text: str, *, cut: bool) -> None:
    h._sse_start()
    msg = {"id": "msg_fake", "type": "message", "role": "assistant", "model": "fake-model",
           "content": [], "stop_reason": None, "stop_sequence": None,
           "usage": {"input_tokens": 11, "output_tokens": 1}}  # fmt: skip
    h._event("message_start", {"type": "message_start", "message": msg})
    h._event("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}})  # fmt: skip
    h._event("content_block_delta", _delta(text[:3]))
    if cut:
        h._cut()
        return
    h._event("content_block_delta", _delta(text[3:]))
    h._event("content_block_stop", {"type": "content_block_stop", "index": 0})
    h._event("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {"output_tokens": 5}})  # fmt: skip
    h._event("message_stop", {"type": "message_stop"})


def _responses(h: _Handler, text: str, *, cut: bool) -> None:
    h._sse_start()
    resp = {"id": "resp_fake", "object": "response", "status": "in_progress", "model": "fake-model",
            "output": []}  # fmt: skip
    h._event("response.created", {"type": "response.created", "response": resp})
    item = {"id": "msg_fake", "type": "message", "role": "assistant", "status": "in_progress",
            "content": []}  # fmt: skip
    h._event("response.output_item.added", {"type": "response.output_item.added",
                                            "output_index": 0, "item": item})  # fmt: skip
    h._event("response.output_text.delta", {"type": "response.output_text.delta",
                                            "item_id": "msg_fake", "output_index": 0,
                                            "content_index": 0, "delta": text[:3]})  # fmt: skip
    if cut:
        h._cut()
        return
    h._event("response.output_text.delta", {"type": "response.output_text.delta",
                                            "item_id": "msg_fake", "output_index": 0,
                                            "content_index": 0, "delta": text[3:]})  # fmt: skip
    done = {**item, "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
    h._event("response.output_item.done", {"type": "response.output_item.done",
                                           "output_index": 0, "item": done})  # fmt: skip
    usage = {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 16}  # fmt: skip
    h._event("response.completed", {"type": "response.completed",
                                    "response": {**resp, "status": "completed", "output": [done],
                                                 "usage": usage}})  # fmt: skip


def _chat(h: _Handler, text: str, *, cut: bool) -> None:
    h._sse_start()

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
        h._event(None, {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                        "created": 1, "model": "fake-model",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                        **extra})  # fmt: skip

    chunk({"role": "assistant", "content": text[:3]})
    if cut:
        h._cut()
        return
    chunk({"content": text[3:]})
    chunk({}, "stop")
    h._event(None, {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
                    "model": "fake-model", "choices": [],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 5,
                              "total_tokens": 16}})  # fmt: skip
    h._event(None, "[DONE]")


_STREAMS = {"anthropic": _anthropic, "responses": _responses, "chat": _chat}
