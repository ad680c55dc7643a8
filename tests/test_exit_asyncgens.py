"""At interpreter exit the harness loop is wound down as asyncio.run winds a loop down:
its async generators closed on it, the loop closed. A CI run once printed "Exception
ignored in: <async_generator ...> ValueError: async generator already executing" after
``harnessnb demo`` had succeeded: an async generator left open on the harness loop was
finalized by the garbage collector while the interpreter tore down."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import atexit, gc, inspect, json, sys

    def report():  # registered first, so it runs after the harness's own exit hooks
        from harnessnb.loop import _bridge
        gc.collect()
        open_gens = [
            getattr(g, "__qualname__", repr(g)) for g in gc.get_objects()
            if inspect.isasyncgen(g) and g.ag_frame is not None
        ]
        loop = _bridge._loop
        print(json.dumps({"open": open_gens, "closed": loop is not None and loop.is_closed()}))
        sys.stdout.flush()

    atexit.register(report)

    import harnessnb as hn
    from harnessnb.chaos import ChaosServer
    from harnessnb.loop._bridge import run_blocking

    with ChaosServer() as server:
        provider = hn.OpenAI("m", api_key="k", base_url=server.openai_url)
        for stream in (True, False):
            answer = run_blocking(
                provider.complete([{"role": "user", "content": "hi"}], stream=stream)
            )
            assert answer.text, answer
    """
)


def test_the_exit_closes_the_harness_loops_async_generators_and_the_loop(
    tmp_path: Path,
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Exception ignored" not in out.stderr, out.stderr[-2000:]
    report = json.loads(out.stdout.splitlines()[-1])
    assert report == {"open": [], "closed": True}
