"""HTTP providers: ``HTTPProvider``, what every provider over HTTP shares.

Every HTTP provider subclasses ``HTTPProvider``, which makes one attempt per
``complete`` call (providers never retry): an ``_attempt.Attempt`` that sends it,
puts its record on the answer (or the failure) and turns every failure into a
``ProviderError`` through the table in ``_errors``. Subclasses only convert messages to their wire
format and parse the answer back; swapping the HTTP client library means editing
``_client.py`` (the client per event loop) and ``_attempt.py`` alone.

Time limits:
    * ``timeout`` is the whole attempt's deadline (connect, send, wait, read all
      of it, stream included). Exceeding it is ``timeout``.
    * ``first_event_timeout`` (190 s) bounds the wait from a stream's headers to its
      first complete event: long, since a reasoning model sends nothing while it
      thinks (3 minutes pass), yet three silent attempts end within 10 minutes.
    * ``idle_timeout`` bounds the silence between two events of a stream, so a
      stream that stalls fails after seconds, not after the 600 s deadline. A byte,
      an empty chunk or a comment that completes no event is silence.

Streaming: answers are streamed unless the provider was built with ``stream=False``
(or a call passes ``stream=False``), so time-to-first-token is measured, a silent
stream is cut by the idle timeout and each piece of text goes to the call's ``on_text``.
A server that rejects a streamed request (an error answer that names streaming) is
asked again at once without it, and that provider instance never streams again.

Usage: every answer that arrived (a 2xx response, used or not) is billed: its attempt
carries the tokens it reported, else an estimate (``_usage.estimate_usage``). A failure
without an answer (an error status, a dropped connection) carries none.

An attempt a cancel cuts off in flight is reported too, as ``cancelled`` (the server
may have billed it). A request a pooled connection closed while idle dropped is sent
again inside the attempt (``_client.post``).

Size limits: an answer body over ``MAX_ANSWER_BYTES`` (16 MiB; a stream over
``MAX_STREAM_BYTES``, 128 MiB) is ``malformed``, read no further; every provider
error message, and so the error of attempt rows, run rows and cards, is cut to
``MAX_ERROR_TEXT`` characters.
"""

from __future__ import annotations

import abc
import asyncio
import copy
import datetime
import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self, TypedDict
from urllib.parse import urlsplit

import httpx2

from ..rules._classify import ErrorReading
from ..rules._errors import ConfigError, ProviderError
from ..rules._renamed import renamed, renamed_keywords
from ..rules._retry import timeout_seconds
from ..rules._secrets import register, register_header
from ._attempt import MAX_ANSWER_BYTES, MAX_ERROR_TEXT, MAX_STREAM_BYTES, Attempt, Endpoint
from ._base import BaseProvider, Call
from ._client import aclose_client, new_client, shared_client
from ._completion import (
    Completion,
    Messages,
    OutputSchema,
    ToolSpecs,
    attempts_of,
    shown_url,
    with_attempts,
)
from ._wire import Parsed, StreamAccumulator

__all__ = [
    "DEFAULT_FIRST_EVENT_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "MAX_ANSWER_BYTES",
    "MAX_ERROR_TEXT",
    "MAX_STREAM_BYTES",
    "REQUEST_TIMEOUT_S",
    "HTTPOptions",
    "HTTPProvider",
    "aclose_client",
    "new_client",
    "shared_client",
]

REQUEST_TIMEOUT_S = 600.0
"""Deadline of one provider attempt, in seconds (the official SDKs' default)."""

DEFAULT_IDLE_TIMEOUT = 60.0
"""Longest silence allowed between two events of a stream, in seconds."""

DEFAULT_FIRST_EVENT_TIMEOUT = 190.0
"""Longest wait from a stream's headers to its first event, in seconds: a reasoning model
that thinks for 3 minutes is waited for, and three attempts of a server that sends its
headers then nothing end within 10 minutes (the default 2 retries included)."""


def _env(var: str) -> str | None:
    value = os.environ.get(var, "").strip()
    return value or None


# Renamed by the names and units rule (docs/api.md): the old spellings warn one release.
_TIMEOUT_RENAMES = {
    "timeout": "timeout_s",
    "idle_timeout": "idle_timeout_s",
    "first_event_timeout": "first_event_timeout_s",
}


class HTTPOptions(TypedDict, total=False):
    """The keyword-only options of ``HTTPProvider``'s constructor, for a subclass that
    adds keywords of its own and hands these on untouched (``OpenRouter``); mypy checks
    them against the constructor, whose defaults are the ones that apply."""

    idle_timeout_s: float | datetime.timedelta
    headers: Mapping[str, str] | None
    stream: bool
    name: str | None


@renamed(**_TIMEOUT_RENAMES)
class HTTPProvider(BaseProvider):
    """A provider reached over HTTP: config, one attempt per call, failure mapping.

    Args:
        model: The model name sent to the server.
        api_key: The secret; never shown in a repr, error or attempt record.
        base_url: The server root, as the official SDK spells it.
        timeout_s: Deadline of one attempt (float seconds or ``timedelta``).
        idle_timeout_s: Longest silence between stream chunks (default 60 s).
        headers: Extra headers sent with every request.
        stream: Stream answers (the default); False asks for whole answers.
    """

    NAME: ClassVar[str]
    PATH: ClassVar[str]  # appended to the base URL
    DEFAULT_BASE_URL: ClassVar[str]
    DEFAULT_MODEL: ClassVar[str]
    ENV: ClassVar[str]  # the prefix of the variables below, one rule for every provider
    KEY_ENV: ClassVar[str]  # {ENV}_API_KEY
    BASE_URL_ENV: ClassVar[str]  # {ENV}_BASE_URL
    MODEL_ENV: ClassVar[str]  # {ENV}_MODEL

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "ENV" in vars(cls):
            cls.KEY_ENV = f"{cls.ENV}_API_KEY"
            cls.BASE_URL_ENV = f"{cls.ENV}_BASE_URL"
            cls.MODEL_ENV = f"{cls.ENV}_MODEL"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float | datetime.timedelta = REQUEST_TIMEOUT_S,
        *,
        idle_timeout_s: float | datetime.timedelta = DEFAULT_IDLE_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        stream: bool = True,
        name: str | None = None,
    ) -> None:
        if not model:
            raise ConfigError(f"{self.NAME}: a model name is required")
        self._model = model
        self._base_url = (base_url or self.DEFAULT_BASE_URL).rstrip("/")
        parts = urlsplit(self._base_url)
        if parts.scheme not in ("http", "https"):
            raise ConfigError(f"{self.NAME}: base_url must be an http(s) URL: {self._base_url!r}")
        if parts.query or parts.fragment:  # the path is appended to it: it would follow them
            raise ConfigError(
                f"{self.NAME}: base_url {shown_url(self._base_url)!r} may not "
                "carry a query or fragment (pass headers= for a key)"
            )
        if api_key:  # a key read from a file ends in a newline, which breaks the header
            if not (api_key := api_key.strip()):
                raise ConfigError(
                    f"{self.NAME}: api_key= holds only whitespace", code="CONFIG_MISSING_KEY"
                )
        elif base_url is None:
            # The official host needs a key: take it from the environment like the
            # SDKs do, but never send it to a custom base_url nobody handed it to.
            api_key = _env(self.KEY_ENV)
            if api_key is None:
                raise ConfigError(
                    f"{self.NAME}: no API key; set {self.KEY_ENV} or pass api_key=",
                    code="CONFIG_MISSING_KEY",
                )
        self._api_key = api_key or None
        register(self._api_key)
        register(parts.password)  # a proxy's key in user:password@
        register(parts.username)  # ... or a key as the user name alone
        for header, value in (headers or {}).items():
            register_header(header, value)
        self._timeout = timeout_seconds(timeout_s)
        self._idle_timeout = timeout_seconds(idle_timeout_s)
        self._first_event_timeout = DEFAULT_FIRST_EVENT_TIMEOUT
        self._stream = bool(stream)
        self._stream_refused = False  # the server rejected a streamed request once
        try:
            # Parsed once: httpx2 would otherwise re-parse the URL string on every call.
            self._url = httpx2.URL(self._base_url + self._path())
        except httpx2.InvalidURL as exc:
            raise ConfigError(f"{self.NAME}: invalid base_url {self._base_url!r}: {exc}") from exc
        self._headers = {**self._auth_headers(self._api_key), **(headers or {})}
        self._name = name or self.NAME

    @classmethod
    @renamed_keywords(timeout="timeout_s", idle_timeout="idle_timeout_s")
    def from_env(
        cls,
        model: str | None = None,
        *,
        timeout_s: float | datetime.timedelta = REQUEST_TIMEOUT_S,
        idle_timeout_s: float | datetime.timedelta = DEFAULT_IDLE_TIMEOUT,
        stream: bool = True,
    ) -> Self:
        """Configure from the environment; ``ConfigError`` names a missing variable.

        Reads the key variable (``KEY_ENV``), the optional base URL variable and,
        when ``model`` is None, the model variable (else ``DEFAULT_MODEL``). The key
        may be absent only when a custom base URL is set (a local server).
        """
        base_url = _env(cls.BASE_URL_ENV)
        api_key = _env(cls.KEY_ENV)
        if api_key is None and base_url is None:
            raise ConfigError(
                f"{cls.NAME}: environment variable {cls.KEY_ENV} is not set",
                code="CONFIG_MISSING_KEY",
            )
        return cls(
            model or _env(cls.MODEL_ENV) or cls.DEFAULT_MODEL,
            api_key=api_key,
            base_url=base_url,
            timeout_s=timeout_s,
            idle_timeout_s=idle_timeout_s,
            stream=stream,
        )

    # -- Provider protocol

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return self._model

    @property
    def timeout_s(self) -> float:
        return self._timeout

    @property
    def idle_timeout_s(self) -> float:
        return self._idle_timeout

    @property
    def first_event_timeout_s(self) -> float:
        return self._first_event_timeout

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def stream(self) -> bool:
        """Whether calls stream: as built, and False once the server rejected it."""
        return self._stream and not self._stream_refused

    def hosts(self) -> list[str]:
        host = urlsplit(self._base_url).hostname
        return [host] if host else []

    @renamed_keywords(**_TIMEOUT_RENAMES)
    def with_timeout(
        self,
        timeout_s: float | datetime.timedelta,
        *,
        idle_timeout_s: float | datetime.timedelta | None = None,
        first_event_timeout_s: float | datetime.timedelta | None = None,
    ) -> Self:
        """A new provider like this one with another deadline (and idle and first-event
        timeouts: a model that thinks longer than 190 s before it streams needs more)."""
        new = copy.copy(self)
        new._timeout = timeout_seconds(timeout_s)
        if idle_timeout_s is not None:
            new._idle_timeout = timeout_seconds(idle_timeout_s)
        if first_event_timeout_s is not None:
            new._first_event_timeout = timeout_seconds(first_event_timeout_s)
        return new

    def _endpoint(self, stream: bool = False) -> Endpoint:
        return Endpoint(
            label=self.NAME,
            name=self._name,
            model=self._model,
            url=self._url_for(stream),
            base_url=self._base_url,
            headers=self._headers,
            timeout=self._timeout,
            idle_timeout=self._idle_timeout,
            first_event_timeout=self._first_event_timeout,
            parse_body=self._parse_body,
            stream_accumulator=self._stream_accumulator,
            error_object=self._error_object,
            read_error=self._read_error(),
        )

    def __repr__(self) -> str:
        # Cheap and secret-free: the key is never part of the repr, nor the URL's
        # user, password or query (``shown_url``).
        url = shown_url(self._base_url)
        return (
            f"{type(self).__name__}(model={self._model!r}, base_url={url!r}, "
            f"timeout_s={self._timeout:g}{'' if self._stream else ', stream=False'})"
        )

    async def _answer(self, call: Call) -> Completion:
        """One HTTP attempt; raises ``ProviderError`` on any failure (never retries).

        The one second attempt is a server's rejection of streaming, asked again
        without it (and remembered); the answer carries both attempts.
        """
        stream = call.stream
        streamed = (self._stream if stream is None else stream) and not self._stream_refused
        body = self._body(call, streamed)
        attempt = Attempt(self._endpoint(streamed), body, streamed, call.on_text)
        try:
            return await attempt.run()
        except ProviderError as err:
            if not attempt.stream_refused:
                raise
            first = attempts_of(err)
        self._stream_refused = True
        body = self._body(call, False)
        try:
            completion = await Attempt(self._endpoint(False), body, False, call.on_text).run()
        except (ProviderError, asyncio.CancelledError) as exc:
            with_attempts(exc, (*first, *attempts_of(exc)))
            raise
        return completion.after(first)

    def _body(self, call: Call, stream: bool) -> dict[str, Any]:
        body = self._request_body(call.messages, call.tools, call.max_tokens, stream)
        return body if call.output is None else self._with_output(body, call.output)

    # -- what a protocol supplies

    def _with_output(self, body: dict[str, Any], output: OutputSchema) -> dict[str, Any]:
        """``body`` asking for the answer in ``output``'s JSON Schema, the wire's own way
        (a wire that can overrides this and ``native_output``)."""
        raise ConfigError(f"{type(self).__name__} has no native structured output")

    def _path(self) -> str:
        """The path appended to the base URL (``PATH``, unless the API is chosen per
        instance: ``OpenAI(api="responses")``)."""
        return self.PATH

    @abc.abstractmethod
    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        """Headers that authenticate (and version) every request."""

    @abc.abstractmethod
    def _request_body(
        self, messages: Messages, tools: ToolSpecs, max_tokens: int | None, stream: bool
    ) -> dict[str, Any]:
        """The JSON request body in the wire format."""

    @abc.abstractmethod
    def _parse_body(self, body: Any) -> Parsed:
        """Parse a non-streamed 200 body; raise ``WireError`` when it is not an answer."""

    @abc.abstractmethod
    def _stream_accumulator(self) -> StreamAccumulator:
        """A fresh accumulator for one streamed answer."""

    def _url_for(self, stream: bool) -> httpx2.URL:
        """The URL of one request (Gemini's names the model and whether it streams)."""
        return self._url

    def _read_error(self) -> Callable[[Any, int], ErrorReading] | None:
        """How an error status's error object is read beyond the status (None: it is not)."""
        return None

    @staticmethod
    def _error_object(body: Any) -> Any:
        """The error object inside an error body, or None (both wire shapes)."""
        if isinstance(body, Mapping):
            return body.get("error")
        return None
