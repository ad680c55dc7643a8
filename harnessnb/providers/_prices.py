"""What an attempt cost: its usage priced in US dollars.

The one module that knows genai-prices (the pydantic team's price catalogue, offline,
pinned exactly: its prices change with its releases). It is imported on the first
lookup that needs it, in a worker thread when a run warms it (:meth:`Prices.warm`), so
``import harnessnb`` does not pay its half second.

Which price an attempt gets, first rule that applies:

1. a model the caller priced with ``hn.Prices({...})``, on any provider;
2. a local server is free: a provider named ``scripted``, ``demo``, ``local`` or
   ``replay`` (a run driven by one of these bills nothing, whatever leaf its answers
   name: a replay reports the recorded provider), or
   one whose server is this machine or a private network (``openai@127.0.0.1:8000``,
   a ``base_url`` on ``localhost`` or ``10.x``), unless ``Prices(local_free=False)``;
3. the catalogue, by the provider's name (``openai``, ``anthropic``, ``openrouter``),
   else by its server's URL (an OpenAI-compatible host the catalogue knows);
4. otherwise the cost is unknown: NULL, never a guess, and a warning on the
   ``harnessnb.prices`` logger once per provider and model in a process.

An attempt that reported no usage (a failure) has no cost to price: NULL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import ipaddress
import logging
import threading
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Final
from urllib.parse import urlsplit

from ..rules._errors import ConfigError

__all__ = ["FREE_PROVIDERS", "Price", "Prices", "default_prices", "is_local"]

log = logging.getLogger("harnessnb.prices")

FREE_PROVIDERS: Final = frozenset({"scripted", "demo", "local", "replay"})
"""Provider names that stand for a server on this machine, or answer from a recording
(no bill)."""

_MTOK: Final = Decimal(1_000_000)
_LOCAL_NAMES: Final = frozenset({"localhost", "localhost.localdomain", "host.docker.internal"})


@dataclasses.dataclass(frozen=True)
class Price:
    """A model's price in US dollars per million tokens, input and output."""

    input_per_mtok: float
    output_per_mtok: float

    def __post_init__(self) -> None:
        for name in ("input_per_mtok", "output_per_mtok"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
                raise ConfigError(f"Price({name}={value!r}): give a number of dollars")
            if not 0 <= value < float("inf"):  # NaN fails too
                raise ConfigError(f"Price({name}={value!r}): a price is 0 or more, and finite")

    def cost(self, input_tokens: int, output_tokens: int) -> Decimal:
        """The price of this usage, in dollars."""
        return (
            Decimal(str(self.input_per_mtok)) * input_tokens
            + Decimal(str(self.output_per_mtok)) * output_tokens
        ) / _MTOK


class Prices:
    """How attempts are priced: genai-prices' catalogue, with the caller's own prices.

    Args:
        models: Model name -> ``Price`` or ``(input_per_mtok, output_per_mtok)`` in US
            dollars per million tokens. Adds a model the catalogue lacks or overrides
            one it has, on every provider (a local server included).
        local_free: A local server (see the module docstring) costs nothing (True);
            False prices it from the catalogue as the provider it speaks for
            (``openai@127.0.0.1:8000`` as ``openai``), e.g. to simulate spend.

    Example:
        ``hn.run(contract, provider, prices=hn.Prices({"my-model": (0.5, 1.5)}))``
    """

    __slots__ = ("_unknown", "local_free", "models")

    def __init__(
        self,
        models: Mapping[str, Price | tuple[float, float]] | None = None,
        *,
        local_free: bool = True,
    ) -> None:
        self.models: dict[str, Price] = {}
        for name, price in (models or {}).items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"Prices: a model name is a non-empty string, not {name!r}")
            self.models[name] = _price(name, price)
        self.local_free = bool(local_free)
        self._unknown: set[tuple[str, str, str | None]] = set()

    def __repr__(self) -> str:
        return f"Prices({self.models!r}, local_free={self.local_free})"

    def cost_usd(
        self,
        provider: str,
        model: str,
        input_tokens: int | None,
        output_tokens: int | None,
        base_url: str | None = None,
    ) -> float | None:
        """The dollars one attempt cost, or None: no usage reported, or no price known."""
        if input_tokens is None and output_tokens is None:
            return None
        cost = self.cost(provider, model, input_tokens or 0, output_tokens or 0, base_url)
        return None if cost is None else float(cost)

    def cost(
        self,
        provider: str,
        model: str,
        input_tokens: int,
        output_tokens: int,
        base_url: str | None = None,
    ) -> Decimal | None:
        """The price of this usage in dollars (exact), or None when no price is known."""
        own = self.models.get(model)
        if own is not None:
            return own.cost(input_tokens, output_tokens)
        local = is_local(provider, base_url)
        if local and self.local_free:
            return Decimal(0)
        key = (provider, model, base_url)
        if key in self._unknown:
            return None
        found = _catalogue(provider, model, input_tokens, output_tokens, base_url, local)
        if found is None:
            self._unknown.add(key)
            _warn_unknown(provider, model)
        return found

    async def warm(self, provider_names: Iterable[str] = ()) -> None:
        """Load the catalogue in a worker thread (not on the event loop) unless every
        provider named is free or priced without it."""
        if _loaded.is_set():
            return
        if all(is_local(name, None) and self.local_free for name in provider_names):
            return
        await asyncio.to_thread(_load)


def _price(name: str, price: Any) -> Price:
    if isinstance(price, Price):
        return price
    if isinstance(price, tuple | list) and len(price) == 2:
        return Price(price[0], price[1])
    raise ConfigError(
        f"Prices({name!r}: {price!r}): give Price(input_per_mtok, output_per_mtok) or a "
        "pair of dollars per million tokens"
    )


_DEFAULT: Prices | None = None


def default_prices() -> Prices:
    """The prices a run uses when given none: the catalogue, local servers free."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Prices()
    return _DEFAULT


@functools.lru_cache(maxsize=256)  # asked for every attempt, of few distinct servers
def is_local(provider: str, base_url: str | None) -> bool:
    """A provider that stands for this machine or a private network: named so
    (``FREE_PROVIDERS``), or its server's host (``NAME@host`` or ``base_url``) is."""
    leaf, _, host = provider.partition("@")
    if leaf in FREE_PROVIDERS:
        return True
    hosts = [urlsplit(f"//{host}").hostname if host else None]
    if base_url:
        hosts.append(urlsplit(base_url).hostname)
    return any(_local_host(h.lower()) for h in hosts if h)


def _local_host(host: str) -> bool:
    if host in _LOCAL_NAMES or host.endswith((".localhost", ".local", ".internal")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


# ------------------------------------------------------------------ the catalogue

_loaded = threading.Event()
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _load() -> None:
    import genai_prices  # noqa: F401  (half a second, once a process)

    _loaded.set()


def _catalogue(
    provider: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
    base_url: str | None,
    local: bool,
) -> Decimal | None:
    """genai-prices' price: by provider name, then by server URL; None when unknown."""
    from genai_prices import Usage, calc_price

    _loaded.set()
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    leaf, _, host = provider.partition("@")
    tries: list[dict[str, Any]] = [{"provider_id": leaf}]
    url = base_url or (f"https://{host}" if host else None)
    if url and not local:
        tries.append({"provider_api_url": url})
    if local and leaf in FREE_PROVIDERS:  # told to price a stand-in: its model decides
        tries = [{}]
    for how in tries:
        try:
            total = calc_price(usage, model, **how).total_price
        except LookupError:
            continue
        return Decimal(total)
    return None


def _warn_unknown(provider: str, model: str) -> None:
    with _warned_lock:
        if (provider, model) in _warned:
            return
        _warned.add((provider, model))
    log.warning(
        "no price known for model %r at provider %r: its attempts' cost_usd is left "
        "NULL; give one with hn.Prices({%r: (input_per_mtok, output_per_mtok)})",
        model,
        provider,
        model,
    )
