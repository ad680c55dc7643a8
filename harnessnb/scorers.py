"""The built-in scorers' public home: ``hn.scorers.includes()``, ``hn.scorers.tests()``.

Each returns a scorer: a callable ``(run, sample, workspace) -> hn.Score`` (the file and
command ones are coroutine functions) with a ``name`` (how it was built) and a
``version``, stored with each score. ``includes``, ``exact`` and ``regex`` judge the
run's last answer against their text or the sample's target; ``json_schema`` parses it
as JSON and validates it; ``file_contains``, ``command`` and ``tests`` look at the run's
own workspace copy; ``model_graded`` asks an LLM judge, its calls recorded in the store
so ``model_graded(None, rubric)`` grades again from them with no key. They live in
``harnessnb.sweeps``; this module keeps one import path.
"""

from __future__ import annotations

from .sweeps import _scorers
from .sweeps._scorers import *  # noqa: F403 -- every name in sweeps/_scorers.__all__

__all__ = list(_scorers.__all__)
