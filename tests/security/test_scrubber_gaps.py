"""The scrubber's gaps an attack round found (issue 25, item 8), each closed.

A key passed in ``headers=`` or as the base URL's user name, a key spelled with lower-case
percent escapes or JSON's ``\\/``, a secret in the task column, a secret at the cut of the
live progress tail or split across two streamed pieces, the HTTP library's DEBUG records,
and ``on_event`` events: each is planted and looked for, in every spelling, where a person
or a file could see it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosServer, Fault, Reply
from harnessnb.events import DeltaEvent, FinishedEvent, ToolCallEvent
from harnessnb.loop._events import DELTA_TAIL, EventSink, TextDeltas
from harnessnb.rules import _secrets

# URL-safe, so it can ride in a base URL's user name; chunks no id or hash contains.
KEY = "hnQZWXheaderVRTLkeyPJMK"
ENV_KEY = "envQZWXtokenVRTLvaluePJMK"
CHUNKS = ("QZWX", "VRTL", "PJMK")


def assert_clean(*texts: Any) -> None:
    for text in texts:
        shown = text if isinstance(text, str) else json.dumps(text, default=str)
        for chunk in CHUNKS:
            assert chunk not in shown, f"{chunk!r} leaked in: {shown[:2000]}"


def error_surfaces(err: hn.HarnessError) -> list[str]:
    bundle = err._repr_mimebundle_()
    return [str(err), repr(err), json.dumps(err.to_dict()), bundle["text/plain"],
            bundle["text/html"], *err._render_traceback_()]  # fmt: skip


# ------------------------------------------------ keys the provider was handed


@pytest.mark.parametrize(
    ("header", "value"),
    [("X-Api-Key", KEY), ("Authorization", f"Bearer {KEY}"), ("X-Custom-Auth", KEY)],
)
async def test_a_key_passed_in_headers_is_scrubbed_when_the_server_echoes_it(
    header: str, value: str
) -> None:
    with ChaosServer(seed=0) as srv:
        # The key alone, as a server that quotes the credential it refused would echo it.
        srv.push(Fault.status(401, body={"error": {"message": f"invalid credential {KEY}"}}))
        provider = hn.OpenAI("m", base_url=srv.openai_url, headers={header: value})
        with pytest.raises(hn.ProviderError) as caught:
            await provider.complete([{"role": "user", "content": "hi"}])
    assert caught.value.kind is hn.ProviderErrorKind.AUTH
    assert "[redacted]" in caught.value.message
    assert_clean(*error_surfaces(caught.value), repr(provider))


def test_an_ordinary_header_is_not_treated_as_a_secret() -> None:
    hn.OpenAI("m", base_url="http://127.0.0.1:9/v1", headers={"X-Title": "harnessnbtitle"})
    assert _secrets.scrub("the harnessnbtitle app") == "the harnessnbtitle app"


async def test_a_key_as_the_base_urls_user_name_is_scrubbed_when_echoed() -> None:
    with ChaosServer(seed=0) as srv:
        srv.push(Fault.status(403, body={"error": {"message": f"user {KEY} is not allowed"}}))
        url = srv.openai_url.replace("http://", f"http://{KEY}@")
        provider = hn.OpenAI("m", base_url=url)
        with pytest.raises(hn.ProviderError) as caught:
            await provider.complete([{"role": "user", "content": "hi"}])
    assert "[redacted]" in caught.value.message
    assert_clean(*error_surfaces(caught.value), repr(provider))


# ------------------------------------------------ spellings


@pytest.mark.parametrize(
    "spelling",
    [
        quote("a/b+c=d" + KEY, safe=""),  # upper-case escapes, as quote writes them
        re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), quote("a/b+c=d" + KEY, safe="")),
        "a%2Fb%2bc%3dd" + KEY,  # mixed case
        json.dumps("a/b+c=d" + KEY)[1:-1].replace("/", "\\/"),  # JSON's escaped solidus
    ],
)
def test_every_percent_and_json_escaping_of_a_key_is_removed(spelling: str) -> None:
    secret = "a/b+c=d" + KEY
    _secrets.register(secret)
    assert KEY in spelling
    out = _secrets.scrub(f"before {spelling} after")
    assert out == "before [redacted] after"


# ------------------------------------------------ the task column


def test_the_task_column_keeps_no_secret_environment_value(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HN_GAPS_API_KEY", ENV_KEY)
    path = tmp_path / "runs.duckdb"
    with hn.Store(path) as store:
        task_text = f"deploy with {ENV_KEY}"
        provider = hn.ScriptedProvider(["ok"])
        result = hn.run_sync(hn.TaskContract(task_text, ws), provider, store=store)
        runs = store.runs()
        task = store.sql("SELECT task FROM run_rows")["task"].tolist()
    assert result.outcome is hn.RunOutcome.FINISHED
    assert runs["task"].tolist() == ["deploy with [redacted]"]
    assert task == ["deploy with [redacted]"]
    assert_clean(runs.to_csv())


# ------------------------------------------------ streamed text and its cut


class Collect:
    def __init__(self) -> None:
        self.events: list[hn.RunEvent] = []

    def __call__(self, event: hn.RunEvent) -> None:
        self.events.append(event)


class Ticks:
    """A clock that moves a whole throttle interval at every read: every piece flushes."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@dataclasses.dataclass
class Stream:
    seen: Collect
    deltas: TextDeltas


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> Stream:
    """Streamed text of a run whose environment holds the key, its events collected."""
    monkeypatch.setenv("HN_GAPS_TOKEN", ENV_KEY)
    seen = Collect()
    return Stream(seen, TextDeltas(EventSink(seen).emit, clock=Ticks()))


def texts(events: list[hn.RunEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, DeltaEvent)]


async def test_a_key_split_across_two_streamed_pieces_reaches_no_event(
    stream: Stream,
) -> None:
    seen, deltas = stream.seen, stream.deltas
    half = len(ENV_KEY) // 2
    for piece in ["the token is ", ENV_KEY[:half], ENV_KEY[half:], " and more words", " end"]:
        await deltas(piece)
    await deltas.flush()
    said = texts(seen.events)
    assert "".join(said) == "the token is [redacted] and more words end"
    assert_clean(*said)


async def test_the_tail_of_a_long_stream_is_cut_between_words_never_inside_a_key(
    stream: Stream,
) -> None:
    seen, deltas = stream.seen, stream.deltas
    # One piece longer than the tail, with the key where the 400-character cut falls.
    after = "x " * ((DELTA_TAIL - 10) // 2)
    text = "start " + ENV_KEY + " " + after
    assert len(text) - DELTA_TAIL in range(6, 6 + len(ENV_KEY))  # the raw cut is in the key
    await deltas(text)
    await deltas.flush()
    shown = "".join(texts(seen.events))
    # scrubbed whole first, then cut: the tail of the scrubbed text, no part of the key
    assert shown == ("start [redacted] " + after)[-DELTA_TAIL:]
    assert_clean(shown)


async def test_the_progress_tails_show_no_part_of_a_key_at_their_cut(
    stream: Stream,
) -> None:
    # The widget's and the terminal's own tails of many deltas, cut at DELTA_TAIL.
    from harnessnb.launch._words import streamed_words
    from harnessnb.notebook._progress import ProgressState

    seen, deltas = stream.seen, stream.deltas
    await deltas("the token " + ENV_KEY)
    await deltas(" " + "y" * (DELTA_TAIL - 12) + " ")
    await deltas.flush()
    state = ProgressState()
    for event in seen.events:
        state.fold(event, 0.0)
    assert_clean(state.streamed, streamed_words(state.streamed), state.text(1.0))


# ------------------------------------------------ on_event


def test_on_event_gets_scrubbed_tool_arguments_and_text_unless_asked_for_raw(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HN_GAPS_TOKEN", ENV_KEY)
    script: list[Any] = [
        {"tool": "write_file", "args": {"path": "NOTES.md", "content": f"key {ENV_KEY}\n"}},
        f"wrote the key {ENV_KEY}",
    ]
    policy = hn.Policy.default().layer("app").allow_write("NOTES.md")
    scrubbed, raw = Collect(), Collect()
    for sink in (scrubbed, hn.unscrubbed_events(raw)):
        hn.run_sync(hn.TaskContract("note it", ws), hn.ScriptedProvider(list(script)),
                    store=hn.Store(":memory:"), policy=policy, on_event=sink)  # fmt: skip
    tool_events = [e for e in scrubbed.events if isinstance(e, ToolCallEvent)]
    assert tool_events and "[redacted]" in json.dumps(dataclasses.asdict(tool_events[0]))
    assert_clean(*[json.dumps(dataclasses.asdict(e), default=str) for e in scrubbed.events])
    assert ENV_KEY in json.dumps([dataclasses.asdict(e) for e in raw.events], default=str)
    # kinds and outcomes keep their values (an enum is no secret to scrub)
    finished = next(e for e in scrubbed.events if isinstance(e, FinishedEvent))
    assert finished.outcome == "finished"


# ------------------------------------------------ the HTTP library's DEBUG records


async def test_http_library_debug_records_of_an_echoed_key_are_scrubbed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def echo(_: Any) -> Reply:
        return Reply(text="hi", headers={"x-echo": KEY})

    with ChaosServer(responder=echo) as srv:
        provider = hn.OpenAI("m", base_url=srv.openai_url, headers={"X-Api-Key": KEY})
        with caplog.at_level(logging.DEBUG):
            await provider.complete([{"role": "user", "content": "hi"}], stream=False)
    names = {r.name for r in caplog.records}
    assert any(n.startswith("httpcore2") for n in names), names  # the records were there
    assert "[redacted]" in caplog.text
    assert_clean(caplog.text)


def test_every_logger_of_the_http_library_has_the_scrub_filter() -> None:
    import httpcore2
    import httpx2

    import harnessnb.providers._http  # noqa: F401  (installs the filters)

    names = set()
    for package in (httpx2, httpcore2):
        root = Path(package.__file__).parent
        for f in root.rglob("*.py"):
            names.update(re.findall(r'getLogger\("([\w.]+)"\)', f.read_text()))
    assert names
    for name in sorted(names):
        filters = logging.getLogger(name).filters
        assert any(type(f).__name__ == "_ScrubLogs" for f in filters), name
