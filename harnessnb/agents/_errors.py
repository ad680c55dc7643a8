"""Typed failures of a coding-agent CLI run.

Class tree (all are ``hn.HarnessError``, so they render as the same cards)::

    CLIError                     .agent .bin .retryable; is_auth_failure() is_cancelled()
    ├── NotInstalled             the CLI is not on PATH: .hint (the install command)
    ├── Spawn                    the OS could not start it: .reason
    ├── CommandLineTooLarge      an input does not fit the command line: .what .size .limit
    ├── Unsupported              a capability this CLI lacks, asked for explicitly: .what
    ├── FlagRejected             the installed CLI refused an argument: .detail
    ├── Timeout                  killed (whole process group) at .timeout_s; .partial kept
    ├── Cancelled                the caller cancelled; the process group is gone
    ├── Failed                   non-zero exit: .exit_code (-N = signal N) .stderr
    ├── RateLimited              rate limited: .detail .status .retry_after_s .resets_at .quota
    ├── NotAuthenticated         not logged in / bad key: .detail .status .hint (the fix)
    ├── AgentError               the turn failed: .kind (from the cause) .status .retry_after_s
    ├── Parse                    structured output that could not be read: .detail
    ├── SessionConflict          a session name bound to another CLI: .name .bound .requested
    └── SessionBusy              another live run drives the named session: .name .holder

harnessnb never retries any of these on its own: ``.retryable`` classifies (the same
spelling as ``ProviderError`` and ``StoreError``; ``is_transient()`` is its deprecated
old name), the caller decides (backing off from a quota is a person's choice, not a
loop's).
``kind`` is the ``ProviderErrorKind`` a failed invocation is stored with in the
``attempts`` table, so "failure rate by provider and kind" covers CLIs too.
"""

from __future__ import annotations

import datetime
import time
import warnings
from typing import Any, ClassVar

from ..rules._errors import HarnessError, ProviderErrorKind, classify_status
from ..rules._html import Html, retry_badge
from ..rules._renamed import renamed
from ..rules._text import shorten

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


class _DeprecatedRetryableFlag:
    """``TRANSIENT``, the old name of ``RETRYABLE``: still read, with a warning."""

    def __get__(self, obj: object, owner: type[CLIError]) -> bool:
        warnings.warn(
            "CLIError.TRANSIENT is deprecated; use CLIError.RETRYABLE or .retryable",
            DeprecationWarning,
            stacklevel=2,
        )
        return owner.RETRYABLE


class CLIError(HarnessError):
    """A coding-agent CLI run failed.

    Args:
        message: What happened, for a person (holds no secret).
        agent: The driver's name (``claude-code``, ``codex``, ``copilot``).
        bin: The executable (as configured, e.g. ``claude``).
    """

    CODE = "AGENT"
    KIND: ClassVar[ProviderErrorKind | None] = None
    RETRYABLE: ClassVar[bool] = False
    TRANSIENT = _DeprecatedRetryableFlag()
    # The attributes a subclass adds, shown (in this order) after agent, bin, retryable.
    CONTEXT: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str, *, agent: str, bin: str, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.agent = agent
        self.bin = bin

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "TRANSIENT" in cls.__dict__:  # a subclass written against the old name
            warnings.warn(
                f"{cls.__name__}.TRANSIENT is deprecated; set RETRYABLE",
                DeprecationWarning,
                stacklevel=2,
            )
            cls.RETRYABLE = bool(cls.__dict__["TRANSIENT"])

    @property
    def kind(self) -> ProviderErrorKind | None:
        """The attempt row's kind; None for failures before the CLI was started."""
        return self.KIND

    @property
    def retryable(self) -> bool:
        """True when the same request may succeed later (quota, timeout, busy session).

        Not ``kind.retryable``: a CLI that exits non-zero (``server``) or prints what
        cannot be read (``malformed``) will most likely do it again.
        """
        return self.RETRYABLE

    def is_transient(self) -> bool:
        """Deprecated: use ``.retryable``."""
        warnings.warn(
            "CLIError.is_transient() is deprecated; use the .retryable property",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.retryable

    def is_auth_failure(self) -> bool:
        return isinstance(self, NotAuthenticated)

    def is_cancelled(self) -> bool:
        return isinstance(self, Cancelled)

    def _fields(self) -> dict[str, Any]:
        context = {name: getattr(self, name) for name in self.CONTEXT}
        return {"agent": self.agent, "bin": self.bin, "retryable": self.retryable, **context}

    def _badge_html(self) -> Html:
        kind = self.kind.value if self.kind is not None else "not started"
        word = "retryable" if self.retryable else "not retryable"
        return retry_badge(f"{self.agent}: {kind}, {word}", retryable=self.retryable)


class _WithDetail(CLIError):
    """A failure the CLI explained in its own words: ``.detail``."""

    CONTEXT: ClassVar[tuple[str, ...]] = ("detail",)

    def __init__(self, message: str, *, agent: str, bin: str, detail: str) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.detail = detail


class NotInstalled(CLIError):
    CODE = "AGENT_NOT_INSTALLED"
    CONTEXT = ("hint",)

    def __init__(self, message: str, *, agent: str, bin: str, hint: str) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.hint = hint

    def _hint(self) -> str:
        return f"install it with: {self.hint}"


class Spawn(CLIError):
    CODE = "AGENT_SPAWN"
    CONTEXT = ("reason",)

    def __init__(self, message: str, *, agent: str, bin: str, reason: str) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.reason = reason


class CommandLineTooLarge(CLIError):
    CODE = "AGENT_COMMAND_LINE_TOO_LARGE"
    CONTEXT = ("what", "size", "limit")

    def __init__(
        self, message: str, *, agent: str, bin: str, what: str, size: int, limit: int
    ) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.what = what
        self.size = size
        self.limit = limit


class Unsupported(CLIError):
    CODE = "AGENT_UNSUPPORTED"
    CONTEXT = ("what",)

    def __init__(self, message: str, *, agent: str, bin: str, what: str) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.what = what


class FlagRejected(_WithDetail):
    CODE = "AGENT_FLAG_REJECTED"
    KIND = ProviderErrorKind.REQUEST

    def _hint(self) -> str:
        return f"the installed {self.bin} does not accept an argument harnessnb passed"


class Timeout(CLIError):
    CODE = "AGENT_TIMEOUT"
    KIND = ProviderErrorKind.TIMEOUT
    RETRYABLE = True

    def __init__(
        self, message: str, *, agent: str, bin: str, timeout_s: float, partial: str = ""
    ) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.timeout_s = timeout_s
        self.partial = partial

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "timeout_s": self.timeout_s,
                "partial": shorten(self.partial.strip(), CARD_CHARS) or None}  # fmt: skip


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
                "stderr": shorten(self.stderr.strip(), CARD_CHARS) or None}  # fmt: skip


@renamed(retry_after="retry_after_s")
class _WithCause(_WithDetail):
    """A failure the model endpoint reported through the CLI: ``.status`` (the HTTP
    status, when the CLI said it) and ``.retry_after_s`` (seconds the server asked to
    wait, when the CLI said it; ``.retry_after`` is its deprecated spelling)."""

    CONTEXT: ClassVar[tuple[str, ...]] = ("status", "retry_after_s", "detail")

    def __init__(
        self,
        message: str,
        *,
        agent: str,
        bin: str,
        detail: str,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, agent=agent, bin=bin, detail=detail)
        self.status = status
        self.retry_after_s = retry_after_s


@renamed(retry_after="retry_after_s")
class RateLimited(_WithCause):
    """Rate limited (retryable), or a quota used up (``.quota``: not retryable).

    ``resets_at`` is when the limit lifts (epoch seconds): the CLI's own record of it,
    or the moment of the failure plus a known ``retry_after_s``.
    """

    CODE = "AGENT_RATE_LIMITED"
    KIND = ProviderErrorKind.RATE_LIMITED
    RETRYABLE = True
    CONTEXT = ("status", "retry_after_s", "quota", "detail")

    def __init__(
        self,
        message: str,
        *,
        agent: str,
        bin: str,
        detail: str,
        resets_at: float | None = None,
        status: int | None = None,
        retry_after_s: float | None = None,
        quota: bool = False,
    ) -> None:
        super().__init__(message, agent=agent, bin=bin, detail=detail, status=status,
                         retry_after_s=retry_after_s)  # fmt: skip
        self.quota = quota
        if resets_at is None and retry_after_s is not None:
            resets_at = time.time() + retry_after_s
        self.resets_at = resets_at

    @property
    def retryable(self) -> bool:
        return not self.quota

    def _fields(self) -> dict[str, Any]:
        resets = None
        if self.resets_at is not None:
            when = datetime.datetime.fromtimestamp(self.resets_at, datetime.UTC)
            resets = when.strftime("%Y-%m-%d %H:%M:%S UTC")
        return {**super()._fields(), "resets_at": self.resets_at, "resets": resets}

    def _hint(self) -> str:
        if self.quota:
            return "the quota is used up: waiting will not help; raise it or switch account"
        return "not retried automatically: back off, or switch account, then run again"


class NotAuthenticated(_WithCause):
    CODE = "AGENT_NOT_AUTHENTICATED"
    KIND = ProviderErrorKind.AUTH
    CONTEXT = ("status", "detail", "hint")

    def __init__(
        self,
        message: str,
        *,
        agent: str,
        bin: str,
        detail: str,
        hint: str,
        status: int | None = None,
    ) -> None:
        super().__init__(message, agent=agent, bin=bin, detail=detail, status=status)
        self.hint = hint

    def _hint(self) -> str:
        if self.hint.startswith("set "):  # a key to provide, not a login
            return self.hint
        return f"log in with: {self.hint}"


@renamed(retry_after="retry_after_s")
class AgentError(_WithCause):
    """The turn failed for the reason ``.kind`` names; retryable when that kind is
    (a server failure, a dropped stream, the CLI's own request timeout). With neither a
    kind nor a status, ``transport``."""

    CODE = "AGENT_TURN_FAILED"

    def __init__(
        self,
        message: str,
        *,
        agent: str,
        bin: str,
        detail: str,
        status: int | None = None,
        kind: ProviderErrorKind | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, agent=agent, bin=bin, detail=detail, status=status,
                         retry_after_s=retry_after_s)  # fmt: skip
        self._kind = kind

    @property
    def kind(self) -> ProviderErrorKind:
        if self._kind is not None:
            return self._kind
        if self.status is not None:
            return classify_status(self.status, self.detail)
        # No status and nothing the CLI said named it: no answer arrived, the connection
        # failed (as ``_cause.retry_cause`` reads a status-less retry).
        return ProviderErrorKind.TRANSPORT

    @property
    def retryable(self) -> bool:
        return self.kind in _RETRYABLE_CAUSES

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "kind": self.kind.value}


_RETRYABLE_CAUSES = frozenset({
    ProviderErrorKind.TRANSPORT, ProviderErrorKind.TIMEOUT,
    ProviderErrorKind.RATE_LIMITED, ProviderErrorKind.SERVER,
})  # fmt: skip


class Parse(_WithDetail):
    CODE = "AGENT_PARSE"
    KIND = ProviderErrorKind.MALFORMED


class SessionConflict(CLIError):
    CODE = "AGENT_SESSION_CONFLICT"
    CONTEXT = ("name", "bound", "requested")

    def __init__(
        self, message: str, *, agent: str, bin: str, name: str, bound: str, requested: str
    ) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.name = name
        self.bound = bound
        self.requested = requested


class SessionBusy(CLIError):
    CODE = "AGENT_SESSION_BUSY"
    RETRYABLE = True
    CONTEXT = ("name", "holder")

    def __init__(
        self, message: str, *, agent: str, bin: str, name: str, holder: str | None = None
    ) -> None:
        super().__init__(message, agent=agent, bin=bin)
        self.name = name
        self.holder = holder


CARD_CHARS = 400  # characters of stderr or partial output a card and its dict keep
