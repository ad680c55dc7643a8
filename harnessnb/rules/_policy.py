"""The permission policy: what an agent may read, write, run and dial.

A ``Policy`` is an ordered list of named layers of rules plus one default effect per
act. It is a pure value: every builder method returns a new policy.

Acts and their targets:

* ``read`` / ``write``: a workspace path, relative, ``/``-separated (``src/app.py``);
* ``exec``: a command line (``shlex.join(argv)``), ``tool:NAME`` for a user tool
  with side effects, or ``mcp:SERVER/TOOL`` for a tool of an MCP server (every one is
  judged, see ``tools/_gate.py``);
* ``net``: a host, optionally ``host:port``.

Patterns are globs: ``*`` matches any run of characters, ``/`` included, and ``?``
one character. Paths are matched in two ways, by effect, so that a name that could be
a file or a folder never widens access by surprise:

* ``deny`` and ``ask`` rules read broadly: they ignore case (a case-insensitive
  filesystem opens ``.ENV`` as ``.env``) and match any run of whole components at any
  depth, and so cover everything beneath a folder they match: ``deny_read("private")``
  denies ``private``, ``private/key.txt`` and ``a/private/x``; ``.aws/credentials``
  denies ``home/.aws/credentials``.
* ``allow`` rules read narrowly: the whole relative path or its basename, case as
  written (``allow_write("src/*")`` for a folder's files; ``allow_write("*.md")``
  does not allow ``x.md/run.sh``).

An exec pattern matches a command line or its program name (so ``deny_exec("rm")``
denies ``rm -rf x``), case as written. An exec target is judged by what will run
(``rules/_exec.py`` reads the argv):

* every program it starts is judged as its own command line, and the strictest
  verdict wins: known wrappers (``env``, ``nice``, ``nohup``, ``timeout``, ``stdbuf``,
  ``xargs``, ``sudo``, ``setsid``, ``time``, ``busybox``/``toybox`` applets, and
  ``find -exec``) are read with their options, nested too, so ``deny_exec("rm")``
  denies ``env rm -rf x`` and ``nice -n 5 busybox rm x``, and ``allow_exec("pytest*")``
  alone leaves ``timeout 10 pytest`` at the exec default (``timeout`` runs too);
* an interpreter running inline code (``sh -c``, ``bash -c``, ``python -c``,
  ``node -e``, ``perl -e``, ``awk 'prog'``...) can run anything, so it is judged as
  the interpreter itself and allowed only by an allow rule naming it without
  wildcards (``allow_exec("python3")``, or the exact command line). Allowed by a
  wildcard (``allow_exec("*")``), it asks; allowed by the default, it asks while any
  exec rule denies or asks (``Policy.permissive()`` alone allows it: its commands run
  in the sandbox). A wrapper with options that cannot be read asks the same way, even
  when allowed by name, and every word after it is tried against the deny rules.

A ``tool:`` or ``mcp:`` target is a name, not a command line: a pattern matches the
whole name, narrowly (``allow_exec("mcp:git/*")`` allows every tool of the server
``git``, ``deny_exec("mcp:*/git_reset")`` denies that tool on any server); a command
rule (``deny_exec("git_reset")``) never matches one, and such rules do not count as
limiting commands (see the inline-code rule above).

A net pattern matches ``host:port`` or the bare host, case-insensitively.

The secrets layer (``Policy.SECRET_PATTERNS``, in ``default()`` and ``permissive()``)
denies read and write of dotenv files, cloud and cluster credentials, SSH private keys,
key and certificate stores and tools' login files, at any depth and in any case.
One carve-out (``Policy.SECRET_EXCEPTIONS``): its ``.env.*`` rule leaves out the dotenv
templates ``.env.example``, ``.env.sample``, ``.env.template`` and ``.env.dist``, by
exact name only (no case tricks, not through a hard link or symlink to a secret); the
table and the carve-out's terms are in ``rules/_secret_files.py``.

Evaluation (``explain``): a matching deny in any layer wins, then a matching ask, then
a matching allow; the first match in layer order names the rule and layer. With no
match the act's default decides and the verdict's rule and layer are ``None``.
Specificity never matters: a deny cannot be carved out by a narrower allow.
"""

from __future__ import annotations

import dataclasses
import posixpath
import shlex
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any, ClassVar

from ._errors import ConfigError
from ._exec import Program, programs
from ._rule import NAMED_EXEC, Act, EffectName, Rule, literal, normalise_path
from ._secret_files import (
    SECRET_EXCEPTIONS,
    SECRET_PATTERNS,
    SECRETS_LAYER,
    SECRETS_VERSION,
    dotenv_template,
)

__all__ = ["ACTS", "EFFECTS", "Layer", "Policy", "Rule", "Verdict", "exec_target"]

ACTS: tuple[Act, ...] = ("read", "write", "exec", "net")
# Ordered loosest to strictest; the index is the strictness rank.
EFFECTS: tuple[EffectName, ...] = ("allow", "ask", "deny")

_DEFAULTS: dict[Act, EffectName] = {"read": "allow", "write": "ask", "exec": "ask", "net": "deny"}
# Verdicts that no layer's rule gave, but how an exec target is read.
_BUILT_IN = "built-in"
# Verdicts a policy keeps (see ``Policy._explain_one``).
_VERDICTS_KEPT = 4096
_HOSTED_KEPT = 64
# ``Policy.default()``, made once (immutable).
_default: Policy | None = None
_USER_LAYER = "user"
_FORMAT_VERSION = 2  # 2: the built-in secrets layer by name and version


def _rank(effect: str) -> int:
    return EFFECTS.index(_check_effect(effect))


def _check_act(act: str) -> Act:
    if act not in ACTS:
        raise ConfigError(f"unknown act {act!r}; expected one of {', '.join(ACTS)}")
    return act


def _check_effect(effect: str) -> EffectName:
    if effect not in EFFECTS:
        raise ConfigError(f"unknown effect {effect!r}; expected one of {', '.join(EFFECTS)}")
    return effect


@dataclasses.dataclass(frozen=True)
class Layer:
    """A named, ordered group of rules (``secrets``, ``provider``, ``app``...)."""

    name: str
    rules: tuple[Rule, ...] = ()


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the policy decided for one act on one target, and which rule decided it.

    ``rule`` is readable text (``"deny write .env"``) and ``layer`` the layer's name;
    both are ``None`` when the act's default decided.
    """

    effect: EffectName
    act: str
    target: str
    rule: str | None = None
    layer: str | None = None

    @property
    def allowed(self) -> bool:
        return self.effect == "allow"

    @property
    def denied(self) -> bool:
        return self.effect == "deny"

    def reason(self) -> str:
        """Why, in words: ``rule 'deny write .env' in layer 'secrets'`` or the default."""
        if self.rule is None:
            return f"the default for {self.act}"
        return f"rule '{self.rule}' in layer '{self.layer}'"

    def __str__(self) -> str:
        return f"{self.effect} {self.act} {self.target} ({self.reason()})"


class Policy:
    """Ordered named layers of rules plus per-act defaults. Immutable.

    ``Policy()`` has the bare defaults (read allow, write ask, exec ask, net deny) and
    no rules; ``Policy.default()`` adds the ``secrets`` layer. Builder methods return a
    new policy; rules go into the layer last chosen with ``.layer(name)`` (``user``
    when none was chosen).
    """

    __slots__ = ("_by_act", "_current", "_defaults", "_hosted", "_layers", "_verdicts")

    #: The secrets layer's patterns, denied for read and write (see the module docstring).
    SECRET_PATTERNS: ClassVar[tuple[str, ...]] = SECRET_PATTERNS
    #: File names the secrets layer's ``.env.*`` leaves out (dotenv templates).
    SECRET_EXCEPTIONS: ClassVar[frozenset[str]] = SECRET_EXCEPTIONS

    def __init__(
        self,
        layers: Sequence[Layer] = (),
        defaults: Mapping[Any, str] | None = None,
        *,
        current: str | None = None,
    ) -> None:
        merged = dict(_DEFAULTS)
        for act, effect in (defaults or {}).items():
            merged[_check_act(act)] = _check_effect(effect)
        self._layers: tuple[Layer, ...] = tuple(layers)
        self._defaults: dict[Act, EffectName] = merged
        self._current = current
        # Immutable, so a verdict never changes: kept per (act, target), bounded. A
        # step asks the same few questions again and again (list_dir, read_file...).
        self._by_act: dict[str, list[tuple[str, Rule]]] = {}
        self._verdicts: dict[tuple[str, str], Verdict] = {}
        # ``with_provider_hosts`` per hosts: every run of a provider derives the same
        # policy, and keeps its verdicts from one run to the next. Bounded.
        self._hosted: dict[tuple[str, ...], Policy] = {}

    # ------------------------------------------------------------ presets

    @classmethod
    def default(cls) -> Policy:
        """Read allow, write ask, exec ask, net deny, and the ``secrets`` layer."""
        if cls is not Policy:
            return cls([_secrets_layer()])
        global _default
        if _default is None:  # immutable: one for the process, its verdicts shared
            _default = cls([_secrets_layer()])
        return _default

    @classmethod
    def permissive(cls, *, secrets: bool = True) -> Policy:
        """Every act allowed. The ``secrets`` layer stays unless ``secrets=False``.

        Secrets stay by default because a key read into a prompt has left the machine;
        workspace containment holds either way (it is not a policy rule).
        """
        defaults = dict.fromkeys(ACTS, "allow")
        return cls([_secrets_layer()] if secrets else [], defaults)

    # ------------------------------------------------------------ reading

    @property
    def layers(self) -> tuple[Layer, ...]:
        return self._layers

    @property
    def defaults(self) -> dict[str, str]:
        return {str(act): str(effect) for act, effect in self._defaults.items()}

    def rules(self) -> list[tuple[str, Rule]]:
        """Every rule with its layer name, in evaluation order."""
        return [(layer.name, rule) for layer in self._layers for rule in layer.rules]

    def explain(self, act: str, target: str) -> Verdict:
        """The verdict for ``act`` on ``target``: deny, then ask, then allow, then default.

        An exec target is judged program by program (see the module docstring).
        """
        act = _check_act(act)
        if act == "exec" and not target.startswith(NAMED_EXEC):
            return self._explain_exec(target)
        return self._explain_one(act, target)

    def _explain_one(self, act: Act, target: str) -> Verdict:
        verdict = self._verdicts.get((act, target))
        if verdict is None:
            verdict = self._judge(act, target)
            if len(self._verdicts) >= _VERDICTS_KEPT:
                self._verdicts.clear()
            self._verdicts[act, target] = verdict
        return verdict

    def _judge(self, act: Act, target: str) -> Verdict:
        rules = self._by_act.get(act)
        if rules is None:
            rules = self._by_act[act] = [(n, r) for n, r in self.rules() if r.act == act]
        for effect in ("deny", "ask", "allow"):
            for layer_name, rule in rules:
                if (
                    rule.effect == effect
                    and rule.matches(target)
                    and not dotenv_template(layer_name, rule.pattern, normalise_path(target))
                ):
                    return Verdict(rule.effect, act, target, str(rule), layer_name)
        return Verdict(self._defaults[act], act, target)

    def _explain_exec(self, target: str) -> Verdict:
        """The strictest verdict over every program ``target`` starts."""
        try:
            argv = shlex.split(target)
        except ValueError:  # not a shlex.join: read it word by word
            argv = target.split()
        exact = self._names(target, ())
        worst: Verdict | None = None
        for program in reversed(programs(argv) or [Program(tuple(argv))]):
            verdict = self._judge_program(program, target, exact=exact)
            if verdict is None:
                continue
            if worst is None or _rank(verdict.effect) > _rank(worst.effect):
                worst = verdict
            elif verdict.effect == worst.effect and worst.rule is None:
                worst = verdict  # a rule says more than a default
        worst = worst or self._explain_one("exec", target)
        return dataclasses.replace(worst, target=target)

    def _judge_program(self, program: Program, target: str, *, exact: bool) -> Verdict | None:
        """One program's verdict; None for a guessed program no deny rule matches."""
        line = shlex.join(program.argv)
        verdict = self._explain_one("exec", line)
        if program.guessed:
            return verdict if verdict.denied else None
        if verdict.denied or (verdict.effect == "ask" and verdict.rule is not None):
            return verdict
        if exact:  # the exact command line is allowed, wrappers and code included
            return Verdict("allow", "exec", line, *self._exact_rule(target))
        # What runs cannot be told: an allow default lets it by only while no exec rule
        # denies or asks, and an allow rule only when it names the interpreter.
        unclear = program.opaque or program.inline
        if not (unclear and verdict.allowed) or (verdict.rule is None and not self._limits_exec()):
            return verdict
        if program.inline and self._names(line, program.argv[:1]):
            return verdict
        why = "options not understood" if program.opaque else "inline code"
        return _built_in_ask(line, f"{program.argv[0]} with {why}")

    def _names(self, line: str, program: Sequence[str]) -> bool:
        """True when an exec allow rule names ``line`` or the program, without wildcards."""
        names = {line, *program, *(posixpath.basename(p) for p in program)}
        return any(
            rule.act == "exec" and rule.effect == "allow" and literal(rule.pattern) in names
            for _, rule in self.rules()
        )

    def _exact_rule(self, target: str) -> tuple[str | None, str | None]:
        for layer_name, rule in self.rules():
            if rule.act == "exec" and rule.effect == "allow" and literal(rule.pattern) == target:
                return str(rule), layer_name
        return None, None

    def _limits_exec(self) -> bool:
        """True when an exec rule denies or asks for a command (not a ``tool:``/``mcp:``)."""
        return any(
            rule.act == "exec"
            and rule.effect != "allow"
            and not rule.pattern.startswith(NAMED_EXEC)
            for _, rule in self.rules()
        )

    # ------------------------------------------------------------ building

    def layer(self, name: str) -> Policy:
        """A policy whose following rules go into layer ``name`` (appended if new)."""
        if not name:
            raise ConfigError("a policy layer needs a name")
        layers = self._layers
        if all(layer.name != name for layer in layers):
            layers = (*layers, Layer(name))
        return Policy(layers, self._defaults, current=name)

    def rule(self, act: str, effect: str, pattern: str) -> Policy:
        """Add one rule to the current layer."""
        new = Rule(_check_act(act), _check_effect(effect), _check_pattern(act, pattern))
        name = self._current or _USER_LAYER
        layers = list(self._layers)
        for i, layer in enumerate(layers):
            if layer.name == name:
                layers[i] = Layer(name, (*layer.rules, new))
                break
        else:
            layers.append(Layer(name, (new,)))
        return Policy(layers, self._defaults, current=name)

    def with_default(self, act: str, effect: str) -> Policy:
        """Set the default effect for one act (a builder step, not a merge)."""
        defaults = dict(self._defaults)
        defaults[_check_act(act)] = _check_effect(effect)
        return Policy(self._layers, defaults, current=self._current)

    def allow_read(self, pattern: str) -> Policy:
        return self.rule("read", "allow", pattern)

    def ask_read(self, pattern: str) -> Policy:
        return self.rule("read", "ask", pattern)

    def deny_read(self, pattern: str) -> Policy:
        return self.rule("read", "deny", pattern)

    def allow_write(self, pattern: str) -> Policy:
        return self.rule("write", "allow", pattern)

    def ask_write(self, pattern: str) -> Policy:
        return self.rule("write", "ask", pattern)

    def deny_write(self, pattern: str) -> Policy:
        return self.rule("write", "deny", pattern)

    def allow_exec(self, pattern: str) -> Policy:
        return self.rule("exec", "allow", pattern)

    def ask_exec(self, pattern: str) -> Policy:
        return self.rule("exec", "ask", pattern)

    def deny_exec(self, pattern: str) -> Policy:
        return self.rule("exec", "deny", pattern)

    def allow_net(self, host: str) -> Policy:
        return self.rule("net", "allow", host)

    def ask_net(self, host: str) -> Policy:
        return self.rule("net", "ask", host)

    def deny_net(self, host: str) -> Policy:
        return self.rule("net", "deny", host)

    # ------------------------------------------------------------ combining

    def merge(self, other: Policy) -> Policy:
        """This policy overlaid with ``other``: layers concatenated, defaults stricter-of.

        ``other`` may widen (its allow rules apply where nothing denies or asks) but it
        can never undo a deny or an ask of this policy, since deny and ask beat allow
        across all layers, and each act's default is the stricter of the two. Layers of
        the same name are joined (this policy's rules first).
        """
        layers = list(self._layers)
        for incoming in other._layers:
            for i, layer in enumerate(layers):
                if layer.name == incoming.name:
                    layers[i] = Layer(layer.name, (*layer.rules, *incoming.rules))
                    break
            else:
                layers.append(incoming)
        defaults = {act: max(self._defaults[act], other._defaults[act], key=_rank) for act in ACTS}
        return Policy(layers, defaults, current=other._current or self._current)

    def with_provider_hosts(self, hosts: Iterable[str]) -> Policy:
        """Allow net to ``hosts`` in an implicit ``provider`` layer beneath this policy's.

        The layer goes first, so it only names the verdict when no caller rule matched;
        an explicit ``deny_net`` (or ``ask_net``) of a provider host still wins.
        """
        key = tuple(hosts)
        derived = self._hosted.get(key)
        if derived is not None:
            return derived
        rules = tuple(Rule("net", "allow", h.lower()) for h in dict.fromkeys(key) if h)
        if not rules:
            return self
        kept = [layer for layer in self._layers if layer.name != "provider"]
        derived = Policy([Layer("provider", rules), *kept], self._defaults, current=self._current)
        if len(self._hosted) >= _HOSTED_KEPT:
            self._hosted.clear()
        self._hosted[key] = derived
        return derived

    def at_least_as_strict_as(self, other: Policy) -> bool:
        """True when this policy allows nothing ``other`` would not (a sound check).

        Sufficient, not necessary: every deny and ask rule of ``other`` is here (same
        act, effect-or-stricter and pattern), every allow rule here is in ``other``,
        every ask rule here is in ``other`` or cannot loosen a deny default there, and
        each default here is at least as strict. Resume uses it so that a policy
        handed in later never silently drops a boundary the run was started under.
        """
        if any(_rank(self._defaults[a]) < _rank(other._defaults[a]) for a in ACTS):
            return False
        mine = {(r.act, r.effect, r.pattern) for _, r in self.rules()}
        theirs = {(r.act, r.effect, r.pattern) for _, r in other.rules()}
        for act, effect, pattern in theirs:
            if effect == "deny" and (act, "deny", pattern) not in mine:
                return False
            if effect == "ask" and not {(act, "ask", pattern), (act, "deny", pattern)} & mine:
                return False
        for act, effect, pattern in mine:
            if effect == "allow" and (act, "allow", pattern) not in theirs:
                return False
            if (
                effect == "ask"
                and other._defaults[act] == "deny"
                and not {(act, "ask", pattern), (act, "deny", pattern)} & theirs
            ):
                return False
        return True

    # ------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, stored with a run so resume sees the same boundary.

        The built-in secrets layer, unchanged, is stored by name and table version
        (``{"name": "secrets", "builtin": 1}``, not its 66 rules: 4 KB a run);
        ``from_dict`` expands it. A secrets layer with rules added or removed is stored
        rule by rule like any other.
        """
        return {
            "version": _FORMAT_VERSION,
            "defaults": dict(self._defaults),
            "layers": [_layer_dict(layer) for layer in self._layers],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        """Rebuild a policy from ``to_dict()`` output; bad input is a ``ConfigError``.

        A stored ``secrets`` layer gains the patterns the table has added since, so a
        run resumed after an upgrade is never guarded by an older, shorter table; one
        stored by reference is the current table.
        """
        try:
            layers = [_layer_from(item) for item in data["layers"]]
            return cls([_current_secrets(layer) for layer in layers], data["defaults"])
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"not a stored policy: {exc!r}") from exc

    # ------------------------------------------------------------ display

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Policy):
            return NotImplemented
        return self._layers == other._layers and self._defaults == other._defaults

    def __hash__(self) -> int:
        return hash((self._layers, tuple(sorted(self._defaults.items()))))

    def __repr__(self) -> str:
        names = ",".join(layer.name for layer in self._layers)
        defaults = " ".join(f"{a}={e}" for a, e in self._defaults.items())
        return f"Policy(layers=[{names}], rules={len(self.rules())}, {defaults})"

    def __str__(self) -> str:
        rows = [(name, r.act, r.effect, r.pattern) for name, r in self.rules()]
        rows += [("(default)", act, effect, "*") for act, effect in self._defaults.items()]
        header = ("layer", "act", "effect", "pattern")
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, [*widths, 0], strict=True))
            for row in [header, *rows]
        ]
        return "\n".join(line.rstrip() for line in lines)


def exec_target(argv: Sequence[str]) -> str:
    """The ``exec`` target for an argv: ``shlex.join``, so an approver sees it unambiguously."""
    return shlex.join(argv)


def _check_pattern(act: str, pattern: str) -> str:
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"a {act} rule needs a non-empty pattern")
    return normalise_path(pattern) if act in ("read", "write") else pattern


def _built_in_ask(line: str, why: str) -> Verdict:
    return Verdict("ask", "exec", line, f"ask exec {why}", _BUILT_IN)


def _layer_dict(layer: Layer) -> dict[str, Any]:
    if layer == _secrets_layer():  # the built-in table, unchanged: by reference
        return {"name": layer.name, "builtin": SECRETS_VERSION}
    # Not dataclasses.asdict: its deep copy made this 2% of a one-step run.
    rules = [{"act": r.act, "effect": r.effect, "pattern": r.pattern} for r in layer.rules]
    return {"name": layer.name, "rules": rules}


def _layer_from(item: Mapping[str, Any]) -> Layer:
    name = str(item["name"])
    if "builtin" in item:
        version = item["builtin"]
        if name != SECRETS_LAYER or type(version) is not int or version < 1:
            raise ConfigError(f"not a stored policy: unknown built-in layer {item!r}")
        if version > SECRETS_VERSION:
            raise ConfigError(
                f"the stored secrets table is version {version}, newer than "
                f"{SECRETS_VERSION}: upgrade harnessnb to read it"
            )
        return _secrets_layer()
    checked = ((_check_act(r["act"]), _check_effect(r["effect"]), r) for r in item["rules"])
    return Layer(name, tuple(Rule(a, e, _check_pattern(a, r["pattern"])) for a, e, r in checked))


def _current_secrets(layer: Layer) -> Layer:
    if layer.name != SECRETS_LAYER or layer is _secrets_layer():
        return layer
    missing = [rule for rule in _secrets_layer().rules if rule not in layer.rules]
    return Layer(layer.name, (*layer.rules, *missing))


@cache
def _secrets_layer() -> Layer:
    # One shared (immutable) object: telling it unchanged in ``to_dict`` is cheap.
    rules = [Rule(act, "deny", p) for act in ("read", "write") for p in SECRET_PATTERNS]
    return Layer(SECRETS_LAYER, tuple(rules))
