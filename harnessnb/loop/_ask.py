"""``hn.ask``: one typed answer from a provider, no agent loop.

It is a run of one step with no workspace tools (in tool mode the ``final_answer``
tool alone is offered), in a workspace folder of its own made for it and removed
after (the user gives none): so the same modes, retries, attempt rows, run row and
cards as a run's typed answer, recorded in the store like any run. The answer is
returned; a run that got none raises its error (``hn.OutputError``, a
``ProviderError``...).
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ..rules._errors import HarnessError, wrap_unknown
from ..rules._retry import RetryPolicy, SystemClock
from ._bridge import sync_twin
from ._contract import RunOutcome, TaskContract
from ._driver import Driver, new_id
from ._output import OutputMode
from ._start import begin_run, uncut
from ._store_wait import close_opened
from ._tracing import TracerProviderLike, Tracing, tracing
from ._typed import TypedAnswers

if TYPE_CHECKING:
    from ..providers._completion import Provider
    from ..providers._prices import Prices
    from ..store._store import Store
    from ._events import Callback
    from ._result import RunResult

__all__ = ["ask", "ask_sync"]

T = TypeVar("T")

ASK_SYSTEM_PROMPT = "Answer the user's request. You have no tools but the answer's own."


@overload
async def ask(
    provider: Provider,
    prompt: str,
    *,
    output: type[T],
    output_mode: OutputMode = ...,
    output_retries: int = ...,
    system_prompt: str | None = ...,
    store: Store | str | os.PathLike[str] | None = ...,
    max_retries: int = ...,
    retry: RetryPolicy | None = ...,
    max_time_s: float | timedelta | None = ...,
    prices: Prices | None = ...,
    on_event: Callback | None = ...,
    tracer_provider: TracerProviderLike = ...,
    include_content: bool = ...,
) -> T: ...


@overload
async def ask(
    provider: Provider,
    prompt: str,
    *,
    output: dict[str, Any],
    output_mode: OutputMode = ...,
    output_retries: int = ...,
    system_prompt: str | None = ...,
    store: Store | str | os.PathLike[str] | None = ...,
    max_retries: int = ...,
    retry: RetryPolicy | None = ...,
    max_time_s: float | timedelta | None = ...,
    prices: Prices | None = ...,
    on_event: Callback | None = ...,
    tracer_provider: TracerProviderLike = ...,
    include_content: bool = ...,
) -> Any: ...


async def ask(
    provider: Provider,
    prompt: str,
    *,
    output: Any,
    output_mode: OutputMode = "auto",
    output_retries: int = 2,
    system_prompt: str | None = None,
    store: Store | str | os.PathLike[str] | None = None,
    max_retries: int = 2,
    retry: RetryPolicy | None = None,
    max_time_s: float | timedelta | None = None,
    prices: Prices | None = None,
    on_event: Callback | None = None,
    tracer_provider: TracerProviderLike = None,
    include_content: bool = False,
) -> Any:
    """One typed answer to ``prompt`` from ``provider``: a value of ``output``.

    Args:
        provider: Any provider (``hn.OpenAI``, ``hn.Anthropic``, ``hn.Gemini``...).
        prompt: What to answer.
        output: The answer's type: a pydantic model, a dataclass, a TypedDict (these
            need ``harnessnb[typed]``) or a JSON Schema dict (the answer is then the
            parsed JSON value).
        output_mode: ``"auto"``, ``"native"``, ``"tool"`` or ``"prompted"``
            (``TaskContract``'s).
        output_retries: Answers that do not validate asked again with the reasons (2).
        system_prompt: Replaces the short built-in one.
        store: Where the call is recorded (a run of one step): a ``Store``, a path, or
            None for the default store.
        max_retries: Retries of a failed provider call (2).
        retry: Their backoff (``hn.RetryPolicy``).
        max_time_s: The call's time budget, every retry and wait included.
        prices: How its attempts are priced (``hn.Prices``).
        on_event: Receives the run's events (retries, the answer's fallback...).
        tracer_provider, include_content: As for ``hn.run``: its run's spans.

    Returns:
        The answer, validated, as ``output`` (a dict schema: the JSON value).

    Raises:
        OutputError: No usable answer (a refusal; retries run out; a truncation
            asked again once), every attempt's reason in its message.
        ProviderError: The provider failed past its retries.
        ConfigError: A bad ``output`` or mode.
    """
    with tempfile.TemporaryDirectory(prefix="harnessnb-ask-") as folder:
        contract = TaskContract(
            prompt,
            folder,
            max_steps=1,
            max_time_s=max_time_s,
            max_retries=max_retries,
            retry=retry if retry is not None else RetryPolicy(),
            system_prompt=system_prompt or ASK_SYSTEM_PROMPT,
            output=output,
            output_mode=output_mode,
            output_retries=output_retries,
        )
        TypedAnswers.of(contract, provider)  # a mode the provider cannot answer in
        traced = tracing(tracer_provider, include_content)
        result = await _one_step(contract, provider, store, prices, on_event, traced)
    if result.error is not None:
        raise result.error
    if result.outcome is not RunOutcome.FINISHED or result.output is None:
        raise HarnessError(f"hn.ask ended {result.outcome.value} without an answer")
    return result.output


async def _one_step(
    contract: TaskContract,
    provider: Provider,
    store: Store | str | os.PathLike[str] | None,
    prices: Prices | None,
    on_event: Callback | None,
    traced: Tracing | None,
) -> RunResult:
    from ..rules._policy import Policy

    clock, run_id = SystemClock(), new_id("run")

    def build(opened: Store) -> Driver:
        driver = Driver(
            contract,
            provider,
            store=opened,
            policy=Policy.default(),
            approver=None,
            tools=(),
            on_event=on_event,
            clock=clock,
            run_id=run_id,
            prices=prices,
            builtins=False,
        )
        driver.tracing = traced
        return driver

    driver = await uncut(begin_run(store, contract, run_id, clock, build), store)
    if not isinstance(driver, Driver):
        return driver  # the store gave out before the call
    try:
        return await driver.drive(fresh=True)
    except Exception as exc:
        if isinstance(exc, HarnessError):
            raise
        err = wrap_unknown(exc)
        driver.recorder.record_now(RunOutcome.ESCALATED_TERMINAL, err.to_dict())
        raise err from exc
    finally:
        await close_opened(driver.store, store)


ask_sync = sync_twin(
    ask,
    """``ask`` for blocking callers: safe in a plain script and inside a Jupyter kernel
    (the call runs on harnessnb's loop thread).""",
)
