"""tests/notebooks/chaos_runs.ipynb executed headless (nbclient) against chaos servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from notebook_helpers import PLANTED, cell, executed_notebook


@pytest.fixture(scope="module")
def nb(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return executed_notebook(tmp_path_factory.mktemp("nbexec"))[0]


def _cards(c: Any) -> list[Any]:
    return [o for o in c.outputs if o.output_type == "display_data" and "text/html" in o.data]


def _errors(c: Any) -> list[Any]:
    return [o for o in c.outputs if o.output_type == "error"]


def test_successful_run_leaves_its_card_as_html_and_plain_text(nb: Any) -> None:
    c = cell(nb, "success")
    assert not _errors(c)
    (card,) = _cards(c)  # the live panel was replaced through its display handle
    assert "harnessnb-run" in card.data["text/html"]
    assert ">finished<" in card.data["text/html"]
    assert "<details" in card.data["text/html"]  # the step table
    assert card.data["text/plain"].splitlines()[0].endswith(": finished")
    assert "answer: say hello" in card.data["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" not in card.data
    assert cell(nb, "after").outputs[0].data["text/plain"] == "'finished'"


def test_live_progress_was_a_widget_panel_in_the_kernel(nb: Any) -> None:
    # The panel's models were created and updated from harnessnb's loop thread
    # (comm messages from a non-main thread reached the client).
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    models = {m["model_name"] for m in state.values()}
    assert {"IntProgressModel", "HTMLModel", "VBoxModel"} <= models
    bars = [m["state"] for m in state.values() if m["model_name"] == "IntProgressModel"]
    assert any(b.get("value") == 1 for b in bars)  # a step was shown before the card


def test_rate_limited_run_card_shows_kind_status_and_retry_after(nb: Any) -> None:
    c = cell(nb, "rate_limited")
    (card,) = _cards(c)
    html = card.data["text/html"]
    assert ">escalated_retryable<" in html
    assert "rate_limited, HTTP 429, retryable, retry after 100 s" in html
    plain = card.data["text/plain"]
    assert "kind: rate_limited" in plain and "status: 429" in plain
    assert "retry_after_s: 100.0" in plain
    (error,) = _errors(c)
    assert error.ename == "ProviderError"
    assert error.traceback[-1] == "rate_limited, HTTP 429, retryable, retry after 100 s"


def test_failed_run_shows_its_card_before_a_short_error(nb: Any) -> None:
    c = cell(nb, "failed")
    kinds = [o.output_type for o in c.outputs]
    assert kinds == ["display_data", "error"]
    assert "authentication_error" in c.outputs[0].data["text/html"]
    error = c.outputs[1]
    assert 1 <= len(error.traceback) <= 3
    assert error.traceback[0].startswith("ProviderError [PROVIDER_AUTH]: anthropic")


def test_model_text_is_escaped_in_the_card(nb: Any) -> None:
    (card,) = _cards(cell(nb, "planted"))
    assert PLANTED not in card.data["text/html"]
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in card.data["text/html"]
    assert f"answer: {PLANTED}" in card.data["text/plain"]


def test_the_executed_notebook_is_saved(tmp_path_factory: pytest.TempPathFactory) -> None:
    _, path = executed_notebook(Path(tmp_path_factory.getbasetemp()) / "unused")
    assert path.exists() and path.stat().st_size > 0
