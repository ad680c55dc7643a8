"""Argument parsing for ``%harness`` / ``%%harness``: argparse that never exits.

The options of ``run`` and ``resume`` are those of ``harnessnb run``/``resume``, from
``launch._options``. Every problem is one ``UsageError`` line (IPython shows it
without a traceback); ``--help`` prints the help and stops the magic. ``argparse``
would otherwise call ``sys.exit``, which IPython reports as a SystemExit traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shlex
import string
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

from IPython.core.error import UsageError

from ..launch._options import (
    OUTPUT_OPTIONS,
    RESUME_OPTIONS,
    RUN_OPTIONS,
    STORE,
    absent_store,
    add_options,
    variable_name,
)
from ..launch._sweep_options import SWEEP_OPTIONS
from ..rules._errors import StoreError
from ..store._failures import FAILURE_GROUPS, failure_groups

__all__ = [
    "SUBCOMMANDS",
    "HelpShown",
    "expand_word",
    "help_text",
    "interpolate",
    "parse",
    "store_there",
    "words",
]


class HelpShown(Exception):
    """``--help`` was asked: the help has been printed, nothing else to do."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            raise UsageError(f"{self.prog}: {message.strip()}")
        raise HelpShown()


def _parser(sub: str, description: str) -> _Parser:
    return _Parser(
        prog=f"%harness {sub}", description=description, add_help=True, exit_on_error=False
    )


def _store_option(p: argparse.ArgumentParser) -> None:
    add_options(p, [STORE], "notebook")


def _out_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="VAR", type=variable_name, help="assign the DataFrame to VAR")


def _build() -> dict[str, _Parser]:
    run = _parser("run", "Run an agent on the task (the cell body, or TASK on the line).")
    run.add_argument("task", nargs="*", metavar="TASK", help="the task (line magic form)")
    add_options(run, RUN_OPTIONS, "notebook")

    resume = _parser("resume", "Continue a run where its last committed step left it.")
    resume.add_argument("run_id", metavar="RUN_ID")
    add_options(resume, RESUME_OPTIONS, "notebook")

    runs = _parser("runs", "The runs table as a DataFrame.")
    _store_option(runs)
    _out_option(runs)

    failures = _parser("failures", "Attempt failure rates as a DataFrame.")
    failures.add_argument(
        "--by",
        metavar="COLS",
        default="provider,kind",
        help=f"comma-separated columns to group by, among {', '.join(FAILURE_GROUPS)} "
        "(default provider,kind)",
    )
    _store_option(failures)
    _out_option(failures)

    show = _parser("show", "A run's card, steps, attempts and tool calls.")
    show.add_argument("run_id", metavar="RUN_ID")
    _store_option(show)

    replay = _parser("replay", "Run a recorded run again from its recordings (no network).")
    replay.add_argument("run_id", metavar="RUN_ID")
    _store_option(replay)
    replay.add_argument(
        "--into", metavar="PATH", help="store to record the replay in (default: in memory)"
    )
    replay.add_argument(
        "--workspace", metavar="DIR", help="a copy of the workspace as it was before the run"
    )
    add_options(replay, OUTPUT_OPTIONS, "notebook", mark=False)  # no `harnessnb replay`

    sweep = _parser(
        "sweep",
        "Run every task (one per line of the cell body, or each sample of --samples FILE "
        "on the line magic) with every provider, --repeats times, --concurrency at once.",
    )
    add_options(sweep, SWEEP_OPTIONS, "notebook")

    tb = _parser("tb", "The full traceback (or stored error) a card shortened.")
    tb.add_argument("run_id", metavar="RUN_ID")
    _store_option(tb)
    return {
        "run": run,
        "resume": resume,
        "runs": runs,
        "failures": failures,
        "show": show,
        "replay": replay,
        "sweep": sweep,
        "tb": tb,
    }


PARSERS = _build()
SUBCOMMANDS = tuple(PARSERS)


def help_text() -> str:
    """The whole help: every subcommand with every option."""
    head = (
        "%harness SUBCOMMAND [options]   (%%harness run [options] takes the task as the cell;\n"
        "%%harness sweep --providers A,B [options] takes one task per line)\n"
        "In a cell body and on the magic line, {name} is replaced by the value of `name` in "
        "the notebook (write {{ and }} for braces); on the line, $name too ($$ for a $).\n"
    )
    return head + "\n".join(p.format_help() for p in PARSERS.values())


def parse(line: str, user_ns: Mapping[str, Any] | None = None) -> tuple[str, argparse.Namespace]:
    """Split and parse a magic line into (subcommand, namespace).

    With ``user_ns``, each word of the line is expanded first (:func:`expand_word`).

    Raises:
        UsageError: unknown subcommand, bad option or value, unbalanced quotes.
        HelpShown: ``--help`` was given (help already printed).
    """
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"%harness: cannot split the line: {exc}") from None
    if user_ns is not None:
        argv = [expand_word(word, user_ns) for word in argv]
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(help_text())
        raise HelpShown()
    sub, rest = argv[0], argv[1:]
    parser = PARSERS.get(sub)
    if parser is None:
        raise UsageError(
            f"%harness: unknown subcommand {sub!r}; choose one of {', '.join(SUBCOMMANDS)} "
            "(see %harness --help)"
        )
    try:
        args = parser.parse_intermixed_args(rest) if sub == "run" else parser.parse_args(rest)
    except argparse.ArgumentError as exc:
        raise UsageError(f"{parser.prog}: {exc} (see {parser.prog} --help)") from None
    return sub, args


# Subcommands that only read the store: where there is none they say so and create
# nothing (``tb`` looks in the kernel's own errors first, so it is checked ``late``).
_READ_ONLY = ("runs", "failures", "show")


def store_there(sub: str, args: argparse.Namespace, *, late: bool = False) -> Any:
    """For a subcommand that only reads the store: a ``UsageError`` when that store is
    not there (a bad ``failures --by`` is told first, as with a store). ``tb`` is checked
    ``late``, once the kernel's own errors did not have the run. Returns ``args.store``."""
    if sub not in _READ_ONLY and not (late and sub == "tb"):
        return args.store
    if sub == "failures":
        try:
            failure_groups(tuple(c.strip() for c in args.by.split(",") if c.strip()), "")
        except StoreError as err:
            raise UsageError(f"%harness failures: --by {args.by!r}: {err.message}") from None
    if absent := absent_store(args.store):
        run = f"no run {args.run_id!r}: " if getattr(args, "run_id", None) else ""
        raise UsageError(f"%harness {sub}: {run}{absent} (%%harness run makes one)")
    return args.store


class _Strict(dict[str, Any]):
    def __missing__(self, key: str) -> Any:
        raise UsageError(
            f"%harness: {{{key}}}: {key!r} is not defined in the notebook (define it, or "
            "write {{ and }} for literal braces)"
        )


def interpolate(body: str, namespace: Mapping[str, Any]) -> str:
    """Replace ``{name}`` (and ``{name.attr}``, ``{name[0]}``) from ``namespace``."""
    with _filling("%%harness: cannot fill in the cell's {...} fields"):
        return string.Formatter().vformat(body, (), _Strict(namespace))


@contextlib.contextmanager
def _filling(what: str) -> Iterator[None]:
    """A field that cannot be filled in: a ``UsageError`` saying ``what`` and why."""
    try:
        yield
    except UsageError:
        raise
    except (ValueError, IndexError, KeyError, AttributeError, TypeError) as exc:
        raise UsageError(f"{what} ({exc}); write {{{{ and }}}} for literal braces") from None


_DOLLAR = re.compile(r"\$(\$|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
_FORMAT = string.Formatter()


def expand_word(word: str, namespace: Mapping[str, Any]) -> str:
    """One word of the magic line with the notebook's values filled in.

    ``{name}`` (``{name.attr}``, ``{name[0]}``) as in a cell body, strictly: an unknown
    name is a ``UsageError``; ``{{``/``}}`` are braces. ``$name`` (``$name.attr``) as in
    IPython's own magics: an unknown one stays as written; ``$$`` is a ``$``. Words are
    expanded after the line is split, so a value with spaces stays one argument.
    """
    if not any(c in word for c in "{}$"):
        return word
    out = []
    with _filling(f"%harness: cannot fill in {word!r} on the line"):
        for literal, field, spec, conversion in _FORMAT.parse(word):
            out.append(_DOLLAR.sub(lambda m: _dollar(m.group(1), namespace), literal))
            if field is None:
                continue
            if not field or field[0].isdigit():
                raise ValueError(f"{{{field}}} names no variable")
            value, _ = _FORMAT.get_field(field, (), _Strict(namespace))
            value = _FORMAT.convert_field(value, conversion)
            out.append(_FORMAT.format_field(value, spec or ""))
    return "".join(out)


def _dollar(name: str, namespace: Mapping[str, Any]) -> str:
    if name == "$":
        return "$"
    head, *attrs = name.split(".")
    if head not in namespace:
        return f"${name}"  # not a notebook variable: left as written, as IPython does
    value = namespace[head]
    for attr in attrs:
        if not hasattr(value, attr):
            return f"${name}"
        value = getattr(value, attr)
    return str(value)


def words(values: Sequence[str]) -> str:
    """Join the line-magic TASK words back into one task."""
    return " ".join(values).strip()
