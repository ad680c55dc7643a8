"""The demo model: a rule-based stand-in agent served over real HTTP, no key, no network.

It is NOT an LLM, and says so in its model name and its answers. It lets a newcomer
see the whole real path (HTTP, streaming, tool calls, retries, fallback, the store)
work on a machine with no API key::

    import harnessnb as hn
    from harnessnb.demo import demo_provider, make_demo_workspace

    ws = make_demo_workspace("demo-repo")
    contract = hn.TaskContract("summarise README.md into NOTES.md", ws,
                               verification=hn.FileContains("NOTES.md", "#"))
    policy = hn.Policy.default().layer("demo").allow_write("NOTES.md")
    hn.run_sync(contract, demo_provider(), policy=policy)

How it works: ``DemoModel`` is the chaos server's responder. From the conversation it
receives (OpenAI, Anthropic or Gemini wire form) it lists the workspace, reads the files the
task names, writes the file the task asks for (for "summarise X into Y": "# Notes"
and a bullet list of X's headings), then stops with a one-line summary. It also answers
arithmetic questions ("What is 17 + 25?": "The answer is 42."; asked to write the answer
into a file, it writes it there first), wrongly at a seeded rate with ``wrong_rate``: a
simulated provider of known quality, for sweeps that score answers. With ``stall=True``
it reads the same file forever, so stall detection has something to catch; ``rates``
make the server fail by kind at seeded rates (see ``harnessnb.chaos.RATE_FAULTS``).

Asked for a typed answer (a JSON Schema in the request natively, a ``final_answer``
tool offered, or a schema given in the conversation), its last answer is JSON that
validates against the schema (as text, as that tool's arguments, or a fenced block),
its integer and number fields the arithmetic answer when the task is a question it can
solve, its strings its one-line answer.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..rules._renamed import renamed_keywords
from ._arithmetic import AnswerDraw, solve, written_answer
from ._chaos import ChaosRequest, ChaosServer, Reply, typed_reply
from ._conversation import Call, Conversation, read_conversation

if TYPE_CHECKING:
    from ..providers._completion import Provider

__all__ = [
    "DEMO_LABEL",
    "DEMO_MARKER",
    "DEMO_MODEL",
    "DEMO_TIMEOUT_S",
    "DemoModel",
    "Rates",
    "demo_provider",
    "demo_server",
    "headings",
    "make_demo_workspace",
    "notes_from",
    "provider_for",
    "quickstart_notebook",
    "shared_demo_server",
    "temporary_demo_workspace",
]

DEMO_LABEL = "harnessnb demo model (rule-based, not an LLM)"
DEMO_MODEL = DEMO_LABEL
"""The model name the demo provider sends, and the server echoes into every answer."""

DEMO_TIMEOUT_S = 3.0
"""Request deadline of ``demo_provider``: the model answers in milliseconds on
loopback, so a ``timeout`` fault costs seconds, not the 600 s of a real provider."""

# Keys: names from ``chaos.RATE_FAULTS`` or ``Fault`` objects (Any: dict keys are invariant).
Rates = Mapping[Any, float]

# A file name as people write it in a task: "README.md", "docs/notes.txt".
_FILE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.[A-Za-z0-9]{1,8})\b")
# The file a task asks to be written: "... into NOTES.md", "write NOTES.md", ...
_TARGET = re.compile(
    r"\b(?:into|to|as|write|create|save)\s+(?:(?:a|the|new|file)\s+)*`?"
    r"((?:[\w-]+/)*[\w-]+\.[A-Za-z0-9]{1,8})",
    re.IGNORECASE,
)
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
_ANSWER = re.compile(r"The answer is (-?\d+)\.")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


# ------------------------------------------------------------------ the model


def _labelled(text: str) -> str:
    return f"{text}\n\n({DEMO_LABEL})"


def headings(markdown: str) -> list[tuple[int, str]]:
    """The ATX headings of a Markdown text as (level, title), code blocks skipped."""
    found: list[tuple[int, str]] = []
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def notes_from(sources: Mapping[str, str]) -> str:
    """The notes the demo model writes: "# Notes" and a bullet list of headings."""
    lines = ["# Notes", ""]
    for name, text in sources.items():
        lines.append(f"Summary of {name}, written by the {DEMO_LABEL}.")
        lines.append("")
        found = headings(text)
        if found:
            top = min(level for level, _ in found)
            lines += [f"{'  ' * (level - top)}- {title}" for level, title in found]
        else:
            first = [ln.strip() for ln in text.splitlines() if ln.strip()][:5]
            lines += [f"- {ln}" for ln in first] or ["- (the file is empty)"]
        lines.append("")
    return "\n".join(lines)


def _parse_task(task: str) -> tuple[list[str], str | None]:
    """The files a task names to read, and the one it asks to write (if any)."""
    target_match = _TARGET.search(task)
    target = target_match.group(1) if target_match else None
    sources: list[str] = []
    for name in _FILE.findall(task):
        if name != target and name not in sources:
            sources.append(name)
    return sources, target


def _listing_readme(calls: Sequence[Call]) -> str | None:
    """A README the workspace listing showed: the source of "summarise the README"."""
    for call in calls:
        if call.name == "list_dir" and call.result and not call.failed:
            for entry in call.result.splitlines():
                if entry.lower().startswith("readme") and not entry.endswith("/"):
                    return entry.rstrip("@")
    return None


class DemoModel:
    """The rule-based agent behind the demo server (a ``ChaosServer`` responder).

    Args:
        stall: Misbehave on purpose: after listing the workspace, read the same file
            again and again (stall detection stops it).
        wrong_rate: The chance that an arithmetic question gets a wrong answer, drawn
            once per run (at its first request) from a generator seeded with ``seed``:
            a simulated provider whose accuracy is known (``1 - wrong_rate``).
        seed: Seeds the wrong-answer draw: the same seed, the same sequence of draws.

    Calling it with a ``ChaosRequest`` returns the ``Reply`` to send. It never raises:
    input it does not understand gets a plain "I can't handle that" answer.

    Raises:
        ConfigError: ``wrong_rate`` is not a number in [0, 1].
    """

    def __init__(self, *, stall: bool = False, wrong_rate: float = 0.0, seed: int = 0) -> None:
        self.stall = stall
        self.draw = AnswerDraw(wrong_rate, seed)
        self.seed = seed

    def __repr__(self) -> str:
        rate = self.draw.wrong_rate
        return f"DemoModel(stall={self.stall}, wrong_rate={rate}, seed={self.seed})"

    def __call__(self, request: ChaosRequest) -> Reply:
        try:
            conv = read_conversation(request)
            return _typed(request, conv, self.answer(conv))
        except Exception as exc:  # the demo must answer anything, never crash the server
            return Reply(text=_labelled(f"I can't handle that ({type(exc).__name__})."))

    def answer(self, conv: Conversation) -> Reply:
        """The next reply for a normalised conversation."""
        sources, target = _parse_task(conv.task)
        right = solve(conv.task)
        if right is not None:
            return self._arithmetic(conv, right, target)
        if not conv.tools:
            return Reply(
                text=_labelled(
                    "I only work through tools (list_dir, read_file, write_file), and this "
                    "request offered none. Give me a task such as "
                    "'summarise README.md into NOTES.md' with tools and I will do it."
                )
            )
        if not sources and target is None:
            return Reply(
                text=_labelled(
                    "I can't handle that: I only read the files a task names and write the "
                    "file it asks for, e.g. 'summarise README.md into NOTES.md'."
                )
            )
        listed = any(c.name == "list_dir" for c in conv.calls)
        if not listed and "list_dir" in conv.tools:
            return _tool("Looking at the workspace first.", "list_dir", {"path": "."})
        if not sources:
            readme = _listing_readme(conv.calls)
            sources = [readme] if readme else []
        if self.stall and sources:
            # On purpose: the same read forever, replan directive or not.
            return _tool(f"Reading {sources[0]} again.", "read_file", {"path": sources[0]})
        if "read_file" not in conv.tools and sources:
            return Reply(text=_labelled("I can't handle that: I need the read_file tool."))
        reads = {c.args.get("path"): c for c in conv.calls if c.name == "read_file"}
        for source in sources:
            if source not in reads:
                return _tool(f"Reading {source}.", "read_file", {"path": source})
        texts = {s: reads[s].result or "" for s in sources if not reads[s].failed}
        failed = [s for s in sources if reads[s].failed]
        if target is None:
            return Reply(text=_labelled(_describe(texts, failed, reads)))
        if sources and not texts:
            return Reply(
                text=_labelled(
                    f"I could not read {', '.join(failed)}: "
                    f"{_first_line(reads[failed[0]].result)}. Nothing written."
                )
            )
        writes = [c for c in conv.calls if c.name == "write_file" and c.args.get("path") == target]
        if not writes:
            if "write_file" not in conv.tools:
                return Reply(text=_labelled("I can't handle that: I need the write_file tool."))
            count = sum(len(headings(t)) for t in texts.values())
            return _tool(
                f"Writing {target}: a bullet list of the {count} heading(s) of "
                f"{', '.join(texts) or 'nothing'}.",
                "write_file",
                {"path": target, "content": notes_from(texts)},
            )
        last = writes[-1]
        if last.failed or last.result is None:
            return Reply(text=_labelled(f"I could not write {target}: {_first_line(last.result)}"))
        count = sum(len(headings(t)) for t in texts.values())
        read_names = ", ".join(texts) or "nothing"
        return Reply(
            text=_labelled(f"Done: wrote {target} with {count} heading(s) from {read_names}.")
        )

    def _arithmetic(self, conv: Conversation, right: int, target: str | None) -> Reply:
        """An arithmetic question: the answer (written into ``target`` first, when the
        task names a file), right or wrong as drawn at the run's first request; a later
        request of the run reads back the answer its write carried."""
        writes = [c for c in conv.calls if c.name == "write_file" and c.args.get("path") == target]
        if target is not None and not writes and "write_file" not in conv.tools:
            return Reply(text=_labelled("I can't handle that: I need the write_file tool."))
        written = written_answer(writes[-1].args.get("content")) if writes else None
        answer = self.draw.answer(right) if written is None else written
        if target is None:
            return Reply(text=_labelled(f"The answer is {answer}."))
        if not writes:
            return _tool(
                f"Writing {answer} into {target}.",
                "write_file",
                {"path": target, "content": f"{answer}\n"},
            )
        if writes[-1].failed or writes[-1].result is None:
            return Reply(
                text=_labelled(
                    f"I could not write {target}: {_first_line(writes[-1].result)}. "
                    f"The answer is {answer}."
                )
            )
        return Reply(text=_labelled(f"Wrote {answer} into {target}. The answer is {answer}."))


def _typed(request: ChaosRequest, conv: Conversation, reply: Reply) -> Reply:
    """``reply`` as the typed answer the request asks for, if it asks one: the
    arithmetic answer in its number fields, the reply's words in its strings."""
    said = reply.text.removesuffix(f"\n\n({DEMO_LABEL})")
    found = _ANSWER.search(said) if solve(conv.task) is not None else None
    number = int(found.group(1)) if found else None
    return typed_reply(request, reply, number=number, text=said)


def _tool(text: str, name: str, args: dict[str, Any]) -> Reply:
    return Reply(text=text, tool_calls=[{"name": name, "arguments": args}])


def _first_line(text: str | None) -> str:
    lines = (text or "no result").strip().splitlines()
    return lines[0] if lines else "no result"


def _describe(texts: Mapping[str, str], failed: Sequence[str], reads: Mapping[Any, Call]) -> str:
    parts = []
    for name, text in texts.items():
        found = [title for _, title in headings(text)]
        if found:
            parts.append(f"{name} has {len(found)} heading(s): {', '.join(found)}.")
        else:
            parts.append(f"{name} has {len(text.splitlines())} line(s) and no heading.")
    for name in failed:
        parts.append(f"I could not read {name}: {_first_line(reads[name].result)}.")
    return " ".join(parts)


# ------------------------------------------------------------------ servers and providers


def demo_server(
    *,
    seed: int = 0,
    rates: Rates | None = None,
    stall: bool = False,
    wrong_rate: float = 0.0,
) -> ChaosServer:
    """A chaos server answering as the demo model (not started: use ``with``).

    Args:
        seed: Seeds the failure draw and the wrong-answer draw: the same seed gives the
            same failures and the same wrong answers.
        rates: Failure rates by kind, e.g. ``{"rate_limited": 0.2, "server": 0.1}``
            (names from ``harnessnb.chaos.RATE_FAULTS``, or ``Fault`` objects; a
            ``Fault.slow(seconds)`` at rate 1.0 makes a slow provider).
        stall: Make the model loop on one read (see ``DemoModel``).
        wrong_rate: The chance that a run's arithmetic question is answered wrongly
            (see ``DemoModel``).
    """
    model = DemoModel(stall=stall, wrong_rate=wrong_rate, seed=seed)
    return ChaosServer(seed=seed, responder=model, rates=rates)


_servers: dict[tuple[Any, ...], ChaosServer] = {}
_servers_lock = threading.Lock()


def _stop_all() -> None:
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop()


atexit.register(_stop_all)


def shared_demo_server(
    *, seed: int = 0, rates: Rates | None = None, stall: bool = False, wrong_rate: float = 0.0
) -> ChaosServer:
    """The process's running demo server for these settings (started on first use)."""
    key = (seed, tuple((rates or {}).items()), stall, wrong_rate)
    with _servers_lock:
        server = _servers.get(key)
        if server is None:
            server = demo_server(seed=seed, rates=rates, stall=stall, wrong_rate=wrong_rate)
            server.start()
            _servers[key] = server
        return server


@renamed_keywords(timeout="timeout_s")
def demo_provider(
    *,
    seed: int = 0,
    rates: Rates | None = None,
    stall: bool = False,
    protocol: Literal["openai", "responses", "anthropic", "gemini"] = "openai",
    timeout_s: float = DEMO_TIMEOUT_S,
    wrong_rate: float = 0.0,
) -> Provider:
    """A provider talking to the demo model over loopback HTTP; no key needed.

    The server is started once per ``(seed, rates, stall, wrong_rate)`` per process and stopped
    at exit. The provider's name is ``demo`` (so demo attempts never mix with a real
    ``openai`` in failure tables) and its model is ``DEMO_MODEL``.

    Args:
        seed: Seeds the failure draw.
        rates: Failure rates by kind (see ``demo_server``).
        stall: Make the model loop on one read.
        protocol: ``"openai"`` (chat completions), ``"responses"`` (OpenAI's Responses
            API), ``"anthropic"`` (messages) or ``"gemini"`` (generateContent).
        timeout_s: Request deadline in seconds (``DEMO_TIMEOUT_S``).
        wrong_rate: The chance that a run's arithmetic question is answered wrongly.

    Returns:
        An ``hn.OpenAI`` (or ``hn.Anthropic``, ``hn.Gemini``) subclass instance named
        ``demo``.
    """
    server = shared_demo_server(seed=seed, rates=rates, stall=stall, wrong_rate=wrong_rate)
    return provider_for(server, protocol=protocol, timeout_s=timeout_s)


@renamed_keywords(timeout="timeout_s")
def provider_for(
    server: ChaosServer,
    *,
    protocol: Literal["openai", "responses", "anthropic", "gemini"] = "openai",
    timeout_s: float = DEMO_TIMEOUT_S,
    name: str = "demo",
) -> Provider:
    """A provider named ``name`` for a running demo (or any chaos) server."""
    from ..providers._anthropic import Anthropic
    from ..providers._gemini import Gemini
    from ..providers._openai import OpenAI

    if protocol == "gemini":
        gemini_cls = type("DemoGemini", (Gemini,), {"NAME": name})
        gemini: Provider = gemini_cls(
            DEMO_MODEL, base_url=server.gemini_url, timeout_s=timeout_s, name=name
        )
        return gemini
    if protocol == "anthropic":
        anthropic_cls = type("DemoAnthropic", (Anthropic,), {"NAME": name})
        provider: Provider = anthropic_cls(
            DEMO_MODEL, base_url=server.anthropic_url, timeout_s=timeout_s, name=name
        )
        return provider
    if protocol not in ("openai", "responses"):
        raise ValueError(
            f"protocol must be 'openai', 'responses', 'anthropic' or 'gemini', not {protocol!r}"
        )
    # A subclass only to carry its own NAME: attempts are recorded under the leaf's NAME.
    openai_cls = type("DemoOpenAI", (OpenAI,), {"NAME": name})
    api = "responses" if protocol == "responses" else "chat"
    provider = openai_cls(
        DEMO_MODEL, base_url=server.openai_url, timeout_s=timeout_s, name=name, api=api
    )
    return provider


# ------------------------------------------------------------------ the workspace

_README = """\
# harnessnb demo project

A tiny project for the harnessnb demo: a greeting library and its command line.

## Install

Copy `src/` next to your code; there is nothing to build.

## Usage

Call `greet("Ada")` from Python, or run `python src/cli.py Ada`.

```
# this line is inside a code block, not a heading
```

## Design

### Greeting rules

Names are trimmed and title-cased; an empty name greets the world.

## License

MIT
"""

_GREET = '''\
"""Greetings."""


def greet(name: str) -> str:
    """Say hello to ``name`` (the world when it is empty)."""
    name = name.strip().title()
    return f"Hello, {name or 'world'}!"
'''

_CLI = '''\
"""python src/cli.py NAME"""

import sys

from greet import greet

if __name__ == "__main__":
    print(greet(" ".join(sys.argv[1:])))
'''


DEMO_MARKER = ".harnessnb-demo"
"""The file ``make_demo_workspace`` leaves in a folder it made: only such a folder (or an
empty or new one) is ever written to."""

_MARKER_TEXT = (
    "This folder was made by harnessnb's demo (make_demo_workspace / harnessnb demo).\n"
    "harnessnb may rewrite README.md and src/ here; delete this file to stop it.\n"
)


def make_demo_workspace(path: str | os.PathLike[str]) -> Path:
    """Create (or refresh) the small demo project at ``path`` and return its path.

    Writes README.md (with headings), src/greet.py, src/cli.py and the marker
    ``.harnessnb-demo``, in a folder that is new, empty, or one it made before (the
    marker says so); other files there, a NOTES.md from an earlier run included, are
    left alone. Any other folder is refused before anything in it is touched.

    Raises:
        ConfigError: ``path`` is a file, or a non-empty folder without the marker.
    """
    root = Path(path)
    _check_demo_folder(root)
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / DEMO_MARKER).write_text(_MARKER_TEXT, encoding="utf-8")
    (root / "README.md").write_text(_README, encoding="utf-8")
    (root / "src" / "greet.py").write_text(_GREET, encoding="utf-8")
    (root / "src" / "cli.py").write_text(_CLI, encoding="utf-8")
    return root


@contextlib.contextmanager
def temporary_demo_workspace() -> Iterator[Path]:
    """The demo project in a new ``harnessnb-demo-*`` temporary folder, removed with
    whatever the run wrote there when the block ends (an error or Ctrl-C included)."""
    with tempfile.TemporaryDirectory(prefix="harnessnb-demo-", ignore_cleanup_errors=True) as tmp:
        yield make_demo_workspace(Path(tmp) / "project")


QUICKSTART_URL = "https://github.com/harnessnb/harnessnb/blob/main/notebooks/01-quickstart.ipynb"
"""The quickstart notebook online: where a wheel's user reads on (a wheel has no notebooks)."""


def quickstart_notebook(checkout: Path | None = None) -> str:
    """Where the quickstart notebook is for this install: its path in a source checkout
    (``checkout``, default the folder above the package, holds ``notebooks/``), else
    ``QUICKSTART_URL``."""
    root = Path(__file__).resolve().parents[2] if checkout is None else checkout
    notebook = root / "notebooks" / "01-quickstart.ipynb"
    return str(notebook) if notebook.is_file() else QUICKSTART_URL


def _check_demo_folder(root: Path) -> None:
    """Refuse a folder the demo did not make, with what to do instead."""
    from ..rules._errors import ConfigError

    if not root.exists() and not root.is_symlink():
        return
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder; give a new or empty folder for the demo")
    if (root / DEMO_MARKER).is_file() or not any(root.iterdir()):
        return
    raise ConfigError(
        f"{root} is not empty and was not made by the harnessnb demo (it has no "
        f"{DEMO_MARKER}); the demo would overwrite README.md and src/ there, so nothing in "
        "it was changed. Give a new or empty folder (--workspace NEW_DIR), or leave "
        "--workspace out for a temporary one."
    )
