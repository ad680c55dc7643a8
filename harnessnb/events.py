"""The run events' public home: ``from harnessnb.events import RetryEvent, FinishedEvent``.

One frozen class per kind, each a ``RunEvent`` (``run_id``, ``step``, ``at``) with its
``kind`` and typed fields; ``AnyEvent`` is their union, for a callback that matches on
them. The classes live in ``harnessnb.rules`` (the gate and the executor, low in the
layers, emit them too); this module keeps one import path for users.
"""

from __future__ import annotations

from .loop._events import unscrubbed_events
from .rules import _events as _rules_events
from .rules._events import *  # noqa: F403 -- every name in rules/_events.__all__

__all__ = [*_rules_events.__all__, "unscrubbed_events"]
