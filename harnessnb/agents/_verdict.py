"""The typed failure one CLI invocation ended with, from its stream, exit and stderr.

Pure: the ``Turn`` read from the stream, how the process ended, and the texts already
scrubbed by the caller go in; a ``CLIError`` (or None for a good answer) comes out.

Order of evidence: a cause the CLI reported that waiting cannot fix (the run was
stopped on it); the driver's timeout (the last cause the CLI reported while still
retrying, else a bare ``Timeout``); the CLI's final error read as a ``Cause`` (its
status, its own word, its wording; a status or retry-after it left out is taken from
its last retry report of the same kind); then stderr's wording (auth, quota,
rejected flags); then the exit code.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import TypedDict

from ..rules._errors import ProviderErrorKind
from ._cause import Cause, cause_of
from ._classify import auth_failure, explanatory_line, flag_rejected, rate_limit
from ._drivers import AgentCLI
from ._errors import (
    AgentError,
    CLIError,
    Failed,
    FlagRejected,
    NotAuthenticated,
    Parse,
    RateLimited,
    Timeout,
)
from ._process import ProcessEnd
from ._turn import Turn

__all__ = ["error_from_cause", "verdict"]

K = ProviderErrorKind
# How the CLIs say a resumed session id is unknown to them.
_LOST_SESSION = re.compile(r"no (conversation|session)\b.*(found|matched)", re.IGNORECASE)
# The CLIs' own words for a failed turn (Claude's assistant ``error``, Copilot's errorType).
_AUTH_KINDS = frozenset({"authentication_failed", "authentication", "oauth_org_not_allowed"})
_QUOTA_KINDS = frozenset({"rate_limit", "rate_limited", "quota"})


def verdict(
    agent: AgentCLI,
    turn: Turn,
    end: ProcessEnd | None,
    *,
    scrub: Callable[[str], str],
    hint: str,
    lost: str = "",
) -> CLIError | None:
    """The failure this invocation ended with, or None for a good answer.

    ``hint`` is the fix for a failed login (the variables or command); ``lost`` is
    appended when a resumed session turns out unknown to the CLI.
    """
    return _Reading(agent, turn, scrub, hint, lost).ending(end)


def error_from_cause(
    agent: AgentCLI,
    cause: Cause,
    scrub: Callable[[str], str],
    *,
    message: str,
    hint: str,
    resets_at: float | None = None,
) -> CLIError:
    """The ``CLIError`` for ``cause``: NotAuthenticated, RateLimited or AgentError."""
    said = _Reported(
        agent=agent.name, bin=agent.bin, detail=scrub(cause.detail), status=cause.status
    )
    if cause.kind is K.AUTH:
        return NotAuthenticated(message, **said, hint=hint)
    wait = cause.retry_after
    if cause.kind is K.RATE_LIMITED:
        return RateLimited(
            message, **said, retry_after_s=wait, quota=cause.quota, resets_at=resets_at
        )
    return AgentError(message, **said, kind=cause.kind, retry_after_s=wait)


class _Reported(TypedDict):
    """What every error made from a reported cause says: who, the words, the status."""

    agent: str
    bin: str
    detail: str
    status: int | None


@dataclasses.dataclass(frozen=True)
class _Reading:
    """One invocation's ending being read: the CLI, its turn and how to word a failure."""

    agent: AgentCLI
    turn: Turn
    scrub: Callable[[str], str]
    hint: str
    lost: str

    def ending(self, end: ProcessEnd | None) -> CLIError | None:
        bin_, turn, scrub = self.agent.bin, self.turn, self.scrub
        if turn.stop is not None:
            return self._caused(
                turn.stop,
                f"{bin_} reported {_what(turn.stop)}, which waiting cannot fix; it was "
                f"stopped at once instead of retrying: {scrub(turn.stop.detail)}",
            )
        assert end is not None
        if end.timed_out:
            return self._timed_out()
        stderr = scrub(end.stderr)
        if end.exit_code == 0 and turn.failure is None:
            if turn.done:
                return None
            what = (
                f"{turn.unparsed} line(s) were not JSON, the first: {turn.first_unparsed!r}"
                if turn.unparsed
                else "it printed no structured output"
            )
            return Parse(
                f"{bin_} exited 0 but its stream never reported the end of the turn; {what}",
                agent=self.agent.name,
                bin=bin_,
                detail=what,
            )
        detail = scrub(turn.failure[0]) if turn.failure else ""
        exit_note = f" (exit code {end.exit_code})" if end.exit_code else " although it exited 0"
        cause = _final_cause(turn, detail)
        if cause is not None:
            return self._caused(
                cause, f"{bin_} reported a failed turn{exit_note}: {detail or cause.detail}"
            )
        code = end.exit_code if end.exit_code is not None else -1
        return self._by_stderr(stderr, detail, (code, exit_note))

    def _caused(self, cause: Cause, message: str) -> CLIError:
        resets_at = _resets(self.turn)
        return error_from_cause(
            self.agent, cause, self.scrub, hint=self.hint, resets_at=resets_at, message=message
        )

    def _timed_out(self) -> CLIError:
        """Killed at the deadline: the last cause it was retrying, else a bare Timeout."""
        bin_, timeout = self.agent.bin, float(self.agent.timeout_s or 0)
        if self.turn.cause is not None:
            return self._caused(
                self.turn.cause,
                f"{bin_} was still retrying when the {timeout:g} s timeout killed its "
                f"process group; the last failure it reported: "
                f"{self.scrub(self.turn.cause.detail)}",
            )
        return Timeout(
            f"{bin_} did not finish within {timeout:g} s; its process group was killed",
            agent=self.agent.name,
            bin=bin_,
            timeout_s=timeout,
            partial=self.scrub(self.turn.partial_text()),
        )

    def _by_stderr(self, stderr: str, detail: str, exit_: tuple[int, str]) -> CLIError:
        """No cause in the stream: the CLI's own words on stderr, else its exit code."""
        name, bin_, turn = self.agent.name, self.agent.bin, self.turn
        code, exit_note = exit_
        answer = detail or turn.text
        if turn.error_kind in _AUTH_KINDS or (auth := auth_failure(stderr, answer)):
            notice = (
                detail
                or (auth if turn.error_kind not in _AUTH_KINDS else "")
                or str(turn.error_kind)
            )
            return NotAuthenticated(
                f"{bin_} is not authenticated: {notice}",
                agent=name,
                bin=bin_,
                detail=notice,
                hint=self.hint,
            )
        if turn.rate_limit is not None or turn.error_kind in _QUOTA_KINDS:
            limit, resets_at = turn.rate_limit or (detail or str(turn.error_kind), None)
            quota = rate_limit(stderr, answer) or limit
            return RateLimited(
                f"{bin_} hit a rate limit: {quota}",
                agent=name,
                bin=bin_,
                detail=quota,
                resets_at=resets_at,
            )
        if worded := rate_limit(stderr, answer):
            return RateLimited(
                f"{bin_} hit a rate limit: {worded}", agent=name, bin=bin_, detail=worded
            )
        if flag := flag_rejected(stderr):
            return FlagRejected(
                f"{bin_} rejected an argument: {flag}", agent=name, bin=bin_, detail=flag
            )
        if turn.failure is not None:
            gone = bool(self.lost) and bool(_LOST_SESSION.search(detail))
            return AgentError(
                f"{bin_} reported a failed turn{exit_note}: {detail or 'no detail given'}"
                + (self.lost if gone else ""),
                agent=name,
                bin=bin_,
                detail=detail,
                status=turn.failure[1],
                kind=K.REQUEST if gone else None,
            )
        line = explanatory_line(stderr)
        return Failed(
            f"{bin_} exited with code {code}" + (f": {line}" if line else ""),
            agent=name,
            bin=bin_,
            exit_code=code,
            stderr=stderr,
        )


def _final_cause(turn: Turn, detail: str) -> Cause | None:
    """The CLI's final error as a Cause, completed from its last retry report."""
    status = turn.failure[1] if turn.failure else None
    word = turn.error_kind
    final = cause_of(detail, status, word) if (detail or status or word) else None
    last = turn.cause
    if final is None:
        return last if turn.failure is not None else None
    if last is not None and last.kind is final.kind:
        final = dataclasses.replace(
            final,
            status=final.status or last.status,
            retry_after=final.retry_after if final.retry_after is not None else last.retry_after,
        )
    return final


def _what(cause: Cause) -> str:
    if cause.kind is K.RATE_LIMITED:
        return "an exhausted quota"
    return {
        K.AUTH: "a refused key or login",
        K.CONTEXT_OVERFLOW: "a prompt too long for the model's context window",
    }.get(cause.kind, "a rejected request")


def _resets(turn: Turn) -> float | None:
    return turn.rate_limit[1] if turn.rate_limit else None
