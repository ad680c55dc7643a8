"""The stand-ins that let everything run with no key and no network.

- ``_chaos``: the chaos server, real HTTP on 127.0.0.1 speaking the OpenAI and Anthropic
  protocols with failures injected on demand or at seeded rates (public path:
  ``harnessnb.chaos``);
- ``_model``: the rule-based demo model the chaos server answers with, the demo provider
  and the demo workspace.

May import: ``providers`` (the demo provider is an ``OpenAI``/``Anthropic`` pointed at
loopback) and ``rules``. Nothing of ``loop``, ``tools``, ``store`` or the faces.
"""

from __future__ import annotations

from ._model import (
    DEMO_LABEL,
    DEMO_MARKER,
    DEMO_MODEL,
    DEMO_TIMEOUT_S,
    DemoModel,
    Rates,
    demo_provider,
    demo_server,
    headings,
    make_demo_workspace,
    notes_from,
    provider_for,
    shared_demo_server,
)

__all__ = [
    "DEMO_LABEL",
    "DEMO_MARKER",
    "DEMO_MODEL",
    "DEMO_TIMEOUT_S",
    "DemoModel",
    "Rates",
    "demo_provider",
    "demo_server",
    "headings",
    "make_demo_workspace",
    "notes_from",
    "provider_for",
    "shared_demo_server",
]
