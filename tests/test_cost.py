"""What runs cost: attempts priced with genai-prices, ``hn.Prices``, the cost budget."""

from __future__ import annotations

import logging
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from genai_prices import Usage, calc_price

import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Reply
from harnessnb.demo._model import provider_for
from tests.store_helpers import old_store

LIST = {"tool": "list_dir", "args": {"path": "."}}


def catalogue(model: str, provider: str, inp: int, out: int) -> float:
    """genai-prices' own price of one attempt, in dollars."""
    usage = Usage(input_tokens=inp, output_tokens=out)
    return float(calc_price(usage, model_ref=model, provider_id=provider).total_price)


def costs(store: hn.Store, run_id: str) -> tuple[list[Any], Any]:
    """The attempts' ``cost_usd`` (None for NULL) and the run's."""
    attempts = store.attempts(run_id)["cost_usd"].astype(object)
    run = store.runs(run_id)["cost_usd"].astype(object)
    as_list = [None if pd.isna(v) else v for v in attempts]
    return as_list, None if pd.isna(run.iloc[0]) else run.iloc[0]


def run(ws: Path, provider: Any, store: hn.Store, **kw: Any) -> hn.RunResult:
    prices = kw.pop("prices", None)
    contract = hn.TaskContract("look around", ws, **kw)
    return hn.run_sync(contract, provider, store=store, prices=prices)


def test_a_known_model_costs_what_genai_prices_calculates(ws: Path, store: hn.Store) -> None:
    provider = hn.ScriptedProvider([LIST, "done"], name="openai", model="gpt-4o",
                                   tokens_per_reply=(1000, 100))  # fmt: skip
    result = run(ws, provider, store)
    one = catalogue("gpt-4o", "openai", 1000, 100)
    assert one == 0.0035  # the reference figure
    attempts, total = costs(store, result.run_id)
    assert attempts == [one, one]
    assert total == pytest.approx(2 * one) and result.cost_usd == pytest.approx(2 * one)
    assert "cost $0.007000" in result.summary_text()
    assert "$0.007000" in result._repr_mimebundle_()["text/html"]


def test_a_chaos_server_run_is_priced_as_the_provider_it_stands_for(
    ws: Path, store: hn.Store
) -> None:
    def answer(req: ChaosRequest) -> Reply:
        return Reply(text="done", input_tokens=1234, output_tokens=56)

    with ChaosServer(responder=answer) as srv:
        provider = hn.OpenAI("gpt-4o", base_url=srv.openai_url)
        priced = run(ws, provider, store, prices=hn.Prices(local_free=False))
        free = run(ws, provider, store)
    assert costs(store, priced.run_id) == ([catalogue("gpt-4o", "openai", 1234, 56)],
                                           catalogue("gpt-4o", "openai", 1234, 56))  # fmt: skip
    # The same server without being told: a server on this machine is free.
    assert costs(store, free.run_id) == ([0.0], 0.0) and free.cost_usd == 0.0


def test_local_servers_are_free_unless_told_otherwise(ws: Path, store: hn.Store) -> None:
    scripted = hn.ScriptedProvider(["done"], model="gpt-4o", tokens_per_reply=(10**6, 10**6))
    with ChaosServer(responder=lambda req: Reply(text="done")) as srv:
        demo = run(ws, provider_for(srv), store)
    local = run(ws, scripted, store)
    assert costs(store, demo.run_id) == ([0.0], 0.0)
    assert costs(store, local.run_id) == ([0.0], 0.0)
    # Told otherwise: a price for the model applies to a local provider too.
    scripted = hn.ScriptedProvider(["done"], model="gpt-4o", tokens_per_reply=(10**6, 10**6))
    told = run(ws, scripted, store, prices=hn.Prices({"gpt-4o": (1.0, 2.0)}))
    assert costs(store, told.run_id) == ([3.0], 3.0)


def test_an_unknown_model_has_null_cost_and_is_reported_once(
    ws: Path, store: hn.Store, caplog: pytest.LogCaptureFixture
) -> None:
    model = f"no-such-model-{uuid.uuid4().hex[:8]}"
    caplog.set_level(logging.WARNING, logger="harnessnb.prices")
    first = run(ws, hn.ScriptedProvider([LIST, "done"], name="openai", model=model), store)
    second = run(ws, hn.ScriptedProvider(["done"], name="openai", model=model), store)
    assert costs(store, first.run_id) == ([None, None], None)
    assert costs(store, second.run_id) == ([None], None)
    assert first.cost_usd is None and "cost" not in first.summary_text()
    notices = [r.getMessage() for r in caplog.records if r.name == "harnessnb.prices"]
    assert len(notices) == 1 and model in notices[0] and "hn.Prices" in notices[0]


def test_prices_add_a_model_and_override_the_catalogue(ws: Path, store: hn.Store) -> None:
    prices = hn.Prices({"my-model": (2.0, 8.0), "gpt-4o": hn.Price(1.0, 1.0)})
    acme = hn.ScriptedProvider(
        ["done"], name="acme", model="my-model", tokens_per_reply=(1000, 100)
    )
    openai = hn.ScriptedProvider(
        ["done"], name="openai", model="gpt-4o", tokens_per_reply=(1000, 100)
    )
    mine = run(ws, acme, store, prices=prices)
    theirs = run(ws, openai, store, prices=prices)
    assert costs(store, mine.run_id) == ([0.0028], 0.0028)
    assert costs(store, theirs.run_id) == ([0.0011], 0.0011)
    assert hn.Prices({"m": (2.0, 8.0)}).cost("x", "m", 1000, 100) == Decimal("0.0028")


@pytest.mark.parametrize(
    "bad",
    [{"m": (1.0,)}, {"m": (-1.0, 1.0)}, {"m": ("1", 2)}, {"m": (float("nan"), 1.0)}, {"": (1, 1)},
     {"m": (1.0, float("inf"))}],
)
def test_a_bad_price_is_a_config_error(bad: dict[str, Any]) -> None:
    with pytest.raises(hn.ConfigError, match="Price"):
        hn.Prices(bad)


def test_max_cost_usd_stops_the_run_with_cost_budget(ws: Path, store: hn.Store) -> None:
    # Each answer reports a million tokens in and 100k out: $3.50 of gpt-4o.
    provider = hn.ScriptedProvider(lambda messages: LIST, name="openai", model="gpt-4o",
                                   tokens_per_reply=(10**6, 10**5))  # fmt: skip
    result = run(ws, provider, store, max_cost_usd=5.0)
    assert result.outcome is hn.RunOutcome.COST_BUDGET and result.steps == 2
    step = catalogue("gpt-4o", "openai", 10**6, 10**5)
    assert step == 3.5
    assert costs(store, result.run_id) == ([3.5, 3.5], 7.0)
    row = store.get_run(result.run_id)
    assert row is not None
    assert (row["outcome"], row["contract"]["max_cost_usd"]) == ("cost_budget", 5.0)


def test_a_cost_budget_with_an_unpriced_model_stops_after_the_first_step(
    ws: Path, store: hn.Store
) -> None:
    model = f"no-such-model-{uuid.uuid4().hex[:8]}"
    provider = hn.ScriptedProvider(lambda messages: LIST, name="openai", model=model)
    result = run(ws, provider, store, max_cost_usd=100.0)
    assert (result.outcome, result.steps) == (hn.RunOutcome.COST_BUDGET, 1)


@pytest.mark.parametrize("cost", [0, -1.0, True, "5"])
def test_max_cost_usd_must_be_positive_dollars(ws: Path, cost: Any) -> None:
    with pytest.raises(hn.ConfigError, match="max_cost_usd"):
        hn.TaskContract("t", ws, max_cost_usd=cost)


def test_failure_rates_show_each_groups_spend(ws: Path, store: hn.Store) -> None:
    server_error = hn.ProviderError("boom", kind=hn.ProviderErrorKind.SERVER, status=500)
    priced = hn.ScriptedProvider([server_error, LIST, "done"], name="openai", model="gpt-4o",
                                 tokens_per_reply=(1000, 100))  # fmt: skip
    unknown = hn.ScriptedProvider(["done"], name="openai", model="no-such-model-fr")
    run(ws, priced, store)
    run(ws, unknown, store)
    run(ws, hn.ScriptedProvider(["done"]), store)
    one = catalogue("gpt-4o", "openai", 1000, 100)
    rates = store.failure_rates(by="model").set_index("model")
    assert rates.loc["gpt-4o", "cost_usd"] == pytest.approx(2 * one)
    assert rates.loc["gpt-4o", "cost_per_success_usd"] == pytest.approx(one)  # 2 answers
    assert rates.loc["gpt-4o", "unpriced_attempts"] == 0
    assert pd.isna(rates.loc["no-such-model-fr", "cost_usd"])
    assert rates.loc["no-such-model-fr", "unpriced_attempts"] == 1
    assert rates.loc["scripted", "cost_usd"] == 0.0
    # With kind: the spend is the group's, beside its total attempts.
    by_kind = store.failure_rates(by=("model", "kind"))
    row = by_kind[(by_kind["model"] == "gpt-4o") & (by_kind["kind"] == "server")].iloc[0]
    assert (row["attempts"], row["failures"]) == (3, 1)
    assert row["cost_usd"] == pytest.approx(2 * one)


def test_a_store_from_before_costs_migrates_with_unknown_costs(tmp_path: Path) -> None:
    path = tmp_path / "v5.duckdb"
    con = old_store(path, 5)
    con.execute("INSERT INTO run_rows (run_id, provider, model) VALUES "
                "('old', 'openai', 'gpt-4o'), ('idle', 'openai', 'gpt-4o')")  # fmt: skip
    con.execute("INSERT INTO attempts (run_id, step, attempt, provider, model, input_tokens, "
                "output_tokens) VALUES ('old', 1, 1, 'openai', 'gpt-4o', 10, 5)")  # fmt: skip
    con.close()
    with hn.Store(path) as store:
        runs = store.runs().set_index("run_id")
        assert pd.isna(runs.loc["old", "cost_usd"])  # tokens at a price not recorded
        assert runs.loc["idle", "cost_usd"] == 0.0  # no attempt, nothing spent
        assert pd.isna(store.attempts("old")["cost_usd"].iloc[0])


def test_the_command_passes_max_cost_to_the_contract(tmp_path: Path) -> None:
    import argparse

    from harnessnb.launch._options import RUN_OPTIONS, add_options, contract_from

    parser = argparse.ArgumentParser()
    add_options(parser, RUN_OPTIONS, "command")
    args = parser.parse_args(["--workspace", str(tmp_path), "--max-cost", "2.5"])
    assert contract_from(args, "task").max_cost_usd == 2.5
    args = parser.parse_args(["--workspace", str(tmp_path)])
    assert contract_from(args, "task").max_cost_usd is None


def test_a_resumed_run_keeps_its_spend_for_the_budget(ws: Path, store: hn.Store) -> None:
    down = hn.ProviderError("down", kind=hn.ProviderErrorKind.SERVER, status=503)
    big = {"name": "openai", "model": "gpt-4o", "tokens_per_reply": (10**6, 10**5)}
    contract = hn.TaskContract("look around", ws, max_cost_usd=5.0, max_retries=0)
    first = hn.run_sync(contract, hn.ScriptedProvider([LIST, down], **big), store=store)
    assert (first.outcome, first.cost_usd) == (hn.RunOutcome.ESCALATED_RETRYABLE, 3.5)
    again = hn.resume_sync(first.run_id, hn.ScriptedProvider([LIST], **big), store=store)
    # $3.50 before the resume and $3.50 after it: the budget of $5 is spent at step 2.
    assert (again.outcome, again.steps, again.cost_usd) == (hn.RunOutcome.COST_BUDGET, 2, 7.0)
    assert costs(store, first.run_id) == ([3.5, None, 3.5], 7.0)
    done = hn.resume_sync(first.run_id, hn.ScriptedProvider([]), store=store)
    assert (done.outcome, done.cost_usd) == (hn.RunOutcome.COST_BUDGET, 7.0)  # as stored


def test_a_replayed_run_costs_nothing(ws: Path, store: hn.Store) -> None:
    answers = {"name": "openai", "model": "gpt-4o", "tokens_per_reply": (1000, 100)}
    recorded = run(ws, hn.Record(hn.ScriptedProvider([LIST, "done"], **answers), store), store)
    replayed = run(ws, hn.Replay(store), store)
    one = catalogue("gpt-4o", "openai", 1000, 100)
    assert costs(store, recorded.run_id) == ([one, one], pytest.approx(2 * one))
    # The replay's attempts name the recorded leaf, but nothing was billed.
    assert store.attempts(replayed.run_id)["provider"].tolist() == ["openai", "openai"]
    assert costs(store, replayed.run_id) == ([0.0, 0.0], 0.0)


@pytest.mark.parametrize(
    "url", ["http://10.0.0.5:4000/v1", "http://192.168.1.2/v1", "https://gw.c.proj.internal/v1"]
)
def test_a_server_on_a_private_network_is_free_unless_told_otherwise(url: str) -> None:
    # As the README says: a gateway there costs $0 (so no budget stops it) until priced.
    assert hn.Prices().cost_usd("openai", "gpt-4o", 10**6, 0, base_url=url) == 0.0
    paid = hn.Prices(local_free=False).cost_usd("openai", "gpt-4o", 10**6, 0, base_url=url)
    assert paid == hn.Prices().cost_usd("openai", "gpt-4o", 10**6, 0) and paid and paid > 0
    assert hn.Prices().cost_usd("openai", "gpt-4o", 10**6, 0, base_url="https://api.openai.com/v1")
