"""The ``harnessnb`` command: a thin face over the run loop and the store.

Commands::

    harnessnb --version
    harnessnb demo [--seed N] [--chaos | --no-chaos] [--stall] [--workspace DIR]
    harnessnb run TASK --workspace DIR [--provider NAME] [--model M] [--base-url URL]
                  [--fallback NAME[,NAME]] [--verify "FILE contains TEXT" | --verify-cmd CMD]
                  [--allow-write GLOB[,GLOB]] [--max-steps N] [--max-seconds S]
                  [--max-cost USD] [--price MODEL=IN,OUT ...] [--approval-timeout S]
    harnessnb run TASK --workspace DIR --agent claude|codex|copilot [--session NAME]
                  [--permission read_only|edit|bypass] [--timeout S] [--model M]
    harnessnb resume RUN_ID [--provider NAME] [--model M] [--base-url URL]
                  [--fallback NAME[,NAME]] [--price MODEL=IN,OUT ...] [--approval-timeout S]
    harnessnb sweep TASK [TASK ...] --providers A,B,C --workspace DIR [--repeats N]
                  [--concurrency K] [--max-sweep-cost USD] [--keep-workspaces]
                  [--executor ADDRESS|local --shards DIR] [--sweep-id ID] [--score SPEC ...]
                  [run options: --model --base-url --verify --verify-cmd --max-steps
                  --max-seconds --max-cost --price --allow-write]
    harnessnb sweep --samples FILE --providers A,B,C --workspace DIR [--score SPEC ...]
                  [the other options of a sweep]
    harnessnb runs
    harnessnb failures [--by provider,kind]

``run`` and ``resume`` take the options of ``%harness run``/``resume``, defined once in
``launch._options`` (less the notebook's ``--out`` and ``--quiet``). A list option
(``--allow-write``, ``--fallback``) is repeated, or takes values separated by commas.
Every command takes ``--store PATH`` (default ``$HARNESSNB_STORE``, else
``runs.duckdb`` in the working directory: the same store the notebook magics use);
``runs`` and ``failures`` only read it: on a store that is not there they say so and
create nothing (no store file, no lock file).
With no ``--provider``: ``$HARNESSNB_PROVIDER``, else the first API key found
(OPENROUTER_API_KEY, ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY), else the demo model
(rule-based, not an LLM), with a note saying so.

Exit codes (the run's outcome decides for demo, run and resume)::

    0    success (the check passed) or finished (no check was set)
    1    an error outside a run (the store, a resume that cannot start, a bug)
    2    usage or configuration error (bad option, missing key, no such workspace)
    3    escalated_retryable: a retryable provider failure outlasted the retries
    4    escalated_terminal: a failure no retry can cure (auth, bad request)
    5    stalled: the agent went round in circles
    6    a budget ran out: step_cap, time_budget, token_budget or cost_budget
    7    needs_reconciliation: a write may or may not have landed (resolve, then resume)
    8    denied or awaiting_approval: the policy refused, or a person must decide
    9    unverified: the agent stopped, but the check failed
    130  cancelled (Ctrl-C); the run stays resumable

Errors print as the error's short text card, never as a Python traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .launch import _options
from .launch._mcp_spec import mcp_from
from .launch._otel import tracer_provider_from
from .launch._sweep_options import SWEEP_OPTIONS, cluster, providers_from, sweep_kwargs, sweep_tasks
from .launch._words import event_words, streamed_words
from .loop._contract import FileContains, TaskContract
from .loop._driver import run_sync
from .loop._durable import resume_sync
from .loop._events import DELTA_TAIL
from .rules._errors import ConfigError, HarnessError, wrap_unknown
from .rules._events import DeltaEvent, FinishedEvent, StartedEvent
from .rules._policy import Policy
from .rules._retry import RetryPolicy
from .rules._secrets import scrub
from .rules._text import printable, shorten
from .store._failures import FAILURE_GROUPS
from .store._open import refuse_store_inside
from .tools._gate import hints_name

if TYPE_CHECKING:
    import pandas as pd

    from .agents import AgentResult
    from .loop._events import RunEvent
    from .loop._result import RunResult
    from .providers._completion import Provider
    from .store._store import Store

__all__ = ["DEMO_CHAOS", "DEMO_SEED", "DEMO_TASK", "EXIT_CODES", "main"]

EXIT_CODES: dict[str, int] = {
    "success": 0,
    "finished": 0,
    "escalated_retryable": 3,
    "escalated_terminal": 4,
    "stalled": 5,
    "step_cap": 6,
    "time_budget": 6,
    "token_budget": 6,
    "cost_budget": 6,
    "needs_reconciliation": 7,
    "denied": 8,
    "awaiting_approval": 8,
    "unverified": 9,
    "cancelled": 130,
}
EXIT_ERROR = 1
EXIT_USAGE = 2

DEMO_TASK = "summarise README.md into NOTES.md"
DEMO_SEED = 32
"""The default demo seed: its first three attempts get a 429 (Retry-After 1 s), a 503 and
a malformed answer, then the run goes through: every kind of retry in about 3 s."""
DEMO_CHAOS: dict[str, float] = {"rate_limited": 0.2, "server": 0.1, "malformed": 0.05}
"""Failure rates of ``harnessnb demo``; the 429s carry ``Retry-After: 1``."""

_EPILOG = """\
exit codes: 0 success/finished, 1 error outside a run, 2 usage or configuration error,
3 escalated_retryable, 4 escalated_terminal, 5 stalled, 6 step/time/token budget,
7 needs_reconciliation, 8 denied or awaiting_approval, 9 unverified (the check failed),
130 cancelled (Ctrl-C)."""


# ------------------------------------------------------------------ output


def _out(*parts: object, file: TextIO | None = None, flush: bool = False) -> None:
    """``print`` for the command: model, server and file text is shown, never obeyed
    (control characters and escape sequences come out escaped, see ``printable``)."""
    text = (printable(str(part), lines=True) for part in parts)
    print(*text, file=file or sys.stdout, flush=flush)


# ------------------------------------------------------------------ progress


class LineProgress:
    """Prints one line per event worth a line, in the words of ``launch._words``.

    On a terminal, the answer the model is streaming shows live on one line that the
    next event's line replaces (``delta`` events come at most ten a second); piped
    output gets the lines alone.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self.run_id: str | None = None
        self.max_steps = 0
        self._streamed = ""  # the tail of the answer being streamed
        self._live = False  # the live line is on screen

    def __call__(self, event: RunEvent) -> None:
        out = self._stream or sys.stdout
        if isinstance(event, DeltaEvent):
            self._show_streamed(event, out)
            return
        self._streamed = ""
        if self._live:
            out.write("\r\x1b[K")  # the live line gives way to the event's
            self._live = False
        line = self.line(event)
        if line is not None:
            _out(line, file=out, flush=True)

    def _show_streamed(self, event: DeltaEvent, out: TextIO) -> None:
        if not out.isatty():
            return
        text = event.text
        tail = text if event.restart else self._streamed + text
        self._streamed = tail[-DELTA_TAIL:]
        width = max(20, shutil.get_terminal_size().columns - 5)
        out.write(f"\r\x1b[K  > {streamed_words(self._streamed, width)}")
        out.flush()
        self._live = True

    def line(self, event: RunEvent) -> str | None:
        """The line for ``event`` (indented below its run's first line), or None."""
        if isinstance(event, StartedEvent):
            self.run_id = event.run_id
            self.max_steps = event.max_steps or 0
        words = event_words(event, max_steps=self.max_steps)
        if words is None or isinstance(event, StartedEvent):
            return words
        return "  " + words


# ------------------------------------------------------------------ parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``harnessnb`` command."""
    common = argparse.ArgumentParser(add_help=False)
    _options.add_options(common, [_options.STORE], "command")
    parser = argparse.ArgumentParser(
        prog="harnessnb",
        description="Run LLM agents on tasks in a workspace, durably; analyse the runs.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"harnessnb {_version()}")
    # Not required here: _main says what is missing, or names an unknown word.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_demo(sub, common)

    # run and resume take the options of %harness run / resume (launch._options).
    run = sub.add_parser("run", help="run an agent on a task", epilog=_EPILOG)
    run.add_argument("task", metavar="TASK", help="the task, in plain words")
    _options.add_options(run, _options.RUN_OPTIONS, "command")
    run.set_defaults(handler=cmd_run)

    resume = sub.add_parser("resume", help="continue an interrupted run", epilog=_EPILOG)
    resume.add_argument("run_id", metavar="RUN_ID")
    _options.add_options(resume, _options.RESUME_OPTIONS, "command")
    resume.set_defaults(handler=cmd_resume)

    sweep = sub.add_parser("sweep", help="run tasks x providers x repeats", epilog=_EPILOG)
    sweep.add_argument(
        "tasks", nargs="*", metavar="TASK", help="the tasks, in plain words (or --samples FILE)"
    )
    _options.add_options(sweep, SWEEP_OPTIONS, "command")
    sweep.set_defaults(handler=cmd_sweep)

    runs = sub.add_parser("runs", parents=[common], help="list the runs in the store")
    runs.set_defaults(handler=cmd_runs)

    failures = sub.add_parser(
        "failures", parents=[common], help="failure rates from the store's attempts"
    )
    failures.add_argument(
        "--by",
        default="provider,kind",
        metavar="COLS",
        help=f"comma-separated columns to group by, among {', '.join(FAILURE_GROUPS)} "
        "(default provider,kind)",
    )
    failures.set_defaults(handler=cmd_failures)
    for command in sub.choices.values():  # its own usage for its own errors (_main)
        command.set_defaults(parser=command)
    return parser


def _version() -> str:
    """The installed version (importing ``harnessnb`` itself would pull the notebook in)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("harnessnb")
    except PackageNotFoundError:
        return "(version unknown: the package is not installed)"


def _add_demo(sub: Any, common: argparse.ArgumentParser) -> None:
    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run the quickstart task on the demo model, with some chaos (no key needed)",
        description=(
            f"Run {DEMO_TASK!r} on the harnessnb demo model (rule-based, not an LLM) over "
            "loopback HTTP, with seeded failures, then print the outcome and the failure "
            "table from the store."
        ),
        epilog=_EPILOG,
    )
    demo.add_argument("--seed", type=int, default=DEMO_SEED, help="seeds the failure draw")
    demo.add_argument(
        "--chaos",
        action=argparse.BooleanOptionalAction,
        default=True,
        # argparse %-formats help text: a literal percent sign is written %%.
        help="inject failures: " + ", ".join(f"{k} {v:.0%}%" for k, v in DEMO_CHAOS.items()),
    )
    demo.add_argument("--stall", action="store_true", help="make the model loop on one read")
    demo.add_argument(
        "--workspace",
        metavar="DIR",
        help="where to build the demo project: a new or empty folder, or one an earlier demo "
        "made (default: a temporary folder); any other folder is refused, unchanged",
    )
    demo.set_defaults(handler=cmd_demo)


class _Scrubbed:
    """A text stream that writes through the one scrubber: the command's one exit."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(scrub(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``harnessnb`` command; returns the exit code (see the module docstring)."""
    # Every line the command prints (progress, cards, tables, notes) goes through it.
    with (
        contextlib.redirect_stdout(_Scrubbed(sys.stdout)),
        contextlib.redirect_stderr(_Scrubbed(sys.stderr)),
    ):
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)  # exits 2 on a usage error
    if unknown:  # said by the command they were given to, with its usage (exit 2)
        where: argparse.ArgumentParser = getattr(args, "parser", parser)
        where.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.error("the following arguments are required: COMMAND")
    face = "harnessnb sweep" if args.command == "sweep" else "harnessnb run"
    try:
        with hints_name(face):  # a refusal's hint names this command, not the magic
            code: int = args.handler(args)
        return code
    except KeyboardInterrupt:
        _out("cancelled", file=sys.stderr)
        return EXIT_CODES["cancelled"]
    except HarnessError as exc:
        return _report(exc)
    except Exception as exc:  # a bug: still a short card, not a traceback
        return _report(wrap_unknown(exc))


def _report(exc: HarnessError) -> int:
    _out(exc._repr_mimebundle_()["text/plain"], file=sys.stderr)
    return EXIT_USAGE if exc.code.startswith("CONFIG") else EXIT_ERROR


# ------------------------------------------------------------------ commands


def _store(args: argparse.Namespace) -> Store:
    from .store._open import open_store

    return open_store(args.store or None)


def _provider(args: argparse.Namespace) -> Provider:
    provider, note = _options.provider_from(args)
    if note:
        _out(f"note: {note}", flush=True)
    return provider


def _drive(run: Any, progress: LineProgress) -> Any:
    """Run a blocking call; on Ctrl-C say how to continue, then re-raise."""
    try:
        return run()
    except KeyboardInterrupt:
        if progress.run_id:
            _out(
                f"\ncancelled: {progress.run_id} is recorded as cancelled; continue with "
                f"`harnessnb resume {progress.run_id}`",
                file=sys.stderr,
            )
        raise


def _finish(result: RunResult | AgentResult) -> int:
    _out(result.summary_text())
    return EXIT_CODES.get(result.outcome.value, EXIT_ERROR)


def cmd_demo(args: argparse.Namespace) -> int:
    """``harnessnb demo``: the quickstart task on the demo model, with seeded chaos."""
    from .demo._model import make_demo_workspace, temporary_demo_workspace

    if args.workspace:
        return _demo(args, make_demo_workspace(args.workspace), kept=True)
    with temporary_demo_workspace() as workspace:  # removed when the demo ends
        return _demo(args, workspace, kept=False)


def _demo(args: argparse.Namespace, workspace: Path, *, kept: bool) -> int:
    from .demo._model import DEMO_LABEL, demo_server, provider_for, quickstart_notebook

    rates = DEMO_CHAOS if args.chaos else None
    store = _store(args)
    chaos = ", ".join(f"{k} {v:.0%}" for k, v in DEMO_CHAOS.items()) if rates else "none"
    _out(f"harnessnb demo: {DEMO_TASK!r}")
    _out(f"  model      {DEMO_LABEL}, over loopback HTTP")
    _out(f"  chaos      {chaos} (seed {args.seed})")
    _out(f"  workspace  {workspace}" + ("" if kept else " (temporary: removed at the end)"))
    _out(f"  store      {store.path}")
    contract = TaskContract(
        DEMO_TASK,
        workspace,
        verification=FileContains("NOTES.md", "#"),
        max_time_s=60,
        # Short real waits so the demo takes seconds; more retries than the default 2
        # so a failure streak at 35% chaos rarely ends the run.
        max_retries=4,
        retry=RetryPolicy(base_s=0.2, cap_s=2.0),
    )
    policy = Policy.default().layer("demo").allow_write("NOTES.md")
    progress = LineProgress()
    with demo_server(seed=args.seed, rates=rates, stall=args.stall) as server:
        provider = provider_for(server)
        result = _drive(
            lambda: run_sync(contract, provider, store=store, policy=policy, on_event=progress),
            progress,
        )
    _out()
    code = _finish(result)
    notes = workspace / "NOTES.md"
    if notes.exists():
        _out(f"\n{notes}:\n" + _indent(notes.read_text(encoding="utf-8")))
    _out("\nfailures of this run, from the store (attempts by provider and kind):")
    _out(_indent(_to_text(_run_failures(store, result.run_id))))
    stalls = store.stalls(result.run_id)
    if len(stalls):
        _out("\nstalls of this run:")
        _out(_indent(_to_text(stalls[["step", "signal", "action", "detail"]])))
    _out(
        f"\nnext: `harnessnb runs --store {store.path}`, `harnessnb failures`, "
        f"or open {quickstart_notebook()}"
    )
    return code


def _run_failures(store: Store, run_id: str) -> pd.DataFrame:
    table = store.failure_rates(by=("run_id", "provider", "kind"))
    mine = table[table["run_id"] == run_id]
    return mine.drop(columns=["run_id"])


def cmd_run(args: argparse.Namespace) -> int:
    """``harnessnb run TASK --workspace DIR``."""
    _options.check_run_options(args)
    if args.agent:
        return _run_agent(args)
    contract = _options.contract_from(args, args.task)
    policy = _options.policy_from(args, "cli")
    prices = _options.prices_from(args)
    servers = mcp_from(args)
    provider = _provider(args)
    refuse_store_inside(args.store or None, contract.workspace)  # before it is made
    store, progress, approver = _store(args), LineProgress(), _options.approver_from(args)
    result = _drive(
        lambda: run_sync(
            contract,
            provider,
            store=store,
            policy=policy,
            approver=approver,
            on_event=progress,
            prices=prices,
            mcp=servers,
            tracer_provider=tracer_provider_from(args),
        ),
        progress,
    )
    return _finish(result)


def cmd_sweep(args: argparse.Namespace) -> int:
    """``harnessnb sweep TASK ... --providers a,b --workspace DIR`` (or ``--samples FILE``
    for the tasks): exit 0 once every run ran (a failed run is a row of the sweep, not an
    error of the command). With ``--score``, the scores' summary follows the table."""
    from .sweeps._sweep import sweep_sync

    kwargs = sweep_kwargs(args, "cli")  # its sweep_id known before the end: a Ctrl-C names it
    tasks = sweep_tasks(args, args.tasks, "TASK arguments")
    providers = providers_from(args)

    def finished(event: RunEvent) -> None:
        if isinstance(event, FinishedEvent):
            _out(f"{event.run_id}: {event.outcome}", flush=True)

    def ended(row: Any) -> None:  # a run on a cluster worker, told here
        _out(f"{row.run_id}: {row.outcome}", flush=True)

    try:
        with cluster(args) as client:
            runs_on: dict[str, Any] = {"executor": client, "shards": args.shards, "on_run": ended}
            if client is None:  # the store is opened only for a run here
                runs_on = {"store": _store(args), "on_event": finished}
            result = sweep_sync(tasks, providers, **runs_on, **kwargs)
    except KeyboardInterrupt:
        where = f"hn.Store.combine({args.shards!r})" if args.executor else "harnessnb runs"
        _out(
            f"\ncancelled: sweep {kwargs['sweep_id']}: the runs in flight are recorded "
            f"cancelled and no other started (read them with `{where}`)",
            file=sys.stderr,
        )
        raise
    _out(result.summary_text())
    if result.scorers:
        table = result.summary()
        shown = table.round({c: 3 for c in table.columns if not c.startswith("cost")})
        _out("scores (mean with its 95% interval, clustered by sample):")
        _out(_indent(_to_text(shown)))
    return 0


def _run_agent(args: argparse.Namespace) -> int:
    """``harnessnb run TASK --agent CLI``: a coding-agent CLI instead of the loop."""
    from .agents import run_sync

    agent = _options.agent_from(args)
    store = _store(args)
    progress = LineProgress()
    run = functools.partial(run_sync, agent, args.task, args.workspace, session=args.session)
    result = _drive(
        lambda: run(store=store, on_event=progress, tracer_provider=tracer_provider_from(args)),
        progress,
    )
    return _finish(result)


def cmd_resume(args: argparse.Namespace) -> int:
    """``harnessnb resume RUN_ID``."""
    from .launch._choose import recorded_run

    _options.check_provider_options(args)
    prices = _options.prices_from(args)
    servers = mcp_from(args)
    store = _store(args)
    recorded = recorded_run(store, args.run_id)
    provider, note = _options.resume_provider_from(args, recorded)
    if note and recorded is not None:  # an unknown run: resume says so, not the choice
        _out(f"note: {note}", flush=True)
    progress = LineProgress()
    progress.run_id = args.run_id
    approver = _options.approver_from(args)
    result = _drive(
        lambda: resume_sync(
            args.run_id,
            provider,
            store=store,
            approver=approver,
            on_event=progress,
            prices=prices,
            mcp=servers,
            tracer_provider=tracer_provider_from(args),
        ),
        progress,
    )
    return _finish(result)


def cmd_runs(args: argparse.Namespace) -> int:
    """``harnessnb runs``: the store's runs, oldest first."""
    if absent := _options.absent_store(args.store):
        _out(f"{absent} (`harnessnb run` or `harnessnb demo` makes one)")
        return 0
    store = _store(args)
    runs = store.runs()
    if not len(runs):
        _out(f"no runs in {store.path}")
        return 0
    cols = ["run_id", "started_at", "provider", "model", "outcome", "steps", "tokens", "task"]
    table = runs[cols].copy()
    table["started_at"] = table["started_at"].astype(str).str.slice(0, 19)
    table["task"] = table["task"].astype(str).map(lambda t: shorten(t, 40))
    _out(_to_text(table))
    return 0


def cmd_failures(args: argparse.Namespace) -> int:
    """``harnessnb failures [--by provider,kind]``."""
    by = tuple(c.strip() for c in args.by.split(",") if c.strip())
    bad = [c for c in by if c not in FAILURE_GROUPS]
    if bad or len(set(by)) != len(by):  # a usage error, told before the store opens
        raise ConfigError(
            f"--by {args.by!r}: {', '.join(map(repr, bad)) or 'a name given twice'}; "
            f"group by distinct names among {', '.join(FAILURE_GROUPS)}"
        )
    if absent := _options.absent_store(args.store):
        _out(f"{absent} (`harnessnb run` or `harnessnb demo` makes one)")
        return 0
    store = _store(args)
    table = store.failure_rates(by=by)
    if not len(table):
        _out(f"no attempts in {store.path}")
        return 0
    _out(_to_text(table))
    return 0


def _to_text(frame: pd.DataFrame) -> str:
    shown = frame.copy()
    for col in shown.columns:
        if col.startswith(("failure_rate", "retry_after_s")):
            shown[col] = shown[col].astype("Float64").round(3)
        elif col.startswith("cost"):
            shown[col] = shown[col].astype("Float64").round(6)  # dollars: micro-cents show
    return str(shown.to_string(index=False))


def _indent(text: str) -> str:
    return "\n".join(("  " + line).rstrip() for line in text.rstrip("\n").splitlines())
