"""The stand-ins that let everything run with no key and no network.

- ``_chaos``: the chaos server, real HTTP on 127.0.0.1 speaking the OpenAI, Anthropic and
  Gemini protocols with failures injected on demand or at seeded rates (public path:
  ``harnessnb.chaos``);
- ``_chaos_responses``: the chaos server's OpenAI Responses API dialect;
- ``_chaos_gemini``: the chaos server's Gemini dialect (requests read, answers and
  Google's error bodies written);
- ``_chaos_output``: typed answers on the chaos server: the JSON Schema a request asks
  in (natively, as a ``final_answer`` tool, or in the conversation), answers that
  validate or break it, a strict mode's 400 (the ``refusal``, ``truncated``,
  ``schema_violation`` and ``schema_rejected`` faults);
- ``_model``: the rule-based demo model the chaos server answers with, the demo provider
  and the demo workspace;
- ``_conversation``: what the demo model reads of a request, in any wire form;
- ``_arithmetic``: its questions with a right answer, answered wrongly at a seeded rate
  (a simulated provider of known quality).

May import: ``providers`` (the demo provider is an ``OpenAI``/``Anthropic``/``Gemini`` pointed at
loopback) and ``rules``. Nothing of ``loop``, ``tools``, ``store`` or the faces.
"""

from __future__ import annotations

from . import _model
from ._model import *  # noqa: F403 -- the package's names are _model.__all__

__all__ = list(_model.__all__)
