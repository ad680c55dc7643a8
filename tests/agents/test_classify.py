# ruff: noqa: E501  (a table of verbatim CLI lines)
"""The pure readers of a failed CLI run's output, table-driven."""

from __future__ import annotations

import pytest

from harnessnb.agents._classify import (
    auth_failure,
    explanatory_line,
    flag_rejected,
    looks_like_notice,
    rate_limit,
    status_code,
)

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
