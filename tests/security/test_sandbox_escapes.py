"""Escapes an attack round found (issue #25), each tried again as the attacker did it:
a scripted model calls ``run_command`` and the file tools through a real ``hn.run_sync``
on every backend this machine has (bubblewrap, Landlock, none), as the caller (root
here) and, for bubblewrap, as an unprivileged user.

The unprivileged runs start the very argv the harness builds (``confine``) under
``setpriv`` as ``nobody``: the harness's interpreter may live where ``nobody`` cannot
read it (a pyenv under ``/root``), so the whole run cannot switch user, but the
sandbox it builds is the same (the namespace uid is ``nobody``'s own either way).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.tools._sandbox import _LAUNCHER, confine
from tests.security.seccomp_helpers import refusing
from tests.security.test_sandbox import BACKENDS, CONTAINED, FAKE_KEY, needs_bwrap

NOBODY = 65534
AS_NOBODY = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the attacks ran as root)")
can_switch = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run a command as an unprivileged user",
)


@pytest.fixture
def ws() -> Iterator[Path]:
    """A workspace an unprivileged user can reach too (pytest's tmp_path is 0700)."""
    top = Path(tempfile.mkdtemp(prefix="harnessnb-escape-", dir="/var/tmp"))
    top.chmod(0o755)
    root = top / "ws"
    root.mkdir()
    (root / "README.md").write_text("hello sandbox\n")
    yield root
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    name: str = request.param
    monkeypatch.setenv("HARNESSNB_SANDBOX", name)
    return name


def _secrets(ws: Path) -> None:
    """The secrets of the attack: the table's, nested, and a user's ``deny_read``."""
    for rel in (".aws/credentials", ".ssh/id_ed25519", "a/b/.aws/credentials"):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(f"{FAKE_KEY}\n")
    (ws / "data" / "private").mkdir(parents=True)
    (ws / "data" / "private" / "key.txt").write_text(f"{FAKE_KEY}\n")


def _policy() -> hn.Policy:
    """Only what the attacker was given: ``mv`` and ``cat`` (and the user's own rule)."""
    return (
        hn.Policy.default()
        .layer("app")
        .allow_exec("mv")
        .allow_exec("cat")
        .allow_exec("python3")
        .deny_read("data/private")
    )


_RENAMES = [
    ["mv", ".aws", "x"],
    ["mv", ".ssh", "y"],
    ["mv", "a/b/.aws", "a/b/z"],
    ["mv", "a", "q"],
    ["mv", "data", "d2"],
    ["mv", "data/private", "data/open"],
]
_READS = [
    "x/credentials",
    "y/id_ed25519",
    "a/b/z/credentials",
    "q/b/.aws/credentials",
    "q/b/z/credentials",
    "d2/private/key.txt",
    "data/open/key.txt",
    "d2/open/key.txt",
]


def _run(ws: Path, store: hn.Store, calls: list[dict[str, Any]], policy: hn.Policy) -> list[str]:
    provider = hn.ScriptedProvider([*calls, "done", "done"])
    contract = hn.TaskContract("probe", ws, max_steps=len(calls) + 2)
    result = hn.run_sync(contract, provider, store=store, policy=policy)
    rows = store.tool_calls(result.run_id).sort_values(["step", "seq"])
    return [str(o) for o in rows["output"].tolist()]


def _command(argv: list[str]) -> dict[str, Any]:
    return {"tool": "run_command", "args": {"argv": argv}}


# ---------------------------------------------------------------- 1. renaming a secret away


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_renaming_a_secrets_folder_never_unmasks_it(
    ws: Path, store: hn.Store, backend: str
) -> None:
    _secrets(ws)
    calls = [_command(argv) for argv in _RENAMES]
    calls += [{"tool": "read_file", "args": {"path": rel}} for rel in _READS]
    calls += [_command(["cat", rel]) for rel in _READS]
    calls += [{"tool": "grep", "args": {"pattern": "sk-fake", "path": "."}}]
    outputs = _run(ws, store, calls, _policy())
    if backend == "none":  # uncontained: the command itself reads anything (README)
        outputs = outputs[: len(_RENAMES) + len(_READS)] + outputs[-1:]
    assert all(FAKE_KEY not in out for out in outputs), outputs
    if backend == "none":  # renamed, and the file tools still know each secret
        # the last rename finds data gone (moved to d2 just before)
        assert all(out.startswith("exit code 0") for out in outputs[: len(_RENAMES) - 1])
        reads = outputs[len(_RENAMES) : len(_RENAMES) + len(_READS)]
        where = dict(zip(_READS, reads, strict=True))
        # y/id_ed25519 is a secret by its own name; the others by what they were
        assert "[REFUSED]" in where["y/id_ed25519"]
        for rel in ("x/credentials", "q/b/z/credentials", "d2/private/key.txt"):
            assert "[REFUSED]" in where[rel] and "moved or renamed" in where[rel], where[rel]
    else:  # the sandbox refuses the renames themselves
        assert all(out.startswith("exit code 1") for out in outputs[: len(_RENAMES)])
        assert (ws / ".aws" / "credentials").read_text() == f"{FAKE_KEY}\n"
        assert (ws / "data" / "private" / "key.txt").read_text() == f"{FAKE_KEY}\n"


def _reachable_by_others(path: str) -> bool:
    """Every folder down to ``path`` may be entered by any user (o+x)."""
    here = os.path.realpath(path)
    while True:
        if not os.stat(here).st_mode & 0o001:
            return False
        if here == os.path.dirname(here):
            return True
        here = os.path.dirname(here)


def _as_nobody(ws: Path, argv: list[str], policy: hn.Policy) -> str:
    """``argv`` confined as the harness confines it, started as ``nobody``."""
    if not _reachable_by_others(sys.prefix):
        pytest.skip(f"nobody cannot reach this interpreter's folder {sys.prefix} "
                    "(bubblewrap binds it into the sandbox)")  # fmt: skip
    with _scratch_beside(ws):
        child = confine(argv, workspace=ws, policy=policy, backend="bubblewrap")
    try:
        for folder, dirs, files in os.walk(child.scratch):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chown(name, NOBODY, NOBODY)
        done = subprocess.run(
            [*AS_NOBODY, "--", *child.argv],
            cwd=ws,
            env=child.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        child.close()
    assert "bwrap:" not in done.stderr, done.stderr  # the sandbox itself started
    return f"exit code {done.returncode}\n{done.stdout}{done.stderr}"


@contextlib.contextmanager
def _scratch_beside(ws: Path) -> Iterator[None]:
    """The command's scratch folder made where ``nobody`` can reach it, and ``nobody``'s
    home (whose credential files are masked) one it can reach too."""
    kept, home = tempfile.tempdir, os.environ.get("HOME")
    tempfile.tempdir = os.environ["HOME"] = str(ws.parent)
    try:
        yield
    finally:
        tempfile.tempdir = kept
        if home is not None:
            os.environ["HOME"] = home


def _run_bare(ws: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` run in ``ws`` with only ``PATH`` in its environment, its output kept."""
    bare = {"PATH": os.defpath}
    return subprocess.run(argv, cwd=ws, capture_output=True, text=True, timeout=60, env=bare)


def _give_to_nobody(ws: Path) -> None:
    for folder, dirs, files in os.walk(ws):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.chown(name, NOBODY, NOBODY)


@needs_bwrap
@can_switch
def test_renaming_a_secrets_folder_never_unmasks_it_as_an_ordinary_user(ws: Path) -> None:
    _secrets(ws)
    _give_to_nobody(ws)
    outputs = [_as_nobody(ws, argv, _policy()) for argv in _RENAMES]
    outputs += [_as_nobody(ws, ["cat", rel], _policy()) for rel in _READS]
    assert all(FAKE_KEY not in out for out in outputs), outputs
    assert all(out.startswith("exit code 1") for out in outputs[: len(_RENAMES)])
    assert (ws / ".aws" / "credentials").exists() and (ws / "data" / "private").is_dir()


# ---------------------------------------------------------------- 2. /proc/sys as root

# Each sysctl is written with the value it already holds: a regression shows as a
# write that succeeded, never as a changed host.
_SYSCTL_WRITE = """
import sys
for name in ("kernel/domainname", "kernel/core_pattern"):
    path = "/proc/sys/" + name
    value = open(path).read()
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as exc:
        print(name, "refused", exc.strerror)
    else:
        print(name, "WRITTEN")
"""


@as_root
@pytest.mark.parametrize("backend", CONTAINED, indirect=True)
def test_a_command_run_by_root_cannot_write_the_hosts_sysctls(
    ws: Path, store: hn.Store, backend: str
) -> None:
    outputs = _run(ws, store, [_command(["python3", "-c", _SYSCTL_WRITE])], _policy())
    assert "WRITTEN" not in outputs[0], outputs[0]
    assert outputs[0].count("refused") == 2, outputs[0]


@needs_bwrap
@can_switch
def test_a_command_run_by_an_ordinary_user_cannot_write_sysctls_either(ws: Path) -> None:
    _give_to_nobody(ws)
    out = _as_nobody(ws, ["python3", "-c", _SYSCTL_WRITE], _policy())
    assert "WRITTEN" not in out and out.count("refused") == 2, out


@needs_bwrap
@as_root
@pytest.mark.parametrize("backend", ["bubblewrap"], indirect=True)
def test_under_bubblewrap_root_runs_commands_as_an_unprivileged_uid(
    ws: Path, store: hn.Store, backend: str
) -> None:
    calls = [_command(["python3", "-c", "import os; print(os.getuid())"]),
             _command(["unshare", "--user", "--map-root-user", "true"])]  # fmt: skip
    outputs = _run(ws, store, calls, _policy().layer("more").allow_exec("unshare"))
    assert outputs[0] == f"exit code 0\n{NOBODY}\n"
    assert not outputs[1].startswith("exit code 0"), outputs[1]  # no namespace of its own


# ---------------------------------------------------------------- 10, 12. process trees


def _alive(marker: str) -> list[str]:
    """Command lines of live processes holding ``marker`` (zombies show none)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                line = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
                if marker.encode() in line:
                    found.append(line.decode(errors="replace"))
    return found


def _unique_sleep() -> str:
    """A ``sleep`` duration no other process uses: its command line is the marker."""
    return str(600_000 + secrets.randbelow(100_000))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_nothing_a_command_starts_outlives_its_call_whatever_setsid_does(
    ws: Path, store: hn.Store, backend: str
) -> None:
    daemon, bomb = _unique_sleep(), _unique_sleep()
    spawn = f"for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep {bomb} & done; wait"
    script = (
        f"setsid sh -c 'while :; do echo x >> beat.txt; sleep {daemon}; done' "
        f"</dev/null >/dev/null 2>&1 & setsid sh -c '{spawn}' </dev/null >/dev/null 2>&1 & "
        "sleep 0.3; echo started"
    )
    outputs = _run(ws, store, [_command(["sh", "-c", script])], hn.Policy.permissive())
    assert outputs[0] == "exit code 0\nstarted\n", outputs[0]
    assert _alive(f"sleep {daemon}") == [] and _alive(f"sleep {bomb}") == []


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_command_ignoring_sigterm_ends_with_its_tree_by_the_time_budget(
    ws: Path, store: hn.Store, backend: str
) -> None:
    child, leader = _unique_sleep(), _unique_sleep()
    script = (
        f"trap '' TERM; setsid sh -c 'trap \"\" TERM; sleep {child}; :' </dev/null "
        f">/dev/null 2>&1 & echo started; sleep {leader}; :"
    )
    provider = hn.ScriptedProvider([_command(["sh", "-c", script]), "done", "done"])
    contract = hn.TaskContract("probe", ws, max_steps=3, max_time_s=2)
    started = time.monotonic()
    result = hn.run_sync(contract, provider, store=store, policy=hn.Policy.permissive())
    took = time.monotonic() - started
    assert result.outcome is hn.RunOutcome.TIME_BUDGET, result.outcome
    assert took < 2 + 1, took  # the budget, to within a second
    assert _alive(f"sleep {child}") == [] and _alive(f"sleep {leader}") == []


_SYSTEM_PYTHON = "/usr/bin/python3"
# Run before the launcher: a seccomp filter answers unshare (272 on x86_64, 97 on
# aarch64) with EPERM, as a kernel or container that allows no namespace does.
_NO_UNSHARE = refusing(
    {"x86_64": 272, "aarch64": 97}, errno.EPERM,
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n",
)


@can_switch
@pytest.mark.skipif(not os.access(_SYSTEM_PYTHON, os.X_OK), reason="needs /usr/bin/python3")
@pytest.mark.parametrize("namespaces", ["allowed", "refused"])
def test_an_ordinary_users_command_leaves_nothing_behind_either(ws: Path, namespaces: str) -> None:
    """The launcher as an ordinary user (uncontained, no ruleset): in a PID namespace
    of its own through a user namespace where the kernel allows one, else as the
    subreaper every orphan of the command comes to; either way it kills them all."""
    if namespaces == "refused" and os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("the test's seccomp filter is for x86_64 and aarch64")
    daemon = _unique_sleep()
    _give_to_nobody(ws)
    script = (
        f"setsid sh -c 'sleep {daemon}; :' </dev/null >/dev/null 2>&1 & ls /proc | grep -c '^[0-9]'"
    )
    launch = ["-I", "-S", _LAUNCHER, "-", "--", "sh", "-c", script]
    if namespaces == "refused":
        launch = ["-c", _NO_UNSHARE, *launch]
    done = _run_bare(ws, [*AS_NOBODY, _SYSTEM_PYTHON, *launch])
    assert done.returncode == 0, done.stderr
    assert _alive(f"sleep {daemon}") == []
    seen = int(done.stdout)  # processes the command's /proc shows
    if namespaces == "allowed":
        assert seen < 10, seen  # its own only (the host shows over a hundred here)
    else:
        assert seen >= 10, seen  # the host's: why README says to keep secrets off argv


@can_switch
@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit")
@pytest.mark.skipif(not os.access(_SYSTEM_PYTHON, os.X_OK), reason="needs /usr/bin/python3")
def test_a_fork_bomb_that_fills_its_process_limit_ends_with_the_call(ws: Path) -> None:
    """A real fork bomb, as ``nobody`` and capped at 40 processes (``RLIMIT_NPROC``, so
    the machine's other users are untouched): it fills its limit, the command ends,
    and the launcher kills every copy before it returns."""
    marker = f"harnessnb-bomb-{_unique_sleep()}"
    _give_to_nobody(ws)
    bomb = "b() { b | b & }; b; sleep 1; echo ended"
    launch = [_SYSTEM_PYTHON, "-I", "-S", _LAUNCHER, "-", "--", "sh", "-c", bomb, marker]
    done = _run_bare(ws, ["prlimit", "--nproc=40:40", *AS_NOBODY, *launch])
    assert "fork" in done.stderr.lower(), done.stderr  # it did reach its limit
    assert _alive(marker) == []


# ---------------------------------------------------------------- 8, 9. the harness's /proc

_LIST_PROCESSES = """
import os
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    try:
        print(pid, open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode())
    except OSError as exc:
        print(pid, "unreadable", exc.strerror)
"""


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_command_cannot_read_the_harness_command_line(
    ws: Path, store: hn.Store, backend: str
) -> None:
    if backend != "bubblewrap" and os.geteuid() != 0:
        pytest.skip("an ordinary user's command gets no PID namespace here (README)")
    ours = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode()
    outputs = _run(ws, store, [_command(["python3", "-c", _LIST_PROCESSES])],
                   hn.Policy.permissive())  # fmt: skip
    assert outputs[0].startswith("exit code 0\n"), outputs[0]
    assert ours.strip() not in outputs[0]
    pids = [line.split()[0] for line in outputs[0].splitlines()[1:] if line[:1].isdigit()]
    assert len(pids) < 5, outputs[0]  # its own few processes only
