"""Commands in an OS sandbox: which backend, the minimal environment, how to start it.

``run_command`` and ``hn.Command`` go through ``tools/_process.run_argv``, which asks
this module how to start the child (``confine``); the runner keeps the time limit,
the process-group kill and the bounded capture.

Backends (``sandbox_backend``; bwrap's probe is kept per ``bwrap`` location, the
Landlock ABI once per process):

* ``bubblewrap``: ``bwrap`` on PATH and a probe run with the full flag set succeeds.
  Root filesystem read-only; the workspace bound writable; a private scratch folder
  as ``/tmp`` (``TMPDIR``) holding a private empty ``HOME``; a fresh ``/dev`` and a
  fresh, read-only ``/proc`` (no sysctl writes, even by root); its own PID, UTS and
  user namespace (the command is ``nobody`` there when the caller is root, and makes
  no namespace of its own); a new session; killed with the runner; no network unless
  the policy allows it (``command_net_allowed``); every workspace file the policy
  denies reading (and every hard link to one) masked by an empty read-only file, a
  denied folder by an empty read-only tmpfs, and every folder between the workspace
  and a mask bound onto itself, so no rename can carry a secret out from under its
  mask (a mount point cannot be renamed); the usual credential files of the real
  home (``~/.ssh``, ``~/.aws``, ...) and the Unix sockets under ``/run`` (docker,
  D-Bus) masked the same way; no capabilities, even when the caller is root.
* ``landlock``: the kernel reports a Landlock ABI (Linux >= 5.13; no user namespace
  needed, so it works where bwrap cannot, e.g. a Binder container). The command
  starts through ``tools/_landlock_exec``, which confines itself and runs it; the
  rules come from ``tools/_landlock``. Read and execute on the filesystem except the
  host's ``/tmp`` and ``/dev`` (the usual devices excepted), the real home's
  credential files and the workspace's secret paths (hard links included); write only
  in the workspace and a private scratch ``TMPDIR`` holding ``HOME``; no capabilities;
  ``no_new_privs``; a new session; its own PID namespace and ``/proc`` where the
  kernel allows it (root, or a user namespace), else a subreaper launcher; every
  process it starts killed at the end of the call. Without network: no IPv4/IPv6
  socket at all (a seccomp filter, x86_64 and aarch64), no TCP connect or bind (ABI
  >= 4) and no
  abstract Unix sockets (ABI >= 6); Unix sockets named in the filesystem stay open.
  Elsewhere the label says what holds (``no TCP (UDP not blocked)``, or ``network not
  blocked`` below ABI 4). Landlock grants by allow-list and cannot hide names: a
  denied folder is listable (its contents are not); a file made beside a secret file
  is readable from the next command on; entries beside a secret cannot be removed or
  renamed (a renamed secret would lose the name that denies it).
* ``none``: the command runs uncontained (only the minimal environment and a private
  ``HOME``/``TMPDIR`` apply); every surface says "uncontained". It still starts
  through the launcher (no ruleset): its own PID namespace where the kernel allows
  it, and nothing it starts outlives the call.

Tried in that order. ``HARNESSNB_SANDBOX=none|bubblewrap|landlock`` (read at each call)
forces a backend, for tests and for people who know their machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..rules._errors import ConfigError, SandboxError
from ..rules._policy import Policy
from . import _landlock, _landlock_exec
from ._host_paths import argv_folders, named_paths, programs_under_tmp
from ._workspace import note_secret

__all__ = [
    "BACKENDS",
    "Confined",
    "command_env",
    "command_net_allowed",
    "confine",
    "landlock_abi",
    "sandbox_backend",
    "sandbox_label",
    "secret_env_name",
]

BACKENDS = ("bubblewrap", "landlock", "none")
FORCE_VAR = "HARNESSNB_SANDBOX"
# Variable names never handed to a command, whoever passes them (matched upper-cased).
_SECRET_ENV = ("*_API_KEY", "*_TOKEN", "*_SECRET", "*PASSWORD*", "*_KEY", "*SECRET*", "*TOKEN")
# Credential files of the real home: the root filesystem is readable, these are not.
_HOME_CREDENTIALS = (
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".config/gh",
    ".config/git/credentials",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".password-store",
    ".local/share/keyrings",
    # the coding-agent CLIs' own logins
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".copilot",
    ".config/github-copilot",
)
# Walking a workspace for secret files stops here: past it the command is refused
# (a secret left unmasked would be the silent failure).
MAX_SCAN_ENTRIES = 300_000
_PROBE_TIMEOUT_S = 10.0
# --cap-drop ALL matters when the caller is root: bwrap then keeps every capability,
# and a command could remount / read-write. A user namespace (the command an
# unprivileged uid in it, no nested namespaces) and its own hostname come on top; when
# bwrap cannot do those here, the probe falls back to _BWRAP_BASE alone.
_BWRAP_BASE = (
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
)
_BWRAP_USERNS = ("--unshare-user", "--disable-userns")
# The uid and gid a command has in its namespace when the caller is root (nobody).
_SANDBOX_ID = 65534
# /proc mounted fresh, then read-only: as root (uid 0 on the host even inside a user
# namespace) a writable /proc/sys would let a command set the host's sysctls.
_BWRAP_PROC = ("--proc", "/proc", "--remount-ro", "/proc")
# Where the host's service sockets live (docker, containerd, the user's D-Bus and
# agents): a Unix socket on the read-only root still connects, with or without network.
_SOCKET_FOLDERS = ("/run", "/var/run")
_MAX_SOCKET_SCAN = 20_000
_probed: dict[str, tuple[str, ...] | None] = {}  # bwrap path -> the flags that ran, or None
_LAUNCHER = str(Path(_landlock_exec.__file__).resolve())
_abi: list[int] = []  # the kernel's Landlock ABI, once asked
_which: list[Any] = []  # [PATH, when, bwrap's path or None] (``_which_bwrap``)
_WHICH_KEPT_S = 5.0


def sandbox_backend() -> str:
    """The sandbox commands run in: ``"bubblewrap"``, ``"landlock"`` or ``"none"``.

    ``HARNESSNB_SANDBOX`` (``none``, ``bubblewrap`` or ``landlock``), read at each
    call, forces one; otherwise ``bubblewrap`` when ``bwrap`` is on PATH and a probe
    run with the full flag set succeeds (kept per ``bwrap`` location), then
    ``landlock`` when the kernel has it, then ``none`` (uncontained).

    Raises:
        ConfigError: the forced backend is unknown or unavailable here.
    """
    forced = os.environ.get(FORCE_VAR, "").strip().lower()
    if forced == "none":
        return "none"
    if forced not in ("", "bubblewrap", "landlock"):
        raise ConfigError(f"{FORCE_VAR}={forced!r}: expected none, bubblewrap or landlock")
    if forced != "landlock":
        bwrap = _which_bwrap()
        if bwrap is not None and _probe(bwrap):
            return "bubblewrap"
        if forced:
            raise ConfigError(f"{FORCE_VAR}=bubblewrap but bwrap is missing or cannot run here")
    if landlock_abi() >= 1 and sys.executable:  # the launcher runs on this Python
        return "landlock"
    if forced:
        raise ConfigError(f"{FORCE_VAR}=landlock but this kernel has no Landlock")
    return "none"


def _which_bwrap() -> str | None:
    """``shutil.which("bwrap")``, kept a few seconds for the same PATH: every run's
    result names its containment, and a PATH walk costs more than the rest of it."""
    path, now = os.environ.get("PATH"), time.monotonic()
    if _which and _which[0] == path and now - _which[1] < _WHICH_KEPT_S:
        kept: str | None = _which[2]
        return kept
    found = shutil.which("bwrap")
    _which[:] = [path, now, found]
    return found


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none), asked once per process."""
    if not _abi:
        _abi.append(_landlock_exec.abi_version())
    return _abi[0]


def _probe(bwrap: str) -> bool:
    return _bwrap_flags(bwrap) is not None


def _bwrap_flags(bwrap: str) -> tuple[str, ...] | None:
    """The namespace flags ``bwrap`` runs with here (probed once per location): the
    full set with a user namespace, else without one (bwrap < 0.8, or user namespaces
    refused to a setuid bwrap), else None (bwrap cannot run)."""
    if bwrap not in _probed:
        _probed[bwrap] = None
        for flags in (_user_flags(), ()):
            argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", *_BWRAP_PROC]
            argv += ["--unshare-net", *flags, *_BWRAP_BASE, "--", "true"]
            try:
                done = subprocess.run(  # a fixed argv, no shell
                    argv, capture_output=True, timeout=_PROBE_TIMEOUT_S, check=False, env={}
                )
            except (OSError, subprocess.SubprocessError):
                continue  # e.g. user namespaces forbidden (a Binder container)
            if done.returncode == 0:
                _probed[bwrap] = (*flags, *_BWRAP_BASE)
                break
    return _probed[bwrap]


def _user_flags() -> tuple[str, ...]:
    """A user namespace in which the command is the caller's own uid, or nobody when
    the caller is root (still uid 0 on the host: /proc and / stay read-only for it)."""
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        uid = gid = _SANDBOX_ID
    return (*_BWRAP_USERNS, "--uid", str(uid), "--gid", str(gid))


def containment() -> str:
    """The containment a run's commands get here, in the words every surface uses; a
    forced backend that cannot run is said, not raised (a result card must not fail)."""
    try:
        return sandbox_label(sandbox_backend())
    except ConfigError as exc:
        return f"commands refused: {exc.message}"


def sandbox_label(backend: str, *, net: bool | None = None) -> str:
    """How every surface names the containment: ``sandbox: bubblewrap, no network``."""
    if backend == "none":
        return "uncontained: no sandbox backend"
    if net is None:
        return f"sandbox: {backend}"
    if backend == "landlock":
        return _landlock.label(landlock_abi(), net=net, no_ip=_landlock_exec.ip_filter_supported())
    return f"sandbox: {backend}, {'network allowed' if net else 'no network'}"


def command_net_allowed(policy: Policy) -> bool:
    """True when a command may use the network: an explicit rule allows net to ``*``.

    A sandbox cannot filter by host, so a command gets the network only when the
    policy allows it to every host by a rule (``allow_net("*")``) and holds no net deny
    or ask rule it would slip past. A default of allow (``Policy.permissive()``) is
    not enough, nor are the provider hosts.
    """
    verdict = policy.explain("net", "*")
    if verdict.effect != "allow" or verdict.rule is None:
        return False
    return all(rule.effect == "allow" for _, rule in policy.rules() if rule.act == "net")


def secret_env_name(name: str) -> bool:
    """True when a variable's name looks secret (``*_API_KEY``, ``*_TOKEN``, ...)."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in _SECRET_ENV)


def command_env(extra: Mapping[str, str] | None, *, home: str, tmp: str) -> dict[str, str]:
    """The whole environment of a command: PATH, LANG, TERM, TMPDIR, HOME and ``extra``.

    Nothing else is inherited; a name in ``extra`` that looks secret is dropped.
    """
    env = {
        "PATH": os.environ.get("PATH") or os.defpath,
        "LANG": os.environ.get("LANG") or "C.UTF-8",
        "TERM": os.environ.get("TERM") or "dumb",
    }
    env.update({k: v for k, v in (extra or {}).items() if not secret_env_name(k)})
    env.update(TMPDIR=tmp, HOME=home)
    return env


@dataclasses.dataclass(frozen=True)
class Confined:
    """How to start one command: its argv, environment and how it is contained.

    ``close`` removes the private scratch folder (``/tmp`` and ``HOME``) afterwards.
    """

    argv: list[str]
    env: dict[str, str]
    backend: str
    net: bool
    label: str
    scratch: Path

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def confine(
    argv: Sequence[str],
    *,
    workspace: Path,
    policy: Policy | None,
    env: Mapping[str, str] | None = None,
    backend: str | None = None,
    net: bool | None = None,
    argv_paths: bool = False,
) -> Confined:
    """The command ``argv`` as it will run, with a fresh private scratch folder.

    Blocking (it walks the workspace): call it in a thread. ``policy`` None means
    ``Policy.default()`` (secrets masked, no network). ``net=False`` blocks the network
    whatever the policy allows (an MCP server not given ``network=True``); None (the
    default) leaves it to the policy (``command_net_allowed``); True is the policy's
    answer too: the network is never granted past the policy. ``argv_paths=True``
    (an MCP server's command line): the folders under the host's /tmp that ``argv`` and
    ``env``'s values name (a script's folder, a repository, a ``PYTHONPATH`` entry) are
    bound back read-only, as the programs on PATH
    are (``_host_paths.argv_folders``); a command the model wrote never gets that.

    Raises:
        FileNotFoundError, PermissionError: the program is missing or not executable
            (checked here, so the sandbox's own failure is not taken for the command's).
        SandboxError: the workspace is too large to scan for secret files.
        ConfigError: a forced backend is unknown or unavailable.
    """
    backend = sandbox_backend() if backend is None else backend
    policy = Policy.default() if policy is None else policy
    root = workspace.resolve()
    _check_program(argv[0], root, env)
    scratch = Path(tempfile.mkdtemp(prefix="harnessnb-cmd-"))
    try:
        tmp = scratch / "tmp"
        (tmp / "home").mkdir(parents=True)
        if backend == "none":
            run_env = command_env(env, home=str(tmp / "home"), tmp=str(tmp))
            secret_paths(root, policy)  # their identities noted before any rename
            launch = [sys.executable, "-I", "-S", _LAUNCHER, "-", "--", *argv]
            return Confined(launch, run_env, "none", True, sandbox_label("none"), scratch)
        net = command_net_allowed(policy) and net is not False
        named = argv_folders(named_paths(argv, env), root) if argv_paths else []
        if backend == "landlock":
            run_env = command_env(env, home=str(tmp / "home"), tmp=str(tmp))
            plan = _landlock_plan(root, tmp, policy, net, run_env["PATH"], named)
            (scratch / "landlock.plan").write_bytes(plan.encode())
            launch = [sys.executable, "-I", "-S", _LAUNCHER, str(scratch / "landlock.plan")]
            label = _landlock.label(plan.abi, net=net, no_ip=plan.no_ip)
            net = net or not (plan.net or plan.no_ip)  # nothing blocks the network
            return Confined([*launch, "--", *argv], run_env, backend, net, label, scratch)
        run_env = command_env(env, home="/tmp/home", tmp="/tmp")
        prefix = _bwrap_argv(root, tmp, policy, net, run_env.get("PATH", ""), named)
        label = sandbox_label(backend, net=net)
        return Confined([*prefix, "--", *argv], run_env, backend, net, label, scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def _check_program(program: str, root: Path, env: Mapping[str, str] | None) -> None:
    """Raise as the child's exec would when ``program`` is missing or not executable."""
    if "/" in program:
        path = str(root / program)
        if not os.path.exists(path):
            raise FileNotFoundError(program)
        if not os.access(path, os.X_OK) or os.path.isdir(path):
            raise PermissionError(program)
        return
    search = (env or {}).get("PATH") or os.environ.get("PATH") or os.defpath
    if shutil.which(program, path=search) is None:
        raise FileNotFoundError(program)


def _bwrap_argv(
    root: Path, tmp: Path, policy: Policy, net: bool, path_env: str, named: Sequence[str] = ()
) -> list[str]:
    bwrap = shutil.which("bwrap") or "bwrap"
    flags = _bwrap_flags(bwrap) or _BWRAP_BASE
    empty = tmp.parent / "empty"  # what a masked file reads as: an empty regular file
    empty.touch(0o444)
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", *_BWRAP_PROC]
    argv += ["--bind", str(tmp), "/tmp"]
    for folder in sorted({*programs_under_tmp(path_env), *named}):
        argv += ["--ro-bind", folder, folder]
    argv += _masks([*_home_credentials(root), *_host_sockets()], empty)
    argv += ["--bind", str(root), str(root)]
    secrets = secret_paths(root, policy)
    # Every folder between the workspace root and a masked path is bound onto itself:
    # a mount point cannot be renamed or removed (EBUSY), so no command can carry a
    # secret away from its mask by renaming its parent (``mv .aws x``).
    for above in _ancestors(root, secrets):
        argv += ["--bind", str(above), str(above)]
    argv += _masks(secrets, empty)
    if not net:
        argv.append("--unshare-net")
    return [*argv, *flags, "--chdir", str(root)]


def _ancestors(root: Path, paths: Sequence[Path]) -> list[Path]:
    """The folders strictly between ``root`` and each of ``paths``, parents first."""
    found: set[Path] = set()
    for path in paths:
        found.update(p for p in path.parents if p != root and p.is_relative_to(root))
    return sorted(found, key=lambda p: (len(p.parts), str(p)))


def _landlock_plan(
    root: Path, tmp: Path, policy: Policy, net: bool, path_env: str, named: Sequence[str] = ()
) -> _landlock.Ruleset:
    secrets = [str(p) for p in secret_paths(root, policy)]
    denied = set()
    for path in secrets:
        with contextlib.suppress(OSError):
            st = os.stat(path, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                denied.add((st.st_dev, st.st_ino))
    home = Path.home()
    # Resolved: a credential folder that is a symlink hides its target.
    hidden = {os.path.realpath(home / name) for name in _HOME_CREDENTIALS}
    return _landlock.build(
        landlock_abi(),
        workspace=str(root),
        tmp=str(tmp.resolve()),
        secrets=secrets,
        hidden=[p for p in hidden if os.path.lexists(p)],
        host_tmp=os.path.realpath("/tmp"),
        readable=sorted({*programs_under_tmp(path_env), *named}),
        net=net,
        ip_filter=_landlock_exec.ip_filter_supported(),
        denied=denied,
    )


def _masks(paths: Sequence[Path], empty: Path) -> list[str]:
    """bwrap arguments hiding each path: a file behind the read-only ``empty`` file (it
    reads as empty; /dev/null on a nodev mount would not open), a folder emptied."""
    out: list[str] = []
    for path in paths:
        if path.is_dir():
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
        else:
            out += ["--ro-bind", str(empty), str(path)]
    return out


def _home_credentials(root: Path) -> list[Path]:
    home = Path.home()
    found = []
    for name in _HOME_CREDENTIALS:
        path = home / name
        inside = path == root or path.is_relative_to(root) or root.is_relative_to(path)
        if not inside and not path.is_symlink() and path.exists():
            found.append(path)
    return found


def _host_sockets() -> list[Path]:
    """Unix sockets under /run (docker.sock, the user's D-Bus...), to be masked."""
    found: list[Path] = []
    seen = 0
    for top in dict.fromkeys(os.path.realpath(f) for f in _SOCKET_FOLDERS):
        for folder, dirs, files in os.walk(top, followlinks=False):
            seen += len(dirs) + len(files)
            if seen > _MAX_SOCKET_SCAN:
                return found  # a bounded effort: /run is small on any normal host
            for name in files:
                path = os.path.join(folder, name)
                with contextlib.suppress(OSError):
                    if stat.S_ISSOCK(os.lstat(path).st_mode):
                        found.append(Path(path))
    return found


def secret_paths(root: Path, policy: Policy) -> list[Path]:
    """Workspace files and folders the policy denies reading, plus hard links to them.

    Judged by the policy's own verdict (``explain("read", relative path)``) on every
    entry; symlinks are not followed (their target is judged under its own name).
    A folder whose modification time is unchanged since the last walk under the same
    policy keeps its verdicts: an entry added, removed or renamed changes its folder's
    time, so only changed folders are judged again.
    """
    key = (str(root), policy)
    cache = _walks.pop(key, None) or {}
    _walks[key] = cache  # most recent last
    while len(_walks) > _WALKS_KEPT:
        _walks.pop(next(iter(_walks)))
    walk = _Walk(str(root), policy, cache)
    walk.run()
    linked = [path for path, inode in walk.linked if inode in walk.denied_inodes]
    return [Path(p) for p in (*walk.denied, *linked)]


_WALKS_KEPT = 8
# (workspace, policy) -> folder path -> what it held when last judged
_walks: dict[tuple[str, Policy], dict[str, _Folder]] = {}


@dataclasses.dataclass(frozen=True)
class _Folder:
    mtime_ns: int
    inside_denied: bool
    denied: tuple[str, ...]  # entries to mask (none when the folder itself is masked)
    denied_inodes: tuple[tuple[int, int], ...]  # denied regular files, masked or not
    linked: tuple[tuple[str, tuple[int, int]], ...]  # allowed files with other names
    subfolders: tuple[tuple[str, str, bool], ...]  # (path, relative, denied)
    entries: int


class _Walk:
    def __init__(self, root: str, policy: Policy, cache: dict[str, _Folder]) -> None:
        self.root, self.policy, self.cache = root, policy, cache
        self.denied: list[str] = []
        self.denied_inodes: set[tuple[int, int]] = set()
        self.linked: list[tuple[str, tuple[int, int]]] = []
        self.entries = 0

    def run(self) -> None:
        """Visit every folder from the root (a stack, not recursion: depth is unbounded)."""
        todo = [(self.root, "", False)]
        while todo:
            path, rel, inside_denied = todo.pop()
            known = self._folder(path, rel, inside_denied)
            if known is None:
                continue
            self.entries += known.entries
            if self.entries > MAX_SCAN_ENTRIES:
                raise SandboxError(
                    f"the workspace has over {MAX_SCAN_ENTRIES} entries; too many to scan "
                    "for secret files before running a command",
                    reason="workspace_too_large",
                )
            self.denied += known.denied
            self.denied_inodes.update(known.denied_inodes)
            self.linked += known.linked
            todo += [(sub, r, inside_denied or d) for sub, r, d in known.subfolders]

    def _folder(self, path: str, rel: str, inside_denied: bool) -> _Folder | None:
        """What ``path`` holds: from the cache while its modification time is unchanged."""
        try:
            mtime = os.stat(path, follow_symlinks=False).st_mtime_ns
        except FileNotFoundError:  # gone since its parent was listed
            return None
        known = self.cache.get(path)
        if known is None or (known.mtime_ns, known.inside_denied) != (mtime, inside_denied):
            known = self._judge(path, rel, mtime, inside_denied)
            self.cache[path] = known
        return known

    def _judge(self, path: str, rel: str, mtime: int, inside_denied: bool) -> _Folder:
        denied: list[str] = []
        inodes: list[tuple[int, int]] = []
        linked: list[tuple[str, tuple[int, int]]] = []
        subfolders: list[tuple[str, str, bool]] = []
        entries = 0
        try:
            listing = list(os.scandir(path))
        except OSError:  # unreadable to us: the command cannot read it either
            listing = []
        for entry in listing:
            entries += 1
            entry_rel = f"{rel}/{entry.name}" if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            is_dir, is_file = stat.S_ISDIR(st.st_mode), stat.S_ISREG(st.st_mode)
            if not (is_dir or is_file):
                continue  # symlinks, FIFOs, sockets: judged under their target's name
            is_denied = inside_denied or self.policy.explain("read", entry_rel).denied
            if is_denied:
                note_secret(st, self.root, entry_rel)  # known by identity if renamed
            if is_denied and not inside_denied:
                denied.append(entry.path)
            if is_dir:
                subfolders.append((entry.path, entry_rel, is_denied))
            elif is_denied:
                inodes.append((st.st_dev, st.st_ino))
            elif st.st_nlink > 1:
                linked.append((entry.path, (st.st_dev, st.st_ino)))
        return _Folder(
            mtime,
            inside_denied,
            tuple(denied),
            tuple(inodes),
            tuple(linked),
            tuple(subfolders),
            entries,
        )
