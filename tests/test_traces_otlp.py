"""A run's spans over OTLP/HTTP with the official exporter, to a receiver on 127.0.0.1
in this test; what arrived decoded with opentelemetry-proto: the span tree, and no
provider key in any byte, even one a store file held unscrubbed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import duckdb
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import harnessnb as hn
from harnessnb import FakeClock
from harnessnb.chaos import ChaosServer, Fault
from harnessnb.providers import _http
from harnessnb.rules._secrets import REDACTED
from harnessnb.store._traces import export_run
from tests.files_helpers import folder

KEY = "sk-otlp-test-" + "z" * 32


class Receiver:
    """An OTLP/HTTP trace receiver on loopback: every body POSTed to /v1/traces."""

    def __init__(self) -> None:
        bodies: list[bytes] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(size)
                if self.path == "/v1/traces":
                    bodies.append(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.bodies = bodies
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def spans(self) -> list[Span]:
        out: list[Span] = []
        for body in self.bodies:
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    out.extend(scope.spans)
        return out


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture(autouse=True)
async def _clients() -> Any:
    yield
    await _http.aclose_client()


def attrs(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value") or "string_value")
    return out


async def test_spans_over_otlp_http_decode_to_the_tree_and_carry_no_key(
    tmp_path: Path, receiver: Receiver
) -> None:
    ws = folder(tmp_path / "ws", {"a.txt": "alpha\n"})
    path = tmp_path / "runs.duckdb"
    with ChaosServer() as srv:
        srv.push(Fault.status(503))
        store = hn.Store(path)
        # A model with no key of ours: the run's rows hold none.
        provider = hn.OpenAI("m", api_key="sk-other", base_url=srv.openai_url)
        result = await hn.run(hn.TaskContract("read a.txt", ws), provider, store=store,
                              clock=FakeClock())  # fmt: skip
        store.close()
    # A store written where KEY was not known (another process, an older harnessnb): it
    # holds the key in an attempt's error, the task and the conversation, unscrubbed.
    leak = f"upstream said: key {KEY} is over quota"
    con = duckdb.connect(str(path))
    con.execute("UPDATE attempts SET error = ? WHERE run_id = ? AND kind IS NOT NULL",
                [leak, result.run_id])  # fmt: skip
    con.execute("UPDATE run_rows SET task = ? WHERE run_id = ?", [leak, result.run_id])
    con.execute("UPDATE steps SET checkpoint = replace(checkpoint, 'read a.txt', ?)", [leak])
    con.close()
    # This process knows KEY: a provider made with it registers it with the scrubber.
    hn.OpenAI("m", api_key=KEY, base_url="http://127.0.0.1:9/v1")

    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint)))
    with hn.Store(path) as store:
        export_run(store, result.run_id, tp, include_content=True)  # flushed: sent now
    tp.shutdown()

    assert receiver.bodies, "nothing arrived"
    assert all(KEY.encode() not in body for body in receiver.bodies)
    assert any(REDACTED.encode() in body for body in receiver.bodies)
    spans = receiver.spans()
    (agent,) = [s for s in spans if s.name == "invoke_agent harnessnb"]
    chats = sorted((s for s in spans if s.name == "chat m"), key=lambda s: s.start_time_unix_nano)
    assert len(spans) == 3 and len(chats) == 2
    assert all(c.parent_span_id == agent.span_id and c.trace_id == agent.trace_id for c in chats)
    assert agent.kind == Span.SPAN_KIND_INTERNAL and agent.parent_span_id == b""
    assert all(c.kind == Span.SPAN_KIND_CLIENT for c in chats)
    failed = attrs(chats[0])
    assert failed["error.type"] == "server" and failed["http.response.status_code"] == 503
    assert chats[0].status.code == Status.STATUS_CODE_ERROR
    assert "upstream said: key" in chats[0].status.message and REDACTED in chats[0].status.message
    assert [e.name for e in chats[0].events] == ["harnessnb.retry"]
    assert attrs(agent)["gen_ai.conversation.id"] == result.run_id
    assert REDACTED in attrs(agent)["gen_ai.input.messages"]
    assert "upstream said" in attrs(chats[1])["gen_ai.input.messages"]
