"""What an argv will run: the programs behind known wrappers, and inline code.

A policy rule on a command applies to the program that runs, not only to the first
word: ``env FOO=1 rm -rf x``, ``nice -n 5 rm``, ``timeout 10 rm``, ``busybox rm`` and
``sudo -u me env rm`` all run ``rm``. ``programs(argv)`` lists every program an argv
starts, outermost first, each a ``Program``:

* a known wrapper (``env``, ``nice``, ``nohup``, ``timeout``, ``stdbuf``, ``xargs``,
  ``sudo``, ``setsid``, ``time``; ``busybox``/``toybox`` applets) is read with its own
  options, so what follows them is the next program; wrappers nest;
* ``find ... -exec CMD ... ;`` (and ``-execdir``, ``-ok``, ``-okdir``) also runs CMD;
* an option of a wrapper this module does not know makes the wrapper ``opaque``: what
  runs cannot be told, so every later word is offered as a ``guessed`` program (for
  deny rules only);
* an interpreter given code in its arguments (``sh -c``, ``bash -c``, ``python -c``,
  ``node -e``, ``perl -e``, ``ruby -e``, ``php -r``, ``deno eval``, ``awk`` without
  ``-f``, ``pwsh -Command``, ...) is ``inline``: the code can run anything.

Pure string work; the policy (``rules/_policy.py``) turns programs into a verdict.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Sequence

__all__ = ["Program", "program_name", "programs"]

_MAX_DEPTH = 16  # wrappers nest; a deeper argv is judged opaque there


@dataclasses.dataclass(frozen=True)
class Program:
    """One program an argv starts: its own argv and how far it can be read."""

    argv: tuple[str, ...]
    inline: bool = False  # an interpreter running code given in its arguments
    opaque: bool = False  # a wrapper with options this module cannot read
    guessed: bool = False  # a word after an opaque wrapper that may be a program


@dataclasses.dataclass(frozen=True)
class _Options:
    """A wrapper's option syntax: short flags, short flags with a value, long ones."""

    flags: str = ""
    valued: str = ""
    long_flags: frozenset[str] = frozenset()
    long_valued: frozenset[str] = frozenset()
    numeric: bool = False  # ``nice -10``: a dash and digits is an option
    assignments: bool = False  # ``env``/``sudo``: NAME=value words before the command
    positionals: int = 0  # ``timeout DURATION``: words before the command


def _fs(names: str) -> frozenset[str]:
    return frozenset(names.split())


_WRAPPERS: dict[str, _Options] = {
    "env": _Options(
        flags="0iv",
        valued="uCS",
        long_flags=_fs("ignore-environment null debug list-signal-handling"),
        long_valued=_fs("unset chdir split-string"),
        assignments=True,
    ),
    "nice": _Options(valued="n", long_valued=_fs("adjustment"), numeric=True),
    "nohup": _Options(),
    "timeout": _Options(
        flags="v",
        valued="ks",
        long_flags=_fs("preserve-status foreground verbose"),
        long_valued=_fs("kill-after signal"),
        positionals=1,
    ),
    "stdbuf": _Options(valued="ioe", long_valued=_fs("input output error")),
    "xargs": _Options(
        flags="0prtxo",
        valued="adEILnPs",
        long_flags=_fs("null interactive no-run-if-empty verbose exit open-tty"),
        long_valued=_fs(
            "arg-file delimiter max-args max-procs max-chars max-lines process-slot-var"
        ),
    ),
    "sudo": _Options(
        flags="AbEHiKknPSsv",
        valued="CDghpRrTtUu",
        long_flags=_fs(
            "askpass background preserve-env set-home login remove-timestamp "
            "reset-timestamp non-interactive preserve-groups stdin shell"
        ),
        long_valued=_fs(
            "close-from chdir group host prompt chroot role type command-timeout other-user user"
        ),
        assignments=True,
    ),
    "setsid": _Options(flags="cfw", long_flags=_fs("ctty fork wait")),
    "time": _Options(
        flags="apqv",
        valued="fo",
        long_flags=_fs("append portability quiet verbose"),
        long_valued=_fs("format output"),
    ),
}
_APPLET_HOSTS = frozenset({"busybox", "toybox"})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")

# Interpreters and the options that hand them code: short letters (clusters such as
# ``-ec`` count), long options, and short letters that take a value (so ``-W error``
# is not read as code).
_SHELL = ("c", (), "o")
# PowerShell's options are words (any case, one dash), never letter clusters.
_PWSH_CODE = ("c", "e", "ec", "command", "encodedcommand", "commandwithargs", "cwa")
_INTERPRETERS: dict[str, tuple[str, tuple[str, ...], str]] = {
    **dict.fromkeys(("sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish"), _SHELL),
    **dict.fromkeys(("csh", "tcsh"), _SHELL),
    "python": ("c", (), "WXmQ"),
    "pypy": ("c", (), "WXmQ"),
    "node": ("ep", ("eval", "print"), "r"),
    "nodejs": ("ep", ("eval", "print"), "r"),
    "bun": ("ep", ("eval", "print"), "r"),
    "perl": ("eE", (), "IMmiFCdDlx0"),
    "ruby": ("e", (), "ICEFKTWxr0i"),
    "php": ("rRBE", (), "cdfzt"),
    "lua": ("e", (), "l"),
    "luajit": ("e", (), "lbj"),
    "rscript": ("e", (), ""),
    "r": ("e", (), ""),
    "osascript": ("e", (), "l"),
    "tclsh": ("", (), ""),
    **dict.fromkeys(("pwsh", "powershell"), ("", _PWSH_CODE, "")),
}
_AWKS = frozenset({"awk", "gawk", "mawk", "nawk"})
_VERSIONED = re.compile(r"(python|pypy|perl|ruby|php|lua|node)[0-9.]*")


def program_name(word: str) -> str:
    """A program's bare name: basename, lower case, no ``.exe``, no version suffix."""
    name = posixpath.basename(word.replace("\\", "/")).lower().removesuffix(".exe")
    versioned = _VERSIONED.fullmatch(name)
    return versioned.group(1) if versioned else name


def programs(argv: Sequence[str]) -> list[Program]:
    """Every program ``argv`` starts, outermost first (see the module docstring)."""
    found: list[Program] = []
    rest = tuple(argv)
    for _ in range(_MAX_DEPTH):
        if not rest:
            return found
        name = program_name(rest[0])
        if name == "find":
            found.extend(_find_execs(rest))
        start = _command_start(name, rest)
        if start is None:  # opaque: guess every later word
            found.append(Program(rest, opaque=True))
            found.extend(Program(rest[i:], guessed=True) for i in range(1, len(rest)))
            return found
        if start == 0 or start >= len(rest):  # not a wrapper, or a wrapper alone
            found.append(Program(rest, inline=_runs_inline_code(name, rest)))
            return found
        found.append(Program(rest))
        rest = rest[start:]
    found.append(Program(rest, opaque=True))
    return found


def _command_start(name: str, argv: tuple[str, ...]) -> int | None:
    """Where the wrapped command starts; 0 when ``name`` wraps nothing; None if unknown."""
    if name in _APPLET_HOSTS:
        return 0 if len(argv) < 2 or argv[1].startswith("-") else 1
    options = _WRAPPERS.get(name)
    if options is None:
        return 0
    if name == "env" and any(a == "-S" or a.startswith(("-S", "--split-string")) for a in argv):
        return None  # the command is inside a string env splits with its own rules
    return _skip_options(argv, options)


def _skip_options(argv: tuple[str, ...], options: _Options) -> int | None:
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if word.startswith("--"):
            key = word[2:].split("=", 1)[0]
            if key in options.long_valued:
                i += 1 if "=" in word else 2
            elif key in options.long_flags:
                i += 1
            else:
                return None
        elif word.startswith("-") and len(word) > 1:
            if options.numeric and word[1:].isdigit():
                i += 1
                continue
            step = _short_cluster(word[1:], options.flags, options.valued)
            if step is None:
                return None
            i += step
        elif options.assignments and _ASSIGNMENT.match(word):
            i += 1
        else:
            break
    return i + options.positionals if i < len(argv) else len(argv)


def _short_cluster(letters: str, flags: str, valued: str) -> int | None:
    """How many words ``-letters`` takes (1, or 2 when its value is the next word)."""
    for at, letter in enumerate(letters):
        if letter in valued:
            return 1 if letters[at + 1 :] else 2
        if letter not in flags:
            return None
    return 1


def _find_execs(argv: tuple[str, ...]) -> list[Program]:
    """The commands ``find -exec CMD ... ;`` runs (each judged as a program of its own)."""
    found: list[Program] = []
    i = 1
    while i < len(argv):
        if argv[i] in _FIND_EXEC:
            end = i + 1
            while end < len(argv) and argv[end] not in (";", "+"):
                end += 1
            found.extend(programs(argv[i + 1 : end]))
            i = end
        i += 1
    return found


def _runs_inline_code(name: str, argv: tuple[str, ...]) -> bool:
    """True when ``argv`` hands its interpreter code to run in an argument."""
    if name in _AWKS:
        return not any(a in ("-f", "--file") or a.startswith("--file=") for a in argv[1:])
    if name == "deno":
        return len(argv) > 1 and argv[1] == "eval"
    spec = _INTERPRETERS.get(name)
    if spec is None:
        return False
    letters, long_names, valued = spec
    words = [w.lower() for w in argv[1:]] if name in ("pwsh", "powershell") else list(argv[1:])
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--" or not word.startswith("-") or word == "-":
            return False  # a script file, stdin, or the end of the options
        if word.lstrip("-").split("=", 1)[0] in long_names:
            return True
        i += 1
        if word.startswith("--") or not letters:
            # an unknown long option: a next word that is not an option may be its value
            if "=" not in word and i < len(words) and not words[i].startswith("-"):
                i += 1
            continue
        for at, letter in enumerate(word[1:]):
            if letter in letters:
                return True
            if letter == "m" and name in ("python", "pypy"):
                return False  # -m runs a module; what follows is the module's
            if letter in valued:
                i += 0 if word[at + 2 :] else 1
                break
    return False
