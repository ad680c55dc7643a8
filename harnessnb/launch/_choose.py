"""Choices both faces (the ``harnessnb`` command and the ``%%harness`` magics) make from
user text: which provider to use, and what ``--verify "FILE contains TEXT"`` means.

One place for each rule, so the command line and the notebook never disagree. No
IPython here: the CLI imports this module too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from ..rules._errors import ConfigError, StoreError

if TYPE_CHECKING:
    from ..loop._contract import Command, FileContains
    from ..providers._completion import Provider

__all__ = [
    "APIS",
    "KEY_ORDER",
    "PROVIDER_NAMES",
    "ProviderWords",
    "build_provider",
    "choose_provider",
    "parse_verify",
    "parse_verify_cmd",
    "provider_for_resume",
    "recorded_run",
]

PROVIDER_NAMES = (
    "openai",
    "openai-responses",
    "openrouter",
    "anthropic",
    "gemini",
    "local",
    "demo",
)

APIS = ("chat", "responses")
"""What ``--api`` takes: the OpenAI API a provider speaks (``openai``, ``local`` and
``demo`` speak either; ``openai-responses`` is ``openai`` speaking ``responses``)."""

# When no provider is named: the first key found wins, in this order.
KEY_ORDER = (
    ("OPENROUTER_API_KEY", "openrouter"),
    ("ANTHROPIC_API_KEY", "anthropic"),
    ("OPENAI_API_KEY", "openai"),
    ("GEMINI_API_KEY", "gemini"),
)

_SET_ONE_OF = (
    "set HARNESSNB_PROVIDER (openai, openai-responses, openrouter, anthropic, gemini, local, "
    "demo) or one of OPENROUTER_API_KEY, ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY"
)


def choose_provider(
    name: str | None = None,
    *,
    model: str | None = None,
    base_url: str | None = None,
    fallbacks: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    api: str | None = None,
) -> tuple[Provider, str]:
    """The provider a user asked for, and a note saying why it was chosen.

    With ``name`` None: ``$HARNESSNB_PROVIDER``; else ``local`` when ``base_url`` is
    given; else the first API key found (``OPENROUTER_API_KEY``, ``ANTHROPIC_API_KEY``,
    ``OPENAI_API_KEY``, ``GEMINI_API_KEY``); else the demo model (rule-based, not an
    LLM) with a note that no key was found. The note is "" for a named provider.

    Args:
        name: ``openai``, ``openai-responses``, ``openrouter``, ``anthropic``, ``gemini``,
            ``local`` or ``demo``.
        model: The model (default: the provider's ``*_MODEL`` variable, else its default).
        base_url: Another server speaking the provider's protocol; ``local`` needs one.
        fallbacks: Provider names tried in order after the first (``hn.Fallback``).
        env: The environment to read (default ``os.environ``; tests pass a dict).
        api: ``chat`` or ``responses``: the OpenAI API the first provider speaks
            (``--api``; None: the provider's own).

    Raises:
        ConfigError: an unknown name, a missing key, ``local`` without a base URL, or
            ``api="responses"`` for a provider that is not OpenAI's.
    """
    env = os.environ if env is None else env
    note = ""
    if name is None:
        name, note = _name_from_env(env, base_url)
    primary = build_provider(name, model=model, base_url=base_url, env=env, api=api)
    if not fallbacks:
        return primary, note
    from ..providers._fallback import Fallback

    others = [build_provider(n, env=env) for n in fallbacks]
    return Fallback(primary, *others), note


class ProviderWords(TypedDict, total=False):
    """The keywords of ``choose_provider`` after the name, for callers that pass them on."""

    model: str | None
    base_url: str | None
    fallbacks: Sequence[str]
    env: Mapping[str, str] | None
    api: str | None


def recorded_run(store: Any, run_id: str) -> dict[str, Any] | None:
    """The stored row of ``run_id`` for ``provider_for_resume``, or None when it cannot
    be read (the resume itself says why)."""
    try:
        row: dict[str, Any] | None = store.get_run(run_id)
    except StoreError:
        return None
    return row


def provider_for_resume(
    run: Mapping[str, Any] | None, name: str | None = None, **words: Unpack[ProviderWords]
) -> tuple[Provider, str]:
    """The provider to resume ``run`` (its stored row) with.

    A provider named by the caller wins. Otherwise the provider the run was recorded
    with, when it is one of ours by name (a resumed run should not silently switch
    providers because the environment changed), with its recorded model and server
    (``base_url``: a ``local`` run resumes against its server and needs no key);
    otherwise the same choice as ``choose_provider``, which takes the same ``words``.
    """
    recorded = str((run or {}).get("provider") or "").lower()
    if name is None and not words.get("base_url") and recorded in PROVIDER_NAMES:
        model = words.get("model") or (run or {}).get("model")
        url = (run or {}).get("base_url") if recorded != "demo" else None
        chosen = build_provider(
            recorded, model=model, base_url=url or None, env=words.get("env"), api=words.get("api")
        )
        return chosen, f"resuming with the provider the run was recorded with: {recorded}"
    if (name or "").strip().lower() == "local" and not words.get("base_url"):
        words["base_url"] = (run or {}).get("base_url")  # the server the run used
    return choose_provider(name, **words)


def _name_from_env(env: Mapping[str, str], base_url: str | None) -> tuple[str, str]:
    named = env.get("HARNESSNB_PROVIDER", "").strip().lower()
    if named:
        return named, f"provider {named} from HARNESSNB_PROVIDER"
    if base_url:
        return "local", ""
    for key, provider in KEY_ORDER:
        if env.get(key, "").strip():
            return provider, f"provider {provider}: {key} is set"
    from ..demo._model import DEMO_LABEL

    return "demo", f"no API key found ({_SET_ONE_OF}); using the {DEMO_LABEL}"


def build_provider(
    name: str,
    *,
    model: str | None = None,
    base_url: str | None = None,
    env: Mapping[str, str] | None = None,
    api: str | None = None,
) -> Provider:
    """One provider by name; ``base_url`` points it at another server (a provider's
    official URL needs its key as ever; another one may do without). ``api`` is the
    OpenAI API it speaks (``--api``): ``responses`` for ``openai``, ``local`` or ``demo``
    (``openai-responses`` is ``openai`` with it), ``chat`` or None their default.

    Raises:
        ConfigError: an unknown name or API, a missing key, ``local`` without a base
            URL, or ``api="responses"`` for a provider that is not OpenAI's.
    """
    from ..providers._anthropic import Anthropic
    from ..providers._gemini import KEY_ENVS, Gemini
    from ..providers._openai import OpenAI, OpenRouter

    env = os.environ if env is None else env
    name = name.strip().lower()
    api = _api(name, api)
    if name == "openai-responses":
        name = "openai"
    if name == "demo":
        from ..demo._model import demo_provider

        return demo_provider(protocol="responses" if api == "responses" else "openai")
    if name == "local":
        if not base_url:
            raise ConfigError(
                "provider 'local' needs a base URL (an OpenAI-compatible server, e.g. "
                "--base-url http://127.0.0.1:8000/v1)",
                code="CONFIG_BASE_URL",
            )
        # Named ``local`` in every row, so its failures never merge with OpenAI's.
        return OpenAI(
            model or env.get("OPENAI_MODEL") or "local",
            base_url=base_url,
            name="local",
            api="responses" if api == "responses" else "chat",
        )
    classes: dict[str, type[OpenAI] | type[Anthropic] | type[Gemini]] = {
        "openai": OpenAI,
        "openrouter": OpenRouter,
        "anthropic": Anthropic,
        "gemini": Gemini,
    }
    cls = classes.get(name)
    if cls is None:
        raise ConfigError(
            f"unknown provider {name!r}; choose one of {', '.join(PROVIDER_NAMES)}",
            code="CONFIG_PROVIDER",
        )
    # As the SDKs do: the key goes to the official host or to a URL the user gave
    # (a proxy or gateway); only a custom URL may do without one.
    url = base_url or env.get(cls.BASE_URL_ENV, "").strip() or None
    if url == cls.DEFAULT_BASE_URL:
        url = None  # the official host (say a resumed run's recorded URL): key needed
    variables = KEY_ENVS if cls is Gemini else (cls.KEY_ENV,)  # Gemini's key has two names
    key = next((k for v in variables if (k := env.get(v, "").strip())), None)
    if key is None and url is None:
        raise ConfigError(
            f"{name}: environment variable {' or '.join(variables)} is not set",
            code="CONFIG_MISSING_KEY",
        )
    model = model or env.get(cls.MODEL_ENV) or cls.DEFAULT_MODEL
    if api == "responses":
        return OpenAI(model, api_key=key, base_url=url, api="responses")
    return cls(model, api_key=key, base_url=url)


def _api(name: str, api: str | None) -> str | None:
    """``api`` checked against the provider ``name``: ``responses`` for the one spelled
    ``openai-responses``; a ConfigError for an unknown API or Responses elsewhere."""
    api = (api or "").strip().lower() or None
    if api is not None and api not in APIS:
        raise ConfigError(
            f"unknown API {api!r}; choose one of {', '.join(APIS)}", code="CONFIG_PROVIDER"
        )
    if name == "openai-responses":
        if api == "chat":
            raise ConfigError(
                "provider 'openai-responses' speaks the Responses API; --api chat is "
                "provider 'openai'",
                code="CONFIG_PROVIDER",
            )
        return "responses"
    if api == "responses" and name not in ("openai", "local", "demo"):
        raise ConfigError(
            f"--api responses is OpenAI's API: provider {name!r} does not speak it "
            "(use openai, local or demo)",
            code="CONFIG_PROVIDER",
        )
    return api


_VERIFY = re.compile(r"^\s*(?P<path>\S+)\s+contains\s+(?P<needle>.+?)\s*$", re.DOTALL)


def parse_verify(text: str) -> FileContains:
    """``"NOTES.md contains #"`` -> ``FileContains("NOTES.md", "#")``.

    Quotes around the text are removed (``NOTES.md contains "two words"``).

    Raises:
        ConfigError: the text is not ``FILE contains TEXT``.
    """
    from ..loop._contract import FileContains

    match = _VERIFY.match(text or "")
    if match is None:
        raise ConfigError(
            f'--verify {text!r}: write it as "FILE contains TEXT", e.g. "NOTES.md contains #"',
            code="CONFIG_VERIFY",
        )
    needle = match.group("needle")
    if len(needle) >= 2 and needle[0] == needle[-1] and needle[0] in "\"'":
        needle = needle[1:-1]
    return FileContains(match.group("path"), needle)


def parse_verify_cmd(text: str) -> Command:
    """``"pytest -q"`` -> ``Command(["pytest", "-q"])`` (shell-style splitting, no shell).

    Raises:
        ConfigError: the text is empty or its quotes do not close.
    """
    import shlex

    from ..loop._contract import Command

    try:
        argv = shlex.split(text or "")
    except ValueError as exc:
        raise ConfigError(f"--verify-cmd {text!r}: {exc}", code="CONFIG_VERIFY") from exc
    if not argv:
        raise ConfigError('--verify-cmd: give a command, e.g. "pytest -q"', code="CONFIG_VERIFY")
    return Command(argv)
