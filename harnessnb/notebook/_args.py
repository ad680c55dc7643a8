"""Argument parsing for ``%harness`` / ``%%harness``: argparse that never exits.

Every problem is one ``UsageError`` line (IPython shows it without a traceback);
``--help`` prints the help and stops the magic. ``argparse`` would otherwise call
``sys.exit``, which IPython reports as a SystemExit traceback.
"""

from __future__ import annotations

import argparse
import shlex
import string
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from IPython.core.error import UsageError

from ..launch._choose import PROVIDER_NAMES

AGENT_NAMES = ("claude", "claude-code", "codex", "copilot")

__all__ = ["SUBCOMMANDS", "HelpShown", "help_text", "interpolate", "parse", "words"]


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
    return _Parser(prog=f"%harness {sub}", description=description, add_help=True,
                   exit_on_error=False)


def _store_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="PATH",
                   help="DuckDB file of runs (default: $HARNESSNB_STORE or ./runs.duckdb)")


def _provider_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--provider", metavar="NAME", choices=PROVIDER_NAMES,
                   help="openai, openrouter, anthropic, local (needs --base-url) or demo; "
                   "default: $HARNESSNB_PROVIDER, else the first API key found "
                   "(OPENROUTER_API_KEY, ANTHROPIC_API_KEY, OPENAI_API_KEY), else the demo model")
    p.add_argument("--model", metavar="M", help="model name (default: the provider's)")
    p.add_argument("--base-url", metavar="URL", help="another server for the provider")
    p.add_argument("--fallback", metavar="NAME", nargs="+", default=[], choices=PROVIDER_NAMES,
                   help="providers to fall back to, in order, after a retryable failure")


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="VAR", help="assign the result to VAR in the notebook")
    p.add_argument("--quiet", action="store_true",
                   help="no live progress, and no card unless the run failed")


def _build() -> dict[str, _Parser]:
    run = _parser("run", "Run an agent on the task (the cell body, or TASK on the line).")
    run.add_argument("task", nargs="*", metavar="TASK", help="the task (line magic form)")
    _provider_options(run)
    run.add_argument("--workspace", metavar="DIR", default=".",
                     help="folder the agent works in (default: the current folder)")
    check = run.add_mutually_exclusive_group()
    check.add_argument("--verify", metavar='"FILE contains TEXT"',
                       help="success when FILE contains TEXT")
    check.add_argument("--verify-cmd", metavar='"COMMAND"',
                       help="success when COMMAND exits 0 in the workspace")
    run.add_argument("--max-steps", metavar="N", type=_positive_int,
                     help="model turns allowed (default 12; with --agent, the CLI's own "
                     "turn limit where it has one)")
    run.add_argument("--max-seconds", metavar="S", type=_positive_float,
                     help="wall-clock budget in seconds (default: none)")
    _store_option(run)
    run.add_argument("--allow-write", metavar="GLOB", nargs="+", default=[],
                     help="workspace paths the agent may write without asking")
    agent = run.add_argument_group(
        "coding-agent CLI", "hand the task to an installed CLI instead of harnessnb's own loop")
    agent.add_argument("--agent", metavar="CLI", choices=AGENT_NAMES,
                       help="claude, codex or copilot (the CLI must be installed and logged in)")
    agent.add_argument("--session", metavar="NAME",
                       help="continue the CLI session bound to NAME (bound on first use)")
    agent.add_argument("--permission", choices=("read_only", "edit", "bypass"),
                       help="what the CLI may do in the workspace (default read_only)")
    agent.add_argument("--timeout", metavar="S", type=_positive_float,
                       help="kill the CLI and all its processes after S seconds")
    _output_options(run)

    resume = _parser("resume", "Continue a run where its last committed step left it.")
    resume.add_argument("run_id", metavar="RUN_ID")
    _provider_options(resume)
    _store_option(resume)
    _output_options(resume)

    runs = _parser("runs", "The runs table as a DataFrame.")
    _store_option(runs)
    runs.add_argument("--out", metavar="VAR", help="assign the DataFrame to VAR")

    failures = _parser("failures", "Attempt failure rates as a DataFrame.")
    failures.add_argument("--by", metavar="COLS", default="provider,kind",
                          help="comma-separated grouping columns (default provider,kind)")
    _store_option(failures)
    failures.add_argument("--out", metavar="VAR", help="assign the DataFrame to VAR")

    show = _parser("show", "A run's card, steps, attempts and tool calls.")
    show.add_argument("run_id", metavar="RUN_ID")
    _store_option(show)

    replay = _parser("replay", "Run a recorded run again from its recordings (no network).")
    replay.add_argument("run_id", metavar="RUN_ID")
    _store_option(replay)
    replay.add_argument("--into", metavar="PATH",
                        help="store to record the replay in (default: in memory)")
    replay.add_argument("--workspace", metavar="DIR",
                        help="a copy of the workspace as it was before the run")
    _output_options(replay)

    tb = _parser("tb", "The full traceback (or stored error) a card shortened.")
    tb.add_argument("run_id", metavar="RUN_ID")
    _store_option(tb)
    return {"run": run, "resume": resume, "runs": runs, "failures": failures, "show": show,
            "replay": replay, "tb": tb}


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return value


PARSERS = _build()
SUBCOMMANDS = tuple(PARSERS)


def help_text() -> str:
    """The whole help: every subcommand with every option."""
    head = (
        "%harness SUBCOMMAND [options]   (%%harness run [options] takes the task as the cell)\n"
        "In a cell body, {name} is replaced by the value of `name` in the notebook; "
        "write {{ and }} for braces.\n"
    )
    return head + "\n".join(p.format_help() for p in PARSERS.values())


def parse(line: str) -> tuple[str, argparse.Namespace]:
    """Split and parse a magic line into (subcommand, namespace).

    Raises:
        UsageError: unknown subcommand, bad option or value, unbalanced quotes.
        HelpShown: ``--help`` was given (help already printed).
    """
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"%harness: cannot split the line: {exc}") from None
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


class _Strict(dict[str, Any]):
    def __missing__(self, key: str) -> Any:
        raise UsageError(
            f"%%harness: the cell refers to {{{key}}}, but {key!r} is not defined in the "
            "notebook (define it, or write {{ and }} for literal braces)"
        )


def interpolate(body: str, namespace: Mapping[str, Any]) -> str:
    """Replace ``{name}`` (and ``{name.attr}``, ``{name[0]}``) from ``namespace``."""
    try:
        return string.Formatter().vformat(body, (), _Strict(namespace))
    except UsageError:
        raise
    except (ValueError, IndexError, KeyError, AttributeError) as exc:
        raise UsageError(
            f"%%harness: cannot fill in the cell's {{...}} fields ({exc}); write {{{{ and }}}} "
            "for literal braces"
        ) from None


def words(values: Sequence[str]) -> str:
    """Join the line-magic TASK words back into one task."""
    return " ".join(values).strip()
