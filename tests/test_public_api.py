"""The public surface: nothing leaks, everything promised resolves, import stays light."""

from __future__ import annotations

import subprocess
import sys

import harnessnb as hn

# The contract of DESIGN.md "Public API", plus the few helpers documented beside it.
INTENDED = {
    "agents",
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
    "REQUEST_TIMEOUT_S",
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
    "plot_failures",
    "abandon",
    "abandon_sync",
    "ask",
    "ask_sync",
    "pass_at_k",
    "pass_hat_k",
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
}


def test_all_matches_the_intended_names() -> None:
    # ruff (RUF022) keeps __all__ sorted; here: no duplicates, nothing missing or extra
    assert len(hn.__all__) == len(set(hn.__all__))
    assert set(hn.__all__) == INTENDED


def test_every_public_name_resolves() -> None:
    for name in hn.__all__:
        assert getattr(hn, name) is not None, name


def test_request_timeout_default() -> None:
    assert hn.REQUEST_TIMEOUT_S == 600.0


def test_outcome_values_are_the_stored_strings() -> None:
    assert [o.value for o in hn.RunOutcome] == [
        "success",
        "finished",
        "unverified",
        "step_cap",
        "time_budget",
        "token_budget",
        "cost_budget",
        "stalled",
        "escalated_retryable",
        "escalated_terminal",
        "denied",
        "cancelled",
        "needs_reconciliation",
        "awaiting_approval",
    ]


def test_import_does_not_pull_heavy_modules() -> None:
    code = (
        "import sys, harnessnb; "
        "heavy = [m for m in ('pandas', 'duckdb', 'ipywidgets', 'httpx2', 'IPython', "
        "'genai_prices', 'pydantic', 'mcp') "
        "if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_public_name_has_an_entry_in_the_api_reference() -> None:
    from pathlib import Path

    reference = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    missing = [name for name in hn.__all__ if f"### `hn.{name}`" not in reference]
    assert missing == []


def test_tests_import_public_names_from_harnessnb() -> None:
    """A test that reaches a public name through a private module pins the module, not
    the name users rely on; internals a test exercises on purpose stay importable."""
    import ast
    from pathlib import Path

    public = set(hn.__all__)
    found = []
    for path in Path(__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harnessnb."):
                private = any(p.startswith("_") for p in (node.module or "").split("."))
                found += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                          if private and a.name in public]
    assert found == []
