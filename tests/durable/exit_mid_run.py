"""A script that starts a run on harnessnb's loop thread and lets the interpreter exit
mid-run (as a script or a kernel that ends mid-run does).

    python exit_mid_run.py STORE WORKSPACE SECONDS [store|path|default] [writing|waiting]

How the run is given its store: an ``hn.Store`` (the default), the path, or nothing
(the default store, ``$HARNESSNB_STORE`` set to STORE). ``writing``: the exit comes
SECONDS after the run's first step, while it steps and writes as fast as it can;
``waiting``: it comes while the run waits for its third model answer, its store's
connection closed (idle). The last thing the process does is
print, as JSON, the names of the threads started once the exit began.
"""

import atexit
import json
import os
import threading

started_at_exit: list[str] = []
exit_began = threading.Event()
_start = threading.Thread.start


def _recording_start(self: threading.Thread) -> None:
    if exit_began.is_set():
        started_at_exit.append(self.name)
    _start(self)


threading.Thread.start = _recording_start  # type: ignore[method-assign]
# Registered before harnessnb is imported: runs after every exit hook of harnessnb's.
atexit.register(lambda: print(json.dumps({"started_at_exit": started_at_exit}), flush=True))

import asyncio  # noqa: E402
import itertools  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import harnessnb as hn  # noqa: E402
from harnessnb.loop._bridge import loop_thread  # noqa: E402

store_path, workspace, seconds = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
how = sys.argv[4] if len(sys.argv) > 4 else "store"
waiting = len(sys.argv) > 5 and sys.argv[5] == "waiting"
workspace.mkdir(exist_ok=True)
counter = itertools.count()
stalled = threading.Event()


class Stalling(hn.ScriptedProvider):
    """Answers twice, then never: the third model call is in flight at the exit."""

    async def complete(self, *args: Any, **kwargs: Any) -> hn.Completion:
        if waiting and len(self.calls) >= 2:
            stalled.set()
            await asyncio.sleep(3600)
        return await super().complete(*args, **kwargs)


def lingering() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("harnessnb-store-linger")]


provider = Stalling(
    lambda messages: {
        "tool": "write_file",
        "args": {"path": f"n{next(counter) % 50}.txt", "content": "x" * next(counter)},
    }
)
contract = hn.TaskContract("write forever", workspace, max_steps=100_000)
policy = hn.Policy.default().layer("t").allow_write("*.txt")
if how == "default":
    os.environ["HARNESSNB_STORE"] = store_path
store = {"store": lambda: hn.Store(store_path), "path": lambda: store_path}.get(how, lambda: None)()
stepped = threading.Event()
run = hn.run(contract, provider, store=store, policy=policy,
             on_event=lambda event: stepped.set() if event.kind == "step" else None)  # fmt: skip
asyncio.run_coroutine_threadsafe(run, loop_thread())
stepped.wait(30)  # mid-run, on a loaded machine too: its first step is committed
if waiting:
    stalled.wait(30)
    for _ in range(600):  # the store's connection is closed once idle, its thread ended
        if not lingering():
            break
        time.sleep(0.05)
    else:
        raise SystemExit(f"the store's idle connection was not closed: {lingering()}")
else:
    time.sleep(seconds)
atexit.register(exit_began.set)  # registered last: the first exit hook to run
print("exiting", flush=True)
