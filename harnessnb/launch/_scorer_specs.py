"""``--score SPEC``: a built-in scorer (``hn.scorers``) named in a word, for both faces.

A spec is a kind, alone or followed by a colon and its argument (everything after the
first colon, so a text or pattern may hold colons):

- ``includes`` / ``includes:TEXT``, ``exact`` / ``exact:TEXT``, ``regex`` /
  ``regex:PATTERN``: the answer against TEXT, or each sample's target when alone;
- ``json_schema:FILE.json``: the answer valid against the JSON Schema in that file;
- ``file_contains:PATH`` / ``file_contains:PATH:TEXT``: a file of the run's workspace
  copy contains TEXT (else the sample's target); PATH holds no colon;
- ``command:ARGV`` (split as a shell would, run with none): exits 0 in the workspace copy;
- ``tests`` / ``tests:ARGV``: pytest's partial credit (default ``python -m pytest -q``).

``score_spec`` is the option's argparse type: a bad spec is a usage error naming the
spec and the kinds (the command exits 2, the magic shows one line).
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules._errors import ConfigError

if TYPE_CHECKING:
    from ..sweeps._scorers import BuiltinScorer

__all__ = ["SCORE_FORMS", "reads_target", "score_spec", "scorer_from"]

SCORE_FORMS = (
    "includes[:TEXT]",
    "exact[:TEXT]",
    "regex[:PATTERN]",
    "json_schema:FILE.json",
    "file_contains:PATH[:TEXT]",
    "command:ARGV",
    "tests[:ARGV]",
)
"""The forms of a ``--score`` spec, as the help and the errors name them."""


def _argv(text: str) -> list[str]:
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"cannot split {text!r} into words: {exc}") from None
    if not argv:
        raise ConfigError("the command has no words")
    return argv


def _schema(path: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the schema file {path!r}: {exc}") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise ConfigError(f"{path!r} is not JSON: nested too deeply") from None
    except ValueError as exc:  # bad JSON, or an integer of too many digits
        raise ConfigError(f"{path!r} is not JSON: {exc}") from None


def _build(kind: str, arg: str | None) -> BuiltinScorer:
    """The scorer of ``kind`` with its argument (None: the kind alone)."""
    from ..sweeps import _scorers as scorers  # imported on use: the command starts light

    if kind == "includes":
        return scorers.includes(arg)
    if kind == "exact":
        return scorers.exact(arg)
    if kind == "regex":
        return scorers.regex(arg)
    if kind == "tests":
        return scorers.tests() if arg is None else scorers.tests(_argv(arg))
    given = arg or ""  # the kinds below always have theirs (_NEEDS)
    if kind == "json_schema":
        return scorers.json_schema(_schema(given))
    if kind == "command":
        return scorers.command(_argv(given))
    path, colon, text = given.partition(":")
    if colon and not text:
        raise ConfigError(
            "nothing after PATH's colon: write file_contains:PATH:TEXT, or PATH alone"
        )
    return scorers.file_contains(path, text if colon else None)


_KINDS = ("includes", "exact", "regex", "json_schema", "file_contains", "command", "tests")
_NEEDS = ("json_schema", "file_contains", "command")  # no meaning without an argument


def scorer_from(spec: str) -> BuiltinScorer:
    """The built-in scorer a ``--score`` spec names.

    Raises:
        ConfigError: an unknown kind (the kinds named), a missing or empty argument, or
            what the scorer refuses (a pattern that does not compile, a schema file that
            is not a JSON Schema, an absolute path), each naming the spec.
    """
    kind, colon, arg = spec.partition(":")
    kind = kind.strip()
    if kind not in _KINDS:
        raise ConfigError(
            f"--score {spec!r}: no scorer kind {kind!r}; write one of {', '.join(SCORE_FORMS)}"
        )
    form = SCORE_FORMS[_KINDS.index(kind)]
    if kind in _NEEDS and not colon:
        raise ConfigError(f"--score {spec!r}: {kind} needs its argument: write {form}")
    if colon and not arg:
        raise ConfigError(f"--score {spec!r}: nothing after the colon: write {form}")
    try:
        return _build(kind, arg if colon else None)
    except ConfigError as err:
        raise ConfigError(f"--score {spec!r}: {err.message}") from None


def score_spec(text: str) -> BuiltinScorer:
    """``scorer_from`` as an argparse type: its error a usage error of the option."""
    try:
        return scorer_from(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(err.message.removeprefix("--score ")) from None


def reads_target(scorer: BuiltinScorer) -> str | None:
    """For a spec's scorer given no TEXT or PATTERN (it reads each sample's target, which
    a task written out has not): the form that gives it one; else None."""
    form = _OWN_TEXT.get(scorer.kind)
    given = getattr(scorer, "pattern" if scorer.kind == "regex" else "text", "")
    return form if form is not None and given is None else None


# The kinds that read the sample's target when given no text: the form that gives one.
_OWN_TEXT = {"includes": "includes:TEXT", "exact": "exact:TEXT", "regex": "regex:PATTERN",
             "file_contains": "file_contains:PATH:TEXT"}  # fmt: skip
