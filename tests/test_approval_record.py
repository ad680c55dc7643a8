"""A decided approval leaves a static record in the page, not a widget a reload loses."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

import harnessnb as hn
from harnessnb.chaos import ChaosServer
from harnessnb.notebook._approver import ApprovalPanel, ApprovalRecord
from tests.chaos_helpers import NOTES, writes_notes

WIDGET = "application/vnd.jupyter.widget-view+json"
AT = datetime(2026, 11, 30, 8, 12, 40, tzinfo=UTC)


def request(preview: str = "# Notes\n<b>claim</b>\n") -> hn.ApprovalRequest:
    return hn.ApprovalRequest("write", "NOTES.md", preview, "write:*", "app", "write_file")


@pytest.mark.parametrize(
    ("decision", "badge", "line"),
    [
        (hn.Decision.approve(), "approved", "approved in the notebook at 08:12 UTC"),
        (hn.Decision.deny("not that file"), "denied",
         "denied: not that file in the notebook at 08:12 UTC"),
        (hn.Decision.defer("no answer within 30 s"), "not answered",
         "deferred: no answer within 30 s at 08:12 UTC"),
    ],
)  # fmt: skip
def test_record_says_what_was_asked_and_what_was_decided(
    decision: hn.Decision, badge: str, line: str
) -> None:
    bundle = ApprovalRecord(request(), decision, "", AT)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    assert bundle["text/plain"].splitlines() == [
        "harnessnb asked to write NOTES.md via write_file "
        "(asked by the rule 'write:*' in the 'app' layer)",
        f"  {line}",
    ]
    html = bundle["text/html"]
    assert "harnessnb-approval-record" in html
    assert f">{badge}</span>" in html
    assert "&lt;b&gt;claim&lt;/b&gt;" in html and "<b>claim" not in html  # the preview, escaped
    assert "what was shown (21 characters)" in html
    plain_html = re.sub(r"<[^>]+>", "", html)
    assert line.split(" in the notebook")[0].split(" at ")[0] in plain_html


def test_record_text_hides_secrets_and_control_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-1234567890")
    req = hn.ApprovalRequest("exec", "curl -H sk-secret-value-1234567890 \x1b[2J", "x", None,
                             None, "shell")  # fmt: skip
    bundle = ApprovalRecord(req, hn.Decision.approve(), "", AT)._repr_mimebundle_()
    for text in bundle.values():
        assert "sk-secret-value-1234567890" not in text
        assert "\x1b" not in text
    assert "\\x1b[2J" in bundle["text/plain"]
    # the act's default asked (no rule matched): said in words, not "rule None in layer -"
    assert "(asked by the policy's default for exec: no rule allows it)" in bundle["text/plain"]


def test_settling_a_panel_keeps_its_record_and_says_so_in_the_status() -> None:
    panel = ApprovalPanel(request(), lambda d: None)
    panel.settle(hn.Decision.deny("no"), at=AT)
    assert panel.record == ApprovalRecord(request(), hn.Decision.deny("no"), "", AT)
    assert "denied: no" in panel.status.value
    assert panel.approve_button.disabled and panel.deny_button.disabled


def test_buttons_use_the_theme_pair_not_the_low_contrast_success_style() -> None:
    # ipywidgets' "success" is white on --jp-success-color1 (#388e3c) in Lab light: 4.12:1.
    panel = ApprovalPanel(request(), lambda d: None)
    assert (panel.approve_button.button_style, panel.deny_button.button_style) == ("", "")
    assert (panel.approve_button.icon, panel.deny_button.icon) == ("check", "times")


# ------------------------------------------------------------------ in a real kernel

_ASK = """
import threading, time
import harnessnb as hn
approver = hn.WidgetApprover(widgets=True{timeout})
def click():
    while not approver.panels:
        time.sleep(0.01)
    {click}
threading.Thread(target=click, daemon=True).start()
decision = await approver(hn.ApprovalRequest(
    "write", "NOTES.md", "# Notes <b>x</b>", "write:*", "app", "write_file"))
"""
_WAITING = """
import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Reply
from harnessnb.notebook._approver import ApprovalPanel
panel = ApprovalPanel(hn.ApprovalRequest(
    "write", "NOTES.md", "# Notes", "write:*", "app", "write_file"), lambda d: None)
panel.show()
"""


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    cells = [
        _ASK.format(timeout="", click="approver.panels[-1].approve_button.click()"),
        _ASK.format(timeout="", click="approver.panels[-1].reason.value = 'not now'; "
                    "approver.panels[-1].deny_button.click()"),
        _ASK.format(timeout=", timeout_s=0.2", click="pass"),
        _WAITING,
    ]  # fmt: skip
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    path = tmp_path_factory.mktemp("approval")
    NotebookClient(nb, kernel_name="python3", timeout=60, store_widget_state=True,
                   resources={"metadata": {"path": str(path)}}).execute()  # fmt: skip
    nbformat.write(nb, path / "approval.ipynb")
    return nbformat.read(path / "approval.ipynb", as_version=4)  # as saved and reopened


@pytest.mark.parametrize(
    ("index", "line"),
    [(0, "  approved in the notebook at "), (1, "  denied: not now in the notebook at "),
     (2, "  deferred: no answer within 0.2 s at ")],
)  # fmt: skip
def test_saved_notebook_shows_the_decision_without_the_widget(
    executed: Any, index: int, line: str
) -> None:
    (output,) = executed.cells[index].outputs  # the panel, replaced through its handle
    assert output.output_type == "display_data"
    assert WIDGET not in output.data  # nothing a reload could fail to find
    assert "harnessnb-approval-record" in output.data["text/html"]
    assert "# Notes &lt;b&gt;x&lt;/b&gt;" in output.data["text/html"]
    plain = output.data["text/plain"].splitlines()
    assert plain[0].startswith("harnessnb asked to write NOTES.md via write_file")
    assert re.fullmatch(re.escape(line) + r"\d\d:\d\d UTC", plain[1])


def test_a_panel_saved_while_waiting_falls_back_to_what_was_asked(executed: Any) -> None:
    (output,) = executed.cells[3].outputs
    assert WIDGET in output.data  # live: the buttons
    assert output.data["text/plain"].startswith(
        "harnessnb asked to write NOTES.md via write_file "
        "(asked by the rule 'write:*' in the 'app' layer)"
    )
    assert "waiting for Approve / Deny" in output.data["text/plain"]
    assert "VBox(" not in output.data["text/plain"]
    assert "harnessnb-approval" in output.data["text/html"]  # what a page without the model shows


# ------------------------------------------------------------------ a %%harness run


_SETUP = """
import threading, time
import harnessnb as hn
from harnessnb.loop._driver import set_default_approver_factory
from harnessnb.notebook._approver import WidgetApprover
hn.set_testing(True)
%load_ext harnessnb
made = []
def factory():
    made.append(WidgetApprover())
    return made[-1]
set_default_approver_factory(factory)
def click():
    while not (made and made[-1].panels):
        time.sleep(0.01)
    made[-1].panels[-1].approve_button.click()
threading.Thread(target=click, daemon=True).start()
"""


def _execute_against_a_writer(
    nb: Any, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> int:
    """Execute ``nb`` in a real kernel in ``folder``, its ``--provider openai`` a chaos
    server answering as ``writes_notes``; how many requests the server saw."""
    with ChaosServer(responder=writes_notes) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.openai_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        # beside the notebook's folder (the default workspace): never inside it
        monkeypatch.setenv("HARNESSNB_STORE", str(folder.parent / f"{folder.name}-runs.duckdb"))
        monkeypatch.delenv("HARNESSNB_NO_WIDGETS", raising=False)
        NotebookClient(nb, kernel_name="python3", timeout=60, store_widget_state=True,
                       resources={"metadata": {"path": str(folder)}}).execute()  # fmt: skip
        return len(srv.requests)


def test_a_harness_cell_keeps_the_record_of_its_approval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The magic's path: the panel is shown and settled on harnessnb's loop thread."""
    nb = nbformat.v4.new_notebook()
    run = "%%harness run --provider openai\nwrite the notes"
    nb.cells = [nbformat.v4.new_code_cell(_SETUP), nbformat.v4.new_code_cell(run)]
    _execute_against_a_writer(nb, tmp_path, monkeypatch)
    assert (tmp_path / "NOTES.md").read_text() == NOTES
    html = [o.data["text/html"] for o in nb.cells[1].outputs if "text/html" in o.get("data", {})]
    records = [h for h in html if "harnessnb-approval-record" in h]
    assert len(records) == 1 and ">approved</span>" in records[0]
    assert not [o for o in nb.cells[1].outputs if WIDGET in o.get("data", {})]


_NO_CLICK = _SETUP.replace("threading.Thread(target=click, daemon=True).start()\n", "")


def test_a_run_left_awaiting_approval_is_asked_again_by_harness_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: with no answer the run stops ``awaiting_approval`` and ``%harness resume``
    takes it up again, asking the same question (the model is not asked that step again)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(_NO_CLICK),
        nbformat.v4.new_code_cell(
            "%%harness run --provider openai --approval-timeout 0.5 --out R\nwrite the notes"
        ),
        nbformat.v4.new_code_cell(
            "first = R.outcome.value\n"
            "threading.Thread(target=click, daemon=True).start()"
        ),
        nbformat.v4.new_code_cell("%harness resume {R.run_id} --out R2"),
        nbformat.v4.new_code_cell("print(first, R2.outcome.value, R2.steps)"),
    ]
    calls = _execute_against_a_writer(nb, tmp_path, monkeypatch)
    (printed,) = [o.text for o in nb.cells[4].outputs if o.output_type == "stream"]
    assert printed.strip() == "awaiting_approval finished 2"
    assert calls == 2  # the write step once, then the answer: not the write step again
    assert (tmp_path / "NOTES.md").read_text() == NOTES
    html = [o.data["text/html"] for o in nb.cells[3].outputs if "text/html" in o.get("data", {})]
    assert any("harnessnb-approval-record" in h and ">approved</span>" in h for h in html)
