"""``Fallback``: try providers in order, moving on only after a retryable failure."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any

from ..rules._errors import ProviderError
from ..rules._renamed import renamed_keywords
from ._base import BaseProvider, Call, after, offers_native_output
from ._completion import AttemptRecord, Completion, Provider, attempts_of, with_attempts

__all__ = ["Fallback", "FallbackError"]


class FallbackError(ProviderError):
    """Every provider of a ``Fallback`` failed.

    Kind, status, retry_after_s and request id are the last failure's, and it is
    retryable exactly when the last failure is. ``failures`` (also ``exceptions``,
    as in an ``ExceptionGroup``) holds every leaf failure in order; a nested
    ``Fallback``'s failures are flattened in.
    """

    def __init__(self, failures: Sequence[ProviderError], *, provider: str) -> None:
        flat: list[ProviderError] = []
        for f in failures:
            flat.extend(f.failures if isinstance(f, FallbackError) else [f])
        last = flat[-1]
        parts = "; ".join(f"{f.provider}: {f.kind.value}" for f in flat)
        super().__init__(
            f"all providers failed ({parts}); last: {last.message}",
            kind=last.kind,
            status=last.status,
            retry_after_s=last.retry_after_s,
            provider=provider,
            request_id=last.request_id,
            should_retry=last.retryable,
            model=last.model,
        )
        self.failures: list[ProviderError] = flat

    @property
    def exceptions(self) -> tuple[ProviderError, ...]:
        return tuple(self.failures)

    def _fields(self) -> dict[str, Any]:
        fields = super()._fields()
        fields["failures"] = len(self.failures)
        return fields


class Fallback(BaseProvider):
    """A provider that tries ``primary``, then ``secondary`` and ``more``, in order.

    It moves on only when a failure is retryable (transport, timeout, rate limit,
    server, malformed, or the server's ``x-should-retry: true``); any other failure
    is raised at once. Fallbacks nest: any provider may be a ``Fallback``. Its
    answer (or failure) carries every leg's attempts in order, the last attempt of
    each leg it moved on from marked ``fell_back``.
    """

    def __init__(self, primary: Provider, secondary: Provider, *more: Provider) -> None:
        self._providers: tuple[Provider, ...] = (primary, secondary, *more)

    @property
    def providers(self) -> tuple[Provider, ...]:
        return self._providers

    @property
    def name(self) -> str:
        return f"fallback({','.join(p.name for p in self._providers)})"

    @property
    def model(self) -> str:
        return self._providers[0].model

    @property
    def native_output(self) -> bool:
        """Every provider in the chain answers in a JSON Schema natively."""
        return all(offers_native_output(p) for p in self._providers)

    def hosts(self) -> list[str]:
        seen: dict[str, None] = {}
        for p in self._providers:
            for host in p.hosts():
                seen.setdefault(host, None)
        return list(seen)

    @renamed_keywords(timeout="timeout_s")
    def with_timeout(self, timeout_s: float | datetime.timedelta) -> Fallback:
        """A new ``Fallback`` whose every provider has this deadline."""
        return Fallback(*(_with_timeout(p, timeout_s) for p in self._providers))

    def __repr__(self) -> str:
        return f"Fallback({', '.join(repr(p) for p in self._providers)})"

    async def _answer(self, call: Call) -> Completion:
        """The first answer in order; raises ``FallbackError`` when every provider failed."""
        failures: list[ProviderError] = []
        made: list[AttemptRecord] = []  # the attempts of the legs it moved on from
        last = len(self._providers) - 1
        for i, provider in enumerate(self._providers):
            try:
                return await after(made, provider, call)
            except ProviderError as err:
                if not err.retryable:
                    raise
                failures.append(err)
                made = list(attempts_of(err))
                if i < last and made:
                    made[-1] = dataclasses.replace(made[-1], fell_back=True)
        error = FallbackError(failures, provider=self.name)
        raise with_attempts(error, made) from failures[-1]


def _with_timeout(provider: Provider, timeout: float | datetime.timedelta) -> Provider:
    method = getattr(provider, "with_timeout", None)
    # A provider without deadlines of its own (a scripted one) is kept as it is.
    return provider if method is None else method(timeout)
