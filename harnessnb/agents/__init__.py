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

- ``_cli``: ``AgentCLI``, what every driver shares, and the output stream's readers;
- ``_drivers``: ``ClaudeCode``, ``Codex``, ``Copilot``: argv, environment, output;
- ``_run``: ``run``/``run_sync`` for a CLI: its invocation and named session, recorded
  through the loop's ``RunRecorder``; ``_rows``: the rows a CLI run is stored as;
- ``_process``: a CLI's process through the one runner; ``_turn``: one turn's events,
  usage and tool calls; ``_codex_config``: what Codex's configuration names;
- ``_classify``, ``_cause``, ``_verdict``: a CLI's failure read into a kind and a
  typed failure; ``_errors``: ``CLIError`` and its subclasses;
- ``_result``: ``AgentResult``.

May import: ``loop``, ``tools``, ``store``, ``rules`` (a CLI run is stored and reported
like a loop run) and ``providers._completion`` (its usage is an ``hn.Usage``). Never a
face (cli, notebook) or IPython.
"""

from . import _errors
from ._drivers import AgentCLI, ClaudeCode, Codex, Copilot, Permission, driver
from ._errors import *  # noqa: F403  (the CLIError tree, listed once: _errors.__all__)
from ._process import Limits
from ._result import AgentResult
from ._run import run, run_sync

__all__ = [
    "AgentCLI",
    "AgentResult",
    "ClaudeCode",
    "Codex",
    "Copilot",
    "Limits",
    "Permission",
    "driver",
    "run",
    "run_sync",
]
__all__ += _errors.__all__
