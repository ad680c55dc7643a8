"""The truth test (#27): simulated providers of known quality, swept with samples and
scorers over real HTTP on loopback, come out where they were configured.

The demo model answers arithmetic questions, wrongly at a seeded rate (``wrong_rate``,
drawn once per run); the chaos server fails requests at seeded rates. So a provider's
accuracy is ``1 - wrong_rate`` by construction, and the sweep's statistics must find it
inside their intervals; a provider that only answers 503 has infrastructure failures,
never wrong answers. The seeds are fixed: the draws are the same sequence every time
(only which run gets which draw varies with timing), so the checks are not flaky.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosRequest
from harnessnb.demo import DEMO_LABEL, DemoModel, demo_provider, demo_server, provider_for

ROOT = Path(__file__).resolve().parent.parent


def ask(task: str, *, tools: tuple[str, ...] = (), calls: list[dict[str, object]] | None = None,
        results: list[dict[str, object]] | None = None) -> ChaosRequest:
    """An OpenAI request carrying ``task``, the tools offered and earlier messages."""
    messages: list[dict[str, object]] = [{"role": "user", "content": task}]
    if calls:
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
    messages += results or []
    body = {"model": "m", "messages": messages,
            "tools": [{"type": "function", "function": {"name": t}} for t in tools]}
    return ChaosRequest("openai", "/v1/chat/completions", body, {}, "req_1")


def questions(count: int) -> list[hn.Sample]:
    """``count`` additions, subtractions and multiplications with their right answers."""
    rng = random.Random(11)
    found = []
    for i in range(count):
        a, b = rng.randint(-50, 99), rng.randint(2, 99)
        op, right = [("+", a + b), ("-", a - b), ("*", a * b)][i % 3]
        found.append(hn.Sample(f"What is {a} {op} {b}?", target=str(right), id=f"q{i:02d}"))
    return found


# ------------------------------------------------------------------ the demo model


def test_the_demo_model_answers_arithmetic_questions_right_by_default() -> None:
    model = DemoModel()
    for sample in questions(30):
        text = model(ask(sample.input)).text
        assert text == f"The answer is {sample.target}.\n\n({DEMO_LABEL})"
    assert model(ask("Compute 6 * 7")).text.startswith("The answer is 42.")
    assert model(ask("calculate -3 - -4, please")).text.startswith("The answer is 1.")


def test_a_wrong_answer_never_holds_the_right_one_so_includes_tells_them_apart() -> None:
    model = DemoModel(wrong_rate=1.0, seed=3)
    for right in [0, 1, 5, 9, 10, 42, 99, 100, -1, -10, 1000, 7, 70]:
        text = model(ask(f"What is {right} + 0?")).text
        answer = text.split("The answer is ", 1)[1].split(".", 1)[0]
        assert int(answer) != right and str(right) not in text, text


def test_the_wrong_answers_are_drawn_at_the_rate_and_repeat_with_the_seed() -> None:
    def draws(seed: int) -> list[bool]:
        model = DemoModel(wrong_rate=0.3, seed=seed)
        return [model(ask("What is 2 + 2?")).text.startswith("The answer is 4.")
                for _ in range(2000)]

    first = draws(5)
    assert draws(5) == first  # same seed, same sequence
    assert draws(6) != first
    # 2000 draws at 0.7: the 99.99% binomial range is about 0.66-0.74
    assert 0.66 < sum(first) / len(first) < 0.74


@pytest.mark.parametrize("rate", [-0.1, 1.5, "0.3", True])
def test_a_wrong_rate_outside_0_to_1_is_a_config_error(rate: object) -> None:
    with pytest.raises(hn.ConfigError, match="wrong_rate"):
        demo_server(wrong_rate=rate)  # type: ignore[arg-type]


def test_asked_to_write_the_answer_it_writes_it_and_then_says_the_same_number() -> None:
    model = DemoModel(wrong_rate=1.0, seed=1)
    task = "What is 20 + 22? Write the answer into ANSWER.txt."
    first = model(ask(task, tools=("write_file",)))
    (call,) = first.tool_calls
    assert call["name"] == "write_file" and call["arguments"]["path"] == "ANSWER.txt"
    written = str(call["arguments"]["content"]).strip()
    assert written != "42"  # drawn wrong
    wire = {"id": "c1", "type": "function",
            "function": {"name": "write_file", "arguments": json.dumps(call["arguments"])}}
    done = model(ask(task, tools=("write_file",), calls=[wire],
                     results=[{"role": "tool", "tool_call_id": "c1", "content": "ok"}]))
    # the second request reads the run's answer back from its write: no second draw
    assert done.text.startswith(f"Wrote {written} into ANSWER.txt. The answer is {written}.")
    assert not model(ask(task)).tool_calls  # no write_file offered: it says so
    assert model(ask(task)).text.startswith("I can't handle that")


def test_demo_provider_has_a_server_of_its_own_per_wrong_rate() -> None:
    right, wrong = demo_provider(seed=8), demo_provider(seed=8, wrong_rate=1.0)
    again = demo_provider(seed=8, wrong_rate=1.0)
    assert wrong.base_url != right.base_url  # type: ignore[attr-defined]
    assert again.base_url == wrong.base_url  # type: ignore[attr-defined]


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_over_http_a_run_writes_one_answer_and_says_it(
    protocol: str, tmp_path: Path, store: hn.Store
) -> None:
    policy = hn.Policy.default().layer("t").allow_write("ANSWER.txt")
    task = "What is 6 * 7? Write the answer into ANSWER.txt."
    with demo_server(seed=4, wrong_rate=0.5) as srv:
        provider = provider_for(srv, protocol=protocol)  # type: ignore[arg-type]
        said = []
        for i in range(6):
            ws = tmp_path / f"ws{i}"
            ws.mkdir()
            result = await hn.run(hn.TaskContract(task, ws), provider, policy=policy, store=store)
            written = (ws / "ANSWER.txt").read_text().strip()
            assert result.text.startswith(f"Wrote {written} into ANSWER.txt."), result.text
            said.append(written == "42")
        assert len(srv.requests) == 12  # the write, then the answer: one draw a run
    assert True in said and False in said  # at 0.5, six runs drew both (seed 4)


# ------------------------------------------------------------------ the truth test


async def test_a_sweep_finds_each_providers_configured_accuracy_and_infra_failures(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "template"
    ws.mkdir()
    truth = {"careless": 0.7, "limited": 0.9}
    with demo_server(seed=2, wrong_rate=0.3) as careless, \
            demo_server(seed=9, wrong_rate=0.1, rates={"rate_limited": 0.4}) as limited, \
            demo_server(seed=3, rates={"server": 1.0}) as down:  # fmt: skip
        providers = {name: provider_for(srv, name=name)
                     for name, srv in (("careless", careless), ("limited", limited),
                                       ("down", down))}  # fmt: skip
        result = await hn.sweep(questions(30), providers, workspace=ws, repeats=4,
                                store=tmp_path / "runs.duckdb",
                                scorers=[hn.scorers.includes()])  # fmt: skip
    summary = result.summary().set_index("provider")
    assert list(summary.index) == ["careless", "limited", "down"]
    assert (summary["runs"] == 120).all()
    for name, accuracy in truth.items():
        row = summary.loc[name]
        # the mean over scored runs, its 95% interval clustered by sample, holds the truth
        assert row["ci_low"] <= accuracy <= row["ci_high"], (name, row.to_dict())
        assert row["ci_high"] - row["ci_low"] < 0.25  # an interval that says something
    assert summary.loc["careless", "infra_failure_rate"] == 0.0
    assert summary.loc["careless", "scored"] == 120
    # an accuracy of 1.0 (no wrong answers) or of 0.7 would not fit both intervals
    assert summary.loc["careless", "ci_high"] < summary.loc["limited", "ci_high"]

    # limited's 429s were retried; a run whose every attempt got one is an infrastructure
    # failure, unscored, not a wrong answer; the 429 rate is the configured 0.4
    rates = result.failure_rates(by=("provider", "kind")).set_index(["provider", "kind"])
    got = rates.loc[("limited", "rate_limited")]
    assert got["failure_rate_low"] <= 0.4 <= got["failure_rate_high"], got.to_dict()
    scores = result.scores
    mine = scores[scores["provider"] == "limited"]
    infra = mine[mine["infra_failure"]]
    assert set(infra["infra_kind"]) <= {"rate_limited"} and infra["value"].isna().all()
    assert summary.loc["limited", "infra_failures"] == len(infra)
    assert summary.loc["limited", "scored"] == 120 - len(infra)

    # the provider that only answers 503: every run an infrastructure failure, none wrong
    row = summary.loc["down"]
    assert row["infra_failure_rate"] == 1.0 and row["infra_failures"] == 120
    assert row["scored"] == 0 and row["mean"] is pd.NA
    gone = scores[scores["provider"] == "down"]
    assert gone["infra_failure"].all() and set(gone["infra_kind"]) == {"server"}
    assert gone["passed"].isna().all()  # no wrong answers: no answers at all

    # compare: careless against limited on the samples both scored; nothing with down
    pairs = result.compare().set_index(["a", "b"])
    assert pairs.loc[("careless", "limited"), "diff"] > 0
    assert pairs.loc[("careless", "down"), "samples"] == 0


def test_the_notebooks_samples_are_thirty_questions_with_their_right_answers() -> None:
    found = hn.samples(ROOT / "notebooks" / "data" / "arithmetic.csv")
    model = DemoModel()
    assert len(found) == 30 and len({s.id for s in found}) == 30
    for sample in found:
        assert model(ask(sample.input)).text.startswith("I can't handle that")  # no tools
        reply = model(ask(sample.input, tools=("write_file",)))
        assert reply.tool_calls[0]["arguments"]["content"] == f"{sample.target}\n"
