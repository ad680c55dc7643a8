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
from ..rules._fields import Declared, context
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


class CLIError(Declared, HarnessError):
    """A coding-agent CLI run failed.

    Each subclass declares its context fields once, as annotations (``rules._fields``):
    they are its keywords, and its card shows them after agent, bin and retryable.

    Args:
        message: What happened, for a person (holds no secret).
        agent: The driver's name (``claude-code``, ``codex``, ``copilot``).
        bin: The executable (as configured, e.g. ``claude``).
    """

    CODE = "AGENT"
    KIND: ClassVar[ProviderErrorKind | None] = None
    RETRYABLE: ClassVar[bool] = False
    TRANSIENT = _DeprecatedRetryableFlag()

    message: str = context(kw_only=False)
    agent: str = context(shown=False)
    bin: str = context(shown=False)

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
        shown = self._declared_fields()
        return {"agent": self.agent, "bin": self.bin, "retryable": self.retryable, **shown}

    def _badge_html(self) -> Html:
        kind = self.kind.value if self.kind is not None else "not started"
        word = "retryable" if self.retryable else "not retryable"
        return retry_badge(f"{self.agent}: {kind}, {word}", retryable=self.retryable)


class _WithDetail(CLIError):
    """A failure the CLI explained in its own words: ``.detail``."""

    detail: str


class NotInstalled(CLIError):
    CODE = "AGENT_NOT_INSTALLED"
    hint: str

    def _hint(self) -> str:
        return f"install it with: {self.hint}"


class Spawn(CLIError):
    CODE = "AGENT_SPAWN"
    reason: str


class CommandLineTooLarge(CLIError):
    CODE = "AGENT_COMMAND_LINE_TOO_LARGE"
    what: str
    size: int
    limit: int


class Unsupported(CLIError):
    CODE = "AGENT_UNSUPPORTED"
    what: str


class FlagRejected(_WithDetail):
    CODE = "AGENT_FLAG_REJECTED"
    KIND = ProviderErrorKind.REQUEST

    def _hint(self) -> str:
        return f"the installed {self.bin} does not accept an argument harnessnb passed"


class Timeout(CLIError):
    CODE = "AGENT_TIMEOUT"
    KIND = ProviderErrorKind.TIMEOUT
    RETRYABLE = True

    timeout_s: float
    partial: str = ""

    def _fields(self) -> dict[str, Any]:
        partial = shorten(self.partial.strip(), CARD_CHARS) or None
        return {**super()._fields(), "partial": partial}


class Cancelled(CLIError):
    CODE = "AGENT_CANCELLED"


class Failed(CLIError):
    CODE = "AGENT_FAILED"
    KIND = ProviderErrorKind.SERVER

    exit_code: int
    stderr: str = ""

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "stderr": shorten(self.stderr.strip(), CARD_CHARS) or None}


@renamed(retry_after="retry_after_s")
class _WithCause(_WithDetail):
    """A failure the model endpoint reported through the CLI: ``.status`` (the HTTP
    status, when the CLI said it) and ``.retry_after_s`` (seconds the server asked to
    wait, when the CLI said it; ``.retry_after`` is its deprecated spelling)."""

    status: int | None = None
    retry_after_s: float | None = None


class RateLimited(_WithCause):
    """Rate limited (retryable), or a quota used up (``.quota``: not retryable).

    ``resets_at`` is when the limit lifts (epoch seconds): the CLI's own record of it,
    or the moment of the failure plus a known ``retry_after_s``.
    """

    CODE = "AGENT_RATE_LIMITED"
    KIND = ProviderErrorKind.RATE_LIMITED
    RETRYABLE = True

    quota: bool = False
    resets_at: float | None = context(default=None, shown=False)

    def _settle(self) -> None:
        if self.resets_at is None and self.retry_after_s is not None:
            self.resets_at = time.time() + self.retry_after_s

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

    hint: str

    def _hint(self) -> str:
        if self.hint.startswith("set "):  # a key to provide, not a login
            return self.hint
        return f"log in with: {self.hint}"


class AgentError(_WithCause):
    """The turn failed for the reason ``.kind`` names; retryable when that kind is
    (a server failure, a dropped stream, the CLI's own request timeout). With neither a
    kind nor a status, ``transport``."""

    CODE = "AGENT_TURN_FAILED"

    # The kind the CLI's report named; else its status's (the one table); else no
    # answer arrived, the connection failed (as ``_cause.retry_cause`` reads a
    # status-less retry). Every other CLIError's kind is its class's.
    kind: ProviderErrorKind | None = context(default=None, shown=False)

    def _settle(self) -> None:
        if self.kind is None:
            self.kind = (
                classify_status(self.status, self.detail)
                if self.status is not None
                else ProviderErrorKind.TRANSPORT
            )

    @property
    def retryable(self) -> bool:
        return self.kind in _RETRYABLE_CAUSES

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "kind": self.kind.value if self.kind else None}


_RETRYABLE_CAUSES = frozenset({
    ProviderErrorKind.TRANSPORT, ProviderErrorKind.TIMEOUT,
    ProviderErrorKind.RATE_LIMITED, ProviderErrorKind.SERVER,
})  # fmt: skip


class Parse(_WithDetail):
    CODE = "AGENT_PARSE"
    KIND = ProviderErrorKind.MALFORMED


class SessionConflict(CLIError):
    CODE = "AGENT_SESSION_CONFLICT"
    name: str
    bound: str
    requested: str


class SessionBusy(CLIError):
    CODE = "AGENT_SESSION_BUSY"
    RETRYABLE = True
    name: str
    holder: str | None = None


CARD_CHARS = 400  # characters of stderr or partial output a card and its dict keep
