"""harnessnb: a Jupyter-first harness for LLM agents.

The public API is ``__all__``; everything else lives in private modules. Names are
resolved lazily (PEP 562) so ``import harnessnb`` does not import pandas, duckdb,
ipywidgets or the HTTP client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import (
    ConfigError,
    ConflictError,
    HarnessError,
    ProviderError,
    ProviderErrorKind,
    RefusedError,
    ResumeError,
    SandboxError,
    StoreError,
    ToolError,
)

__version__ = "0.1.0"

# public name -> private module that defines it (imported on first use)
_LAZY: dict[str, str] = {
    "AttemptRecord": "._completion",
    "Completion": "._completion",
    "ToolCall": "._completion",
    "Usage": "._completion",
    "REQUEST_TIMEOUT": "._http",
    "OpenAI": "._openai",
    "OpenRouter": "._openai",
    "Anthropic": "._anthropic",
    "Fallback": "._fallback",
    "Store": "._store",
    "Effect": "._tools",
    "Tool": "._tools",
    "ToolResult": "._tools",
    "tool": "._tools",
    "Policy": "._policy",
    "Verdict": "._policy",
    "ApprovalRequest": "._approval",
    "ApproveAll": "._approval",
    "Decision": "._approval",
    "DenyAll": "._approval",
    "run": "._loop",
    "run_sync": "._loop",
    "TaskContract": "._contract",
    "FileContains": "._contract",
    "Command": "._contract",
    "RunOutcome": "._contract",
    "RunResult": "._result",
    "RetryPolicy": "._retry",
    "set_testing": "._retry",
    "FakeClock": "._retry",
    "Clock": "._retry",
    "StallPolicy": "._stall",
    "ScriptedProvider": "._scripted",
    "RunEvent": "._events",
    "resume": "._durable",
    "resume_sync": "._durable",
    "resolve": "._durable",
    "abandon": "._durable",
    "Record": "._durable",
    "Replay": "._durable",
    "replay": "._durable",
    "replay_sync": "._durable",
    "WidgetApprover": ".notebook._approver",
    "plot_failures": ".notebook._plots",
}

if TYPE_CHECKING:
    from . import agents
    from ._anthropic import Anthropic
    from ._approval import ApprovalRequest, ApproveAll, Decision, DenyAll
    from ._completion import AttemptRecord, Completion, ToolCall, Usage
    from ._contract import Command, FileContains, RunOutcome, TaskContract
    from ._durable import Record, Replay, abandon, replay, replay_sync, resolve, resume, resume_sync
    from ._events import RunEvent
    from ._fallback import Fallback
    from ._http import REQUEST_TIMEOUT
    from ._loop import run, run_sync
    from ._openai import OpenAI, OpenRouter
    from ._policy import Policy, Verdict
    from ._result import RunResult
    from ._retry import Clock, FakeClock, RetryPolicy, set_testing
    from ._scripted import ScriptedProvider
    from ._stall import StallPolicy
    from ._store import Store
    from ._tools import Effect, Tool, ToolResult, tool
    from .notebook._approver import WidgetApprover
    from .notebook._plots import plot_failures

__all__ = [
    "REQUEST_TIMEOUT",
    "Anthropic",
    "ApprovalRequest",
    "ApproveAll",
    "AttemptRecord",
    "Clock",
    "Command",
    "Completion",
    "ConfigError",
    "ConflictError",
    "Decision",
    "DenyAll",
    "Effect",
    "FakeClock",
    "Fallback",
    "FileContains",
    "HarnessError",
    "OpenAI",
    "OpenRouter",
    "Policy",
    "ProviderError",
    "ProviderErrorKind",
    "Record",
    "RefusedError",
    "Replay",
    "ResumeError",
    "RetryPolicy",
    "RunEvent",
    "RunOutcome",
    "RunResult",
    "SandboxError",
    "ScriptedProvider",
    "StallPolicy",
    "Store",
    "StoreError",
    "TaskContract",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "Usage",
    "Verdict",
    "WidgetApprover",
    "abandon",
    "agents",
    "plot_failures",
    "replay",
    "replay_sync",
    "resolve",
    "resume",
    "resume_sync",
    "run",
    "run_sync",
    "set_testing",
    "tool",
]


def __getattr__(name: str) -> Any:
    if name == "agents":  # a subpackage: hn.agents.ClaudeCode(), hn.agents.run(...)
        value = importlib.import_module(".agents", __name__)
        globals()[name] = value
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'harnessnb' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"agents"})


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext harnessnb``: register the ``%harness`` / ``%%harness`` magics."""
    from .notebook import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext harnessnb``: remove the magics and the cell transformer."""
    from .notebook import unload_ipython_extension as unload

    unload(ipython)
