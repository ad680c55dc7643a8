"""What every harnessnb provider shares: one ``complete`` and how a provider is asked.

``BaseProvider`` writes the ``complete`` signature of the ``Provider`` protocol once and
hands each call on as a ``Call`` (the request and where its streamed text goes, the
run it is made for) to ``_answer``, the one method a provider supplies: the HTTP
providers (``_http.HTTPProvider``), ``Fallback``, ``ScriptedProvider`` and the
loop's ``Record`` and ``Replay``. ``LocalProvider`` is the base of a provider that
answers without HTTP (a script, recordings): it times each call and puts its one
attempt on the answer, or on the ``ProviderError`` it raised.

``ask`` is how a wrapper (``Fallback``, ``Record``) and the loop call a provider: a
provider written against the protocol before ``on_text`` and ``run_id`` existed
(``complete(messages, tools)``) is handed only the arguments its signature takes,
inspected once per class.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import functools
import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..rules._errors import ProviderError
from ._completion import (
    AttemptRecord,
    Completion,
    Messages,
    OutputSchema,
    Provider,
    TextSink,
    ToolSpecs,
    attempts_of,
    with_attempts,
)

__all__ = ["BaseProvider", "Call", "LocalProvider", "after", "ask", "offers_native_output"]

_KEYWORDS = ("max_tokens", "stream", "on_text", "run_id", "output")


@dataclasses.dataclass(frozen=True)
class Call:
    """One ``complete`` call as a provider answers it."""

    messages: Messages
    tools: ToolSpecs = None
    max_tokens: int | None = None
    stream: bool | None = None
    on_text: TextSink | None = None  # takes each piece of streamed text
    run_id: str | None = None  # the run the call is made for (None: outside a run)
    output: OutputSchema | None = None  # the answer asked for in a JSON Schema, natively


class BaseProvider(abc.ABC):
    """A provider: ``name``, ``model``, ``hosts`` (none by default) and ``complete``,
    which hands the call to ``_answer``.

    ``native_output``: the provider answers in a JSON Schema natively when a call
    gives ``output=`` (False: it is never handed one; see ``offers_native_output``).
    """

    @property
    def native_output(self) -> bool:
        """Whether a call's ``output=`` is answered natively (False here)."""
        return False

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The provider's name in rows."""

    @property
    @abc.abstractmethod
    def model(self) -> str:
        """The model asked."""

    def hosts(self) -> list[str]:
        """Network hosts this provider dials (all leaves, for the egress policy)."""
        return []

    async def complete(
        self,
        messages: Messages,
        tools: ToolSpecs = None,
        max_tokens: int | None = None,
        stream: bool | None = None,
        *,
        on_text: TextSink | None = None,
        run_id: str | None = None,
        output: OutputSchema | None = None,
    ) -> Completion:
        """One answer, its attempts on it; a ``ProviderError`` carries those it made.

        ``stream=None`` streams as the provider was built to; ``on_text`` takes each
        piece of streamed text; ``run_id`` is the run the call is made for; ``output``
        asks for the answer in a JSON Schema (given only where ``native_output``).
        """
        return await self._answer(
            Call(messages, tools, max_tokens, stream, on_text, run_id, output)
        )

    @abc.abstractmethod
    async def _answer(self, call: Call) -> Completion:
        """Answer ``call``: the completion carries the call's attempts, and so does a
        ``ProviderError`` raised (``_completion.with_attempts``)."""


class LocalProvider(BaseProvider):
    """A provider that answers without HTTP: one attempt per call, timed here."""

    async def _answer(self, call: Call) -> Completion:
        started = time.time()
        try:
            completion = await self._reply(call)
        except ProviderError as err:
            record = AttemptRecord.failed(
                err,
                provider=self.name,
                model=self.model,
                started_at=started,
                latency_ms=(time.time() - started) * 1000,
            )
            with_attempts(err, [record])
            raise
        record = AttemptRecord.succeeded(
            completion, started_at=started, latency_ms=(time.time() - started) * 1000
        )
        return dataclasses.replace(completion, attempts=(record,))

    @abc.abstractmethod
    async def _reply(self, call: Call) -> Completion:
        """The answer, or a ``ProviderError``."""


async def ask(provider: Provider, call: Call) -> Completion:
    """``provider.complete`` for ``call``, given only the arguments its signature takes."""
    taken = _taken(provider)
    keywords = {name: getattr(call, name) for name in taken}
    return await provider.complete(call.messages, call.tools, **keywords)


async def after(earlier: Sequence[AttemptRecord], provider: Provider, call: Call) -> Completion:
    """``ask(provider, call)`` made after ``earlier`` attempts of the same call: its
    answer, its failure or its cut-off carries them before its own."""
    try:
        completion = await ask(provider, call)
    except (ProviderError, asyncio.CancelledError) as exc:
        if earlier:
            with_attempts(exc, (*earlier, *attempts_of(exc)))
        raise
    return completion.after(earlier)


def offers_native_output(provider: Provider) -> bool:
    """Whether ``provider`` answers in a JSON Schema natively: it says so
    (``native_output``) and its ``complete`` takes ``output=``."""
    return bool(getattr(provider, "native_output", False)) and "output" in _taken(provider)


def _taken(provider: Provider) -> tuple[str, ...]:
    """The keywords of ``_KEYWORDS`` that ``provider.complete`` takes."""
    method = getattr(type(provider), "complete", None)
    if method is None:  # a complete set on the instance: not cached
        return _takes(provider.complete)
    return _takes_cached(method)


def _takes(method: Callable[..., Any]) -> tuple[str, ...]:
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):  # a builtin without a signature: the protocol's
        return _KEYWORDS
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return _KEYWORDS
    return tuple(
        name
        for name in _KEYWORDS
        if name in params and params[name].kind is not inspect.Parameter.POSITIONAL_ONLY
    )


@functools.lru_cache(maxsize=256)  # once per provider class
def _takes_cached(method: Callable[..., Any]) -> tuple[str, ...]:
    return _takes(method)
