"""A run's typed answer (``TaskContract(output=T)``): the mode it is asked in, each
answer judged, and what is asked next.

``TypedAnswers`` is the model calls' (``_model_call.ModelCalls``) helper for a typed
run. Per call it says what to add to the request (``native``: ``output=OutputSchema``;
``tool``: the ``final_answer`` tool beside the run's tools; ``prompted``: the schema
and an instruction as a last user message) and judges the answer (``judge``):

- a refusal (``Completion.refusal``) ends the run: not retried;
- an answer stopped at its token cap is asked once more with twice the cap (when
  the run's token budget allows);
- an answer that does not validate is asked again with the reasons as feedback (a
  user message, the answer quoted), up to ``output_retries`` times;
- a valid answer is the run's ``output``; in tool mode the completion is rewritten
  as that answer's JSON text (the ``final_answer`` call, and any other call made with
  it, dropped: the answer ends the model's turn).

The attempt that brought an unusable answer is recorded as that attempt's row with
the ``OutputFailureKind`` as its kind, the reasons as its error and the raw text as
its answer; every attempt of a typed run carries the mode (``AttemptRecord``).

A native request the provider refuses (a ``request`` error with HTTP status 400: a
schema its strict mode will not take; not a 200 the wire reads as a request failure,
such as Gemini's SAFETY stop) is asked again once in the next mode (native -> tool
-> prompted). ``auto`` is native where the provider offers it and the schema has a
strict form, else tool, else prompted (a provider whose ``complete`` takes no tools).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import TYPE_CHECKING, Any, Final

from ..providers._base import offers_native_output
from ..providers._completion import AttemptRecord, Completion, OutputSchema, Provider
from ..rules._classify import OutputFailureKind
from ..rules._errors import ConfigError, OutputError, ProviderError, ProviderErrorKind
from ..rules._text import clip, shorten
from ._output import FINAL_ANSWER, OutputSpec, Valid, answer_text

if TYPE_CHECKING:
    from ._contract import TaskContract

__all__ = ["MAX_ANSWER_CHARS", "Judged", "TypedAnswers", "resolve_mode"]

MAX_ANSWER_CHARS: Final = 4000  # an unusable answer's text kept on its attempt row
_NEXT_MODE: Final = {"native": "tool", "tool": "prompted"}


def takes_tools(provider: Provider) -> bool:
    """Whether ``provider.complete`` takes tools: it has a parameter named ``tools`` (or
    takes any). A user's provider of the protocol's first form that names its second
    parameter otherwise (``complete(self, messages, _tools)``) is taken to call none:
    ``auto`` asks it in prompted mode, which works whatever it does with tools."""
    try:
        params = inspect.signature(provider.complete).parameters
    except (TypeError, ValueError):  # a builtin without a signature: the protocol's
        return True
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return "tools" in params or any(p.kind in variadic for p in params.values())


def resolve_mode(spec: OutputSpec, asked: str, provider: Provider) -> str:
    """The mode a run starts in; ``ConfigError`` for ``native`` on a provider without it."""
    native = offers_native_output(provider)
    if asked == "native" and not native:
        raise ConfigError(
            f"output_mode='native': {provider.name} has no native structured output "
            "(use 'auto', 'tool' or 'prompted')"
        )
    if asked == "tool" and not takes_tools(provider):
        raise ConfigError(f"output_mode='tool': {provider.name}'s complete() takes no tools")
    if asked != "auto":
        return asked
    if native and spec.strict is not None:
        return "native"
    return "tool" if takes_tools(provider) else "prompted"


@dataclasses.dataclass(frozen=True)
class Judged:
    """One answer judged: ``failure`` None and ``value`` the answer when it is usable."""

    completion: Completion
    failure: OutputFailureKind | None = None
    reasons: tuple[str, ...] = ()
    answer: str | None = None
    value: Valid | None = None
    final: bool = True  # an answer at all (False: tool calls of the run, not judged)


@dataclasses.dataclass(eq=False)
class TypedAnswers:
    """The typed answer of one run: its mode, the answers judged, what comes next."""

    spec: OutputSpec
    mode: str
    retries: int
    provider_takes_tools: bool = True
    cap: int | None = None  # the token cap asked (None: the provider's own)
    violations: int = 0
    truncations: int = 0
    fell_back: bool = False
    reasons: list[str] = dataclasses.field(default_factory=list)
    output: Valid | None = None

    @classmethod
    def of(cls, contract: TaskContract, provider: Provider) -> TypedAnswers | None:
        spec = contract.output_spec
        if spec is None:
            return None
        mode = resolve_mode(spec, contract.output_mode, provider)
        return cls(spec, mode, contract.output_retries, takes_tools(provider))

    # -- the request

    def output_schema(self) -> OutputSchema | None:
        if self.mode != "native":
            return None
        strict = self.spec.strict
        if strict is None:  # asked natively all the same (output_mode="native"): not strict
            return OutputSchema(self.spec.name, self.spec.schema, strict=False)
        return OutputSchema(self.spec.name, strict)

    def tools(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.mode != "tool":
            return specs
        final = {
            "name": FINAL_ANSWER,
            "description": (
                "Give your final answer: call this once, when you are done, with the "
                "answer as its arguments. Nothing else ends the task."
            ),
            "parameters": dict(self.spec.schema),
        }
        return [*specs, final]

    def messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.mode != "prompted":
            return messages
        schema = json.dumps(dict(self.spec.schema))
        ask = (
            "When you give your final answer, give only a JSON value that matches this "
            f"JSON Schema, in a ```json block:\n{schema}"
        )
        return [*messages, {"role": "user", "content": ask}]

    # -- the answer

    def judge(self, completion: Completion) -> Judged:
        """Whether ``completion`` is the run's typed answer, and if not why."""
        if completion.refusal is not None:
            said = f"the model refused: {shorten(completion.refusal, 300)}"
            return self._failed(completion, OutputFailureKind.REFUSAL, [said], completion.refusal)
        finals = [c for c in completion.tool_calls if c.name == FINAL_ANSWER]
        if completion.tool_calls and not finals and not completion.truncated:
            return Judged(completion, final=False)  # the run's own tools: a step
        if completion.truncated:
            raw = completion.text or json.dumps([c.arguments for c in finals])
            cap = "its token cap" if self.cap is None else f"its cap of {self.cap} tokens"
            said = f"the answer stopped at {cap} ({completion.finish_reason})"
            return self._failed(completion, OutputFailureKind.TRUNCATED, [said], raw)
        if finals:
            raw = json.dumps(finals[-1].arguments)
            checked = self.spec.validate(finals[-1].arguments)
        else:
            raw = completion.text
            checked = self.spec.check_text(completion.text)
            if self.mode == "tool" and isinstance(checked, list):
                checked = [f"no {FINAL_ANSWER} call; the text: {checked[0]}", *checked[1:]]
        if isinstance(checked, list):
            return self._failed(completion, OutputFailureKind.SCHEMA_VIOLATION, checked, raw)
        answered = dataclasses.replace(
            completion, text=answer_text(checked.value), tool_calls=(), finish_reason="stop"
        )
        return Judged(answered, value=checked)

    def _failed(
        self, completion: Completion, kind: OutputFailureKind, reasons: list[str], raw: str
    ) -> Judged:
        return Judged(completion, kind, tuple(reasons), clip(raw, MAX_ANSWER_CHARS))

    def marked(
        self, records: tuple[AttemptRecord, ...], judged: Judged | None
    ) -> tuple[AttemptRecord, ...]:
        """The call's attempt records with the mode, the answering one with its failure."""
        marked = [dataclasses.replace(r, output_mode=self.mode) for r in records]
        if judged is not None and judged.failure is not None and marked and marked[-1].kind is None:
            marked[-1] = dataclasses.replace(
                marked[-1],
                kind=judged.failure.value,
                error="\n".join(judged.reasons),
                answer=judged.answer,
            )
        return tuple(marked)

    # -- what comes next

    def again(self, judged: Judged, tokens_used: int, max_total_tokens: int | None) -> bool:
        """Whether an unusable answer is asked again (and how: the cap, the count)."""
        assert judged.failure is not None
        self.reasons.append("; ".join(judged.reasons))
        if judged.failure is OutputFailureKind.TRUNCATED:
            if self.truncations:
                return False
            used = self.cap or judged.completion.usage.output_tokens or 2048
            cap = 2 * used
            if max_total_tokens is not None and tokens_used + cap > max_total_tokens:
                return False
            self.truncations += 1
            self.cap = cap
            return True
        if judged.failure is OutputFailureKind.SCHEMA_VIOLATION:
            if self.violations >= self.retries:
                return False
            self.violations += 1
            return True
        return False

    def feedback(self, judged: Judged) -> dict[str, Any]:
        """The user message that asks again after an answer that did not validate."""
        listed = "\n".join(f"- {r}" for r in judged.reasons)
        quoted = shorten(judged.answer or "", 1000)
        how = f"call {FINAL_ANSWER} again" if self.mode == "tool" else "answer again"
        return {
            "role": "user",
            "content": (
                f"Your answer does not match the schema asked for:\n{listed}\n"
                f"Your answer was: {quoted}\nFix these and {how}."
            ),
        }

    def error(self, judged: Judged) -> OutputError:
        """The error that ends the run: the last answer's kind, every answer's reason."""
        assert judged.failure is not None
        if judged.failure is OutputFailureKind.REFUSAL:
            said = "the model refused to answer"
        elif judged.failure is OutputFailureKind.TRUNCATED:
            said = "the answer stopped at its token cap (asked again once)"
        else:
            said = f"no answer matched the schema after {self.violations + 1} tries"
        return OutputError(
            f"no usable typed answer ({self.spec.name}, {self.mode} mode): {said}",
            kind=judged.failure,
            mode=self.mode,
            reasons=self.reasons,
        )

    def fall_back(self, err: ProviderError) -> bool:
        """A native request refused (its schema: an HTTP 400): ask once in the next mode.

        Only a 400: a ``request`` failure that came as a 200 (Gemini's SAFETY stop or
        blocked prompt) is the model's or the filter's answer, not the schema refused,
        and another mode would only ask the same again."""
        if self.fell_back or self.mode != "native" or err.kind is not ProviderErrorKind.REQUEST:
            return False
        if err.status != 400:
            return False
        following = _NEXT_MODE["native"] if self.provider_takes_tools else "prompted"
        self.fell_back = True
        self.mode = following
        return True
