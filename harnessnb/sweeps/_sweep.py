"""``hn.sweep``: every task x provider x repeat, run concurrently, tagged with one id.

Each run is an ordinary ``hn.run`` in the store, its ``sweep_id`` set, in a copy of
its task's workspace made for it (runs never share a folder; the template is never
written; a ``Sample``'s files are written into the copy). Each run is scored as it
ends by every scorer given (``_sweep_run``). At most ``concurrency`` runs are driven at
once (a semaphore); a run that fails is a row of the result, never the end of the
sweep. ``max_cost_usd`` stops launching runs once the finished runs' spend reaches it
(or cannot be priced).
Each run opens its own connections to the sweep's MCP servers (``mcp=``: values, pickled
to the workers of a cluster) and closes them when it ends.
Cancelling the sweep (Ctrl-C in ``sweep_sync``) cancels the runs in flight, each
recorded ``cancelled``, and starts no other.

Called again with the ``sweep_id`` of a sweep in its store, a sweep runs only the
slots (sample, provider name, repeat) that sweep has not finished: a finished slot's
run (its outcome anything but ``cancelled``, ``awaiting_approval`` or
``needs_reconciliation``) is read back from the store with its scores, a scorer it has
no row of scored from its kept files (``_rescore``); every other slot (never started,
cancelled, killed, or cut by a cancel before its files were kept) is run afresh, as a
new run of the sweep (the older run stays in the store, in no result). On a cluster
(``executor=``) the finished slots are read from the shards already in the folder
(``Store.combine``, read-only) and only the others are sent to the workers; since the
shards take no writes there, a scorer that a finished run has no stored row of is
refused (ConfigError, before any run: resume with the sweep's own scorers, then
``hn.rescore`` a merged copy).

Traced (``tracer_provider=``, or the process default), the sweep is one span,
``invoke_workflow sweep <id>``, open while its runs go, each run's spans nested under
it (``loop._tracing``). A Dask worker builds its own provider from a callable it is
given (pickled; called once per worker process: a provider's exporter does not cross
processes) and nests its runs under the sweep's span, sent as W3C trace-context headers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from ..loop._bridge import sync_twin
from ..loop._contract import TaskContract
from ..loop._driver import new_id
from ..loop._store_wait import open_patiently
from ..loop._tracing import (
    Nested,
    TracerProviderLike,
    parent_carrier,
    sweep_traced,
    tracer_provider_of,
    worker_factory,
)
from ..mcp._server import MCPServer, checked_servers
from ..providers._completion import shown_url
from ..rules._errors import ConfigError
from ..rules._retry import SystemClock
from ._rescore import Slot, finished_slots, stored_run
from ._sample import Sample, Scorer
from ._sweep_dask import Job, check_cluster_options, sweep_on_cluster
from ._sweep_result import Signature, SweepResult, SweepRun, apart, labels
from ._sweep_run import NamedScorer, named_scorers, one_run, unfit_template_entry

if TYPE_CHECKING:
    from ..loop._events import Callback
    from ..providers._completion import Provider
    from ..providers._prices import Prices
    from ..rules._policy import Policy
    from ..store._store import Store
    from ..tools._approval import Approver
    from ..tools._protocol import Tool

__all__ = ["Task", "provider_names", "sweep", "sweep_sync"]

# A task of a sweep: a text, a sample, a contract, or a sample with its own contract.
Task: TypeAlias = "str | TaskContract | Sample | tuple[TaskContract, Sample]"

_log = logging.getLogger("harnessnb.sweep")


@dataclasses.dataclass
class _Plan:
    """The runs to make and the sweep's running spend."""

    jobs: list[Job]
    max_cost_usd: float | None
    aliases: tuple[tuple[tuple[str | None, ...], str], ...] = ()
    spent: float = 0.0
    stopped: str | None = None
    scorers: tuple[NamedScorer, ...] = ()
    done: dict[Slot, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def tags(self) -> tuple[tuple[str, str], ...]:
        """(name, version) of each scorer."""
        return tuple((s.name, s.version) for s in self.scorers)

    def spent_reaches(self, spent: float) -> bool:
        """``over_budget`` once the finished runs' spend is ``spent``."""
        self.spent = spent
        return self.over_budget()

    def over_budget(self) -> bool:
        if self.max_cost_usd is not None and self.spent >= self.max_cost_usd:
            self.stopped = "max_cost_usd"
        return self.stopped is not None


async def sweep(
    tasks: Sequence[Task],
    providers: Sequence[Provider] | Mapping[str, Provider],
    *,
    workspace: str | os.PathLike[str] | None = None,
    repeats: int = 1,
    concurrency: int = 8,
    store: Store | str | os.PathLike[str] | None = None,
    policy: Policy | None = None,
    approver: Approver | None = None,
    tools: Sequence[Tool] = (),
    on_event: Callback | None = None,
    keep_workspaces: bool = False,
    max_cost_usd: float | None = None,
    prices: Prices | None = None,
    sweep_id: str | None = None,
    on_run: Callable[[SweepRun], None] | None = None,
    executor: Any = None,
    shards: str | os.PathLike[str] | None = None,
    scorers: Sequence[Scorer] | None = None,
    mcp: Sequence[MCPServer] = (),
    tracer_provider: TracerProviderLike = None,
    include_content: bool = False,
) -> SweepResult:
    """Run every task with every provider ``repeats`` times; return a ``SweepResult``.

    Args:
        tasks: Texts, ``Sample``s (run in ``workspace`` with the contract's defaults, its
            ``files`` in the run's copy; ids unique), ``TaskContract``s, or both as a pair.
        providers: A list (each reported under its ``name``, ``/model`` added when two
            share a name, ``@base_url`` when two share both; two the same in all three
            are refused) or a dict name -> provider (reported under the key). A
            provider is shared by all its runs: give a ``ScriptedProvider`` a reply
            function, not a list, which the runs would consume between them.
        workspace: The folder a task given as text runs in (a template: copied).
        repeats, concurrency: Runs of each task with each provider; runs driven at once.
        store, policy, approver, tools, on_event, prices, mcp: As for ``hn.run``, for
            every run (events carry their run's ``run_id``; each opens its own MCP servers).
        keep_workspaces: Keep each run's copy of its workspace (its path is the run's
            ``workspace`` in the store); by default each is removed after its run.
        max_cost_usd: Start no run once the finished runs' spend reaches this, or
            cannot be priced (tokens of a model with no known price).
        sweep_id: Use this id instead of a fresh one; the id of a sweep in ``store`` (or
            ``shards``) resumes it, running only the slots it has not finished (module docstring).
        on_run: Called with each run's ``SweepRun`` row as the run ends (a live table).
        executor: A ``dask.distributed.Client``: each run executes on a worker of its
            cluster (``pip install 'harnessnb[dask]'``), at most ``concurrency``
            submitted at once; each worker process writes its own store file in
            ``shards`` and the result's store is ``Store.combine(shards)``. A run whose
            worker died is a row with outcome ``unfinished`` naming its ``shard`` (run
            it on with ``hn.resume(run_id, store=shard)``); it is never run twice.
        shards: With ``executor``: the folder (shared by the workers) of the shard
            store files (``<host>-<pid>.duckdb``) and the runs' claims.
        scorers: ``(run, sample, workspace) -> Score`` callables (sync ones run in a
            thread) judging each run as it ends, in its workspace copy, named by their
            ``name`` (else ``__name__``, else class) and ``version`` (else ``"1"``):
            ``SweepResult.scores`` and the store's ``scores`` (``_sweep_run``).
        tracer_provider, include_content: As for ``hn.run``, nested (module docstring).

    Returns:
        The ``SweepResult``; a run that failed is a row with its outcome and error.

    Raises:
        ConfigError: Bad arguments (nothing is run: two scorers with one name, two
            samples with one id, a bad ``mcp``...); with ``executor``: Dask not installed, no
            ``shards``, a ``store``, ``on_event``, or an approver that asks a person.
    """
    plan = _plan(tasks, providers, workspace, repeats, max_cost_usd)
    plan.scorers = named_scorers(scorers)
    _check_concurrency(concurrency)
    the_id = sweep_id or new_id("sweep")
    options: dict[str, Any] = {"policy": policy, "approver": approver, "tools": tools}
    options |= {"prices": prices, "sweep_id": the_id, "mcp": checked_servers(mcp, "sweep")}
    options |= {"tracer_provider": tracer_provider, "include_content": include_content}
    if executor is not None or shards is not None:
        folder = check_cluster_options(executor, shards, store, approver, on_event)
        cluster = (executor, folder, concurrency, options, keep_workspaces, on_run, plan.scorers)
        return await _on_cluster(plan, cluster)
    options |= {"store": await open_patiently(store, None, SystemClock()), "on_event": on_event}
    return await _here(plan, options, concurrency, keep_workspaces, on_run, sweep_id is not None)


async def _here(
    plan: _Plan,
    options: dict[str, Any],
    concurrency: int,
    keep: bool,
    on_run: Callable[[SweepRun], None] | None,
    resumed: bool,
) -> SweepResult:
    """The plan's runs in this process (a resumed sweep's finished slots read back),
    each run's spans nested under the sweep's."""
    opened, the_id = options["store"], options["sweep_id"]
    options["tracer_provider"] = traced_by = tracer_provider_of(options["tracer_provider"])
    plan.done = await asyncio.to_thread(finished_slots, opened, the_id) if resumed else {}
    async with sweep_traced(traced_by, the_id) as parent:
        if parent is not None:  # each run is handed the sweep's span with its provider
            options["tracer_provider"] = Nested(traced_by, parent)
        rows = await _run_here(plan, options, concurrency, keep, on_run, plan.scorers)
    return SweepResult(the_id, opened, tuple(rows), plan.stopped, plan.aliases, plan.tags())


async def _on_cluster(plan: _Plan, cluster: tuple[Any, ...]) -> SweepResult:
    """The plan's runs on a Dask cluster: each worker builds its tracer provider from the
    callable it is given, its runs nested under the sweep's span (as trace headers)."""
    options = cluster[3]
    options["tracer_provider"] = factory = worker_factory(options["tracer_provider"])
    async with sweep_traced(tracer_provider_of(factory), options["sweep_id"]) as parent:
        options["trace_parent"] = parent_carrier(parent) if parent is not None else {}
        limit = plan.spent_reaches if plan.max_cost_usd is not None else None
        rows, combined = await sweep_on_cluster(plan.jobs, limit, *cluster)
    the_id = options["sweep_id"]
    return SweepResult(the_id, combined, tuple(rows), plan.stopped, plan.aliases, plan.tags())


async def _run_here(
    plan: _Plan,
    options: dict[str, Any],
    concurrency: int,
    keep: bool,
    on_run: Callable[[SweepRun], None] | None,
    scorers: tuple[NamedScorer, ...],
) -> list[SweepRun]:
    """The plan's runs in this process, at most ``concurrency`` at once; rows in order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Job) -> SweepRun:
        contract, name, provider, repeat, sample = job
        unstarted = SweepRun(contract.task, name, provider.model, repeat, sample_id=sample.id)
        async with gate:
            if (done := plan.done.get((sample.id, name, repeat))) is not None:
                row = await stored_run(options["store"], done, scorers, options, every=False)
            elif plan.over_budget():
                return unstarted
            else:
                row = await one_run(
                    contract, name, provider, repeat, keep, options, sample=sample, scorers=scorers
                )
        plan.spent += row.spend
        if on_run is not None:
            try:
                on_run(row)
            except Exception:  # a display's fault must not orphan the other runs
                _log.exception("sweep %s: on_run raised; the sweep goes on", options["sweep_id"])
        return row

    return list(await asyncio.gather(*(one(job) for job in plan.jobs)))


def _check_concurrency(concurrency: int) -> None:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"sweep: concurrency must be an int >= 1, not {concurrency!r}")


sweep_sync = sync_twin(
    sweep,
    """``sweep`` for blocking callers (a script, a notebook cell): runs on harnessnb's
    loop thread; Ctrl-C cancels the runs in flight (recorded ``cancelled``).""",
)


def _plan(
    tasks: Sequence[Task],
    providers: Sequence[Provider] | Mapping[str, Provider],
    workspace: str | os.PathLike[str] | None,
    repeats: int,
    max_cost_usd: float | None,
) -> _Plan:
    """The jobs in plan order (repeat, task, provider), or ConfigError."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"sweep: repeats must be an int >= 1, not {repeats!r}")
    if max_cost_usd is not None and not (
        isinstance(max_cost_usd, int | float)
        and not isinstance(max_cost_usd, bool)
        and max_cost_usd > 0
    ):
        raise ConfigError(f"sweep: max_cost_usd must be dollars > 0, not {max_cost_usd!r}")
    named = _named(providers)
    one_pair = isinstance(tasks, tuple) and [type(t) for t in tasks] == [TaskContract, Sample]
    if isinstance(tasks, str | Sample | TaskContract) or one_pair:
        raise ConfigError("sweep: tasks must be a list (of texts, samples or contracts)")
    given = [_contract(t, workspace) for t in tasks]
    if not given:
        raise ConfigError("sweep: no tasks given")
    ids = [
        sample.id
        for task, (_, sample) in zip(tasks, given, strict=True)
        if not isinstance(task, str | TaskContract)
    ]
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})[0]
        raise ConfigError(f"sweep: two samples have the id {twice!r}; give each its own id")
    contracts = [c for c, _ in given]
    for c in contracts:
        if not os.path.isdir(c.workspace):
            raise ConfigError(f"sweep: the workspace {c.workspace!r} is not a folder that exists")
    for template in dict.fromkeys(str(c.workspace) for c in contracts):
        if (unfit := unfit_template_entry(template)) is not None:
            raise ConfigError(
                f"sweep: the workspace holds {unfit!r}, which is not a regular file, folder "
                "or symlink; a run's copy cannot hold it"
            )
    jobs = [
        (c, name, provider, repeat, sample)
        for repeat in range(repeats)
        for c, sample in given
        for name, provider in named.items()
    ]
    return _Plan(jobs, None if max_cost_usd is None else float(max_cost_usd), _aliases(named))


def _named(providers: Sequence[Provider] | Mapping[str, Provider]) -> dict[str, Provider]:
    """The sweep's name for each provider: a dict's keys, else ``provider_names``."""
    if isinstance(providers, Mapping):
        named = {str(k): v for k, v in providers.items()}
    else:
        named = provider_names(providers)
    if not named:
        raise ConfigError("sweep: no providers given")
    return named


def provider_names(providers: Iterable[Provider]) -> dict[str, Provider]:
    """Each provider under the name a sweep gives it by what tells it apart: its
    ``name``, with ``/model`` when another shares the name (``openai/gpt-4o``,
    ``openai/gpt-4o-mini``), and ``@`` its base URL when another shares both.

    Raises:
        ConfigError: two providers are the same (name, model and base URL): only a dict
            can name them.
    """
    given = list(providers)
    named: dict[str, Provider] = {}
    for provider, label in zip(given, labels([_signature(p) for p in given]), strict=True):
        if label is None or label in named:
            raise ConfigError(
                f"sweep: two providers are the same ({_described(provider)}); pass a "
                "dict name -> provider to sweep both, each under its own name"
            )
        named[label] = provider
    return named


def _signature(provider: Provider) -> Signature:
    """What the attempts of ``provider`` record of it: name, model, server (shown)."""
    base_url = getattr(provider, "base_url", None)
    shown = shown_url(base_url) if isinstance(base_url, str) else None
    return (provider.name, provider.model, shown)


def _described(provider: Provider) -> str:
    name, model, base_url = _signature(provider)
    where = f", base URL {base_url!r}" if base_url else ""
    return f"name {name!r}, model {model!r}{where}"


def _aliases(named: Mapping[str, Provider]) -> tuple[tuple[tuple[str | None, ...], str], ...]:
    """(what the attempts record, sweep name) for each provider of one leaf whose
    attempts no other provider of the sweep could have made: keyed by the recorded name
    and as many of ``SPLIT`` as the sweep needs to tell those providers apart."""
    leaves = {key: _leaf_signatures(provider) for key, provider in named.items()}
    every = [s for signatures in leaves.values() for s in signatures]
    alone = {
        key: sigs[0] for key, sigs in leaves.items() if len(sigs) == 1 and every.count(sigs[0]) == 1
    }
    if not alone:
        return ()
    width = max(apart(s, [o for o in every if o != s]) or 0 for s in alone.values())
    return tuple((s[: width + 1], key) for key, s in alone.items())


def _leaf_signatures(provider: Provider) -> list[Signature]:
    """What a provider's attempts record: its own signature, or a ``Fallback``'s leaves'."""
    leaves = getattr(provider, "providers", None)  # a Fallback (they nest)
    if not leaves:
        return [_signature(provider)]
    return [s for leaf in leaves for s in _leaf_signatures(leaf)]


def _contract(task: Task, workspace: str | os.PathLike[str] | None) -> tuple[TaskContract, Sample]:
    """A task's contract and sample (a contract's is ``Sample(contract.task)``)."""
    if isinstance(task, tuple) and len(task) == 2:
        contract, sample = task
        if not (isinstance(contract, TaskContract) and isinstance(sample, Sample)):
            raise ConfigError("sweep: a pair of a task is (TaskContract, Sample)")
        if contract.task != sample.input:
            raise ConfigError(
                f"sweep: the contract's task {contract.task[:60]!r} is not its sample's "
                f"input {sample.input[:60]!r}"
            )
        return contract, sample
    if isinstance(task, TaskContract):
        return task, Sample(task.task)
    if isinstance(task, str):
        task = Sample(task)
    if not isinstance(task, Sample):
        kind = type(task).__name__
        raise ConfigError(f"sweep: a task is a str, a Sample or a TaskContract, not {kind}")
    if workspace is None:
        raise ConfigError(
            f"sweep: the task {task.input[:60]!r} is text: pass workspace= (the folder it "
            "runs in, copied for each run) or a TaskContract"
        )
    return TaskContract(task.input, workspace), task
