"""The failure taxonomy: classification table, Retry-After parsing, error shape."""

from __future__ import annotations

import collections.abc
import email.utils
import importlib
import inspect
import pickle
import pkgutil
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.rules._errors import (
    MCPErrorKind,
    OutputFailureKind,
    StoreErrorKind,
    classify_body_error,
    classify_status,
    parse_retry_after,
    parse_should_retry,
    request_id_from,
    wrap_unknown,
)

K = hn.ProviderErrorKind


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (429, "", K.RATE_LIMITED),
        (401, "", K.AUTH),
        (402, "insufficient credits", K.AUTH),
        (403, "", K.AUTH),
        (408, "", K.TIMEOUT),
        (500, "", K.SERVER),
        (502, "", K.SERVER),
        (503, "", K.SERVER),
        (504, "", K.SERVER),
        (529, "overloaded", K.SERVER),
        (400, "This model's maximum context length is 8192 tokens", K.CONTEXT_OVERFLOW),
        (400, "prompt is too long: 210000 tokens > 200000 maximum", K.CONTEXT_OVERFLOW),
        (413, "context_length_exceeded", K.CONTEXT_OVERFLOW),
        (400, "invalid value for temperature", K.REQUEST),
        (413, "payload too large", K.REQUEST),
        (404, "model not found", K.REQUEST),
        (422, "", K.REQUEST),
        (409, "", K.REQUEST),
        (301, "", K.REQUEST),
        (302, "", K.REQUEST),
        (404, "maximum context length", K.REQUEST),  # only 400/413 can mean overflow
    ],
)
def test_status_table(status: int, message: str, kind: hn.ProviderErrorKind) -> None:
    assert classify_status(status, message) is kind
    if not message:
        assert K.from_status(status) is kind


@pytest.mark.parametrize(
    ("kind", "retryable"),
    [
        (K.TRANSPORT, True),
        (K.TIMEOUT, True),
        (K.RATE_LIMITED, True),
        (K.SERVER, True),
        (K.MALFORMED, True),
        (K.AUTH, False),
        (K.REQUEST, False),
        (K.CONTEXT_OVERFLOW, False),
    ],
)
def test_kind_retryable(kind: hn.ProviderErrorKind, retryable: bool) -> None:
    assert kind.retryable is retryable


def test_kind_values_are_lower_case_names() -> None:
    assert [k.value for k in K] == [k.name.lower() for k in K]


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        ({"type": "overloaded_error", "message": "Overloaded"}, 200, K.SERVER),
        ({"type": "rate_limit_error", "message": "slow down"}, 200, K.RATE_LIMITED),
        ({"type": "api_error", "message": "boom"}, 200, K.SERVER),
        ({"type": "authentication_error", "message": "bad key"}, 200, K.AUTH),
        (
            {"type": "invalid_request_error", "message": "prompt is too long"},
            400,
            K.CONTEXT_OVERFLOW,
        ),
        ({"type": "invalid_request_error", "message": "bad field"}, 400, K.REQUEST),
        ({"code": 429, "message": "rate limited upstream"}, 200, K.RATE_LIMITED),
        ({"code": 502, "message": "model down"}, 200, K.SERVER),
        ({"code": 402, "message": "insufficient credits"}, 200, K.AUTH),
        ({"code": "429", "message": "as text"}, 200, K.RATE_LIMITED),
        ({"code": "context_length_exceeded", "message": "too long"}, 400, K.CONTEXT_OVERFLOW),
        ({"message": "something odd"}, 200, K.SERVER),
        ({"message": "something odd"}, 503, K.SERVER),
        ("not an object", 200, K.MALFORMED),
    ],
)
def test_body_error_table(error: object, status: int, kind: hn.ProviderErrorKind) -> None:
    assert classify_body_error(error, status) is kind


NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"Retry-After-Ms": "250", "retry-after": "9"}, 0.25),  # ms wins
        ({"retry-after": "7"}, 7.0),
        ({"Retry-After": "2.5"}, 2.5),
        ({"retry-after": "100"}, 100.0),
        ({"retry-after": email.utils.formatdate(NOW + 30, usegmt=True)}, 30.0),
        ({"retry-after": email.utils.formatdate(NOW - 300, usegmt=True)}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": ""}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after-ms": "garbage", "retry-after": "3"}, 3.0),
        ({"retry-after": "Wed, 99 Foo 2015 07:28:00 GMT"}, None),
    ],
)
def test_retry_after_parsing(headers: dict[str, str], expected: float | None) -> None:
    got = parse_retry_after(headers, now=NOW)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_should_retry_header() -> None:
    assert parse_should_retry({"X-Should-Retry": "true"}) is True
    assert parse_should_retry({"x-should-retry": "false"}) is False
    assert parse_should_retry({"x-should-retry": "maybe"}) is None
    assert parse_should_retry({}) is None


def test_should_retry_overrides_kind() -> None:
    err = hn.ProviderError("x", kind=K.SERVER, status=503, should_retry=False)
    assert err.retryable is False
    err = hn.ProviderError("x", kind=K.REQUEST, status=409, should_retry=True)
    assert err.retryable is True
    assert hn.ProviderError("x", kind=K.AUTH).retryable is False


def test_request_id_headers() -> None:
    assert request_id_from({"x-request-id": "req_1"}) == "req_1"
    assert request_id_from({"Request-Id": "req_2"}) == "req_2"
    assert request_id_from({}) is None


def test_error_code_is_stable_and_distinct_from_message() -> None:
    err = hn.ProviderError("Too many requests", kind=K.RATE_LIMITED, status=429, retry_after_s=3.0)
    assert err.code == "PROVIDER_RATE_LIMITED"
    d = err.to_dict()
    assert d["code"] == "PROVIDER_RATE_LIMITED"
    assert d["message"] == "Too many requests"
    assert d["kind"] == "rate_limited"
    assert d["retry_after_s"] == 3.0
    assert d["retryable"] is True
    assert hn.RefusedError("no", act="write", target="a", rule="r", layer="l").code == "REFUSED"
    assert hn.ResumeError("gone", reason="unknown_run").code == "RESUME_UNKNOWN_RUN"
    assert hn.StoreError("locked", kind="busy").retryable is True
    assert hn.StoreError("bad", kind="corrupt").retryable is False


def test_wrap_unknown_keeps_cause_chain() -> None:
    original = ValueError("bad value")
    err = wrap_unknown(original)
    assert err.code == "UNKNOWN"
    assert err.__cause__ is original
    assert "ValueError: bad value" in err.to_dict()["causes"][0]
    same = hn.ConfigError("c")
    assert wrap_unknown(same) is same


def test_raise_from_keeps_chain_in_dict() -> None:
    try:
        try:
            raise ConnectionResetError("peer reset")
        except ConnectionResetError as exc:
            raise hn.ProviderError("dropped", kind=K.TRANSPORT) from exc
    except hn.ProviderError as err:
        assert err.to_dict()["causes"] == ["ConnectionResetError: peer reset"]


def test_traceback_is_short_and_card_is_escaped() -> None:
    err = hn.ProviderError(
        "<script>alert(1)</script>", kind=K.RATE_LIMITED, status=429, retry_after_s=7.0
    )
    lines = err._render_traceback_()
    assert 1 <= len(lines) <= 3
    assert "rate_limited" in lines[1] and "HTTP 429" in lines[1] and "retry after 7 s" in lines[1]
    bundle = err._repr_mimebundle_()
    assert "<script>" not in bundle["text/html"]
    assert "&lt;script&gt;" in bundle["text/html"]
    assert "429" in bundle["text/plain"] and "retry_after_s: 7.0" in bundle["text/plain"]


# --------------------------------------------- "may a retry help": one spelling


@pytest.mark.parametrize(
    ("word", "retryable"),
    [("busy", True), ("full", True), ("closed", False), ("corrupt", False), ("foreign", False),
     ("newer", False), ("io", False), ("missing", False), ("duplicate", False),
     ("query", False), ("internal", False), ("read_only", False)],
)  # fmt: skip
def test_store_error_kind_is_an_enum_that_still_reads_as_its_word(
    word: str, retryable: bool
) -> None:
    err = hn.StoreError("x", kind=word, path="runs.duckdb")
    assert err.kind is StoreErrorKind(word)
    assert err.kind == word and f"{err.kind}" == word
    assert err.code == f"STORE_{word.upper()}"
    assert err.retryable is retryable
    assert err.to_dict()["kind"] == word and err.to_dict()["retryable"] is retryable
    assert hn.StoreError("x", kind=StoreErrorKind(word)).kind is err.kind


def test_store_error_kind_outside_the_table_is_refused() -> None:
    with pytest.raises(ValueError):
        hn.StoreError("x", kind="sleepy")


def test_every_retry_question_is_asked_as_retryable() -> None:
    import harnessnb.agents as ag

    assert hn.ProviderError("x", kind=K.TIMEOUT).retryable is True
    assert hn.ProviderError("x", kind=K.REQUEST).retryable is False
    assert hn.StoreError("x", kind="busy").retryable is True
    assert hn.StoreError("x", kind="io").retryable is False
    assert hn.ToolError("no such file: a.txt", code="FILE_NOT_FOUND").retryable is False
    assert ag.Timeout("t", agent="codex", bin="codex", timeout_s=1).retryable is True
    assert ag.Failed("f", agent="codex", bin="codex", exit_code=2).retryable is False


def test_store_and_cli_cards_show_kind_and_retryable_in_a_badge() -> None:
    import harnessnb.agents as ag

    store = hn.StoreError("locked", kind="busy")._repr_mimebundle_()["text/html"]
    assert ">busy, retryable<" in store
    cli = ag.RateLimited("quota", agent="codex", bin="codex", detail="q")
    assert ">codex: rate_limited, retryable<" in cli._repr_mimebundle_()["text/html"]


# ------------------------------------------------------------- pickling, .retryable


def _every_error_class() -> list[type[hn.HarnessError]]:
    """Every HarnessError subclass in harnessnb (each module imported first)."""
    import harnessnb

    for module in pkgutil.walk_packages(harnessnb.__path__, "harnessnb."):
        if module.name != "harnessnb.__main__":
            importlib.import_module(module.name)

    def walk(cls: type[hn.HarnessError]) -> Iterator[type[hn.HarnessError]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from walk(sub)

    found = {c for c in walk(hn.HarnessError) if c.__module__.startswith("harnessnb.")}
    return [hn.HarnessError, *sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")]


def _sample(hint: Any, name: str) -> Any:
    """A value of type ``hint`` for the parameter ``name``, not its default."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return _sample(args[0], name)  # the first type of an optional or a union
    if typing.get_origin(hint) is collections.abc.Sequence and args == [hn.ProviderError]:
        return [hn.ProviderError("leaf a failed", kind=K.SERVER, status=503, provider="a"),
                hn.ProviderError("leaf b failed", kind=K.TIMEOUT, provider="b")]  # fmt: skip
    samples: dict[Any, Any] = {str: f"{name} value", int: 7, float: 2.5, bool: True,
                               K: K.RATE_LIMITED, StoreErrorKind: StoreErrorKind.FULL,
                               MCPErrorKind: MCPErrorKind.EXITED,
                               OutputFailureKind: OutputFailureKind.TRUNCATED,
                               collections.abc.Sequence[str]: ("a reason", "another"),
                               tuple[Any, ...]: ("an attempt record",)}  # fmt: skip
    if hint not in samples:
        raise AssertionError(f"no sample for a {hint!r} parameter ({name}): add one here")
    return samples[hint]


def _with_every_field(cls: type[hn.HarnessError]) -> hn.HarnessError:
    # A class declaring its fields (rules._fields) has them as annotations, its
    # signature on the class; the others have theirs on __init__.
    hints = typing.get_type_hints(cls.__init__) | typing.get_type_hints(cls)
    params = inspect.signature(cls).parameters
    kwargs = {n: _sample(hints[n], n) for n in params if n not in ("self", "message")}
    if "message" in params:
        return cls(f"{cls.__name__} happened", **kwargs)
    return cls(**kwargs)


ERROR_CLASSES = _every_error_class()


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__qualname__)
def test_every_error_pickles_round_trip_with_its_fields(cls: type[hn.HarnessError]) -> None:
    err = _with_every_field(cls)
    try:
        raise err from OSError("the connection was reset")
    except hn.HarnessError as raised:
        err = raised
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    assert (str(back), back.message, back.code) == (str(err), err.message, err.code)
    assert back.retryable is err.retryable and isinstance(err.retryable, bool)
    assert back.to_dict() == err.to_dict()  # every shown field, and the cause chain
    assert back.to_dict()["causes"] == ["OSError: the connection was reset"]
    assert repr(back) == repr(err)
    for name in inspect.signature(cls).parameters:
        if name not in ("self", "message") and hasattr(err, name):
            want, got = getattr(err, name), getattr(back, name)
            if isinstance(want, list):  # errors compare by what they say
                want, got = [w.to_dict() for w in want], [g.to_dict() for g in got]
            assert got == want, name


def test_the_error_classes_enumerated_include_every_tree() -> None:
    import harnessnb.agents as ag
    from harnessnb.providers._fallback import FallbackError

    names = {c.__name__ for c in ERROR_CLASSES}
    assert {"ProviderError", "ConfigError", "RefusedError", "ResumeError", "SandboxError",
            "StoreError", "ConflictError", "ToolError"} <= names  # fmt: skip
    assert set(ag._errors.__all__) <= names and FallbackError.__name__ in names


def test_every_error_has_retryable_false_unless_its_class_says_a_retry_may_help() -> None:
    assert hn.HarnessError("x").retryable is False
    assert hn.ConfigError("no key").retryable is False
    assert hn.RefusedError("no", act="write", target="a").retryable is False
    assert hn.ResumeError("gone", reason="missing").retryable is False
    assert hn.SandboxError("too big", reason="too_big").retryable is False
    assert hn.ConflictError("held", run_id="r", owner="o").retryable is False


def test_a_pickled_error_carries_no_secret_from_its_message_fields_or_causes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = "sk-pickle-secret-0123456789"
    monkeypatch.setenv("HN_PICKLE_API_KEY", key)
    err = hn.ProviderError(f"refused {key}", kind=K.AUTH, status=401, request_id=key)
    err.model = f"model {key}"  # a field set after init, unscrubbed
    err.__cause__ = ValueError(f"the server said: invalid key {key}")
    data = pickle.dumps(err)
    assert key.encode() not in data and b"pickle-secret" not in data
    back = pickle.loads(data)
    assert back.to_dict()["causes"] == ["ValueError: the server said: invalid key [redacted]"]
    assert key not in repr(back.to_dict()) and back.model == "model [redacted]"


# ------------------------------------------------------- context fields declared once


def test_error_classes_declare_their_context_fields_once_with_no_init_of_their_own() -> None:
    """One ``__init__`` (rules._fields.Declared) sets every declared field; a class that
    repeats it is the duplication this rule removed (AgentError's ``kind`` too: a field
    of its own, settled from its status when not given). FallbackError keeps one: it
    takes the failures its fields are read from."""
    from harnessnb.rules._fields import Declared

    declared = [c for c in ERROR_CLASSES if issubclass(c, Declared)]
    names = {c.__name__ for c in declared}
    assert {"CLIError", "Timeout", "RateLimited", "RefusedError", "ConflictError"} <= names
    assert "ProviderError" in names
    own = [c.__name__ for c in declared if "__init__" in vars(c)]
    assert own == ["FallbackError"]
    # Such a class shows its own keywords (help(), a notebook's signature tip), not fields.
    fallback = next(c for c in declared if c.__name__ == "FallbackError")
    assert list(inspect.signature(fallback).parameters) == ["failures", "provider"]


def test_a_misspelled_or_missing_context_field_is_a_type_error_naming_it() -> None:
    import harnessnb.agents as ag

    with pytest.raises(TypeError, match="timeot_s"):
        ag.Timeout("slow", agent="codex", bin="codex", timeot_s=3.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="timeout_s"):
        ag.Timeout("slow", agent="codex", bin="codex")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="target"):
        hn.RefusedError("no", act="read")  # type: ignore[call-arg]
    err = ag.RateLimited("slow down", agent="codex", bin="codex", detail="d", retry_after_s=5.0)
    assert err.resets_at is not None and err.quota is False  # derived, and the default
    assert list(err.to_dict())[3:8] == ["agent", "bin", "retryable", "detail", "status"]
    params = inspect.signature(ag.SessionBusy).parameters  # what help() shows
    assert list(params) == ["message", "agent", "bin", "name", "holder"]
