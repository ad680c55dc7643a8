"""harnessnb: a Jupyter-first harness for LLM agents.

The public API is ``__all__``; everything else lives in private modules. Names are
resolved lazily (PEP 562) so ``import harnessnb`` does not import pandas, duckdb,
ipywidgets or the HTTP client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .rules._errors import (
    ConfigError,
    ConflictError,
    HarnessError,
    MCPError,
    OutputError,
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
    "AttemptRecord": ".providers._completion",
    "Completion": ".providers._completion",
    "ToolCall": ".providers._completion",
    "Usage": ".providers._completion",
    "REQUEST_TIMEOUT_S": ".providers._http",
    "OpenAI": ".providers._openai",
    "OpenRouter": ".providers._openai",
    "Anthropic": ".providers._anthropic",
    "Gemini": ".providers._gemini",
    "Fallback": ".providers._fallback",
    "Store": ".store._store",
    "MCPServer": ".mcp._server",
    "Effect": ".tools._protocol",
    "Tool": ".tools._protocol",
    "ToolResult": ".tools._protocol",
    "tool": ".tools._protocol",
    "sandbox_backend": ".tools._sandbox",
    "Policy": ".rules._policy",
    "Verdict": ".rules._policy",
    "ApprovalRequest": ".tools._approval",
    "ApproveAll": ".tools._approval",
    "Decision": ".tools._approval",
    "DenyAll": ".tools._approval",
    "ask": ".loop._ask",
    "ask_sync": ".loop._ask",
    "run": ".loop._driver",
    "run_sync": ".loop._driver",
    "sweep": ".sweeps._sweep",
    "sweep_sync": ".sweeps._sweep",
    "SweepResult": ".sweeps._sweep_result",
    "Sample": ".sweeps._sample",
    "Score": ".sweeps._sample",
    "samples": ".sweeps._samples_io",
    "pass_at_k": ".sweeps._stats",
    "pass_hat_k": ".sweeps._stats",
    "rescore": ".sweeps._rescore",
    "rescore_sync": ".sweeps._rescore",
    "TaskContract": ".loop._contract",
    "FileContains": ".loop._contract",
    "Command": ".loop._contract",
    "RunOutcome": ".loop._contract",
    "RunResult": ".loop._result",
    "StepSummary": ".loop._result",
    "RetryPolicy": ".rules._retry",
    "set_testing": ".rules._retry",
    "set_tracer_provider": ".loop._tracing",
    "FakeClock": ".rules._retry",
    "Clock": ".rules._retry",
    "StallPolicy": ".rules._stall",
    "ScriptedProvider": ".providers._scripted",
    "Price": ".providers._prices",
    "Prices": ".providers._prices",
    "RunEvent": ".loop._events",
    "unscrubbed_events": ".loop._events",
    "resume": ".loop._durable",
    "resume_sync": ".loop._durable",
    "resolve": ".loop._durable",
    "abandon": ".loop._durable",
    "abandon_sync": ".loop._durable",
    "resolve_sync": ".loop._durable",
    "Record": ".loop._durable",
    "Replay": ".loop._durable",
    "replay": ".loop._replay",
    "replay_sync": ".loop._replay",
    "WidgetApprover": ".notebook._approver",
    "plot_failures": ".notebook._plots",
}

if TYPE_CHECKING:
    from . import agents, scorers
    from .loop._ask import ask, ask_sync
    from .loop._contract import Command, FileContains, RunOutcome, TaskContract
    from .loop._driver import run, run_sync
    from .loop._durable import (
        Record,
        Replay,
        abandon,
        abandon_sync,
        resolve,
        resolve_sync,
        resume,
        resume_sync,
    )
    from .loop._events import RunEvent, unscrubbed_events
    from .loop._replay import replay, replay_sync
    from .loop._result import RunResult, StepSummary
    from .loop._tracing import set_tracer_provider
    from .mcp._server import MCPServer
    from .notebook._approver import WidgetApprover
    from .notebook._plots import plot_failures
    from .providers._anthropic import Anthropic
    from .providers._completion import AttemptRecord, Completion, ToolCall, Usage
    from .providers._fallback import Fallback
    from .providers._gemini import Gemini
    from .providers._http import REQUEST_TIMEOUT_S
    from .providers._openai import OpenAI, OpenRouter
    from .providers._prices import Price, Prices
    from .providers._scripted import ScriptedProvider
    from .rules._policy import Policy, Verdict
    from .rules._retry import Clock, FakeClock, RetryPolicy, set_testing
    from .rules._stall import StallPolicy
    from .store._store import Store
    from .sweeps._rescore import rescore, rescore_sync
    from .sweeps._sample import Sample, Score
    from .sweeps._samples_io import samples
    from .sweeps._stats import pass_at_k, pass_hat_k
    from .sweeps._sweep import sweep, sweep_sync
    from .sweeps._sweep_result import SweepResult
    from .tools._approval import ApprovalRequest, ApproveAll, Decision, DenyAll
    from .tools._protocol import Effect, Tool, ToolResult, tool
    from .tools._sandbox import sandbox_backend

__all__ = [
    "REQUEST_TIMEOUT_S",
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
    "Gemini",
    "HarnessError",
    "MCPError",
    "MCPServer",
    "OpenAI",
    "OpenRouter",
    "OutputError",
    "Policy",
    "Price",
    "Prices",
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
    "Sample",
    "SandboxError",
    "Score",
    "ScriptedProvider",
    "StallPolicy",
    "StepSummary",
    "Store",
    "StoreError",
    "SweepResult",
    "TaskContract",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "Usage",
    "Verdict",
    "WidgetApprover",
    "abandon",
    "abandon_sync",
    "agents",
    "ask",
    "ask_sync",
    "pass_at_k",
    "pass_hat_k",
    "plot_failures",
    "replay",
    "replay_sync",
    "rescore",
    "rescore_sync",
    "resolve",
    "resolve_sync",
    "resume",
    "resume_sync",
    "run",
    "run_sync",
    "samples",
    "sandbox_backend",
    "scorers",
    "set_testing",
    "set_tracer_provider",
    "sweep",
    "sweep_sync",
    "tool",
    "unscrubbed_events",
]


# public modules, imported on first use: the coding-agent CLIs, the built-in scorers
_MODULES = frozenset({"agents", "scorers"})

# old public name -> its new one (names and units, docs/api.md): warns, one release
_RENAMED: dict[str, str] = {"REQUEST_TIMEOUT": "REQUEST_TIMEOUT_S"}


def __getattr__(name: str) -> Any:
    if name in _MODULES:  # hn.agents.ClaudeCode(), hn.scorers.includes()
        value = importlib.import_module(f".{name}", __name__)
        globals()[name] = value
        return value
    if name in _RENAMED:  # an old spelling, kept one release (docs/api.md)
        from .rules._renamed import warn_renamed

        warn_renamed("harnessnb", name, _RENAMED[name], keyword=False)
        return __getattr__(_RENAMED[name])
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'harnessnb' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _MODULES)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext harnessnb``: register the ``%harness`` / ``%%harness`` magics."""
    from .notebook import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext harnessnb``: remove the magics and the cell transformer."""
    from .notebook import unload_ipython_extension as unload

    unload(ipython)
