"""Typed failures of a coding-agent CLI run.

Class tree (all are ``hn.HarnessError``, so they render as the same cards)::

    CLIError                     .agent .bin; is_transient() is_auth_failure() is_cancelled()
    ├── NotInstalled             the CLI is not on PATH: .hint (the install command)
    ├── Spawn                    the OS could not start it: .reason
    ├── CommandLineTooLarge      an input does not fit the command line: .what .size .limit
    ├── Unsupported              a capability this CLI lacks, asked for explicitly: .what
    ├── FlagRejected             the installed CLI refused an argument: .detail
    ├── Timeout                  killed (whole process group) at .timeout_s; .partial kept
    ├── Cancelled                the caller cancelled; the process group is gone
    ├── Failed                   non-zero exit: .exit_code (-N = signal N) .stderr
    ├── RateLimited              the CLI's quota/rate-limit wording, unedited: .detail .resets_at
    ├── NotAuthenticated         not logged in / bad key: .detail .hint (the login command)
    ├── AgentError               exit 0 but the turn failed: .status .detail
    ├── Parse                    structured output that could not be read: .detail
    ├── SessionConflict          a session name bound to another CLI: .name .bound .requested
    └── SessionBusy              another live run drives the named session: .name .holder

harnessnb never retries any of these on its own: ``is_transient()`` classifies, the
caller decides (backing off from a quota is a person's choice, not a loop's).
``kind`` is the ``ProviderErrorKind`` a failed invocation is stored with in the
``attempts`` table, so "failure rate by provider and kind" covers CLIs too.
"""

from __future__ import annotations

import datetime
from typing import Any, ClassVar

from ..rules._errors import HarnessError, ProviderErrorKind, badge_html, classify_status

__all__ = [
    "AgentError",
    "CLIError",
    "Cancelled",
    "CommandLineTooLarge",
    "Failed",
    "FlagRejected",
    "NotAuthenticated",
    "NotInstalled",
    "Parse",
    "RateLimited",
    "SessionBusy",
    "SessionConflict",
    "Spawn",
    "Timeout",
    "Unsupported",
]


class CLIError(HarnessError):
    """A coding-agent CLI run failed.

    Args:
        message: What happened, for a person (holds no secret).
        agent: The driver's name (``claude-code``, ``codex``, ``copilot``).
        bin: The executable (as configured, e.g. ``claude``).
    """

    CODE = "AGENT"
    KIND: ClassVar[ProviderErrorKind | None] = None
    TRANSIENT: ClassVar[bool] = False

    def __init__(self, message: str, *, agent: str, bin: str, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.agent = agent
        self.bin = bin

    @property
    def kind(self) -> ProviderErrorKind | None:
        """The attempt row's kind; None for failures before the CLI was started."""
        return self.KIND

    def is_transient(self) -> bool:
        """True when the same request may succeed later (quota, timeout, busy session)."""
        return self.TRANSIENT

    def is_auth_failure(self) -> bool:
        return isinstance(self, NotAuthenticated)

    def is_cancelled(self) -> bool:
        return isinstance(self, Cancelled)

    def _fields(self) -> dict[str, Any]:
        return {"agent": self.agent, "bin": self.bin, "transient": self.is_transient()}

    def _badge_html(self) -> str:
        kind = self.kind.value if self.kind is not None else "not started"
        word = "transient" if self.is_transient() else "not transient"
        return badge_html(f"{self.agent}: {kind}, {word}", transient=self.is_transient())


class NotInstalled(CLIError):
    CODE = "AGENT_NOT_INSTALLED"

    def __init__(self, message: str, *, agent: str, bin: str, hint: str) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.hint = hint

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "hint": self.hint}

    def _hint(self) -> str:
        return f"install it with: {self.hint}"


class Spawn(CLIError):
    CODE = "AGENT_SPAWN"

    def __init__(self, message: str, *, agent: str, bin: str, reason: str) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.reason = reason

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "reason": self.reason}


class CommandLineTooLarge(CLIError):
    CODE = "AGENT_COMMAND_LINE_TOO_LARGE"

    def __init__(
        self, message: str, *, agent: str, bin: str, what: str, size: int, limit: int
    ) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.what = what
        self.size = size
        self.limit = limit

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "what": self.what, "size": self.size, "limit": self.limit}


class Unsupported(CLIError):
    CODE = "AGENT_UNSUPPORTED"

    def __init__(self, message: str, *, agent: str, bin: str, what: str) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.what = what

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "what": self.what}


class FlagRejected(CLIError):
    CODE = "AGENT_FLAG_REJECTED"
    KIND = ProviderErrorKind.REQUEST

    def __init__(self, message: str, *, agent: str, bin: str, detail: str) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.detail = detail

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "detail": self.detail}

    def _hint(self) -> str:
        return f"the installed {self.bin} does not accept an argument harnessnb passed"


class Timeout(CLIError):
    CODE = "AGENT_TIMEOUT"
    KIND = ProviderErrorKind.TIMEOUT
    TRANSIENT = True

    def __init__(
        self, message: str, *, agent: str, bin: str, timeout_s: float, partial: str = ""
    ) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.timeout_s = timeout_s
        self.partial = partial

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "timeout_s": self.timeout_s,
                "partial": shorten(self.partial) or None}  # fmt: skip


class Cancelled(CLIError):
    CODE = "AGENT_CANCELLED"


class Failed(CLIError):
    CODE = "AGENT_FAILED"
    KIND = ProviderErrorKind.SERVER

    def __init__(
        self, message: str, *, agent: str, bin: str, exit_code: int, stderr: str = ""
    ) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.exit_code = exit_code
        self.stderr = stderr

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "exit_code": self.exit_code,
                "stderr": shorten(self.stderr) or None}  # fmt: skip


class RateLimited(CLIError):
    CODE = "AGENT_RATE_LIMITED"
    KIND = ProviderErrorKind.RATE_LIMITED
    TRANSIENT = True

    def __init__(
        self, message: str, *, agent: str, bin: str, detail: str, resets_at: float | None = None
    ) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.detail = detail
        self.resets_at = resets_at

    def _fields(self) -> dict[str, Any]:
        resets = None
        if self.resets_at is not None:
            when = datetime.datetime.fromtimestamp(self.resets_at, datetime.UTC)
            resets = when.strftime("%Y-%m-%d %H:%M UTC")
        return {**super()._fields(), "detail": self.detail, "resets_at": self.resets_at,
                "resets": resets}  # fmt: skip

    def _hint(self) -> str:
        return "not retried automatically: back off, or switch account, then run again"


class NotAuthenticated(CLIError):
    CODE = "AGENT_NOT_AUTHENTICATED"
    KIND = ProviderErrorKind.AUTH

    def __init__(self, message: str, *, agent: str, bin: str, detail: str, hint: str) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.detail = detail
        self.hint = hint

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "detail": self.detail, "hint": self.hint}

    def _hint(self) -> str:
        return f"log in with: {self.hint}"


class AgentError(CLIError):
    CODE = "AGENT_TURN_FAILED"

    def __init__(
        self, message: str, *, agent: str, bin: str, detail: str, status: int | None = None
    ) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.detail = detail
        self.status = status

    @property
    def kind(self) -> ProviderErrorKind:
        if self.status is not None:
            return classify_status(self.status, self.detail)
        return ProviderErrorKind.SERVER

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "status": self.status, "detail": self.detail}


class Parse(CLIError):
    CODE = "AGENT_PARSE"
    KIND = ProviderErrorKind.MALFORMED

    def __init__(self, message: str, *, agent: str, bin: str, detail: str) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.detail = detail

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "detail": self.detail}


class SessionConflict(CLIError):
    CODE = "AGENT_SESSION_CONFLICT"

    def __init__(
        self, message: str, *, agent: str, bin: str, name: str, bound: str, requested: str
    ) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.name = name
        self.bound = bound
        self.requested = requested

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "name": self.name, "bound": self.bound,
                "requested": self.requested}  # fmt: skip


class SessionBusy(CLIError):
    CODE = "AGENT_SESSION_BUSY"
    TRANSIENT = True

    def __init__(
        self, message: str, *, agent: str, bin: str, name: str, holder: str | None = None
    ) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.name = name
        self.holder = holder

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "name": self.name, "holder": self.holder}


def shorten(text: str, limit: int = 400) -> str:
    """``text`` stripped and cut to ``limit`` characters for a card or a summary line."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
