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
}

if TYPE_CHECKING:
    from ._completion import AttemptRecord, Completion, ToolCall, Usage

__all__ = [
    "REQUEST_TIMEOUT",
    "Anthropic",
    "ApprovalRequest",
    "ApproveAll",
    "AttemptRecord",
    "Completion",
    "ConfigError",
    "ConflictError",
    "Decision",
    "DenyAll",
    "Effect",
    "Fallback",
    "HarnessError",
    "OpenAI",
    "OpenRouter",
    "Policy",
    "ProviderError",
    "ProviderErrorKind",
    "RefusedError",
    "ResumeError",
    "SandboxError",
    "Store",
    "StoreError",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "Usage",
    "Verdict",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'harnessnb' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
