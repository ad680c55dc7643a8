"""A script that starts a run on harnessnb's loop thread and lets the interpreter exit
while the run is still writing (as a script or a kernel that ends mid-run does).

    python exit_mid_run.py STORE WORKSPACE SECONDS
"""

import asyncio
import itertools
import sys
import time
from pathlib import Path

import harnessnb as hn
from harnessnb.loop._bridge import loop_thread

store_path, workspace, seconds = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
workspace.mkdir(exist_ok=True)
counter = itertools.count()
provider = hn.ScriptedProvider(
    lambda messages: {
        "tool": "write_file",
        "args": {"path": f"n{next(counter) % 50}.txt", "content": "x" * next(counter)},
    }
)
contract = hn.TaskContract("write forever", workspace, max_steps=100_000)
policy = hn.Policy.default().layer("t").allow_write("*.txt")
store = hn.Store(store_path)
run = hn.run(contract, provider, store=store, policy=policy)
asyncio.run_coroutine_threadsafe(run, loop_thread())
time.sleep(seconds)
print("exiting", flush=True)
