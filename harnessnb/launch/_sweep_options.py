"""The options of ``harnessnb sweep`` and ``%%harness sweep``, and what they mean.

A sweep takes the loop's run options (model, workspace, checks, budgets, store,
``--allow-write``) for every run, plus its own: which providers, how many repeats, how
many at once, a spend limit for the whole sweep, and whether to keep the workspace
copies. ``--provider``/``--fallback``, approvals and the coding-agent options are not
sweep options: each ``--providers`` name is one provider of the sweep.

``--samples FILE`` (``hn.samples``: CSV or JSONL) gives the tasks instead of the face's
own (TASK arguments, a cell body: refused with it, never mixed in), each sample run with
the contract the run options make; ``--score SPEC`` (repeatable) adds a built-in scorer
(``_scorer_specs``); ``--sweep-id ID`` tags the runs with ID instead of a fresh one.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..rules._errors import ConfigError
from ._choose import PROVIDER_NAMES, build_provider
from ._options import (
    OUTPUT_OPTIONS,
    RUN_OPTIONS,
    Option,
    contract_from,
    positive_float,
    positive_int,
)
from ._scorer_specs import SCORE_FORMS, reads_target, score_spec

if TYPE_CHECKING:
    from ..loop._contract import TaskContract
    from ..providers._completion import Provider
    from ..sweeps._sample import Sample

__all__ = ["SWEEP_OPTIONS", "cluster", "providers_from", "sweep_kwargs", "sweep_tasks"]

_FROM_RUN = ("--model", "--base-url", "--workspace", "--verify", "--verify-cmd", "--max-steps",
             "--max-seconds", "--max-cost", "--price", "--prices", "--store",
             "--allow-write", "--mcp", "--mcp-trust", "--otel-endpoint")  # fmt: skip


def _sweep_id(text: str) -> str:
    """An argparse type: a sweep id, non-empty words with no control characters."""
    if not text.strip() or not text.isprintable():
        raise argparse.ArgumentTypeError(f"{text!r} is no sweep id (printable, not empty)")
    return text.strip()


SWEEP_OPTIONS: tuple[Option, ...] = (
    Option("--providers",
           f"comma-separated providers to sweep ({', '.join(PROVIDER_NAMES)}), each once, "
           "or PROVIDER/MODEL for one of its models (openai/gpt-4o,openai/gpt-4o-mini); "
           "in a notebook also the name of a variable holding a provider, or a dict or list "
           "of them",
           {"metavar": "A,B,C", "required": True}),
    Option("--repeats", "runs of each task with each provider (default 1)",
           {"metavar": "N", "type": positive_int, "default": 1}),
    Option("--concurrency", "runs at once (default 8)",
           {"metavar": "K", "type": positive_int, "default": 8}),
    Option("--max-sweep-cost", "start no run once the sweep has spent this many US dollars",
           {"metavar": "USD", "type": positive_float}),
    Option("--keep-workspaces", "keep each run's copy of the workspace",
           {"action": "store_true"}),
    Option("--executor",
           "run on a Dask cluster: its scheduler's address (tcp://host:8786), or 'local' "
           "for worker processes on this machine (pip install 'harnessnb[dask]'); "
           "needs --shards", {"metavar": "ADDRESS"}),
    Option("--shards",
           "with --executor: the folder each worker process writes its store file in "
           "(storage every worker sees); read back as one with hn.Store.combine(DIR)",
           {"metavar": "DIR"}),
    Option("--samples",
           "the tasks from a CSV or JSONL file of samples (columns input, target, id, "
           "metadata; see hn.samples), instead of tasks written out",
           {"metavar": "FILE"}),
    Option("--score",
           "score every run with a built-in scorer (repeatable): "
           f"{', '.join(SCORE_FORMS)}; without TEXT or PATTERN, each sample's target",
           {"metavar": "SPEC", "type": score_spec, "action": "append", "default": []}),
    Option("--sweep-id", "tag the runs with this sweep id instead of a fresh one",
           {"metavar": "ID", "type": _sweep_id}),
    *(o for o in RUN_OPTIONS if o.flag in _FROM_RUN),
    *(o for o in OUTPUT_OPTIONS if o.flag == "--out"),
)  # fmt: skip
"""The options of ``harnessnb sweep`` and ``%%harness sweep``."""


def sweep_tasks(
    args: argparse.Namespace, texts: list[str], written: str, hint: str = ""
) -> list[TaskContract | tuple[TaskContract, Sample]]:
    """The sweep's tasks: the face's own ``texts``, or ``--samples FILE``'s samples, each
    with the contract the run options make (budgets, ``--verify``).

    ``written`` names where the face's tasks come from (``"TASK arguments"``, ``"cell
    body"``), for the errors; ``hint`` follows the one that refuses them beside
    ``--samples`` (how the face takes samples alone).

    Raises:
        ConfigError: both or neither given; a ``--score`` that reads the sample's target
            with tasks that have none; what ``hn.samples`` raises (a missing or bad file,
            the row named); a bad ``--verify`` text.
    """
    if args.samples is None:
        if not texts:
            raise ConfigError(f"sweep: give the tasks ({written}) or --samples FILE")
        for scorer in args.score:
            if form := reads_target(scorer):
                raise ConfigError(
                    f"--score {scorer.name} compares each run with its sample's target, and "
                    f"tasks written out ({written}) have none: write {form}, or give the tasks "
                    "with their targets (--samples FILE)"
                )
        return [contract_from(args, text) for text in texts]
    if texts:
        raise ConfigError(
            f"--samples {args.samples} gives the sweep's tasks: no {written} beside it{hint}"
        )
    from ..sweeps._samples_io import samples

    try:
        found = samples(args.samples)
    except ConfigError as err:
        message = err.message.removeprefix("hn.samples: ")
        raise ConfigError(f"--samples {args.samples}: {message}") from None
    return [(contract_from(args, sample.input), sample) for sample in found]


def providers_from(
    args: argparse.Namespace, namespace: dict[str, Any] | None = None
) -> dict[str, Provider]:
    """``--providers a,b,c`` as name -> provider (``--model``/``--base-url`` apply to each).

    ``PROVIDER/MODEL`` names a model of a built-in provider (``openai/gpt-4o,
    openai/gpt-4o-mini``: two models of one provider), swept under that name.

    A name that is no built-in provider is looked up in ``namespace`` (a notebook's
    variables): a provider is swept under the variable's name, a dict of them under
    its keys, a list of them under the names ``hn.sweep`` gives a list
    (``openai/gpt-4o``, ``openai/gpt-4o-mini``), so a cell can sweep providers built in
    Python (several models or local servers, ``name=``, timeouts).

    Raises:
        ConfigError: an empty list, a name given twice, or what ``build_provider`` raises.
    """
    names = [n.strip() for n in str(args.providers).split(",") if n.strip()]
    if not names:
        raise ConfigError("--providers: name at least one provider", code="CONFIG_PROVIDER")
    found: dict[str, Provider] = {}
    for name in names:
        for key, provider in _named_provider(name, args, namespace).items():
            if key in found:
                raise ConfigError(f"--providers: {key!r} is given twice", code="CONFIG_PROVIDER")
            found[key] = provider
    return found


def _named_provider(
    name: str, args: argparse.Namespace, namespace: dict[str, Any] | None
) -> dict[str, Provider]:
    base, slash, model = (part.strip() for part in name.partition("/"))
    if base.lower() in PROVIDER_NAMES or namespace is None or name not in namespace:
        if namespace is not None and base.lower() not in PROVIDER_NAMES:
            raise ConfigError(
                f"--providers: {name!r} is neither a built-in provider "
                f"({', '.join(PROVIDER_NAMES)}) nor a variable of the notebook holding a "
                "provider or a dict or list of them",
                code="CONFIG_PROVIDER",
            )
        if slash and (not model or base.lower() == "demo"):
            raise ConfigError(
                f"--providers: {name!r}: write PROVIDER/MODEL, e.g. "
                "openai/gpt-4o (the demo has one model)",
                code="CONFIG_PROVIDER",
            )
        # --api applies to the providers that speak OpenAI's APIs; the others keep theirs.
        api = getattr(args, "api", None) if base.lower() in ("openai", "local", "demo") else None
        built = build_provider(base, model=model or args.model, base_url=args.base_url, api=api)
        return {f"{base.lower()}/{model}" if slash else base.lower(): built}
    value = namespace[name]
    if isinstance(value, dict) and value and all(map(_is_provider, value.values())):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, list | tuple) and value and all(map(_is_provider, value)):
        from ..sweeps._sweep import provider_names

        return provider_names(value)
    if _is_provider(value):
        return {name: value}
    raise ConfigError(
        f"--providers: {name!r} is a {type(value).__name__}, not a provider (or a dict or "
        f"list of them); built-in names: {', '.join(PROVIDER_NAMES)}",
        code="CONFIG_PROVIDER",
    )


def _is_provider(value: object) -> bool:
    from ..providers._completion import Provider

    return isinstance(value, Provider)


def sweep_kwargs(
    args: argparse.Namespace, layer: str, namespace: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The keywords of ``hn.sweep`` from the checked options (less tasks and providers);
    ``namespace`` (a notebook's variables) is where ``--prices VAR`` is looked up.
    ``sweep_id`` is ``--sweep-id``, else a fresh id (known before the sweep ends: an
    interrupt names it); ``scorers`` the ``--score`` specs' scorers; ``mcp`` the
    ``--mcp`` servers (``mcp_from``).

    Raises:
        ConfigError: a workspace that is not a folder, a bad ``--verify`` text, a bad
            ``--price``/``--prices`` (``prices_from``), a ``--mcp-trust`` naming no
            ``--mcp`` server (``mcp_from``).
    """
    import os

    from ..loop._driver import new_id
    from ._mcp_spec import mcp_from
    from ._options import policy_from, prices_from
    from ._otel import tracer_provider_from

    if not os.path.isdir(args.workspace):
        raise ConfigError(f"--workspace {args.workspace!r} is not a folder that exists")
    return {
        "repeats": args.repeats,
        "concurrency": args.concurrency,
        "max_cost_usd": args.max_sweep_cost,
        "keep_workspaces": args.keep_workspaces,
        "policy": policy_from(args, layer),
        "prices": prices_from(args, namespace),
        "sweep_id": args.sweep_id or new_id("sweep"),
        "scorers": list(args.score) or None,
        "mcp": mcp_from(args),
        "tracer_provider": tracer_provider_from(args),
    }


@contextlib.contextmanager
def cluster(args: argparse.Namespace) -> Iterator[Any]:
    """The Dask ``Client`` that ``--executor`` names, closed after the sweep (with the
    workers it started, for ``local``); None without ``--executor``.

    Raises:
        ConfigError: ``--shards`` without ``--executor`` or the reverse, ``--store`` with
            it, Dask not installed, or a scheduler that cannot be reached.
    """
    address, shards = getattr(args, "executor", None), getattr(args, "shards", None)
    if address is None:
        if shards is not None:
            raise ConfigError("--shards goes with --executor (a sweep on a Dask cluster)")
        yield None
        return
    if shards is None:
        raise ConfigError("--executor needs --shards DIR: the folder each worker writes in")
    if getattr(args, "store", None) is not None:
        raise ConfigError(
            "--store and --executor: on a cluster every worker process writes its own "
            "store file in --shards DIR (read them as one with hn.Store.combine(DIR))"
        )
    try:
        import distributed
    except ImportError:
        raise ConfigError("--executor needs Dask: pip install 'harnessnb[dask]'") from None
    connect: Any = distributed.Client  # untyped
    try:
        if address == "local":
            # loopback only, any free port (its status page; 8787 may be taken)
            with _deaf_to_ctrl_c():
                client = connect(processes=True, dashboard_address="127.0.0.1:0")
        else:
            client = connect(address, timeout=10)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError(f"--executor {address}: no Dask scheduler there ({exc})") from None
    try:
        yield client
    finally:
        client.close()


@contextlib.contextmanager
def _deaf_to_ctrl_c() -> Iterator[None]:
    """Processes started in the block ignore SIGINT (Python keeps an ignored SIGINT
    ignored). Ctrl-C on a terminal reaches the whole process group: the worker
    processes of ``--executor local`` would die printing tracebacks, when the sweep
    cancels their runs itself (the cancel marker) and closes them."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
