"""Exercises the public API under ``mypy --strict`` (run by .ci/run; not a pytest file).

If a public signature changes in a way users' typed code would notice, this file stops
type-checking.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import harnessnb as hn
from harnessnb.events import AnyEvent, FinishedEvent, RetryEvent
from harnessnb.store._writer import store_writer


def on_event(event: AnyEvent) -> None:
    match event:
        case RetryEvent(error_kind=kind, delay_s=wait, retry_after_s=asked):
            print(kind, wait + 1.0, asked)
        case FinishedEvent(outcome=outcome, cost_usd=spent):
            print(outcome, spent)
        case _:
            print(event.kind, event.run_id, event.step, event.at)


async def typed_usage(store: hn.Store) -> None:
    contract = hn.TaskContract(
        "summarise README.md into NOTES.md",
        "repo",
        verification=hn.FileContains("NOTES.md", "#"),
        max_steps=12,
        max_time_s=300.0,
        max_cost_usd=0.50,
        retry=hn.RetryPolicy(base_s=0.5, cap_s=30.0),
        stall=hn.StallPolicy(window=3, max_replans=1),
    )
    provider = hn.Fallback(
        hn.OpenAI("gpt-4o-mini", api_key="k"),
        hn.Anthropic("claude", api_key="k", idle_timeout_s=20.0, stream=False).with_timeout(30.0),
        hn.Gemini("gemini-2.5-flash", api_key="k", api_version="v1beta", idle_timeout_s=20.0),
    )
    streams: bool = hn.OpenAI("m", base_url="http://127.0.0.1:1/v1", stream=False).stream
    policy = hn.Policy.default().layer("app").allow_write("NOTES.md")
    result: hn.RunResult = await hn.run(
        contract, provider, store=store, policy=policy, approver=hn.ApproveAll()
    )
    outcome: hn.RunOutcome = result.outcome
    await hn.run(contract, provider, store=store, on_event=on_event)
    await hn.run(contract, provider, store=store, on_event=lambda e: print(e.kind))
    print(streams)
    error: hn.HarnessError | None = result.error
    if isinstance(error, hn.ProviderError):
        kind: hn.ProviderErrorKind = error.kind
        wait: float | None = error.retry_after_s
        print(kind.value, kind.retryable, wait, error.status, error.request_id)
    print(outcome.value, result.steps, result.tokens, result.verified)
    completion: hn.Completion = await hn.ScriptedProvider(["hi"]).complete(
        [{"role": "user", "content": "hi"}]
    )
    print(completion.text, completion.tool_calls, completion.usage.total_tokens)
    made: tuple[hn.AttemptRecord, ...] = completion.attempts
    print([attempt.latency_ms for attempt in made])
    prices = hn.Prices({"my-model": (0.5, 1.5), "gpt-4o": hn.Price(2.5, 10.0)}, local_free=True)
    priced: hn.RunResult = await hn.run(contract, provider, store=store, prices=prices)
    spent: float | None = priced.cost_usd
    print(spent, hn.RunOutcome.COST_BUDGET.value)
    again: hn.RunResult = await hn.resume(result.run_id, provider, store=store, prices=prices)
    print(again.outcome, store.failure_rates(by=("provider", "kind")).shape)
    assert hn.REQUEST_TIMEOUT_S == 600.0
    swept: hn.SweepResult = await hn.sweep(
        ["say hello", contract], {"a": provider}, workspace="repo", repeats=3, concurrency=4,
        store=store, keep_workspaces=False, max_cost_usd=1.0, prices=prices,
    )  # fmt: skip
    sweep_id: str = swept.sweep_id
    print(swept.runs.shape, swept.failure_rates(by="provider").shape, swept.cost_usd)
    print(store.runs(sweep=sweep_id), store.failure_rates(sweep=sweep_id))
    print(hn.sweep_sync(["x"], [provider], workspace="repo").runs)
    chance: float = hn.pass_at_k(10, 3, 2) - hn.pass_hat_k(10, 3, 2)
    print(chance)
    on_dask: hn.SweepResult = await hn.sweep(
        ["x"], [provider], workspace="repo", executor=object(), shards="shards/"
    )
    print([(r.run_id, r.shard) for r in on_dask.unfinished])
    combined: hn.Store = hn.Store.combine("shards/")
    merged: hn.Store = combined.merge(into="all.duckdb")
    print(hn.Store.combine(["a.duckdb", "b.duckdb"]).runs(), merged.failure_rates())
    hn.set_testing(True)
    await hn.resolve("run_x", output="landed", store="runs.duckdb")
    hn.abandon_sync("run_x", "not there", store=store)
    with hn.set_testing(True):
        pass
    agent: hn.agents.AgentCLI = hn.agents.ClaudeCode(model="sonnet", permission="edit")
    done: hn.agents.AgentResult = await hn.agents.run(
        agent, "tidy the README", "repo", session="docs", store=store, on_event=print
    )
    if isinstance(done.error, hn.agents.RateLimited):
        print(done.error.detail, done.error.resets_at, done.error.retryable)
    print(done.text, done.usage.cached_input_tokens, done.cost_usd, done.session_id)
    print(done.exit_code, done.outcome.value)
    print(hn.agents.run_sync(hn.agents.Codex(timeout_s=600.0), "x", "repo").ok)



async def typed_answers(provider: hn.OpenAI, store: hn.Store) -> None:
    """A typed answer: ``hn.ask`` returns the type asked for; a run's is on its result."""
    import dataclasses

    @dataclasses.dataclass
    class City:
        name: str
        population: int

    city: City = await hn.ask(provider, "Norway's largest city?", output=City, store=store)
    print(city.population + 1)
    blocking: City = hn.ask_sync(provider, "x", output=City, output_mode="tool")
    loose = await hn.ask(provider, "x", output={"type": "object"}, output_retries=1)
    print(blocking.name, loose)
    contract = hn.TaskContract("x", "repo", output=City, output_mode="native", output_retries=3)
    result = await hn.run(contract, provider, store=store)
    mode: str | None = result.output_mode
    if isinstance(result.error, hn.OutputError):
        print(result.error.kind.value, result.error.reasons, result.error.mode)
    print(result.output, mode)


async def typed_store_writes(store: hn.Store) -> None:
    """Each write is declared once, its rows typed, and mypy checks its arguments wherever
    it is called: a wrong one below must stay an error (strict mode flags an unused
    ignore). The writes are the loop's (``store_writer``), not ``hn.Store``'s."""
    writer = store_writer(store)
    lease = writer.start_run({"run_id": "r1", "task": "t"}, "me", ttl_s=30.0)
    expires: float = lease.expires_at
    writer.commit_step("r1", {"step": 1}, attempts=[], tool_calls=[], stalls=[],
                       checkpoint={}, lease=lease)  # fmt: skip
    renewed = await writer.queued.renew_lease(lease, ttl_s=30.0)
    print(expires, renewed.generation)
    await writer.queued.finish_run("r1", outcome="finished", finished_at=1.0, lease=renewed)
    writer.commit_step("r1", 1, attempts=[], tool_calls=[], stalls=[], checkpoint={})  # type: ignore[arg-type]
    writer.commit_step("r1", {"step": 1, "tokenz": 50}, attempts=[], tool_calls=[], stalls=[],  # type: ignore[typeddict-unknown-key]
                       checkpoint={})  # fmt: skip
    writer.add_attempts("r1", [{"step": 1, "latency": 2.0}])  # type: ignore[typeddict-unknown-key]
    await writer.queued.finish_run("r1", outcome="finished")  # type: ignore[call-arg]
    await writer.queued.add_marker("r1", "resume", "at step 2", at="now")  # type: ignore[arg-type]
    writer.renew_lease(lease, ttl=30.0)  # type: ignore[call-arg]
    print(store.commit_step)  # type: ignore[attr-defined]


@hn.tool(effect=hn.Effect.WRITE)
async def publish(title: str) -> str:
    """Publish a post.

    Args:
        title: The title.
    """
    return title


def typed_samples_and_scorers(run: hn.RunResult, workspace: Path) -> None:
    """A built-in scorer is what a sweep's ``scorers=`` takes: a callable (run, sample,
    workspace) -> Score or an awaitable of one, with a name and a version."""
    samples: list[hn.Sample] = hn.samples("samples.csv") + hn.samples([{"input": "x"}])
    scorers: list[Callable[[hn.RunResult, hn.Sample, Path], hn.Score | Awaitable[hn.Score]]] = [
        hn.scorers.includes(case_sensitive=True),
        hn.scorers.regex(r"\d+"),
        hn.scorers.tests(timeout_s=60.0),
        hn.scorers.json_schema({"type": "object"}),
    ]
    print([f"{s.name} v{s.version}" for s in [hn.scorers.command(["make", "test"])]])
    print([scorer(run, sample, workspace) for scorer in scorers for sample in samples])
    hn.scorers.includes(case_sensitve=True)  # type: ignore[call-arg]
