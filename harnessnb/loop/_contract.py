"""The task contract a run is held to, its verifications, and how runs end."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ..rules._errors import ConfigError
from ..rules._outcomes import RunOutcome
from ..rules._renamed import renamed, warn_renamed
from ..rules._retry import RetryPolicy, seconds
from ..rules._stall import StallPolicy
from ._output import MODES, OutputMode, OutputSpec

__all__ = ["Command", "FileContains", "RunOutcome", "TaskContract", "Verification"]


@dataclasses.dataclass(frozen=True)
class FileContains:
    """Passes when ``path`` (inside the workspace) exists and contains ``needle``."""

    path: str
    needle: str

    def describe(self) -> str:
        return f"{self.path} contains {self.needle!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"type": "file_contains", "path": self.path, "needle": self.needle}


@dataclasses.dataclass(frozen=True)
class Command:
    """Passes when ``argv`` run in the workspace exits with ``expect_exit``.

    The command goes through the exec policy like any tool call; a check that could
    not run (refused, not found, timed out) is reported apart from one that ran and
    failed.
    """

    argv: Sequence[str]
    expect_exit: int = 0
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.argv, str) or not self.argv:
            raise ConfigError("Command(argv): give a non-empty list of strings, not a string")
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))

    def describe(self) -> str:
        return f"`{' '.join(self.argv)}` exits {self.expect_exit}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "command",
            "argv": list(self.argv),
            "expect_exit": self.expect_exit,
            "timeout_s": self.timeout_s,
        }


Verification = FileContains | Command


def verification_from_dict(data: dict[str, Any] | None) -> Verification | None:
    if not data:
        return None
    if data.get("type") == "file_contains":
        return FileContains(data["path"], data["needle"])
    if data.get("type") == "command":
        return Command(data["argv"], data.get("expect_exit", 0), data.get("timeout_s", 60.0))
    raise ConfigError(f"unknown verification {data.get('type')!r}")


# A contract stored before the names and units rule (docs/api.md) spells these so.
_RETRY_RENAMES = {"base": "base_s", "cap": "cap_s", "max_wait": "max_wait_s"}


def _unrenamed(stored: dict[str, Any], renames: dict[str, str]) -> dict[str, Any]:
    """``stored`` with its old keys under their new names (read back without warning)."""
    return {renames.get(k, k): v for k, v in stored.items()}


@renamed(max_seconds="max_time_s", max_tokens="max_total_tokens")
@dataclasses.dataclass(frozen=True)
class TaskContract:
    """What the agent must do, where, and within which budgets.

    Args:
        task: The instruction, in plain words.
        workspace: The folder the agent works in; it must exist.
        verification: A check that decides success (None: the run is ``finished``
            when the model answers without a tool call).
        max_steps: Model turns allowed (12).
        max_time_s: Wall-clock budget from the run's start, bounding every wait
            (None: no limit). Float seconds or ``timedelta`` (read back as float
            seconds). Was ``max_seconds`` (deprecated).
        max_total_tokens: The run's token budget (all its steps' input and output),
            checked after each step's usage is counted. Was ``max_tokens``
            (deprecated: a provider's ``max_tokens`` caps one answer).
        max_cost_usd: Cost budget in US dollars, checked after each step against what
            the run's attempts cost (``hn.Prices``); a run whose spend cannot be
            priced ends ``cost_budget`` at once rather than run unbounded.
        max_retries: Retries per provider call (2, so 3 attempts).
        retry: Backoff rule for those retries.
        stall: Stall detection; ``StallPolicy(window=0)`` disables it.
        system_prompt: Replaces the built-in system prompt when given.
        output: The type of answer asked for (a pydantic model, a dataclass, a
            TypedDict or a JSON Schema dict): the final answer is validated and
            ``RunResult.output`` is a value of it (None: a text answer). Needs the
            ``harnessnb[typed]`` extra (pydantic) for a Python type.
        output_mode: How it is asked for: ``"native"`` (the provider's structured
            output), ``"tool"`` (a ``final_answer`` tool), ``"prompted"`` (the schema in
            the conversation, the JSON read from the text) or ``"auto"`` (native where
            the provider offers it and the schema has a strict form, else tool, else
            prompted).
        output_retries: Answers that do not validate asked again, with the errors as
            feedback (2).
    """

    task: str
    workspace: str | os.PathLike[str]
    verification: Verification | None = None
    max_steps: int = 12
    max_time_s: float | timedelta | None = None
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    max_retries: int = 2
    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)
    stall: StallPolicy = dataclasses.field(default_factory=StallPolicy)
    system_prompt: str | None = None
    output: Any = None
    output_mode: OutputMode = "auto"
    output_retries: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.task, str) or not self.task.strip():
            raise ConfigError("TaskContract: the task is empty")
        object.__setattr__(self, "workspace", os.fspath(self.workspace))
        object.__setattr__(self, "max_time_s", seconds(self.max_time_s))
        if self.max_steps < 1:
            raise ConfigError("TaskContract: max_steps must be at least 1")
        if self.max_retries < 0:
            raise ConfigError("TaskContract: max_retries must be >= 0")
        if self._budget_s is not None and self._budget_s <= 0:
            raise ConfigError("TaskContract: max_time_s must be > 0")
        if self.max_total_tokens is not None and self.max_total_tokens <= 0:
            raise ConfigError("TaskContract: max_total_tokens must be > 0")
        if self.max_cost_usd is not None:
            cost = self.max_cost_usd
            if isinstance(cost, bool) or not isinstance(cost, int | float) or not cost > 0:
                raise ConfigError(f"TaskContract: max_cost_usd must be dollars > 0, not {cost!r}")
            object.__setattr__(self, "max_cost_usd", float(cost))
        self._check_output()

    def _check_output(self) -> None:
        if self.output_mode not in MODES:
            raise ConfigError(
                f"TaskContract: output_mode must be one of {', '.join(MODES)}, "
                f"not {self.output_mode!r}"
            )
        if isinstance(self.output_retries, bool) or not isinstance(self.output_retries, int):
            raise ConfigError("TaskContract: output_retries must be a whole number")
        if self.output_retries < 0:
            raise ConfigError("TaskContract: output_retries must be >= 0")
        if self.output is None:
            if self.output_mode != "auto":
                raise ConfigError("TaskContract: output_mode without output= (no typed answer)")
            return
        OutputSpec.of(self.output)  # a bad T is refused here

    @property
    def output_spec(self) -> OutputSpec | None:
        """The typed answer asked for (None: a text answer)."""
        return None if self.output is None else OutputSpec.of(self.output)

    @property
    def _budget_s(self) -> float | None:
        """``max_time_s`` as the float it is after ``__init__``."""
        value = self.max_time_s
        return None if value is None else float(value)  # type: ignore[arg-type]

    @property
    def budget_seconds(self) -> float | None:
        """Deprecated: ``max_time_s``."""
        warn_renamed("TaskContract", "budget_seconds", "max_time_s", keyword=False)
        return self._budget_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "workspace": str(self.workspace),
            "verification": self.verification.to_dict() if self.verification else None,
            "max_steps": self.max_steps,
            "max_time_s": self._budget_s,
            "max_total_tokens": self.max_total_tokens,
            "max_cost_usd": self.max_cost_usd,
            "max_retries": self.max_retries,
            "retry": dataclasses.asdict(self.retry),
            "stall": dataclasses.asdict(self.stall),
            "system_prompt": self.system_prompt,
            **self._output_dict(),
        }

    def _output_dict(self) -> dict[str, Any]:
        spec = self.output_spec
        if spec is None:
            return {}
        # A Python type cannot be stored: its schema is; a resume given no output= reads
        # the answer back as that schema's JSON (a dict).
        return {
            "output": spec.to_dict(),
            "output_mode": self.output_mode,
            "output_retries": self.output_retries,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskContract:
        return cls(
            task=data["task"],
            workspace=data["workspace"],
            verification=verification_from_dict(data.get("verification")),
            max_steps=data.get("max_steps", 12),
            max_time_s=data.get("max_time_s", data.get("max_seconds")),  # older: max_seconds
            max_total_tokens=data.get("max_total_tokens", data.get("max_tokens")),
            max_cost_usd=data.get("max_cost_usd"),
            max_retries=data.get("max_retries", 2),
            retry=RetryPolicy(**_unrenamed(data.get("retry", {}), _RETRY_RENAMES)),
            stall=StallPolicy(**data.get("stall", {})),
            system_prompt=data.get("system_prompt"),
            output=_stored_output(data.get("output")),
            output_mode=data.get("output_mode", "auto"),
            output_retries=data.get("output_retries", 2),
        )


def _stored_output(stored: Any) -> Any:
    """A stored contract's typed answer: its schema (with its name as the title)."""
    if not isinstance(stored, dict) or not isinstance(stored.get("schema"), dict):
        return None
    schema = dict(stored["schema"])
    schema.setdefault("title", stored.get("name") or "answer")
    return schema
