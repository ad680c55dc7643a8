"""Secrets never leave: one scrubber on every outward surface (issue 14, part 2).

Each test plants a canary secret where an attacker (or an unlucky config) would, runs
the real thing (real HTTP against the chaos server, real runs on a real store file, the
``harnessnb`` command as a subprocess) and looks for the canary, and its stripped,
JSON-escaped and URL-encoded spellings, in everything a person or a file could see.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosServer, Fault, Reply
from harnessnb.rules import _secrets

# Characters that JSON and URLs spell differently, and chunks no run id or hash contains.
CANARY = 'hnQZWX/canary+VRTL"PJMK=='
ENV_CANARY = "envQZWX-secret-VRTL-PJMK"
CHUNKS = ("QZWX", "VRTL", "PJMK")


def spellings(secret: str) -> list[str]:
    s = secret.strip()
    return [secret, s, json.dumps(s)[1:-1], quote(s, safe=""), quote_plus(s), *CHUNKS]


def assert_clean(*texts: Any, secret: str = CANARY) -> None:
    for text in texts:
        shown = text if isinstance(text, str) else json.dumps(text, default=str)
        for form in spellings(secret):
            assert form not in shown, f"{form!r} leaked in: {shown[:2000]}"


def error_surfaces(err: BaseException) -> list[str]:
    """Everything an error shows: str, repr, to_dict, both cards, short and full tracebacks."""
    out = [str(err), repr(err), "".join(traceback.format_exception(err))]
    if isinstance(err, hn.HarnessError):
        bundle = err._repr_mimebundle_()
        out += [json.dumps(err.to_dict()), bundle["text/plain"], bundle["text/html"]]
        out += err._render_traceback_()
    return out


def result_surfaces(result: Any) -> list[str]:
    bundle = result._repr_mimebundle_()
    out = [repr(result), result.summary_text(), bundle["text/plain"], bundle["text/html"]]
    if result.error is not None:
        out += error_surfaces(result.error)
    return out


def store_surfaces(path: Path) -> list[str]:
    """Every table of a closed store file as text, and the files' raw bytes."""
    with hn.Store(path) as store:
        tables = store.sql("SELECT table_name FROM information_schema.tables")["table_name"]
        dumps = [store.sql(f'SELECT * FROM "{t}"').to_csv() for t in tables]
    raw = [p.read_bytes().decode("latin-1") for p in path.parent.glob(path.name + "*")]
    return dumps + raw


def contract(ws: Path, **kw: Any) -> hn.TaskContract:
    kw.setdefault("retry", hn.RetryPolicy(base_s=0.01, cap_s=0.01))
    return hn.TaskContract("say hi", ws, **kw)


# ------------------------------------------------------------------ the scrubber


def test_a_registered_key_is_removed_in_every_spelling() -> None:
    _secrets.register(CANARY + "\n")
    text = " | ".join([CANARY + "\n", json.dumps(CANARY + "\n"), quote(CANARY), quote_plus(CANARY),
                       repr((CANARY + "\n").encode())])  # fmt: skip
    scrubbed = _secrets.scrub(text)
    assert_clean(scrubbed)
    assert scrubbed.count("[redacted]") == 5


def test_secret_named_environment_values_are_read_when_scrubbing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HN_TEST_TOKEN", ENV_CANARY)
    monkeypatch.setenv("HN_SHORT_PASSWORD", "short")  # under 8 characters: kept
    monkeypatch.setenv("HN_TEST_MODEL", "model-name-kept")  # not a secret's name
    text = f"a {ENV_CANARY} b short c model-name-kept"
    assert _secrets.scrub(text) == "a [redacted] b short c model-name-kept"
    assert _secrets.is_secret_name("db_password_main") and _secrets.is_secret_name("GH_TOKEN")
    assert not _secrets.is_secret_name("KEYBOARD")


@pytest.mark.parametrize(
    ("name", "secret"),
    [("OPENAI_API_KEY", True), ("GH_TOKEN", True), ("db_password_main", True),
     ("AWS_SECRET_ACCESS_KEY", True), ("AWS_BEARER_TOKEN_BEDROCK", True),
     ("ANTHROPIC_AUTH_TOKEN", True), ("NPM_CONFIG__AUTH", True), ("MY_APIKEY", True),
     ("GITHUB_APP_CREDENTIALS", True), ("SESSION_COOKIE", True), ("SECRET_KEY_BASE", True),
     ("KEYBOARD", False), ("KEYBOARD_LAYOUT", False), ("TOKENIZERS_PARALLELISM", False),
     ("SSH_AUTH_SOCK", False), ("SSL_KEY_FILE", False), ("HF_TOKEN_PATH", False),
     ("AUTHOR", False), ("OPENAI_BASE_URL", False), ("HOME", False), ("", False)],
)  # fmt: skip
def test_a_secret_name_is_one_with_a_credentials_word(name: str, secret: bool) -> None:
    # The one rule: the scrubber's reading of the environment and a CLI's variables.
    assert _secrets.is_secret_name(name) is secret


def test_a_secret_named_variable_with_the_word_inside_is_scrubbed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", ENV_CANARY)
    assert _secrets.scrub(f"token {ENV_CANARY} used") == "token [redacted] used"


def test_token_shapes_go_with_scrub_but_not_with_scrub_values() -> None:
    text = "Authorization: Bearer abc.def-123 and sk-proj-abcdefgh12345"
    assert _secrets.scrub(text) == "Authorization: Bearer [redacted] and sk-proj-[redacted]"
    assert _secrets.scrub_values(text) == text
    # A Google (Gemini) key never registered here: its shape is AIza and 35 more.
    key = "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
    assert _secrets.scrub(f"x-goog-api-key: {key}.") == "x-goog-api-key: AIza[redacted]."
    assert _secrets.scrub("AIza is a prefix; AIzaShort is no key") == (
        "AIza is a prefix; AIzaShort is no key"
    )


def test_log_records_and_their_tracebacks_are_scrubbed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HN_TEST_API_KEY", ENV_CANARY)
    with caplog.at_level(logging.DEBUG, logger="harnessnb"):
        try:
            raise ValueError(f"key {ENV_CANARY}")
        except ValueError:
            logging.getLogger("harnessnb.tools").exception("failed with %s", ENV_CANARY)
    assert caplog.records
    assert_clean(caplog.text, secret=ENV_CANARY)
    assert "[redacted]" in caplog.text


def test_every_logger_harnessnb_logs_through_scrubs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Filters do not follow propagation: a logger without its own filter (a sweep's
    # "on_run raised" traceback, say) would hand its record to the handlers unscrubbed.
    import re
    from pathlib import Path

    import harnessnb

    root = Path(harnessnb.__file__).parent
    names = {m for f in root.rglob("*.py")
             for m in re.findall(r'getLogger\("([\w.]+)"\)', f.read_text())}  # fmt: skip
    assert {"harnessnb", "harnessnb.sweep", "harnessnb.prices"} <= names
    monkeypatch.setenv("HN_TEST_API_KEY", ENV_CANARY)
    for name in sorted(names):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="harnessnb"):
            logging.getLogger(name).warning("failed with %s", ENV_CANARY)
        assert caplog.records, name
        assert ENV_CANARY not in caplog.text, name


def test_progress_words_and_cards_of_any_text_are_scrubbed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harnessnb.events import ToolCallEvent
    from harnessnb.launch._words import event_words
    from harnessnb.rules._html import escape, text_block

    monkeypatch.setenv("HN_TEST_SECRET", ENV_CANARY)
    # Long enough that the line is cut inside the secret, had it not been scrubbed first.
    args = {"argv": ["curl", "-H", f"X-Deploy: {ENV_CANARY}", "https://example.invalid/x"]}
    event = ToolCallEvent(run_id="run_1", step=1, tool="run_command", args=args, status="ok")
    line = event_words(event)
    assert line is not None and "[redacted]" in line
    assert_clean(line, escape(ENV_CANARY), text_block(f"x {ENV_CANARY}"), secret=ENV_CANARY)


# ------------------------------------------------------- a key read from a file


def test_an_api_key_of_only_whitespace_is_a_config_error_naming_the_argument() -> None:
    with pytest.raises(hn.ConfigError, match="api_key="):
        hn.OpenAI("m", api_key=" \n", base_url="http://127.0.0.1:9/v1")


async def test_a_key_with_a_trailing_newline_is_stripped_and_never_shown(
    srv: ChaosServer, ws: Path, tmp_path: Path
) -> None:
    key_file = tmp_path / "key.txt"
    key_file.write_text(CANARY + "\n")
    provider = hn.OpenAI("m", api_key=key_file.read_text(), base_url=srv.openai_url)
    assert provider._headers["Authorization"] == f"Bearer {CANARY}"
    # A server that rejects the key quoting it, and echoing it as the request id.
    srv.set_default(Fault.status(401, body=f"Incorrect API key provided: {CANARY}\n",
                                 headers={"x-request-id": CANARY}))  # fmt: skip
    path = tmp_path / "runs.duckdb"
    with hn.Store(path) as store:
        result = await hn.run(contract(ws), provider, store=store)
    assert result.outcome is hn.RunOutcome.ESCALATED_TERMINAL
    err = result.error
    assert isinstance(err, hn.ProviderError) and err.kind is hn.ProviderErrorKind.AUTH
    assert err.status == 401 and err.request_id == "[redacted]"
    assert "[redacted]" in err.message
    assert_clean(*result_surfaces(result), *store_surfaces(path))


async def test_a_key_the_client_refuses_to_send_is_scrubbed_from_the_whole_cause_chain(
    srv: ChaosServer,
) -> None:
    # A newline inside the key survives stripping: the client's own error quotes the
    # header, and it is chained under the ProviderError.
    provider = hn.OpenAI("m", api_key=CANARY + "\nrest", base_url=srv.openai_url)
    with pytest.raises(hn.ProviderError) as caught:
        await provider.complete([{"role": "user", "content": "hi"}])
    err = caught.value
    assert err.__cause__ is not None
    assert_clean(*error_surfaces(err))
    assert not srv.requests  # never sent


def test_a_foreign_cause_chain_is_scrubbed_in_every_error_surface() -> None:
    _secrets.register(CANARY)
    try:
        try:
            raise OSError(f"Illegal header value b'Bearer {CANARY}\\n'")
        except OSError as inner:
            raise ValueError(f"while sending {json.dumps(CANARY)}") from inner
    except ValueError as outer:
        err = hn.HarnessError(f"failed: {CANARY}")
        err.__cause__ = outer
        wrapped = hn.ProviderError("x", kind=hn.ProviderErrorKind.TRANSPORT)
        wrapped.__cause__ = outer
    for e in (err, wrapped):
        shown = error_surfaces(e)
        assert len(e.to_dict()["causes"]) == 2
        # The full Python traceback prints the foreign messages raw: only the error's
        # own surfaces are promised, so the raw traceback is left out here.
        assert_clean(*shown[:1], *shown[1:2], *shown[3:])


# --------------------------------------------------- a server that echoes the key


def echoing(headers: dict[str, str] | None = None, usage: dict[str, Any] | None = None) -> Any:
    def responder(_: Any) -> Reply:
        return Reply(text="hi there", headers=headers or {}, usage=usage)

    return responder


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_request_id_echoing_the_key_reaches_no_row_or_card(
    protocol: str, stream: bool, ws: Path, tmp_path: Path
) -> None:
    with ChaosServer(responder=echoing(headers={"x-request-id": f"req-{CANARY}"})) as srv:
        provider: Any = (
            hn.OpenAI("m", api_key=CANARY, base_url=srv.openai_url)
            if protocol == "openai"
            else hn.Anthropic("m", api_key=CANARY, base_url=srv.url)
        )
        completion = await provider.complete([{"role": "user", "content": "hi"}], stream=stream)
        assert completion.request_id == "req-[redacted]"
        path = tmp_path / "runs.duckdb"
        with hn.Store(path) as store:
            result = await hn.run(contract(ws), provider, store=store)
            assert result.outcome is hn.RunOutcome.FINISHED, result.error
            assert store.attempts()["request_id"].tolist() == ["req-[redacted]"]
    assert_clean(completion.request_id, *result_surfaces(result), *store_surfaces(path))


async def test_an_error_body_cut_inside_the_key_shows_no_part_of_it(srv: ChaosServer) -> None:
    # The error object's JSON is cut at 300 characters, here in the middle of the key.
    srv.push(Fault.status(500, body={"error": {"code": "odd", "detail": "x" * 262 + CANARY}}))
    provider = hn.OpenAI("m", api_key=CANARY, base_url=srv.openai_url)
    with pytest.raises(hn.ProviderError) as caught:
        await provider.complete([{"role": "user", "content": "hi"}])
    assert "odd: " in caught.value.message and "[redacted]" in caught.value.message
    assert_clean(*error_surfaces(caught.value))


USAGE = {
    "openai": {"prompt_tokens": f"12 {CANARY}", "completion_tokens": 3},
    "anthropic": {"input_tokens": f"12 {CANARY}", "output_tokens": 3},
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_usage_field_that_is_not_a_token_count_is_malformed_without_the_body(
    protocol: str, stream: bool, ws: Path, tmp_path: Path
) -> None:
    with ChaosServer(responder=echoing(usage=USAGE[protocol])) as srv:
        provider: Any = (
            hn.OpenAI("m", api_key=CANARY, base_url=srv.openai_url)
            if protocol == "openai"
            else hn.Anthropic("m", api_key=CANARY, base_url=srv.url)
        )
        with pytest.raises(hn.ProviderError) as caught:
            await provider.complete([{"role": "user", "content": "hi"}], stream=stream)
        err = caught.value
        assert err.kind is hn.ProviderErrorKind.MALFORMED and err.retryable
        assert "usage field" in err.message and "12" not in err.message
        # No raw parser exception anywhere in the chain.
        assert err.__cause__ is None
        assert all("ValueError" not in c and "TypeError" not in c for c in err.to_dict()["causes"])
        path = tmp_path / "runs.duckdb"
        with hn.Store(path) as store:
            result = await hn.run(contract(ws, max_retries=1), provider, store=store)
            kinds = store.attempts()["kind"].tolist()
    assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    assert kinds == ["malformed", "malformed"]
    assert_clean(*error_surfaces(err), *result_surfaces(result), *store_surfaces(path))


# ---------------------------------------------------------- secrets in tool output


async def test_tool_output_holding_a_secret_env_value_reaches_neither_model_nor_store(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HN_DEPLOY_TOKEN", ENV_CANARY)

    @hn.tool(effect=hn.Effect.READ)
    async def show_env(name: str) -> str:
        """Show an environment variable (what printenv does)."""
        return f"{name}={os.environ.get(name, '')}"

    provider = hn.ScriptedProvider(
        [
            {"tool": "run_command", "args": {"argv": ["printenv", "HN_DEPLOY_TOKEN"]}},
            {"tool": "show_env", "args": {"name": "HN_DEPLOY_TOKEN"}},
            "done",
        ]
    )
    policy = hn.Policy.default().layer("test").allow_exec("**")
    path = tmp_path / "runs.duckdb"
    with hn.Store(path) as store:
        result = await hn.run(contract(ws), provider, store=store, policy=policy, tools=[show_env])
        outputs = store.tool_calls()["output"].tolist()
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert "HN_DEPLOY_TOKEN=[redacted]" in outputs
    seen_by_model = json.dumps(provider.calls)
    assert "HN_DEPLOY_TOKEN=[redacted]" in seen_by_model
    assert_clean(seen_by_model, *outputs, *result_surfaces(result), *store_surfaces(path),
                 secret=ENV_CANARY)  # fmt: skip


async def test_model_text_quoting_a_secret_is_scrubbed_in_checkpoint_and_card(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HN_DB_PASSWORD", ENV_CANARY)
    provider = hn.ScriptedProvider([f"the password is {ENV_CANARY}, and sk-ant-abcdefghijk12"])
    path = tmp_path / "runs.duckdb"
    with hn.Store(path) as store:
        result = await hn.run(contract(ws), provider, store=store)
        checkpoint = store.sql("SELECT checkpoint FROM steps")["checkpoint"][0]
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    # Known values go; a token shape in model text is kept verbatim for resume.
    assert "the password is [redacted], and sk-ant-abcdefghijk12" in checkpoint
    assert_clean(*result_surfaces(result), *store_surfaces(path), secret=ENV_CANARY)


# ------------------------------------------------------------------ the command


def test_the_command_prints_no_key_of_a_failing_run(srv: ChaosServer, tmp_path: Path) -> None:
    srv.set_default(Fault.status(401, body=f"Incorrect API key provided: {CANARY}",
                                 headers={"x-request-id": CANARY}))  # fmt: skip
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(OPENAI_API_KEY=CANARY + "\n", NO_PROXY="127.0.0.1,localhost",
               PYTHONPATH=str(Path(hn.__file__).parent.parent))  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "harnessnb", "run", "--provider", "openai", "--base-url",
         srv.openai_url, "--workspace", str(ws), "--store", "runs.duckdb", "say hi"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 4, out.stdout + out.stderr
    assert "PROVIDER_AUTH" in out.stdout + out.stderr
    assert "[redacted]" in out.stdout + out.stderr
    assert_clean(out.stdout, out.stderr, *store_surfaces(tmp_path / "runs.duckdb"))


async def _run_cut_output(
    ws: Path,
    path: Path,
    provider: hn.ScriptedProvider,
    elided: str,
    policy: hn.Policy | None = None,
) -> tuple[str, list[str]]:
    """Run ``provider``'s one tool call (its output cut, ``elided`` said) and check that
    no half of ENV_CANARY, which lay across the cut, reached the model or the stored
    output. Returns what the model saw and the stored outputs."""
    half = len(ENV_CANARY) // 2
    with hn.Store(path) as store:
        result = await hn.run(contract(ws), provider, store=store, policy=policy)
        outputs = store.tool_calls()["output"].tolist()
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert elided in outputs[0]
    seen_by_model = json.dumps(provider.calls)
    for part in (ENV_CANARY[:half], ENV_CANARY[half:]):
        assert part not in seen_by_model and part not in outputs[0]
    return seen_by_model, outputs


@pytest.mark.parametrize("where", ["head", "tail"])
async def test_a_secret_at_the_cut_of_a_long_tool_output_leaves_no_part_behind(
    where: str, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tool output is kept to its head and tail (8,000 characters each): a secret lying
    # across either cut must be removed before the cut, or half of it stays readable.
    monkeypatch.setenv("HN_SERVICE_TOKEN", ENV_CANARY)
    half = len(ENV_CANARY) // 2
    filler = "x" * 30_000
    text = (
        "a" * (8_000 - half) + ENV_CANARY + filler
        if where == "head"
        else filler + ENV_CANARY + "z" * (8_000 - half)
    )
    (ws / "big.log").write_text(text)
    provider = hn.ScriptedProvider([{"tool": "read_file", "args": {"path": "big.log"}}, "done"])
    path = tmp_path / "runs.duckdb"
    seen_by_model, outputs = await _run_cut_output(ws, path, provider, "chars elided")
    assert_clean(seen_by_model, *outputs, *store_surfaces(path), secret=ENV_CANARY)


@pytest.mark.parametrize(("before", "after"), [(8_000, 60_000), (60_000, 8_000), (8_000, 9_000)])
async def test_a_secret_at_the_cut_of_a_commands_output_leaves_no_part_behind(
    before: int, after: int, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A command's output is captured head and tail as it streams (8,000 bytes each),
    # before any scrubbing: the capture keeps a margin past each cut for the scrubber.
    monkeypatch.setenv("HN_SERVICE_TOKEN", ENV_CANARY)
    half = len(ENV_CANARY) // 2
    (ws / "big.log").write_text("a" * (before - half) + ENV_CANARY + "b" * (after - half))
    provider = hn.ScriptedProvider(
        [{"tool": "run_command", "args": {"argv": ["cat", "big.log"]}}, "done"]
    )
    policy = hn.Policy.default().layer("test").allow_exec("cat")
    await _run_cut_output(ws, tmp_path / "runs.duckdb", provider, "elided", policy)
