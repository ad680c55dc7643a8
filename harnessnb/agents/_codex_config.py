"""What Codex is configured with: ``-m``/``-c`` overrides, then ``$CODEX_HOME/config.toml``.

Codex takes its model and its model provider (``model_provider``, and
``model_providers.NAME`` with ``base_url`` and ``env_key``, the variable holding the
key) from ``config.toml``, overridden by ``-c key=value``. harnessnb reads them to
record the model of a run and to name the right fix when the key is refused. Reading
only; a file that cannot be read counts as empty.
"""

from __future__ import annotations

import itertools
import os
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["codex_auth_hint", "codex_model"]


def codex_model(extra_args: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The model: ``-m``/``--model`` or ``-c model=...`` in the arguments, else config's."""
    overrides = _overrides(extra_args)
    if "model" in overrides:
        return overrides["model"]
    model = _config(env).get("model")
    return model if isinstance(model, str) else None


def codex_auth_hint(extra_args: Sequence[str], env: Mapping[str, str], login: str) -> str:
    """The fix for a refused key: the provider's ``env_key`` for a custom provider."""
    config = _config(env)
    name = _overrides(extra_args).get("model_provider") or config.get("model_provider")
    providers = config.get("model_providers")
    provider = providers.get(name) if isinstance(providers, dict) and name else None
    key = provider.get("env_key") if isinstance(provider, dict) else None
    if not isinstance(key, str) or not key:
        return login
    url = provider.get("base_url") if isinstance(provider, dict) else None
    where = f" at {url}" if isinstance(url, str) and url else ""
    return (
        f"set {key} (model_providers.{name}.env_key in config.toml) to a key the "
        f"provider{where} accepts"
    )


def _overrides(extra_args: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for flag, value in itertools.pairwise(extra_args):
        if flag in ("-m", "--model"):
            found["model"] = value
        elif flag == "-c" and "=" in value:
            key, raw = value.split("=", 1)
            found[key.strip()] = raw.strip().strip("\"'")
    return found


def _config(env: Mapping[str, str]) -> dict[str, Any]:
    home = env.get("CODEX_HOME") or os.path.join(env.get("HOME", ""), ".codex")
    try:
        with open(os.path.join(home, "config.toml"), "rb") as f:
            return tomllib.load(f)
    except (OSError, ValueError):
        return {}
