"""A reference run of ~20 steps for the durability tests, runnable as a child process.

    python reference_run.py STORE WORKSPACE RUN_ID [--kill-at N] [--kill-in-ledger N]

--kill-at N          SIGKILL this process right after its Nth store write (a commit
                     boundary: create, lease, intent, settle, step, finish...).
--kill-in-ledger N   SIGKILL inside the Nth ledger append, after the line landed but
                     before its completion was recorded.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, ClassVar

import harnessnb as hn
from harnessnb import Store
from harnessnb.store._batch import WriteOp

WRITES = ("create_run", "start_run", "acquire_lease", "record_intent", "settle_tool_call",
          "commit_step", "finish_run", "release_lease", "renew_lease", "add_attempts",
          "add_marker")

KILL_IN_LEDGER = [0]
LEDGER_CALLS = [0]


def kill_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillingStore(Store):
    """A store that kills its own process right after its Nth write."""

    kill_at = 0
    writes = 0
    # each write's name as it commits, and "ledger" where a ledger append runs
    trace: ClassVar[list[str]] = []


def _wrap(name: str) -> None:
    original = getattr(Store, name)

    def method(self: KillingStore, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        type(self).writes += 1
        type(self).trace.append(name)
        if type(self).writes == type(self).kill_at:
            kill_now()
        return out

    setattr(KillingStore, name, method)


for _name in WRITES:
    _wrap(_name)


def _submit(self: KillingStore, op: WriteOp[Any]) -> Any:
    """The loop's writes go through ``submit`` (group commit): count each one when it
    has committed, and die right then, in the writer thread."""
    future = Store.submit(self, op)

    def committed(done: Any) -> None:
        if done.cancelled() or done.exception() is not None:
            return
        type(self).writes += 1
        type(self).trace.append(op.name)
        if type(self).writes == type(self).kill_at:
            kill_now()

    future.add_done_callback(committed)
    return future


KillingStore.submit = _submit  # type: ignore[method-assign]


@hn.tool(effect=hn.Effect.WRITE)
def append_ledger(line: str) -> str:
    """Append one line to LEDGER.txt.

    Args:
        line: The line to append.
    """
    KillingStore.trace.append("ledger")
    path = Path(os.environ["HNB_WS"]) / "LEDGER.txt"
    with path.open("a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
    LEDGER_CALLS[0] += 1
    if LEDGER_CALLS[0] == KILL_IN_LEDGER[0]:
        kill_now()
    return f"appended {line!r}"


@hn.tool(effect=hn.Effect.IDEMPOTENT)
def put_value(key: str, value: str, idempotency_key: str = "") -> str:
    """Store a value under a key (a file in kv/), idempotently.

    Args:
        key: The key.
        value: The value.
    """
    root = Path(os.environ["HNB_WS"]) / "kv"
    root.mkdir(exist_ok=True)
    (root / key).write_text(f"{value} ({idempotency_key[:9]})\n")
    return "stored"


PLAN: list[dict[str, Any]] = []
for i in range(1, 5):
    PLAN += [
        {"tool": "read_file", "args": {"path": f"src/f{i}.txt"}},
        {"tool": "put_value", "args": {"key": f"k{i}", "value": f"v{i}"}},
        {"tool": "append_ledger", "args": {"line": f"entry {i}"}},
        {"tool": "write_file", "args": {"path": f"out/o{i}.txt", "content": f"out {i}\n"}},
    ]
PLAN += [
    {"tool": "list_dir", "args": {"path": "out"}},
    {"tool": "edit_file", "args": {"path": "out/o1.txt", "old": "out 1", "new": "OUT 1"}},
    {"tool": "grep", "args": {"pattern": "entry", "path": "LEDGER.txt"}},
    {"tool": "write_file", "args": {"path": "DONE.md", "content": "# done\n"}},
]


def brain(messages: Any) -> Any:
    """The scripted model: the next step of PLAN, redoing a call a person abandoned."""
    progress = sum(1 for m in messages if m.get("role") == "assistant")
    progress -= sum(1 for m in messages if m.get("role") == "tool"
                    and str(m.get("content", "")).startswith("ERROR [ABANDONED]"))
    if progress < len(PLAN):
        return PLAN[progress]
    return "all done"


def contract(ws: str) -> hn.TaskContract:
    return hn.TaskContract("work through the plan", ws, max_steps=40,
                           verification=hn.FileContains("DONE.md", "# done"))


def policy() -> hn.Policy:
    return hn.Policy.default().layer("test").allow_write("**").allow_exec("tool:*")


def provider() -> hn.ScriptedProvider:
    return hn.ScriptedProvider(brain)


TOOLS = [append_ledger, put_value]


def seed_workspace(ws: Path) -> None:
    (ws / "src").mkdir(parents=True)
    for i in range(1, 5):
        (ws / "src" / f"f{i}.txt").write_text(f"file {i}\n")


def main(argv: list[str]) -> None:
    store_path, ws, run_id = argv[:3]
    rest = argv[3:]
    if "--kill-at" in rest:
        KillingStore.kill_at = int(rest[rest.index("--kill-at") + 1])
    if "--kill-in-ledger" in rest:
        KILL_IN_LEDGER[0] = int(rest[rest.index("--kill-in-ledger") + 1])
    os.environ["HNB_WS"] = ws
    store = KillingStore(store_path)
    result = hn.run_sync(contract(ws), provider(), store=store, policy=policy(), tools=TOOLS,
                         run_id=run_id)
    store.close()
    print(json.dumps({"outcome": result.outcome.value, "steps": result.steps,
                      "writes": KillingStore.writes, "trace": KillingStore.trace}))


if __name__ == "__main__":
    main(sys.argv[1:])
