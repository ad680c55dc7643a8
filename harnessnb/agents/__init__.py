"""Drive coding-agent CLIs (Claude Code, Codex, Copilot) from a notebook or a script.

    import harnessnb as hn

    result = await hn.agents.run(hn.agents.ClaudeCode(permission="edit"),
                                 "add a docstring to util.py", "repo", session="docs")
    result.text, result.usage, result.session_id, result.error

A run spawns the CLI headless (no shell, a minimal environment, its own process
group), reads its structured output into the events ``hn.run`` emits, and records
the run, its usage and its failure in the same store tables, with
``provider`` = the CLI. Failures are typed (``hn.agents.CLIError`` and its
subclasses) and never retried automatically.

May import: ``loop``, ``tools``, ``store``, ``rules`` (a CLI run is stored and reported
like a loop run). Never a face (cli, notebook) or IPython.
"""

from ._drivers import AgentCLI, ClaudeCode, Codex, Copilot, Permission, driver
from ._errors import (
    AgentError,
    Cancelled,
    CLIError,
    CommandLineTooLarge,
    Failed,
    FlagRejected,
    NotAuthenticated,
    NotInstalled,
    Parse,
    RateLimited,
    SessionBusy,
    SessionConflict,
    Spawn,
    Timeout,
    Unsupported,
)
from ._process import Limits
from ._result import AgentResult
from ._run import run, run_sync

__all__ = [
    "AgentCLI",
    "AgentError",
    "AgentResult",
    "CLIError",
    "Cancelled",
    "ClaudeCode",
    "Codex",
    "CommandLineTooLarge",
    "Copilot",
    "Failed",
    "FlagRejected",
    "Limits",
    "NotAuthenticated",
    "NotInstalled",
    "Parse",
    "Permission",
    "RateLimited",
    "SessionBusy",
    "SessionConflict",
    "Spawn",
    "Timeout",
    "Unsupported",
    "driver",
    "run",
    "run_sync",
]
