# ruff: noqa: E501  (a table of verbatim CLI lines)
"""The pure readers of a failed CLI run's output, table-driven."""

from __future__ import annotations

import pytest

import harnessnb as hn
from harnessnb.agents._cause import cause_of
from harnessnb.agents._classify import (
    CLI_PHRASES,
    auth_failure,
    explanatory_line,
    flag_rejected,
    looks_like_notice,
    rate_limit,
    status_code,
)
from harnessnb.rules._errors import PHRASES, classify_body_error
from harnessnb.rules._phrases import Phrases

K = hn.ProviderErrorKind

ESSAY = (
    "I looked into the login flow. The handler returns 401 when the token is missing, "
    "and the middleware marks the request unauthorized before the route runs. I changed "
    "the order so that public routes skip the check, and added a test that logs in and "
    "out twice. Everything passes now; the remaining work is documenting the flow."
)


@pytest.mark.parametrize(
    ("stderr", "answer", "expected"),
    [
        # the CLIs' own wording (claude, copilot, codex login status)
        ("", "Not logged in · Please run /login", "Not logged in · Please run /login"),
        ("Error: No authentication information found.\n\nCopilot can be authenticated",
         "", "Error: No authentication information found."),
        ("", "Invalid API key · Fix external API key", "Invalid API key · Fix external API key"),
        ("error: 401 Unauthorized", "", "error: 401 Unauthorized"),
        ("HTTP 401.", "", "HTTP 401."),
        ("request failed (status: 401)", "", "request failed (status: 401)"),
        ("OAuth token has expired. Please run /login", "", "OAuth token has expired. Please run /login"),
        ("authentication_error: invalid x-api-key", "", "authentication_error: invalid x-api-key"),
        # 402's words are auth, as the status is in the one status table
        ("Error: 402 Payment Required", "", "Error: 402 Payment Required"),
        # not auth: ids, versions, paths and sizes that contain 401
        ("error: request 6a1f-401b-9c2e-77aa failed", "", None),
        ("trace 0401ab: upstream closed", "", None),
        ("codex 1.401.2 crashed", "", None),
        ("cannot open /tmp/401/file", "", None),
        ("wrote 4010 bytes", "", None),
        ("run_401x failed", "", None),
        # the answer counts only as a short notice, never as an essay about auth
        ("", ESSAY, None),
    ],
)
def test_auth_failure_reads_narrow_phrases_and_standalone_401(
    stderr: str, answer: str, expected: str | None
) -> None:
    assert auth_failure(stderr, answer) == expected


@pytest.mark.parametrize(
    ("stderr", "answer", "expected"),
    [
        ("You've hit your usage limit. Upgrade to Pro", "", "You've hit your usage limit. Upgrade to Pro"),
        ("", "You’ve hit your session limit · resets 5pm", "You’ve hit your session limit · resets 5pm"),
        ("", "API Error: Request rejected (429) · slow down", "API Error: Request rejected (429) · slow down"),
        ("Quota exceeded. Check your plan and billing details.", "",
         "Quota exceeded. Check your plan and billing details."),
        ("exceeded retry limit, last status: 429 Too Many Requests", "",
         "exceeded retry limit, last status: 429 Too Many Requests"),
        ("rate_limit_error: slow down", "", "rate_limit_error: slow down"),
        ("Claude AI usage limit reached|1900000000", "", "Claude AI usage limit reached|1900000000"),
        ("error: request 6a1f-429b-9c2e failed", "", None),
        ("listening on port 14290", "", None),
        ("", ESSAY.replace("401", "429"), None),
        # a short answer that names billing is no quota notice
        ("", "I moved the billing module into its own package.", None),
    ],
)
def test_rate_limit_reads_quota_wording_and_standalone_429(
    stderr: str, answer: str, expected: str | None
) -> None:
    assert rate_limit(stderr, answer) == expected


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        ("error: unknown option '--definitely-not-a-flag'", True),  # claude (commander)
        ("error: unexpected argument '--sandbox' found\n\nUsage: codex exec resume", True),  # clap
        ("error: a value is required for '--prompt <text>' but none was supplied", False),
        ("TypeError: cannot read properties of undefined", False),
        ("", False),
    ],
)
def test_flag_rejected_reads_argument_parser_wording(stderr: str, expected: bool) -> None:
    assert (flag_rejected(stderr) is not None) is expected


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        ("loading config\nTypeError: x is undefined\n    at main (cli.js:1:1)\nprogress 100%",
         "TypeError: x is undefined"),
        ("starting\nsegfault in worker\n", "segfault in worker"),
        ("INFO starting\nDEBUG loop\n", "DEBUG loop"),
        ("\n\n", ""),
        ("fatal: not a git repository\nerror: bailing out", "error: bailing out"),
    ],
)
def test_explanatory_line_prefers_error_lines_over_chatter(stderr: str, expected: str) -> None:
    assert explanatory_line(stderr) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("API Error: 404 model: x not found", 404),
        ("unexpected status 401 Unauthorized: bad key", 401),
        ("API Error: 529 Overloaded", 529),
        ("request 6a1f-404b failed", None),
        ("version 2.404.1", None),
        ("took 500ms", None),
        ("no status here", None),
    ],
)
def test_status_code_finds_a_standalone_http_status(text: str, expected: int | None) -> None:
    assert status_code(text) == expected


def test_a_notice_is_at_most_three_short_lines() -> None:
    assert looks_like_notice("Not logged in · Please run /login")
    assert not looks_like_notice(ESSAY)
    assert not looks_like_notice("")
    assert looks_like_notice("a\n\n\nb\nc\n" + "x" * 1000)  # only the first three count


# ------------------------------------------------------- one table of failure phrases


@pytest.mark.parametrize(
    "message",
    [
        # OpenAI's wording, whose only phrase the CLIs did not read before the one table
        "Please reduce the length of the messages or completion.",
        "This model's maximum context length is 128000 tokens.",
        "prompt is too long: 250000 tokens > 200000 maximum",  # Anthropic
        "Input length 9000 exceeds the maximum of 8192",
    ],
)
def test_a_provider_body_and_a_cli_read_an_overflow_with_the_same_phrases(message: str) -> None:
    body = {"type": "invalid_request_error", "message": message}
    assert classify_body_error(body, 400) is K.CONTEXT_OVERFLOW
    cause = cause_of(message)
    assert cause is not None and cause.kind is K.CONTEXT_OVERFLOW and cause.fatal


def test_the_clis_table_is_the_rules_table_with_rows_added() -> None:
    # every row the rules classify with is read, in its place, for the CLIs too
    assert CLI_PHRASES.rows[: len(PHRASES.rows)] == PHRASES.rows
    assert len(CLI_PHRASES.rows) > len(PHRASES.rows)
    # the CLIs' words are read by the one reader, in the table's order of kinds
    assert CLI_PHRASES.kind_of("Codex ran out of room. Start a new thread.") is (
        K.CONTEXT_OVERFLOW
    )
    assert PHRASES.kind_of("Codex ran out of room. Start a new thread.") is None


def test_rows_added_to_a_table_join_their_kind_and_a_new_kind_comes_last() -> None:
    table = Phrases((("auth", r"bad key"), ("rate", r"slow down")))
    more = table.plus(("rate", r"too fast"), ("auth", r"not logged in"), ("server", r"oops"))
    assert table.kind_of("too fast") is None
    assert more.kind_of("too fast") == "rate"
    # a text naming two kinds gets the earlier kind: auth's place is first
    assert more.kind_of("not logged in, and too fast") == "auth"
    assert more.kind_of("oops") == "server" and more.says("server", "OOPS")
    assert not more.says("missing", "oops")
    assert more.line("rate", ["first\n  Too fast here  \nlast"]) == "Too fast here"
    assert more.line("missing", ["anything"]) is None
    assert more.map(str.upper).kind_of("bad key") == "AUTH"
