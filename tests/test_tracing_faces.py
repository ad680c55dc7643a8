"""Tracing on every face that runs (issue #30): ``tracer_provider=`` on ``hn.run``,
``run_sync``, ``resume``, ``replay``, ``ask``, ``sweep`` and agents' ``run``, the
process default ``hn.set_tracer_provider`` (never OpenTelemetry's global provider), a
run's spans exported from its stored rows when it ends (``store._traces.export_run``),
a sweep's runs nested under its span, a failed export that never fails a run, and no
opentelemetry imported without a provider. Spans are read with the SDK's in-memory
exporter."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import harnessnb as hn

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-tracing-0123456789abcdef"


class Traced:
    """A real SDK provider whose finished spans are kept in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def agent_spans(self) -> dict[str, ReadableSpan]:
        """The ``invoke_agent`` span of each run, by run id."""
        return {
            str(s.attributes["gen_ai.conversation.id"]): s
            for s in self.spans()
            if s.name.startswith("invoke_agent") and s.attributes
        }


@pytest.fixture(autouse=True)
def _no_process_default() -> Iterator[None]:
    hn.set_tracer_provider(None)
    yield
    hn.set_tracer_provider(None)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha")
    return folder


@pytest.fixture
def store(tmp_path: Path) -> Iterator[hn.Store]:
    opened = hn.Store(tmp_path / "runs.duckdb")
    yield opened
    opened.close()


def done() -> hn.ScriptedProvider:
    return hn.ScriptedProvider(["done"])


async def test_a_run_given_a_tracer_provider_exports_its_spans_when_it_ends(
    ws: Path, store: hn.Store
) -> None:
    traced = Traced()
    result = await hn.run(
        hn.TaskContract("t", ws), done(), store=store, tracer_provider=traced.provider
    )
    assert result.outcome is hn.RunOutcome.FINISHED
    assert list(traced.agent_spans()) == [result.run_id]
    untraced = await hn.run(hn.TaskContract("t", ws), done(), store=store)
    assert untraced.run_id not in traced.agent_spans()  # no provider, no spans


def shape(spans: list[ReadableSpan]) -> list[tuple[Any, ...]]:
    """Spans as values without their ids: name, kind, parent (by position), times,
    attributes, events and status, in start order."""
    ordered = sorted(spans, key=lambda s: (s.start_time or 0, s.name))
    at = {s.context.span_id: i for i, s in enumerate(ordered)}
    return [
        (
            s.name,
            s.kind,
            None if s.parent is None else at.get(s.parent.span_id, "outside"),
            s.start_time,
            s.end_time,
            dict(s.attributes or {}),
            [(e.name, e.timestamp, dict(e.attributes or {})) for e in s.events],
            (s.status.status_code, s.status.description),
        )
        for s in ordered
    ]


def test_a_live_runs_spans_equal_those_exported_later_from_its_store(
    ws: Path, store: hn.Store
) -> None:
    """The design's one mapping: a run traced live (a 429 retried, a tool call, content
    on) and the same run exported later by ``store.export_traces`` give the same spans
    but for their ids, so the live export runs after the run's end is committed."""
    busy = hn.ProviderError("busy", kind=hn.ProviderErrorKind.RATE_LIMITED, status=429)
    read = {"tool": "read_file", "args": {"path": "a.txt"}}
    live, later = Traced(), Traced()
    result = hn.run_sync(
        hn.TaskContract("t", ws),
        hn.ScriptedProvider([busy, read, "done"]),
        store=store,
        tracer_provider=live.provider,
        include_content=True,
    )
    assert result.outcome is hn.RunOutcome.FINISHED
    assert store.export_traces(later.provider, include_content=True) == 1
    names = [s.name.split(" ")[0] for s in live.spans()]
    assert sorted(names) == ["chat", "chat", "chat", "execute_tool", "invoke_agent"]
    assert shape(live.spans()) == shape(later.spans())


def test_run_sync_takes_a_tracer_provider(ws: Path, store: hn.Store) -> None:
    traced = Traced()
    result = hn.run_sync(
        hn.TaskContract("t", ws), done(), store=store, tracer_provider=traced.provider
    )
    assert list(traced.agent_spans()) == [result.run_id]


def test_the_process_default_is_used_replaced_and_cleared(ws: Path, store: hn.Store) -> None:
    first, second, own = Traced(), Traced(), Traced()
    contract = hn.TaskContract("t", ws)
    hn.set_tracer_provider(first.provider)
    a = hn.run_sync(contract, done(), store=store)
    hn.set_tracer_provider(second.provider)  # a setup cell run again: replaced, no error
    b = hn.run_sync(contract, done(), store=store)
    c = hn.run_sync(contract, done(), store=store, tracer_provider=own.provider)
    hn.set_tracer_provider(None)
    d = hn.run_sync(contract, done(), store=store)
    assert list(first.agent_spans()) == [a.run_id]
    assert list(second.agent_spans()) == [b.run_id]  # the run given its own went there
    assert list(own.agent_spans()) == [c.run_id]
    assert d.run_id not in {**first.agent_spans(), **second.agent_spans(), **own.agent_spans()}


def test_a_meter_provider_given_with_the_default_records_live_runs_metrics(
    ws: Path, store: hn.Store
) -> None:
    """``set_tracer_provider(tp, meter_provider=mp)``: each traced run records the GenAI
    client metrics of its attempts when it ends (its own provider's run too); set
    again without one, none more; something not a MeterProvider is refused."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    def durations() -> int:
        data = reader.get_metrics_data()
        points = [
            p.count
            for rm in (data.resource_metrics if data else [])
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "gen_ai.client.operation.duration"
            for p in m.data.data_points
        ]
        return sum(points)

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    traced, own = Traced(), Traced()
    contract = hn.TaskContract("t", ws)
    hn.set_tracer_provider(traced.provider, meter_provider=meters)
    hn.run_sync(contract, done(), store=store)
    assert durations() == 1  # the run's one attempt
    hn.run_sync(contract, done(), store=store, tracer_provider=own.provider)
    assert durations() == 2 and len(own.agent_spans()) == 1
    hn.set_tracer_provider(traced.provider)
    hn.run_sync(contract, done(), store=store)
    assert durations() == 2
    with pytest.raises(hn.ConfigError, match="MeterProvider"):
        hn.set_tracer_provider(traced.provider, meter_provider=object())
    meters.shutdown()


def test_the_global_opentelemetry_provider_is_never_set(ws: Path, store: hn.Store) -> None:
    from opentelemetry import trace

    before = trace.get_tracer_provider()
    hn.set_tracer_provider(Traced().provider)
    hn.run_sync(hn.TaskContract("t", ws), done(), store=store)
    assert trace.get_tracer_provider() is before


def test_something_not_a_tracer_provider_is_refused() -> None:
    with pytest.raises(hn.ConfigError, match="TracerProvider"):
        hn.set_tracer_provider("http://127.0.0.1:6006")  # type: ignore[arg-type]


def test_a_resumed_run_is_exported_when_it_ends_again(ws: Path, store: hn.Store) -> None:
    down = hn.ProviderError("down", kind=hn.ProviderErrorKind.SERVER, status=503)
    contract = hn.TaskContract("t", ws, max_retries=0)
    first = hn.run_sync(contract, hn.ScriptedProvider([down]), store=store)
    assert first.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    traced = Traced()
    again = hn.resume_sync(first.run_id, done(), store=store, tracer_provider=traced.provider)
    assert again.outcome is hn.RunOutcome.FINISHED
    (span,) = traced.agent_spans().values()
    assert span.attributes is not None
    assert span.attributes["gen_ai.conversation.id"] == first.run_id
    assert span.attributes["harnessnb.outcome"] == "finished"
    # Exported again in full (README "Tracing"): the first leg's failed attempt too,
    # and the resume as an event of the run's span.
    chats = [s for s in traced.spans() if s.name.startswith("chat")]
    kinds = [(s.attributes or {}).get("error.type") for s in chats]
    assert kinds == ["server", None]
    assert "harnessnb.resume" in [e.name for e in span.events]


def test_a_replay_is_exported_from_the_store_it_is_recorded_in(ws: Path, store: hn.Store) -> None:
    recorded = hn.run_sync(hn.TaskContract("t", ws), hn.Record(done(), store), store=store)
    traced = Traced()
    replayed = hn.replay_sync(recorded.run_id, store, tracer_provider=traced.provider)
    assert replayed.outcome is hn.RunOutcome.FINISHED
    assert list(traced.agent_spans()) == [replayed.run_id]


def test_ask_takes_a_tracer_provider(store: hn.Store) -> None:
    traced = Traced()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    answer = hn.ask_sync(
        hn.ScriptedProvider(['{"n": 4}']),
        "2+2?",
        output=schema,
        output_mode="prompted",
        store=store,
        tracer_provider=traced.provider,
    )
    assert answer == {"n": 4}
    (run_id,) = traced.agent_spans()
    assert store.get_run(run_id) is not None


def test_a_sweeps_runs_nest_under_one_sweep_span(ws: Path, store: hn.Store) -> None:
    traced = Traced()
    result = hn.sweep_sync(
        ["a", "b", "c"], [done()], workspace=ws, store=store, tracer_provider=traced.provider
    )
    runs = traced.agent_spans()
    assert sorted(runs) == sorted(result.runs["run_id"])
    (sweep,) = [s for s in traced.spans() if s.parent is None]
    assert sweep.name.startswith("invoke_workflow") and result.sweep_id in sweep.name
    assert sweep.context is not None
    for span in runs.values():
        assert span.parent is not None
        assert (span.parent.trace_id, span.parent.span_id) == (
            sweep.context.trace_id,
            sweep.context.span_id,
        )


class Flushes(TracerProvider):
    """A real SDK provider that notes, at each flush, whether an event loop was running
    in the thread that flushed (DuckDB reads and a flush must not block the loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.on_loop: list[bool] = []

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        try:
            asyncio.get_running_loop()
            self.on_loop.append(True)
        except RuntimeError:
            self.on_loop.append(False)
        return super().force_flush(timeout_millis)


async def test_a_runs_and_a_sweeps_export_and_flush_run_off_the_event_loop(
    ws: Path, store: hn.Store
) -> None:
    traced = Flushes()
    await hn.run(hn.TaskContract("t", ws), done(), store=store, tracer_provider=traced)
    await hn.sweep(["a", "b"], [done()], workspace=ws, store=store, tracer_provider=traced)
    # One flush per run (three) and the sweep span's, at its end: none on the loop.
    assert traced.on_loop == [False] * 4


async def test_a_sweep_span_whose_sweep_raises_ends_an_error_flushed_off_the_loop() -> None:
    from opentelemetry.trace import StatusCode

    from harnessnb.loop._tracing import sweep_traced

    traced = Flushes()
    exporter = InMemorySpanExporter()
    traced.add_span_processor(SimpleSpanProcessor(exporter))
    with pytest.raises(ValueError, match="boom"):
        async with sweep_traced(traced, "sw1") as parent:
            assert parent is not None
            raise ValueError("boom")
    (span,) = exporter.get_finished_spans()
    assert span.name == "invoke_workflow sweep sw1"
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "ValueError"
    assert traced.on_loop == [False]


def test_a_sweep_given_a_callable_builds_its_provider_once(ws: Path, store: hn.Store) -> None:
    traced, built = Traced(), []

    def build() -> TracerProvider:  # what a Dask worker is given
        built.append(1)
        return traced.provider

    result = hn.sweep_sync(["a", "b"], [done()], workspace=ws, store=store, tracer_provider=build)
    assert sorted(traced.agent_spans()) == sorted(result.runs["run_id"])
    assert built == [1]


def test_runs_after_a_sweep_are_not_nested_under_it(ws: Path, store: hn.Store) -> None:
    traced = Traced()
    hn.sweep_sync(["a"], [done()], workspace=ws, store=store, tracer_provider=traced.provider)
    alone = hn.run_sync(
        hn.TaskContract("t", ws), done(), store=store, tracer_provider=traced.provider
    )
    assert traced.agent_spans()[alone.run_id].parent is None


async def test_a_cancelled_run_is_exported_cancelled(ws: Path, store: hn.Store) -> None:
    traced, asked = Traced(), asyncio.Event()

    class Hangs(hn.ScriptedProvider):
        async def complete(self, *args: Any, **kwargs: Any) -> Any:
            asked.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(
        hn.run(hn.TaskContract("t", ws), Hangs(["x"]), store=store, tracer_provider=traced.provider)
    )
    await asked.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (span,) = traced.agent_spans().values()
    assert span.attributes is not None and span.attributes["harnessnb.outcome"] == "cancelled"


class Broken:
    """A tracer provider whose backend fails, saying a key in its message."""

    def __init__(self) -> None:
        self.asked = 0

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        self.asked += 1
        raise RuntimeError(f"collector refused Authorization: Bearer {KEY}")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def test_a_failed_export_never_fails_a_run_and_is_logged_once_scrubbed(
    ws: Path, store: hn.Store, caplog: pytest.LogCaptureFixture
) -> None:
    from harnessnb.rules._secrets import register

    register(KEY)  # as a provider's key is
    broken = Broken()
    with caplog.at_level(logging.DEBUG, logger="harnessnb.tracing"):
        one = hn.run_sync(hn.TaskContract("t", ws), done(), store=store, tracer_provider=broken)
        two = hn.run_sync(hn.TaskContract("t", ws), done(), store=store, tracer_provider=broken)
    assert (one.outcome, two.outcome) == (hn.RunOutcome.FINISHED, hn.RunOutcome.FINISHED)
    assert broken.asked == 2  # both runs tried
    lines = [r.getMessage() for r in caplog.records if r.name == "harnessnb.tracing"]
    assert len(lines) == 1 and one.run_id in lines[0] and "RuntimeError" in lines[0]
    assert KEY not in caplog.text


def test_without_a_provider_no_opentelemetry_is_imported(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        import harnessnb as hn
        from harnessnb.demo._model import make_demo_workspace
        ws = make_demo_workspace(sys.argv[1])
        result = hn.run_sync(hn.TaskContract("say hello", ws), hn.ScriptedProvider(["done"]),
                             store=sys.argv[2])
        print(result.outcome.value, sorted(m for m in sys.modules if "opentelemetry" in m))
        """
    )
    done_ = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "ws"), str(tmp_path / "s.duckdb")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done_.returncode == 0, done_.stderr
    assert done_.stdout.split() == ["finished", "[]"]


SETUP_CELL = """\
import harnessnb as hn
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
hn.set_tracer_provider(provider)
"""


def test_a_notebook_cell_that_sets_up_tracing_can_be_run_again(tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    ws = tmp_path / "ws"
    ws.mkdir()
    run_cell = (
        f"result = hn.run_sync(hn.TaskContract('t', {str(ws)!r}), hn.ScriptedProvider(['done']),"
        f" store={str(tmp_path / 'runs.duckdb')!r})"
    )
    check = (
        "print(len(first.get_finished_spans()), "
        "[s.attributes['gen_ai.conversation.id'] for s in exporter.get_finished_spans()"
        " if s.name.startswith('invoke_agent')] == [result.run_id])"
    )
    cells = [SETUP_CELL, "first = exporter", SETUP_CELL, run_cell, check]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(nb, kernel_name="python3", timeout=60, allow_errors=True)
    client.execute(cwd=str(tmp_path))
    outputs = [[o for o in c.outputs] for c in nb.cells]
    assert [o for out in outputs for o in out if o.output_type == "error"] == []
    assert outputs[0] == [] and outputs[2] == []  # run again: no warning, no error
    (printed,) = outputs[4]
    assert printed.text == "0 True\n"  # the second setup's provider got the run


def test_a_coding_agent_clis_run_is_exported_when_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.agents.agent_helpers import CLIs

    clis = CLIs(tmp_path)  # the stand-in CLIs the agents' tests drive
    monkeypatch.setenv("PATH", f"{clis.bin}:{os.environ.get('PATH', '')}")
    monkeypatch.setenv("HOME", str(clis.home))
    clis.scenario(mode="ok", text="a.txt says hello")
    traced = Traced()
    try:
        result = hn.agents.run_sync(
            hn.agents.driver("claude"),
            "read a.txt",
            clis.ws,
            store=clis.store,
            tracer_provider=traced.provider,
        )
    finally:
        clis.store.close()
    assert result.outcome is hn.RunOutcome.FINISHED
    assert list(traced.agent_spans()) == [result.run_id]


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1: keeps each POST body sent to /v1/traces."""

    def __init__(self) -> None:
        import http.server
        import threading

        bodies: list[bytes] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                bodies.append(self.rfile.read(size))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.bodies = bodies
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> list[Any]:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        found = []
        for body in self.bodies:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    found += list(scope.spans)
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_readmes_batch_exporter_delivers_a_run_when_it_ends_without_shutdown(
    ws: Path, store: hn.Store
) -> None:
    """README "Tracing": a BatchSpanProcessor with the official OTLP/HTTP exporter, as a
    long-lived kernel keeps it (never shut down), has sent a run's spans by the time the
    run returns: the run's end flushes them. No key is in the bytes that arrived."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from harnessnb.chaos import ChaosServer

    receiver = Receiver()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.url)))
    try:
        with ChaosServer() as srv:
            hn.set_tracer_provider(provider)
            model = hn.OpenAI("gpt-test", api_key=KEY, base_url=srv.openai_url)
            result = hn.run_sync(hn.TaskContract("say hi", ws, max_steps=1), model, store=store)
        ids = [
            a.value.string_value
            for span in receiver.spans()
            for a in span.attributes
            if a.key == "gen_ai.conversation.id"
        ]
        assert result.run_id in ids  # arrived before any shutdown or exit
        assert all(KEY.encode() not in body for body in receiver.bodies)
    finally:
        provider.shutdown()
        receiver.close()


def _received_ids(receiver: Receiver) -> list[str]:
    return [
        a.value.string_value
        for span in receiver.spans()
        for a in span.attributes
        if a.key == "gen_ai.conversation.id"
    ]


def test_the_commands_otel_endpoint_sends_the_runs_spans_before_it_exits(tmp_path: Path) -> None:
    from harnessnb.demo._model import make_demo_workspace

    ws = make_demo_workspace(tmp_path / "ws")
    receiver = Receiver()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    try:
        done_ = subprocess.run(
            [sys.executable, "-m", "harnessnb", "run", "say hello", "--workspace", str(ws),
             "--provider", "demo", "--max-steps", "1", "--store", "s.duckdb",
             "--otel-endpoint", receiver.url],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done_.returncode == 0, done_.stdout + done_.stderr
        with hn.Store(tmp_path / "s.duckdb") as store:
            (run_id,) = store.runs()["run_id"].tolist()
        assert _received_ids(receiver) == [run_id]
    finally:
        receiver.close()


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/v1/traces", "127.0.0.1:6006", "http:///x"])
def test_an_otel_endpoint_that_is_no_http_url_is_a_usage_error(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from harnessnb import cli

    with pytest.raises(SystemExit) as info:
        cli.main(["run", "x", "--workspace", ".", "--otel-endpoint", url])
    assert info.value.code == 2
    assert "is not an http(s) URL" in capsys.readouterr().err


def test_a_dask_sweeps_runs_nest_under_its_span_from_the_workers(tmp_path: Path, ws: Path) -> None:
    """On a real LocalCluster (a worker process): the worker builds its provider from
    the pickled factory (``--otel-endpoint``'s), and its runs' spans, sent from there,
    have the client's sweep span as their parent."""
    import functools

    distributed = pytest.importorskip("distributed")
    from harnessnb.launch._otel import otlp_provider

    receiver = Receiver()
    cluster = distributed.LocalCluster(
        n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None
    )
    client = distributed.Client(cluster)
    try:
        result = hn.sweep_sync(
            ["a", "b"],
            [hn.ScriptedProvider(["done"])],
            workspace=ws,
            executor=client,
            shards=tmp_path / "shards",
            tracer_provider=functools.partial(otlp_provider, receiver.url),
        )
        spans = receiver.spans()
    finally:
        client.close()
        cluster.close()
        receiver.close()
    (sweep,) = [s for s in spans if s.name.startswith("invoke_workflow")]
    runs = {
        a.value.string_value: s
        for s in spans
        for a in s.attributes
        if a.key == "gen_ai.conversation.id"
    }
    assert sorted(runs) == sorted(result.runs["run_id"])
    for span in runs.values():
        assert (span.trace_id, span.parent_span_id) == (sweep.trace_id, sweep.span_id)


def test_a_tracer_provider_object_cannot_go_to_dask_workers(ws: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    client = distributed.Client(processes=False, n_workers=1, dashboard_address=None)
    with client, pytest.raises(hn.ConfigError, match="callable that builds"):
        hn.sweep_sync(
            ["a"],
            [done()],
            workspace=ws,
            executor=client,
            shards=tmp_path / "shards",
            tracer_provider=Traced().provider,
        )


def test_the_magics_otel_endpoint_sends_the_runs_spans(
    shell: Any, srv: Any, ws: Path, tmp_path: Path
) -> None:
    """``%harness run ... --otel-endpoint URL`` in a real IPython shell (the suite's
    ``shell`` and chaos ``srv`` fixtures): the run's span reaches the receiver."""
    receiver = Receiver()
    line = (
        f"run say hi --provider openai --base-url {srv.openai_url} --workspace {ws} "
        f"--store {tmp_path / 'runs.duckdb'} --otel-endpoint {receiver.url} --out R --quiet"
    )
    try:
        shell.run_line_magic("harness", line)
        result = shell.user_ns["R"]
        assert result.outcome is hn.RunOutcome.FINISHED
        assert _received_ids(receiver) == [result.run_id]
    finally:
        receiver.close()
