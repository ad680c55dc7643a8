"""Execute tests/notebooks/chaos_runs.ipynb headless against chaos servers, once per session.

Shared by test_notebook_exec.py and test_browser.py. The servers: healthy OpenAI
(echo, or a planted ``<script>`` for a task that says "plant"), OpenRouter answering
429 with Retry-After 100, Anthropic answering 401.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply, echo_responder

NOTEBOOK = Path(__file__).parent / "notebooks" / "chaos_runs.ipynb"
PLANTED = "<script>window.__pwned=1</script>"

_executed: dict[str, Any] = {}


def _responder(request: ChaosRequest) -> Reply:
    if any("plant" in str(m.get("content")) for m in request.messages if isinstance(m, dict)):
        return Reply(text=PLANTED)
    return echo_responder(request)


def executed_notebook(workdir: Path) -> tuple[Any, Path]:
    """(executed notebook, its path on disk); executed once per test session."""
    if "nb" in _executed:
        return _executed["nb"], _executed["path"]
    workdir.mkdir(parents=True, exist_ok=True)
    healthy = ChaosServer(responder=_responder).start()
    limited = ChaosServer().start()
    limited.set_default(Fault.status(429, retry_after="100"))
    denied = ChaosServer().start()
    denied.set_default(Fault.status(401))
    env = {
        "OPENAI_BASE_URL": healthy.openai_url,
        "OPENROUTER_BASE_URL": limited.openai_url,
        "ANTHROPIC_BASE_URL": denied.url,
        "OPENAI_API_KEY": "sk-test",
        "OPENROUTER_API_KEY": "sk-test",
        "ANTHROPIC_API_KEY": "sk-test",
        "HARNESSNB_STORE": str(workdir / "runs.duckdb"),
    }
    saved = {k: os.environ.get(k) for k in [*env, "HARNESSNB_NO_WIDGETS", "HARNESSNB_PROVIDER"]}
    os.environ.update(env)
    os.environ.pop("HARNESSNB_NO_WIDGETS", None)
    os.environ.pop("HARNESSNB_PROVIDER", None)
    try:
        nb = nbformat.read(NOTEBOOK, as_version=4)
        client = NotebookClient(
            nb,
            kernel_name="python3",
            timeout=60,
            allow_errors=True,
            store_widget_state=True,
            resources={"metadata": {"path": str(workdir)}},
        )
        client.execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for srv in (healthy, limited, denied):
            srv.stop()
    path = workdir / "chaos_runs.executed.ipynb"
    nbformat.write(nb, path)
    _executed.update(nb=nb, path=path)
    return nb, path


def cell(nb: Any, tag: str) -> Any:
    """The code cell carrying ``tag``."""
    for c in nb.cells:
        if tag in c.get("metadata", {}).get("tags", []):
            return c
    raise KeyError(tag)


@contextlib.contextmanager
def started_kernel(home: Path, **env: str) -> Iterator[tuple[KernelManager, Any]]:
    """A python3 kernel run in ``home``, with no ``HARNESSNB_`` variable of ours but those
    in ``env``: its manager and its client, ready; shut down when done."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HARNESSNB_")}
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env={**environ, **env}, cwd=str(home))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
