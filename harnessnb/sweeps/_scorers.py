"""The built-in scorers (``hn.scorers``): each a callable ``(run, sample, workspace) ->
Score`` with a ``name`` and a ``version``, stored with every score it gives.

A scorer's ``name`` is how it was built, defaults left out (``includes``,
``includes('Paris', case_sensitive=True)``, ``command(['make', 'test'])``), so two
scorers of one kind in one sweep have their own rows and a rescore in another process
finds the same name; its ``version`` changes when what it judges the same answer to be
changes. A scorer is plain data (it pickles, for a sweep on Dask): a pattern or schema
is checked when the scorer is built and compiled (once, cached) when it scores.

The text scorers read the run's last answer (``RunResult.text``); the file and command
scorers read or run in the run's own workspace copy: a file through the workspace's
containment walk (``tools/_workspace.py``), a command through the one subprocess runner
in the sandbox (``tools/_process.py``: no shell, its process group killed at the
timeout, its output bounded and scrubbed). A scorer that needs a target the sample lacks
raises ``ConfigError`` naming the scorer and the sample: a scoring error, not a wrong
answer. ``model_graded``, the LLM judge, lives in ``_judge`` (its calls recorded so a
replay re-scores with no key) and is exported here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..loop._contract import FileContains
from ..loop._verify import run_verification
from ..rules._errors import ConfigError, ToolError
from ..rules._policy import Policy, exec_target
from ..rules._secrets import scrub
from ..rules._text import shorten
from ..tools._builtin import re2_compile
from ..tools._process import CommandResult, run_argv
from ..tools._schema import schema_problems, validate_args
from ..tools._workspace import Workspace
from ._judge import model_graded
from ._sample import Sample, Score, _relative

if TYPE_CHECKING:
    from ..loop._result import RunResult

__all__ = [
    "BuiltinScorer",
    "command",
    "exact",
    "file_contains",
    "includes",
    "json_schema",
    "model_graded",
    "regex",
    "tests",
]

_SHOWN = 80  # characters of an answer, a target or a match in an explanation
_TAIL = 2_000  # characters of a command's output kept in its explanation
_PYTEST = ("python", "-m", "pytest", "-q")


class BuiltinScorer:
    """What the built-in scorers share: a ``name`` from how it was built, a ``version``,
    the sample's target when the scorer was given no text of its own."""

    kind: ClassVar[str]
    version: ClassVar[str] = "1"

    def _given(self) -> tuple[list[Any], dict[str, Any]]:
        """The arguments the scorer was built with that differ from the defaults."""
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        values = [(f, _listed(getattr(self, f.name))) for f in fields]
        args = [v for f, v in values if not f.kw_only and v != _listed(f.default)]
        kwargs = {f.name: v for f, v in values if f.kw_only and v != _listed(f.default)}
        return args, kwargs

    @property
    def name(self) -> str:
        """``kind`` with the arguments given (``includes('Paris')``), secrets scrubbed."""
        args, kwargs = self._given()
        shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
        return scrub(f"{self.kind}({', '.join(shown)})" if shown else self.kind)

    def __repr__(self) -> str:
        return f"<scorer {self.name} v{self.version}>"

    def __call__(self, run: RunResult, sample: Sample, workspace: Path) -> Score | Awaitable[Score]:
        """The verdict on ``run`` of ``sample``, its workspace copy at ``workspace``
        (a coroutine for the scorers that read or run in the workspace)."""
        raise NotImplementedError

    def _target(self, text: str | None, sample: Sample) -> str:
        if text is not None:
            return text
        if sample.target is None:
            raise ConfigError(
                f"scorer {self.name}: sample {sample.id!r} has no target (give the sample "
                "one, or the scorer its own text)"
            )
        return sample.target


def _listed(value: Any) -> Any:
    """An argv kept as a tuple (the scorer is immutable) shown as the list it was given."""
    return list(value) if isinstance(value, tuple) else value


def _shown(text: str) -> str:
    return shorten(repr(text), _SHOWN)


def _some_text(text: str | None, scorer: str) -> str | None:
    if text is not None and (not isinstance(text, str) or not text):
        raise ConfigError(f"scorers.{scorer}: text must be non-empty text or None, got {text!r}")
    return text


# ------------------------------------------------------------------ the answer's text


@dataclasses.dataclass(frozen=True, repr=False)
class _Includes(BuiltinScorer):
    kind: ClassVar[str] = "includes"
    text: str | None = None
    case_sensitive: bool = dataclasses.field(default=False, kw_only=True)

    def __call__(self, run: RunResult, sample: Sample, workspace: Path) -> Score:
        target = self._target(self.text, sample)
        if self.case_sensitive:
            found = target in run.text
        else:
            found = target.casefold() in run.text.casefold()
        said = "contains" if found else "does not contain"
        return Score(found, f"the answer {said} {_shown(target)}")


def includes(text: str | None = None, *, case_sensitive: bool = False) -> BuiltinScorer:
    """Passes when the run's last answer contains ``text`` (default: the sample's
    target), ignoring case unless ``case_sensitive``."""
    return _Includes(_some_text(text, "includes"), case_sensitive=case_sensitive)


@dataclasses.dataclass(frozen=True, repr=False)
class _Exact(BuiltinScorer):
    kind: ClassVar[str] = "exact"
    text: str | None = None
    strip: bool = dataclasses.field(default=True, kw_only=True)
    case_sensitive: bool = dataclasses.field(default=True, kw_only=True)

    def __call__(self, run: RunResult, sample: Sample, workspace: Path) -> Score:
        target = self._target(self.text, sample)
        wanted, answer = (target.strip(), run.text.strip()) if self.strip else (target, run.text)
        if not self.case_sensitive:
            wanted, answer = wanted.casefold(), answer.casefold()
        if wanted == answer:
            return Score(True, f"the answer is {_shown(target)}")
        return Score(False, f"the answer {_shown(run.text)} is not {_shown(target)}")


def exact(
    text: str | None = None, *, strip: bool = True, case_sensitive: bool = True
) -> BuiltinScorer:
    """Passes when the run's last answer is ``text`` (default: the sample's target):
    surrounding whitespace ignored when ``strip``, case when not ``case_sensitive``."""
    return _Exact(_some_text(text, "exact"), strip=strip, case_sensitive=case_sensitive)


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (linear time: a target is untrusted data), or a
    ``ConfigError`` saying why not."""
    try:
        return re2_compile(pattern, shorten(pattern, _SHOWN), "regex")
    except ToolError as exc:
        raise ConfigError(exc.message) from None


@dataclasses.dataclass(frozen=True, repr=False)
class _Regex(BuiltinScorer):
    kind: ClassVar[str] = "regex"
    pattern: str | None = None

    def __call__(self, run: RunResult, sample: Sample, workspace: Path) -> Score:
        pattern = self._target(self.pattern, sample)
        try:
            found = _compiled(pattern).search(run.text)
        except ConfigError as exc:  # the sample's target as a pattern: checked only now
            raise ConfigError(f"scorer {self.name}, sample {sample.id!r}: {exc.message}") from None
        if found is None:
            return Score(False, f"no match for {_shown(pattern)}")
        return Score(True, f"{_shown(pattern)} matched {_shown(found.group(0))}")


def regex(pattern: str | None = None) -> BuiltinScorer:
    """Passes when ``pattern`` (RE2 syntax; default: the sample's target) matches
    somewhere in the run's last answer (anchor it with ``^...$`` for the whole).

    Raises:
        ConfigError: the pattern does not compile (at once, not when scoring).
    """
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError(f"scorers.regex: pattern must be non-empty text, got {pattern!r}")
        _compiled(pattern)
    return _Regex(pattern)


# ------------------------------------------------------------------ JSON


_FENCED_JSON = re.compile(r"```json[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


def _json_of(text: str) -> str:
    """The last fenced ```json block of ``text``, else all of it."""
    blocks = _FENCED_JSON.findall(text)
    return str(blocks[-1]) if blocks else text


@dataclasses.dataclass(frozen=True, repr=False)
class _JsonSchema(BuiltinScorer):
    kind: ClassVar[str] = "json_schema"
    schema: Mapping[str, Any] = dataclasses.field(hash=False)  # a dict: not hashable

    @property
    def name(self) -> str:  # a schema is long: its title, else the start of its JSON
        title = self.schema.get("title")
        key = title if isinstance(title, str) else json.dumps(self.schema, sort_keys=True)
        return scrub(f"json_schema({shorten(key, 40)!r})")

    def __call__(self, run: RunResult, sample: Sample, workspace: Path) -> Score:
        try:
            value = json.loads(_json_of(run.text))
        except RecursionError:  # the answer is the model's: a wrong one, not an error
            return Score(False, "the answer is not JSON: nested too deeply")
        except ValueError as exc:  # bad JSON, or an integer of too many digits
            return Score(False, f"the answer is not JSON: {exc}")
        problems = validate_args(self.schema, value)
        if problems:
            said = [re.sub(r"^arguments\b", "the answer", p) for p in problems]
            return Score(False, shorten("; ".join(said), 4 * _SHOWN))
        return Score(True, "the answer is JSON valid against the schema")


def json_schema(schema: Mapping[str, Any]) -> BuiltinScorer:
    """Passes when the run's last answer (or the last fenced ```json block in it) is JSON
    valid against ``schema`` (draft 7, as a tool's parameters are checked).

    Raises:
        ConfigError: ``schema`` is not a valid JSON Schema (at once, not when scoring).
    """
    if not isinstance(schema, Mapping):
        raise ConfigError(f"scorers.json_schema: a schema is a JSON object, not {schema!r}")
    problems = schema_problems(schema)
    if problems:
        raise ConfigError(f"scorers.json_schema: not a valid JSON Schema: {'; '.join(problems)}")
    return _JsonSchema(dict(schema))


# ------------------------------------------------------------------ the workspace


@dataclasses.dataclass(frozen=True, repr=False)
class _FileContains(BuiltinScorer):
    kind: ClassVar[str] = "file_contains"
    path: str
    text: str | None = None

    async def __call__(self, run: RunResult, sample: Sample, workspace: Path) -> Score:
        check = FileContains(self.path, self._target(self.text, sample))
        # The verification's own read: walked inside the workspace (a symlink out is
        # refused, a FIFO never waited on); the policy is not asked about a file read.
        done = await run_verification(check, Workspace(workspace), policy=Policy(), approver=None)
        return Score(done.passed, scrub(done.detail))


def file_contains(path: str | os.PathLike[str], text: str | None = None) -> BuiltinScorer:
    """Passes when the file ``path`` of the run's workspace copy contains ``text``
    (default: the sample's target).

    Raises:
        ConfigError: ``path`` is absolute or climbs out with ``..`` (at once); a symlink
            that leads out of the workspace fails the score when it is read.
    """
    return _FileContains(_relative(path), _some_text(text, "file_contains"))


def _argv(argv: Sequence[str], scorer: str) -> tuple[str, ...]:
    if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
        raise ConfigError(f"scorers.{scorer}: argv is a non-empty list of strings, not {argv!r}")
    return tuple(argv)


def _tail(output: str) -> str:
    """The end of a command's output, scrubbed, from a line's start."""
    text = scrub(output).rstrip()
    if len(text) <= _TAIL:
        return text
    cut = text[-_TAIL:]
    return "..." + cut[cut.find("\n") :] if "\n" in cut else "..." + cut


def _with_tail(said: str, tail: str) -> str:
    """An explanation: what happened, then the output's end (the argv may hold a key)."""
    return scrub(f"{said}\n{tail}" if tail else said)


@dataclasses.dataclass(frozen=True, repr=False)
class _Runs(BuiltinScorer):
    """A scorer that runs ``argv`` in the workspace copy, sandboxed as an agent's command
    (no network, the secrets masked, the minimal environment), its process group killed
    at the timeout."""

    argv: tuple[str, ...]
    timeout_s: float = dataclasses.field(default=60.0, kw_only=True)

    async def _ran(self, workspace: Path) -> tuple[CommandResult, str, str | None]:
        """What the command did, the end of its output and, when it outlived its
        timeout, the words for that (else None)."""
        done = await run_argv(list(self.argv), cwd=workspace, timeout_s=self.timeout_s)
        late = done.timed_out or done.exit_code is None
        words = f"timed out after {self.timeout_s:g} s" if late else None
        return done, _tail(done.output), words


@dataclasses.dataclass(frozen=True, repr=False)
class _Command(_Runs):
    kind: ClassVar[str] = "command"

    async def __call__(self, run: RunResult, sample: Sample, workspace: Path) -> Score:
        done, tail, late = await self._ran(workspace)
        said = f"`{exec_target(self.argv)}` {late or f'exited {done.exit_code}'}"
        return Score(done.exit_code == 0 and late is None, _with_tail(said, tail))


def command(argv: Sequence[str], *, timeout_s: float = 60.0) -> BuiltinScorer:
    """Passes when ``argv`` (no shell) exits 0 in the run's workspace copy, sandboxed like
    the agent's commands; killed (and failed) after ``timeout_s``. The explanation is the
    end of its output, scrubbed.

    Raises:
        ConfigError: ``argv`` is not a non-empty list of strings.
    """
    return _Command(_argv(argv, "command"), timeout_s=float(timeout_s))


_COUNT = r"\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?|rerun)"
_SUMMARY = re.compile(rf"^=*\s*((?:{_COUNT})(?:, {_COUNT})*|no tests ran) in \d+(?:\.\d+)?s\b")


def pytest_counts(output: str) -> tuple[str, dict[str, int]] | None:
    """pytest's last summary line in ``output`` (``1 failed, 2 passed in 0.05s``) and its
    counts by outcome (``errors`` as ``error``); None when there is none."""
    for line in reversed(output.splitlines()):
        found = _SUMMARY.match(line.strip())
        if found:
            counts = re.findall(r"(\d+) ([a-z]+)", found.group(1))
            return line.strip(" ="), {w.removesuffix("s"): int(n) for n, w in counts}
    return None


def _one_summary(scorer: str, done: CommandResult, tail: str) -> None:
    """Refuse output with more than one line shaped as pytest's summary: one was printed
    by something else (a conftest.py's hook, a test), and the last is not surely pytest's.

    Raises:
        ConfigError: two or more summary lines (named): a scoring error, not a score.
    """
    lines = [line.strip(" =") for line in done.output.splitlines() if _SUMMARY.match(line.strip())]
    if len(lines) > 1:
        raise ConfigError(
            f"scorer {scorer}: {len(lines)} lines shaped as pytest's summary in the output "
            f"({', '.join(map(repr, lines[-3:]))}): which is pytest's own cannot be told "
            f"(a conftest.py or a test printing one?):\n{tail}"
        )


@dataclasses.dataclass(frozen=True, repr=False)
class _Tests(_Runs):
    kind: ClassVar[str] = "tests"
    argv: tuple[str, ...] = _PYTEST
    timeout_s: float = dataclasses.field(default=300.0, kw_only=True)

    async def __call__(self, run: RunResult, sample: Sample, workspace: Path) -> Score:
        done, tail, late = await self._ran(workspace)
        if late is not None:
            return Score(0.0, _with_tail(f"the tests {late}", tail))
        found = pytest_counts(done.output)
        if found is None:
            raise ConfigError(
                f"scorer {self.name}: no pytest summary line in the output of "
                f"`{exec_target(self.argv)}` (exit {done.exit_code}):\n{tail}"
            )
        summary, counts = found
        _one_summary(self.name, done, tail)
        passed = counts.get("passed", 0)
        wrong = counts.get("failed", 0) + counts.get("error", 0)
        if (done.exit_code == 0 and wrong) or (done.exit_code == 1 and not wrong):
            raise ConfigError(
                f"scorer {self.name}: pytest exited {done.exit_code} but its summary line "
                f"says {summary!r}: the output was not pytest's own (a conftest.py or a "
                f"test printing one?):\n{tail}"
            )
        total = passed + wrong
        if total == 0:
            return Score(0.0, f"no tests ran ({summary})")
        said = f"{passed} of {total} tests passed ({summary})"
        return Score(passed / total, _with_tail(said, tail))


def tests(argv: Sequence[str] = _PYTEST, *, timeout_s: float = 300.0) -> BuiltinScorer:
    """Partial credit from pytest run in the run's workspace copy (sandboxed like
    ``command``): passed / (passed + failed + errors), read from pytest's summary line;
    no tests collected scores 0. A run whose output has no summary line (pytest missing,
    a bad option), more than one (something printed a fake), or one at odds with pytest's
    exit code (0 with failures, 1 without) raises ``ConfigError``: a scoring error, not a
    wrong answer. pytest runs the workspace's own ``conftest.py`` and plugins, which can
    change any result: this scorer grades work, it is no guard against an agent that
    rewrites its test harness (give ``--noconftest`` in ``argv`` to leave them out).

    Raises:
        ConfigError: ``argv`` is not a non-empty list of strings.
    """
    return _Tests(_argv(argv, "tests"), timeout_s=float(timeout_s))
