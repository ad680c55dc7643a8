"""What every coding-agent CLI driver shares: ``AgentCLI`` (configuration, the
environment a CLI gets, the command-line size check, refusing what a CLI cannot do),
``Invocation``, ``Permission``, and the readers of values in a CLI's output stream.
The three drivers (``_drivers``) subclass ``AgentCLI``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, Literal

from ..rules._errors import ConfigError
from ..rules._renamed import renamed
from ._classify import status_code
from ._errors import CommandLineTooLarge, Unsupported
from ._process import Limits
from ._turn import Turn, to_int

__all__ = ["PROMPT_ARG_MAX", "AgentCLI", "Invocation", "Permission"]

Permission = Literal["read_only", "edit", "bypass"]
_PERMISSIONS: Final = ("read_only", "edit", "bypass")

# Linux refuses a single argument over 32 pages (MAX_ARG_STRLEN, 128 KiB) with E2BIG;
# a prompt this large goes to stdin where the CLI reads one.
PROMPT_ARG_MAX: Final = 128 * 1024

# Every CLI gets these; nothing else of the host environment unless listed per CLI.
_BASE_ENV: Final = ("PATH", "HOME")


@dataclasses.dataclass(frozen=True)
class Invocation:
    """The argv to run and the bytes for stdin (None: stdin is closed)."""

    argv: list[str]
    stdin: bytes | None
    session_id: str | None  # known before the run (chosen by us, or resumed)


@renamed(timeout="timeout_s")
@dataclasses.dataclass(frozen=True)
class AgentCLI:
    """A coding-agent CLI run headless.

    Args:
        model: The model to ask for (the CLI's default when None).
        permission: ``read_only`` (the default: the agent may read, not change, the
            workspace), ``edit`` (it may edit files in the workspace) or ``bypass``
            (every tool, no sandbox: only for an externally sandboxed machine).
        bin: The executable, looked up on ``PATH`` (the driver's usual name by default).
        timeout_s: Seconds before the whole process group is killed (None: no limit).
        max_turns: Cap on the agent's turns, for CLIs that have one (``Unsupported``
            otherwise: never silently ignored).
        extra_args: Further arguments, placed before the prompt.
        env: Variables to add to the child's minimal environment (a proxy, say).
        limits: Bounds on captured output.
    """

    model: str | None = None
    permission: Permission = "read_only"
    bin: str = ""
    timeout_s: float | None = None
    max_turns: int | None = None
    extra_args: Sequence[str] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    limits: Limits = dataclasses.field(default_factory=Limits)

    name: ClassVar[str] = ""
    default_bin: ClassVar[str] = ""
    install_hint: ClassVar[str] = ""
    login_hint: ClassVar[str] = ""
    # Host variables this CLI authenticates or configures itself with: exact names, and
    # prefixes (a name ending in "_" passes every variable that starts with it).
    auth_env: ClassVar[tuple[str, ...]] = ()
    # Host variables that change how the CLI behaves (how long it retries, whether it
    # trusts the folder...): never taken from the host, only from ``env=``.
    behaviour_env: ClassVar[tuple[str, ...]] = ()
    model_env: ClassVar[str] = ""  # the variable that names the CLI's model, if any
    # The CLI reports every failed request, the last one too (not only its retries).
    reports_every_failure: ClassVar[bool] = False
    prompt_on_stdin: ClassVar[bool] = True
    # The CLI reports the usage of the whole session, not of this invocation.
    cumulative_usage: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.permission not in _PERMISSIONS:
            raise ConfigError(
                f"permission must be one of {', '.join(_PERMISSIONS)}, not {self.permission!r}"
            )
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ConfigError(
                f"timeout_s must be a positive number of seconds, not {self.timeout_s!r}"
            )
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError(f"max_turns must be at least 1, not {self.max_turns!r}")
        if not self.bin:
            object.__setattr__(self, "bin", self.default_bin)

    # ------------------------------------------------------------ invocation

    def environment(self, host: Mapping[str, str] | None = None) -> dict[str, str]:
        """The child's environment: PATH, HOME and this CLI's own variables only.

        Of the host's variables, those that change the CLI's behaviour rather than say
        who it is and where its model is (``behaviour_env``: ``IS_SANDBOX``, a retry
        count...) are left out; pass them with ``env=`` to use them.
        """
        host = os.environ if host is None else host
        names = (*_BASE_ENV, *self.auth_env)
        prefixes = tuple(n for n in names if n.endswith("_"))
        env = {
            k: v
            for k, v in host.items()
            if (k in names or k.startswith(prefixes)) and k not in self.behaviour_env
        }
        env.update(self.env)
        return env

    def auth_hint(self, env: Mapping[str, str]) -> str:
        """How to fix a failed login, for the environment the CLI is given."""
        return self.login_hint

    def invocation(
        self, prompt: str, *, resume: str | None = None, usage_file: str | None = None
    ) -> Invocation:
        """The argv (and stdin) that sends ``prompt``, resuming session ``resume``.

        ``usage_file`` is a path the CLI may write its usage to (see ``read_usage_file``).
        """
        data = prompt.encode("utf-8")
        on_stdin = len(data) >= PROMPT_ARG_MAX
        if on_stdin and not self.prompt_on_stdin:
            raise CommandLineTooLarge(
                f"the prompt is {len(data)} bytes; {self.bin} takes it only as an argument, "
                f"and the command line allows {PROMPT_ARG_MAX - 1} bytes for one argument",
                agent=self.name,
                bin=self.bin,
                what="prompt",
                size=len(data),
                limit=PROMPT_ARG_MAX - 1,
            )
        argv, session_id = self._argv(None if on_stdin else prompt, resume, usage_file)
        for arg in argv:  # extra_args could be as large
            if len(arg.encode("utf-8")) >= PROMPT_ARG_MAX:
                raise CommandLineTooLarge(
                    f"an argument of {len(arg)} characters does not fit the command line",
                    agent=self.name,
                    bin=self.bin,
                    what="argument",
                    size=len(arg.encode("utf-8")),
                    limit=PROMPT_ARG_MAX - 1,
                )
        return Invocation(argv, data if on_stdin else None, session_id)

    def _argv(
        self, prompt: str | None, resume: str | None, usage_file: str | None
    ) -> tuple[list[str], str | None]:
        raise NotImplementedError

    def _unsupported(self, what: str) -> Unsupported:
        return Unsupported(
            f"{self.bin} has no {what}; harnessnb does not silently run without it",
            agent=self.name,
            bin=self.bin,
            what=what,
        )

    # ---------------------------------------------------------------- stream

    def read(self, obj: Mapping[str, Any], turn: Turn) -> None:
        """Fold one object of the CLI's structured stream into ``turn``."""
        raise NotImplementedError

    def read_usage_file(self, text: str, turn: Turn) -> None:
        """Fold what the CLI wrote to ``usage_file`` into ``turn`` (most CLIs write none)."""

    def read_scratch(self, folder: str, turn: Turn) -> None:
        """Fold what the CLI wrote beside ``usage_file`` (its logs) into ``turn``."""

    def configured_model(self, env: Mapping[str, str]) -> str | None:
        """The model the CLI will use: ``model``, else its own variable's (``model_env``)."""
        return self.model or (env.get(self.model_env) if self.model_env else None) or None


def _str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content given as blocks
        return "".join(_str(v.get("text")) if isinstance(v, dict) else _str(v) for v in value)
    return "" if value is None else str(value)


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _errors_text(obj: Mapping[str, Any]) -> str:
    errors = obj.get("errors")
    return "; ".join(_str(e) for e in errors) if isinstance(errors, list) else ""


def _status(value: Any, detail: str) -> int | None:
    status = to_int(value)
    return status if 100 <= status < 600 else status_code(detail)


# Codex's report of a retry: "Reconnecting... 2/5 (the cause)".
_RECONNECTING = re.compile(r"Reconnecting\.*\s*(\d+)/(\d+)\s*\((.*)\)\s*$", re.DOTALL)


def _rate_limit(info: Mapping[str, Any], turn: Turn) -> None:
    """A structured rate-limit record: only a status other than allowed* is a refusal."""
    status = _str(info.get("status"))
    if not status or status.startswith("allowed"):
        return
    resets = info.get("resetsAt") or info.get("resets_at")
    kind = _str(info.get("rateLimitType") or info.get("type"))
    detail = f"rate limit {status}" + (f" ({kind})" if kind else "")
    turn.rate_limit = (detail, float(resets) if isinstance(resets, int | float) else None)
