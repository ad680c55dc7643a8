"""One driver per coding-agent CLI: the argv it is run with, the environment it is
given, and how its structured output stream is read.

A driver is configuration plus two pure functions, ``invocation`` (argv and stdin for
a prompt, new or resuming a session) and ``read`` (one parsed stream object into the
``Turn``). Spawning, classification and the store live in ``_run``.

Flags were checked against the installed CLIs' ``--help`` (claude 2.1.197, codex-cli
0.171.0, GitHub Copilot CLI 1.0.102); ``tests/agents/test_real_clis.py`` repeats
the check wherever the CLIs are installed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from ..rules._errors import ConfigError
from ..rules._renamed import renamed
from ._cause import (
    claude_retry_after,
    copilot_log_waits,
    error_message,
    retry_cause,
    with_retry_after,
)
from ._cli import (
    _RECONNECTING,
    AgentCLI,
    Invocation,
    Permission,
    _blocks,
    _errors_text,
    _rate_limit,
    _status,
    _str,
)
from ._codex_config import codex_auth_hint, codex_model
from ._turn import Turn, to_int

__all__ = ["AgentCLI", "ClaudeCode", "Codex", "Copilot", "Invocation", "Permission", "driver"]


@renamed(timeout="timeout_s")
@dataclasses.dataclass(frozen=True)
class ClaudeCode(AgentCLI):
    """Claude Code: ``claude -p --output-format stream-json --verbose``.

    A new session gets an id chosen here (``--session-id``); its name is bound once the
    stream names it. ``--resume`` continues it (from the same folder only: Claude keeps
    sessions per working directory, which is why names are bound per workspace). Each
    ``api_retry`` line is a failed request it will retry.
    """

    name: ClassVar[str] = "claude-code"
    default_bin: ClassVar[str] = "claude"
    install_hint: ClassVar[str] = "npm install -g @anthropic-ai/claude-code"
    login_hint: ClassVar[str] = "claude  (then /login), or set ANTHROPIC_API_KEY"
    auth_env: ClassVar[tuple[str, ...]] = (
        "ANTHROPIC_", "CLAUDE_CODE_", "CLAUDE_CONFIG_DIR",
        # Bedrock / Vertex credentials.
        "AWS_REGION", "AWS_PROFILE", "CLOUD_ML_REGION", "GOOGLE_APPLICATION_CREDENTIALS",
    )  # fmt: skip
    # IS_SANDBOX (root may bypass; 529 retried 10 times, not 3) and the retry count come
    # only from env=, e.g. ClaudeCode(permission="bypass", env={"IS_SANDBOX": "1"}).
    behaviour_env: ClassVar[tuple[str, ...]] = ("IS_SANDBOX", "CLAUDE_CODE_MAX_RETRIES")
    model_env: ClassVar[str] = "ANTHROPIC_MODEL"
    _MODES: ClassVar[dict[str, list[str]]] = {
        # dontAsk refuses whatever is not pre-approved (reads in the folder are); the
        # tools that change things are refused by name as well.
        "read_only": ["--permission-mode", "dontAsk",
                      "--disallowedTools", "Bash,Edit,Write,NotebookEdit"],
        "edit": ["--permission-mode", "acceptEdits"],
        "bypass": ["--dangerously-skip-permissions"],
    }  # fmt: skip

    def _argv(
        self, prompt: str | None, resume: str | None, usage_file: str | None
    ) -> tuple[list[str], str | None]:
        argv = [
            self.bin,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            *self._MODES[self.permission],
        ]
        if self.model:
            argv += ["--model", self.model]
        if self.max_turns is not None:
            argv += ["--max-turns", str(self.max_turns)]
        session_id = resume or str(uuid.uuid4())
        argv += ["--resume", resume] if resume else ["--session-id", session_id]
        argv += list(self.extra_args)
        if prompt is not None:
            argv += ["--", prompt]  # a prompt starting with '-' is not an option
        return argv, session_id

    def read(self, obj: Mapping[str, Any], turn: Turn) -> None:
        kind = obj.get("type")
        if isinstance(obj.get("session_id"), str):
            turn.session_id = obj["session_id"]
        if kind == "system":
            subtype = obj.get("subtype")
            if subtype == "init":
                turn.model = _str(obj.get("model")) or turn.model
            elif subtype == "api_retry":
                word, status = _str(obj.get("error")), _status(obj.get("error_status"), "")
                delay = obj.get("retry_delay_ms")
                detail = f"{word or 'error'}" + (f" (HTTP {status})" if status else "")
                wait = claude_retry_after(status, delay, [c for c, _ in turn.reports])
                turn.retry(
                    retry_cause(detail, status, word, wait),
                    attempt=obj.get("attempt"),
                    of=obj.get("max_retries"),
                    delay_s=to_int(delay) / 1000,
                )
        elif kind == "assistant":
            if isinstance(obj.get("error"), str):  # a synthetic message saying why it failed
                turn.error_kind = obj["error"]
            texts = []
            for block in _blocks(obj.get("message") or {}):
                if block.get("type") == "text":
                    texts.append(_str(block.get("text")))
                elif block.get("type") == "tool_use":
                    turn.tool_started(
                        _str(block.get("id")), _str(block.get("name")), block.get("input")
                    )
            if texts:  # a made-up message saying why it failed is no progress
                turn.say("".join(texts), progress=not isinstance(obj.get("error"), str))
            turn.step(self.name)
        elif kind == "user":
            for block in _blocks(obj.get("message") or {}):
                if block.get("type") == "tool_result":
                    turn.tool_ended(
                        _str(block.get("tool_use_id")),
                        ok=not block.get("is_error"),
                        output=_str(block.get("content")),
                    )
        elif kind == "result":
            turn.done = True
            if isinstance(obj.get("result"), str):
                turn.answer(obj["result"])
            turn.add_usage(obj.get("usage"), replace=True)
            if obj.get("total_cost_usd") is not None:
                turn.usage["cost_usd"] = obj.get("total_cost_usd")
            for denial in obj.get("permission_denials") or []:
                if isinstance(denial, dict):
                    turn.tool_refused(_str(denial.get("tool_use_id")))
            # A failed turn may still say subtype "success": is_error decides.
            if obj.get("is_error") or obj.get("subtype") not in (None, "success"):
                detail = _str(obj.get("result")) or _errors_text(obj) or _str(obj.get("subtype"))
                turn.failure = (detail, _status(obj.get("api_error_status"), detail))
        elif kind == "rate_limit_event" or "rate_limit_info" in obj:
            _rate_limit(obj.get("rate_limit_info") or obj, turn)


@renamed(timeout="timeout_s")
@dataclasses.dataclass(frozen=True)
class Codex(AgentCLI):
    """OpenAI Codex: ``codex exec --json`` (``codex exec resume <id>`` to continue).

    Codex authenticates ``exec`` with ``CODEX_API_KEY`` or a stored login (an
    ``OPENAI_API_KEY`` alone is not used by ``exec``). It reports the usage of the whole
    thread, so a resumed run's usage is the difference from the previous run's.
    Without a network it retries for ever: give it a ``timeout_s``.
    """

    name: ClassVar[str] = "codex"
    default_bin: ClassVar[str] = "codex"
    install_hint: ClassVar[str] = "npm install -g @openai/codex"
    login_hint: ClassVar[str] = "codex login (or codex login --with-api-key), or set CODEX_API_KEY"
    auth_env: ClassVar[tuple[str, ...]] = ("CODEX_", "OPENAI_")
    cumulative_usage: ClassVar[bool] = True
    _SANDBOX: ClassVar[dict[str, str]] = {"read_only": "read-only", "edit": "workspace-write"}

    def _argv(
        self, prompt: str | None, resume: str | None, usage_file: str | None
    ) -> tuple[list[str], str | None]:
        if self.max_turns is not None:
            raise self._unsupported("turn limit (max_turns)")
        argv = [
            self.bin,
            "exec",
            *(["resume"] if resume else []),
            "--json",
            "--skip-git-repo-check",
        ]
        if self.permission == "bypass":
            argv += ["--dangerously-bypass-approvals-and-sandbox"]
        elif resume:  # exec resume has no --sandbox; the config key does the same
            argv += ["-c", f'sandbox_mode="{self._SANDBOX[self.permission]}"']
        else:
            argv += ["--sandbox", self._SANDBOX[self.permission]]
        if self.model:
            argv += ["--model", self.model]
        argv += list(self.extra_args)
        if resume:
            argv += [resume]
        # '-' reads the prompt from stdin; a prompt starting with '-' goes there too.
        argv += ["-" if prompt is None or prompt.startswith("-") else prompt]
        return argv, resume

    def invocation(
        self, prompt: str, *, resume: str | None = None, usage_file: str | None = None
    ) -> Invocation:
        inv = super().invocation(prompt, resume=resume, usage_file=usage_file)
        if inv.stdin is None and inv.argv[-1] == "-":
            return dataclasses.replace(inv, stdin=prompt.encode("utf-8"))
        return inv

    def read(self, obj: Mapping[str, Any], turn: Turn) -> None:
        kind = obj.get("type")
        if kind == "thread.started":
            turn.session_id = _str(obj.get("thread_id")) or turn.session_id
            turn.model = turn.model or self.model
        elif kind in ("item.started", "item.completed"):
            item = obj.get("item") or {}
            if isinstance(item, dict):
                self._item(item, turn, done=kind == "item.completed")
        elif kind == "turn.completed":
            turn.done = True
            turn.failure = None  # error lines before it were retries that recovered
            turn.add_usage(obj.get("usage"), replace=True)
            turn.step(self.name)
        elif kind == "turn.failed":
            turn.done = True
            error = obj.get("error") or {}
            detail = _str(error.get("message")) if isinstance(error, dict) else _str(error)
            turn.failure = (detail, _status(None, detail))
        elif kind == "error":
            # Its retries ("Reconnecting... 2/5 (cause)") come this way, then the last,
            # not retried, error: only turn.failed, or the exit code, ends the turn.
            detail = _str(obj.get("message"))
            retry = _RECONNECTING.match(detail)
            if retry:
                inner = retry.group(3)
                turn.retry(
                    retry_cause(inner, _status(None, inner)),
                    attempt=retry.group(1),
                    of=retry.group(2),
                )
            else:
                turn.failure = (detail, _status(None, detail))

    def configured_model(self, env: Mapping[str, str]) -> str | None:
        """``model``, else ``-m``/``-c model=`` in ``extra_args``, else ``config.toml``'s."""
        return self.model or codex_model(self.extra_args, env)

    def auth_hint(self, env: Mapping[str, str]) -> str:
        """With a custom model provider the fix is its ``env_key``, not a login."""
        return codex_auth_hint(self.extra_args, env, self.login_hint)

    def _item(self, item: Mapping[str, Any], turn: Turn, *, done: bool) -> None:
        item_type = item.get("type")
        call_id = _str(item.get("id"))
        if item_type == "agent_message" and done:
            turn.say(_str(item.get("text")))
            return
        tool, args = {
            "command_execution": ("shell", item.get("command")),
            "file_change": ("apply_patch", item.get("changes")),
            "mcp_tool_call": (f"{_str(item.get('server'))}.{_str(item.get('tool'))}",
                              item.get("arguments")),
            "web_search": ("web_search", item.get("query")),
        }.get(str(item_type), (None, None))  # fmt: skip
        if tool is None:
            return  # reasoning, plans, todo lists, warnings: not tool calls
        if not done:
            turn.tool_started(call_id, tool, args)
            return
        if not any(c["id"] == call_id for c in turn.tool_calls):
            turn.tool_started(call_id, tool, args)  # completed without a started event
        status = _str(item.get("status"))
        if status == "declined":  # the sandbox or approval policy said no
            turn.tool_refused(call_id, "declined")
            return
        exit_code = item.get("exit_code")
        ok = status != "failed" and exit_code in (None, 0)
        turn.tool_ended(call_id, ok=ok, output=_str(item.get("aggregated_output")) or None)


@renamed(timeout="timeout_s")
@dataclasses.dataclass(frozen=True)
class Copilot(AgentCLI):
    """GitHub Copilot CLI: ``copilot --output-format json --allow-all-tools --no-ask-user``.

    Its stream carries no token counts; ``--usage-output-file`` does, for the whole
    session. A failure to authenticate prints no JSON at all, only stderr.
    """

    name: ClassVar[str] = "copilot"
    default_bin: ClassVar[str] = "copilot"
    install_hint: ClassVar[str] = "npm install -g @github/copilot"
    login_hint: ClassVar[str] = "copilot login, or set COPILOT_GITHUB_TOKEN (a fine-grained token)"
    auth_env: ClassVar[tuple[str, ...]] = (
        "COPILOT_", "GH_TOKEN", "GITHUB_TOKEN", "GH_HOST", "XDG_CONFIG_HOME", "XDG_STATE_HOME",
    )  # fmt: skip
    # COPILOT_ALLOW_ALL=true trusts the folder (its hooks run shell commands).
    behaviour_env: ClassVar[tuple[str, ...]] = ("COPILOT_ALLOW_ALL",)
    model_env: ClassVar[str] = "COPILOT_MODEL"
    reports_every_failure: ClassVar[bool] = True
    cumulative_usage: ClassVar[bool] = True
    provider_hint: ClassVar[str] = (
        "set COPILOT_PROVIDER_API_KEY (or COPILOT_PROVIDER_BEARER_TOKEN, or "
        "COPILOT_PROVIDER_API_KEY_COMMAND) to a key the provider at COPILOT_PROVIDER_BASE_URL "
        "accepts"
    )

    def auth_hint(self, env: Mapping[str, str]) -> str:
        """With its own provider endpoint (BYOK) the fix is the provider's key, not a login."""
        return self.provider_hint if env.get("COPILOT_PROVIDER_BASE_URL") else self.login_hint

    _MODES: ClassVar[dict[str, list[str]]] = {
        # Denials win over --allow-all-tools, which prompt mode needs.
        "read_only": ["--deny-tool=shell", "--deny-tool=write"],
        "edit": ["--deny-tool=shell"],
        "bypass": ["--allow-all-paths"],
    }

    def _argv(
        self, prompt: str | None, resume: str | None, usage_file: str | None
    ) -> tuple[list[str], str | None]:
        if self.max_turns is not None:
            raise self._unsupported("turn limit (max_turns)")
        # --session-id names a new session or continues an existing one.
        session_id = resume or str(uuid.uuid4())
        argv = [
            self.bin,
            "--output-format",
            "json",
            "--allow-all-tools",
            "--no-ask-user",
            *self._MODES[self.permission],
            "--session-id",
            session_id,
        ]
        if self.model:
            argv += ["--model", self.model]
        if usage_file:  # its log beside it: the only place it writes a retry-after
            log_dir = os.path.join(os.path.dirname(usage_file), "copilot-logs")
            argv += ["--usage-output-file", usage_file, "--log-dir", log_dir]
        argv += list(self.extra_args)
        if prompt is not None:  # otherwise piped on stdin, which needs no -p
            argv += [f"--prompt={prompt}"]
        return argv, session_id

    def read(self, obj: Mapping[str, Any], turn: Turn) -> None:
        kind = _str(obj.get("type"))
        raw = obj.get("data")
        data: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        if kind in ("session.tools_updated", "model.call_start") and not turn.model:
            turn.model = _str(data.get("model")) or None
        elif kind == "assistant.message":
            turn.model = _str(data.get("model")) or turn.model
            if _str(data.get("content")):
                turn.say(_str(data.get("content")))
            for req in data.get("toolRequests") or []:
                if isinstance(req, dict):
                    turn.tool_started(
                        _str(req.get("toolCallId")), _str(req.get("name")), req.get("arguments")
                    )
            turn.step(self.name)
        elif kind == "tool.execution_complete":
            result, error = data.get("result"), data.get("error")
            if isinstance(error, dict) and error.get("code") == "denied":
                turn.tool_refused(_str(data.get("toolCallId")), _str(error.get("message")))
                return
            output = _str(result.get("content")) if isinstance(result, dict) else None
            turn.tool_ended(
                _str(data.get("toolCallId")), ok=bool(data.get("success")), output=output
            )
        elif kind == "model.call_failure":
            word = _str(data.get("errorType")) or _str(data.get("failureKind"))
            status = _status(data.get("statusCode"), "")
            detail = error_message(data.get("errorMessage")) or (
                f"{word or 'request'} failure" + (f" (HTTP {status})" if status else "")
            )
            turn.retry(
                retry_cause(detail, status or _status(None, detail), word),
                attempt=to_int(data.get("retryAttempt")) + 1,
            )
        elif kind == "session.error":
            detail = _str(data.get("message"))
            turn.error_kind = _str(data.get("errorType")) or turn.error_kind
            turn.failure = (detail, _status(data.get("statusCode"), detail))
        elif kind == "result":
            turn.done = True
            turn.session_id = _str(obj.get("sessionId")) or turn.session_id
            code = to_int(obj.get("exitCode"))
            if code and turn.failure is None:
                turn.failure = (f"copilot reported exit code {code}", None)

    def read_scratch(self, folder: str, turn: Turn) -> None:
        """The retry-after of each failed request, from Copilot's log (not its stream)."""
        waits = copilot_log_waits(os.path.join(folder, "copilot-logs"))
        turn.reports = with_retry_after(turn.reports, waits)
        if turn.stop is not None and turn.reports:
            turn.stop = turn.reports[-1][0]

    def read_usage_file(self, text: str, turn: Turn) -> None:
        try:
            report = json.loads(text)
        except ValueError:
            return
        metrics = report.get("modelMetrics") if isinstance(report, dict) else None
        if not isinstance(metrics, dict):
            return
        totals = {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0}
        for model in metrics.values():
            usage = model.get("usage") if isinstance(model, dict) else None
            if isinstance(usage, dict):
                # OpenAI-style: the input count includes the cache reads.
                totals["input_tokens"] += to_int(usage.get("inputTokens"))
                totals["output_tokens"] += to_int(usage.get("outputTokens"))
                totals["cached_input_tokens"] += to_int(usage.get("cacheReadTokens"))
        turn.add_usage(totals, replace=True)


_DRIVERS: Final[dict[str, type[AgentCLI]]] = {
    "claude": ClaudeCode, "claude-code": ClaudeCode, "codex": Codex, "copilot": Copilot,
}  # fmt: skip


def driver(name: str, **options: Any) -> AgentCLI:
    """The driver named ``name`` (claude, claude-code, codex, copilot) with ``options``."""
    try:
        cls = _DRIVERS[name.strip().lower()]
    except KeyError:
        raise ConfigError(
            f"unknown agent {name!r}; choose one of: claude, codex, copilot"
        ) from None
    return cls(**options)


# ------------------------------------------------------------------ helpers
