"""The options of a run, defined once for both faces: names, defaults, validation, help.

``harnessnb run``/``resume`` (argparse in ``cli``) and ``%harness run``/``resume``
(argparse in ``notebook._args``) add the same ``Option`` rows to their parsers with
``add_options``. An option that makes sense in one face only is added there alone,
its help saying so ("(notebook only)", "(command only)"). What argparse cannot check
(options that need or exclude ``--agent``, ``--provider local`` without ``--base-url``,
the workspace, the ``--verify`` text) ``check_run_options`` checks, raising
``ConfigError``: the command shows it as a card (exit 2), the magic as a ``UsageError``.

A list option (``--allow-write``, ``--fallback``) takes one value per flag, or several
separated by commas, and is repeated for more: it never swallows the positional TASK
after it (``harnessnb run --allow-write NOTES.md 'say hi'``).

``--max-steps 0`` is a usage error in both faces: zero model turns cannot run a task
(the command once ran it as the default 12).

``--price MODEL=IN,OUT`` (repeatable; both faces) and ``--prices VAR`` (a notebook's
``hn.Prices``; the magics only), on run, resume and sweep, become the run's ``prices=``
(``prices_from``): they add or override those models only, everything else priced as
before (the catalogue, local servers free). Given together they merge: the variable's
prices, then each ``--price`` on top.
"""

from __future__ import annotations

import argparse
import dataclasses
import keyword
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..rules._errors import ConfigError
from ._choose import (
    APIS,
    PROVIDER_NAMES,
    ProviderWords,
    choose_provider,
    parse_verify,
    parse_verify_cmd,
    provider_for_resume,
)
from ._mcp_spec import mcp_spec
from ._otel import otlp_url

if TYPE_CHECKING:
    from ..agents import AgentCLI
    from ..loop._contract import TaskContract
    from ..providers._completion import Provider
    from ..providers._prices import Prices
    from ..rules._policy import Policy
    from ..tools._approval import Approver

__all__ = [
    "AGENT_NAMES",
    "APPROVAL_TIMEOUT",
    "FACE_MARK",
    "MCP_OPTIONS",
    "OTEL_ENDPOINT",
    "OUTPUT_OPTIONS",
    "PERMISSIONS",
    "PRICE_OPTIONS",
    "PROVIDER_OPTIONS",
    "RESUME_OPTIONS",
    "RUN_OPTIONS",
    "STORE",
    "Face",
    "Option",
    "absent_store",
    "add_options",
    "agent_from",
    "approver_from",
    "check_provider_options",
    "check_run_options",
    "contract_from",
    "listed",
    "model_price",
    "policy_from",
    "positive_float",
    "positive_int",
    "prices_from",
    "provider_from",
    "resume_provider_from",
]

Face = Literal["command", "notebook"]
FACE_MARK: dict[Face, str] = {"command": "(command only)", "notebook": "(notebook only)"}

AGENT_NAMES = ("claude", "claude-code", "codex", "copilot")
PERMISSIONS = ("read_only", "edit", "bypass")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0, and finite")
    return value


def listed(choices: Sequence[str] = ()) -> Callable[[str], list[str]]:
    """An argparse type for a list option (with ``action="extend"``): one value, or
    several separated by commas, so ``--allow-write A,B`` is ``--allow-write A
    --allow-write B``; each value one of ``choices`` when there are any. A flag takes
    one word, so it never swallows the positional TASK that follows it."""

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(
                f"{text!r} has an empty value: give one per flag, or several separated by commas"
            )
        bad = [item for item in items if choices and item not in choices]
        if bad:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {bad[0]!r} (choose from {', '.join(choices)})"
            )
        return items

    return parse


def variable_name(text: str) -> str:
    """An argparse type: a name the result can be assigned to in the notebook."""
    if not text.isidentifier() or keyword.iskeyword(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Python variable name")
    return text


_PRICE_FIX = "write it as MODEL=IN,OUT, e.g. --price my-model=0.5,1.5"


def model_price(text: str) -> tuple[str, tuple[float, float]]:
    """An argparse type: ``MODEL=IN,OUT``, a model and its US dollars per million input
    and output tokens (0 or more, finite), as ``hn.Prices`` takes them."""
    model, equals, pair = text.rpartition("=")
    model = model.strip()
    numbers = pair.split(",")
    if not equals or len(numbers) != 2:
        raise argparse.ArgumentTypeError(f"{text!r}: {_PRICE_FIX}")
    if not model:
        raise argparse.ArgumentTypeError(f"{text!r} names no model: {_PRICE_FIX}")
    dollars = []
    for number in numbers:
        try:
            value = float(number)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {number.strip()!r} is not a number of dollars; {_PRICE_FIX}"
            ) from None
        if not (math.isfinite(value) and value >= 0):
            raise argparse.ArgumentTypeError(
                f"{text!r}: {number.strip()!r} is no price (a finite number of dollars, 0 "
                f"or more); {_PRICE_FIX}"
            )
        dollars.append(value)
    return model, (dollars[0], dollars[1])


@dataclasses.dataclass(frozen=True)
class Option:
    """One ``--flag``: its argparse keywords, help, and where it belongs.

    Attributes:
        flag: The option string, e.g. ``--max-steps``.
        help: One help text for both faces (no ``%``: argparse formats help with it).
        spec: Keywords for ``add_argument`` (metavar, type, choices, nargs, action, default).
        only: The one face the option belongs to, or None for both.
        per_face: Keywords that differ by face (``--workspace`` is required by the command).
        scope: ``"agent"``: only with ``--agent`` (shown in the coding-agent CLI group);
            ``"loop"``: harnessnb's own loop, refused with ``--agent``; None: either.
        exclusive: Options sharing this name exclude each other.
    """

    flag: str
    help: str
    spec: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    only: Face | None = None
    per_face: Mapping[Face, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    scope: Literal["agent", "loop"] | None = None
    exclusive: str | None = None

    @property
    def dest(self) -> str:
        """The attribute argparse stores it in (``--max-steps`` -> ``max_steps``)."""
        return self.flag.removeprefix("--").replace("-", "_")

    def marked_help(self) -> str:
        """The help, saying "(notebook only)" or "(command only)" when it is."""
        return f"{self.help} {FACE_MARK[self.only]}" if self.only else self.help


STORE = Option(
    "--store",
    "the DuckDB store (default: $HARNESSNB_STORE, else ./runs.duckdb)",
    {"metavar": "PATH"},
)

PROVIDER_OPTIONS = (
    Option("--provider",
           "openai, openai-responses, openrouter, anthropic, gemini, local (needs --base-url) "
           "or demo; default: $HARNESSNB_PROVIDER, else the first API key found "
           "(OPENROUTER_API_KEY, ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY), else the "
           "demo model",
           {"metavar": "NAME", "choices": PROVIDER_NAMES}, scope="loop"),
    Option("--model", "the model (default: the provider's)", {"metavar": "M"}),
    Option("--base-url", "another server speaking the provider's protocol",
           {"metavar": "URL"}, scope="loop"),
    Option("--api",
           "the OpenAI API the provider speaks: chat (chat completions, the default) or "
           "responses (the Responses API; openai, local or demo)",
           {"metavar": "API", "choices": APIS}, scope="loop"),
    Option("--fallback",
           "providers to fall back to, in order, after a retryable failure (repeat the "
           "flag, or separate names with commas)",
           {"metavar": "NAME", "type": listed(PROVIDER_NAMES), "action": "extend",
            "default": []}, scope="loop"),
)  # fmt: skip

APPROVAL_TIMEOUT = Option(
    "--approval-timeout",
    "wait at most S seconds for a person to answer an approval (the notebook's "
    "Approve/Deny panel; the command asks on the terminal, which it does only with this "
    "option), then stop the run awaiting_approval, resumable (default: the notebook "
    "waits until answered or interrupted; the command refuses what needs approval)",
    {"metavar": "S", "type": positive_float},
    scope="loop",
)

PRICE_OPTIONS = (
    Option("--price",
           "price MODEL in US dollars per million input and output tokens (repeatable), "
           "for a model the catalogue lacks or to override it, on any server (a local one "
           "too); other models are priced as before",
           {"metavar": "MODEL=IN,OUT", "type": model_price, "action": "append",
            "default": []}, scope="loop"),
    Option("--prices",
           "the name of a notebook variable holding an hn.Prices; merged with --price "
           "(--price wins for its model)",
           {"metavar": "VAR", "type": variable_name}, only="notebook", scope="loop"),
)  # fmt: skip

MCP_OPTIONS = (
    Option("--mcp",
           "an MCP tool server for the run (repeatable): a command line run in the "
           "command sandbox (\"python -m mcp_server_time\"), NAME=\"COMMAND ARGS\" to name "
           "it, or an http(s) URL; its tools are called mcp:NAME/TOOL by the policy",
           {"metavar": "SPEC", "type": mcp_spec, "action": "append", "default": []},
           scope="loop"),
    Option("--mcp-trust",
           "believe the tool annotations of the --mcp server NAME (repeatable): its "
           "read-only tools run without asking; untrusted, every tool is asked",
           {"metavar": "NAME", "action": "append", "default": []}, scope="loop"),
)  # fmt: skip

OTEL_ENDPOINT = Option(
    "--otel-endpoint",
    "send the run's OpenTelemetry spans over OTLP/HTTP to URL when it ends (e.g. Phoenix's "
    "http://127.0.0.1:6006/v1/traces; pip install 'harnessnb[otel]' "
    "opentelemetry-exporter-otlp-proto-http)",
    {"metavar": "URL", "type": otlp_url},
)

OUTPUT_OPTIONS = (
    Option("--out", "assign the result to VAR in the notebook",
           {"metavar": "VAR", "type": variable_name}, only="notebook"),
    Option("--quiet", "no live progress, and no card unless the run failed",
           {"action": "store_true"}, only="notebook"),
)  # fmt: skip

_AGENT_OPTIONS = (
    Option("--agent",
           "hand the task to this coding-agent CLI: claude, codex or copilot (it must be "
           "installed and logged in)",
           {"metavar": "CLI", "choices": AGENT_NAMES}, scope="agent"),
    Option("--session", "continue the CLI session bound to NAME (bound on first use)",
           {"metavar": "NAME"}, scope="agent"),
    Option("--permission", "what the CLI may do in the workspace (default read_only)",
           {"choices": PERMISSIONS}, scope="agent"),
    Option("--timeout", "kill the CLI and all its processes after S seconds",
           {"metavar": "S", "type": positive_float}, scope="agent"),
)  # fmt: skip

RUN_OPTIONS: tuple[Option, ...] = (
    *PROVIDER_OPTIONS,
    Option("--workspace",
           "the folder the agent works in (required by the command; in a notebook the "
           "default is the current folder)",
           {"metavar": "DIR"},
           per_face={"command": {"required": True}, "notebook": {"default": "."}}),
    Option("--verify", "success when FILE contains TEXT", {"metavar": '"FILE contains TEXT"'},
           scope="loop", exclusive="verify"),
    Option("--verify-cmd", "success when COMMAND exits 0 in the workspace",
           {"metavar": '"COMMAND"'}, scope="loop", exclusive="verify"),
    Option("--max-steps",
           "model turns allowed, at least 1 (default 12; with --agent, the CLI's own turn "
           "limit where it has one)",
           {"metavar": "N", "type": positive_int}),
    Option("--max-seconds", "wall-clock budget in seconds (default: none)",
           {"metavar": "S", "type": positive_float}, scope="loop"),
    Option("--max-cost", "cost budget in US dollars, from the attempts' prices (default: "
           "none); ends the run cost_budget",
           {"metavar": "USD", "type": positive_float}, scope="loop"),
    *PRICE_OPTIONS,
    STORE,
    Option("--allow-write",
           "workspace paths the agent may write without asking (repeat the flag, or "
           "separate globs with commas)",
           {"metavar": "GLOB", "type": listed(), "action": "extend", "default": []},
           scope="loop"),
    APPROVAL_TIMEOUT,
    *MCP_OPTIONS,
    OTEL_ENDPOINT,
    *_AGENT_OPTIONS,
    *OUTPUT_OPTIONS,
)  # fmt: skip
"""The options of ``harnessnb run`` and ``%harness run`` (TASK is each face's own)."""

RESUME_OPTIONS: tuple[Option, ...] = (
    *PROVIDER_OPTIONS,
    *PRICE_OPTIONS,
    STORE,
    APPROVAL_TIMEOUT,
    *MCP_OPTIONS,
    OTEL_ENDPOINT,
    *OUTPUT_OPTIONS,
)
"""The options of ``harnessnb resume`` and ``%harness resume`` (after RUN_ID)."""

_AGENT_GROUP = (
    "coding-agent CLI",
    "hand the task to an installed CLI instead of harnessnb's own loop",
)


def add_options(
    parser: argparse.ArgumentParser, options: Iterable[Option], face: Face, *, mark: bool = True
) -> None:
    """Add the ``options`` that belong to ``face`` to ``parser``, in order.

    ``mark=False`` leaves out "(notebook only)" where the other face has no such
    subcommand at all (``%harness replay``).
    """
    groups: dict[str, Any] = {}

    def home(option: Option) -> Any:
        target: Any = parser
        if option.scope == "agent":
            if "agent" not in groups:
                groups["agent"] = parser.add_argument_group(*_AGENT_GROUP)
            target = groups["agent"]
        if option.exclusive:
            key = f"x:{option.exclusive}"
            if key not in groups:
                groups[key] = target.add_mutually_exclusive_group()
            target = groups[key]
        return target

    for option in options:
        if option.only not in (None, face):
            continue
        spec = {**option.spec, **option.per_face.get(face, {})}
        text = option.marked_help() if mark else option.help
        home(option).add_argument(option.flag, help=text, **spec)


# ------------------------------------------------------------------ validation


def _given(args: argparse.Namespace, scope: str) -> list[str]:
    """The flags of ``scope`` given in ``args``, in the order of ``RUN_OPTIONS``."""
    given = []
    for option in RUN_OPTIONS:
        value = getattr(args, option.dest, None)
        if option.scope == scope and value is not None and value is not False and value != []:
            given.append(option.flag)
    return given


def check_provider_options(args: argparse.Namespace) -> None:
    """``--provider local`` needs ``--base-url``.

    Raises:
        ConfigError: it has none.
    """
    if args.provider == "local" and not args.base_url:
        raise ConfigError(
            "--provider local needs --base-url (an OpenAI-compatible server, e.g. "
            "http://127.0.0.1:8000/v1)",
            code="CONFIG_BASE_URL",
        )


def provider_from(args: argparse.Namespace) -> tuple[Provider, str]:
    """The provider ``--provider``, ``--model``, ``--base-url`` and ``--fallback`` name,
    and the note saying why it was chosen (``choose_provider``)."""
    return choose_provider(args.provider, **_provider_words(args))


def resume_provider_from(
    args: argparse.Namespace, recorded: Mapping[str, Any] | None
) -> tuple[Provider, str]:
    """The provider to resume the run stored as ``recorded`` with, the same flags
    given (``provider_for_resume``), and its note."""
    return provider_for_resume(recorded, args.provider, **_provider_words(args))


def _provider_words(args: argparse.Namespace) -> ProviderWords:
    return {
        "model": args.model,
        "base_url": args.base_url,
        "fallbacks": args.fallback,
        "api": args.api,
    }


def check_run_options(args: argparse.Namespace) -> None:
    """What argparse cannot check about run options, in the words both faces use.

    Raises:
        ConfigError: an option of the loop with ``--agent`` or of ``--agent`` without
            it, ``--provider local`` without ``--base-url``, a workspace that is not a
            folder, or a ``--verify``/``--verify-cmd`` text that does not parse.
    """
    if args.agent:
        loop_only = _given(args, "loop")
        if loop_only:
            hint = " (use --permission edit)" if loop_only[0] == "--allow-write" else ""
            raise ConfigError(
                f"{loop_only[0]} applies to harnessnb's own loop, not to --agent {args.agent}{hint}"
            )
    else:
        agent_only = _given(args, "agent")
        if agent_only:
            raise ConfigError(f"{agent_only[0]} applies only with --agent")
        check_provider_options(args)
        _verification(args)
    if not os.path.isdir(args.workspace):
        raise ConfigError(f"--workspace {args.workspace!r} is not a folder that exists")


# ------------------------------------------------------------------ meaning


def _verification(args: argparse.Namespace) -> Any:
    if args.verify:
        return parse_verify(args.verify)
    if args.verify_cmd:
        return parse_verify_cmd(args.verify_cmd)
    return None


def contract_from(args: argparse.Namespace, task: str) -> TaskContract:
    """The contract of a loop run from its checked options (default budgets where not given).

    Raises:
        ConfigError: from ``TaskContract`` or the ``--verify`` text.
    """
    from ..loop._contract import TaskContract

    budgets: dict[str, Any] = {"max_time_s": args.max_seconds}
    if getattr(args, "max_cost", None) is not None:
        budgets["max_cost_usd"] = args.max_cost
    if args.max_steps is not None:
        budgets["max_steps"] = args.max_steps
    return TaskContract(task, args.workspace, verification=_verification(args), **budgets)


def prices_from(
    args: argparse.Namespace, namespace: Mapping[str, Any] | None = None
) -> Prices | None:
    """The run's ``prices=``: None (the default prices) without ``--price``/``--prices``.

    ``--prices VAR`` is looked up in ``namespace`` (a notebook's variables); each
    ``--price`` adds or overrides its model on top, keeping the variable's
    ``local_free``. A model given twice with ``--price`` is refused.

    Raises:
        ConfigError: a model priced twice, or ``--prices`` naming no variable or one
            that is not an ``hn.Prices``.
    """
    from ..providers._prices import Prices

    given: dict[str, tuple[float, float]] = {}
    for model, pair in getattr(args, "price", None) or []:
        if model in given:
            raise ConfigError(f"--price: {model!r} is priced twice; give each model once")
        given[model] = pair
    name = getattr(args, "prices", None)
    if name is None:
        return Prices(given) if given else None
    value = (namespace or {}).get(name, _MISSING)
    if value is _MISSING:
        raise ConfigError(
            f"--prices: {name!r} is not defined in the notebook; define it first, e.g. "
            f"{name} = hn.Prices({{'my-model': (0.5, 1.5)}})"
        )
    if not isinstance(value, Prices):
        raise ConfigError(
            f"--prices: {name!r} is a {type(value).__name__}, not an hn.Prices; e.g. "
            f"{name} = hn.Prices({{'my-model': (0.5, 1.5)}})"
        )
    if not given:
        return value
    return Prices({**value.models, **given}, local_free=value.local_free)


_MISSING = object()


def policy_from(args: argparse.Namespace, layer: str) -> Policy:
    """``Policy.default()``, with a ``layer`` allowing the ``--allow-write`` globs and
    the ``--verify-cmd`` command.

    The person typed the check command themselves, which is their approval to run it:
    without this, exec's default "ask" would refuse it wherever no approver is there
    (the command, a notebook without widgets) and the run could never be verified. The
    rule allows that exact command line only; any other command the agent tries is
    still asked about.
    """
    from ..rules._policy import Policy, exec_target

    policy = Policy.default()
    if args.allow_write:
        policy = policy.layer(layer)
        for glob in args.allow_write:
            policy = policy.allow_write(glob)
    if getattr(args, "verify_cmd", None):
        argv = parse_verify_cmd(args.verify_cmd).argv
        policy = policy.layer(layer).allow_exec(_literal(exec_target(argv)))
    return policy


def _literal(text: str) -> str:
    """A glob pattern that matches ``text`` and nothing else."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def absent_store(path: str | None) -> str | None:
    """For a command that only reads the store (``--store PATH``, None: the default):
    the words saying it is not there, or None when it is. Reading must not create it,
    nor its lock file."""
    from ..store._open import default_store_path

    path = path or default_store_path()
    if path == ":memory:" or os.path.lexists(path):
        return None
    return f"no store at {path}: nothing has been recorded there"


def approver_from(args: argparse.Namespace) -> Approver | None:
    """The command's ``--approval-timeout S``: ask on the terminal, S seconds at most;
    else None (an act that needs approval is refused, with a hint saying how to allow
    it)."""
    if args.approval_timeout is None:
        return None
    from ..tools._approval import PromptApprover

    return PromptApprover(args.approval_timeout)


def agent_from(args: argparse.Namespace) -> AgentCLI:
    """The coding-agent CLI driver ``--agent`` names, with its options.

    Raises:
        ConfigError: the driver refuses an option.
    """
    from ..agents import driver

    return driver(
        args.agent,
        model=args.model,
        permission=args.permission or "read_only",
        timeout_s=args.timeout,
        max_turns=args.max_steps,
    )
