"""Landlock's kernel interface, and the launcher that confines itself and runs a command.

``tools/_landlock`` decides which paths get which rights; this module talks to the
kernel: the ABI probe (``abi_version``), the access-right bits by ABI, and ``main``,
which ``tools/_sandbox`` runs as::

    python -I -S .../_landlock_exec.py PLAN -- PROGRAM ARG...   (Landlock)
    python -I -S .../_landlock_exec.py - -- PROGRAM ARG...      (none: no ruleset)

The command's tree: where the kernel allows it (root: CAP_SYS_ADMIN; an ordinary
user: through a user namespace mapping only its own ids) the launcher unshares a PID
and a mount namespace and forks their init, which makes the mounts
private and mounts a fresh ``/proc`` (the command sees its own processes only, never
the harness's command line) and dies with the launcher (``PR_SET_PDEATHSIG``), taking
the whole namespace with it. Elsewhere the launcher is a child subreaper, so every
orphan of the command's tree (a ``setsid`` daemon included) comes to it. Either way
the supervisor (init, or the launcher) forks the command, reaps, and once the command
has exited kills everything left; it ignores SIGTERM (the harness's SIGTERM is for the
command, in the same process group) and ends as the command ended (its code, or its
signal). ``tools/_process`` kills the tree beneath it before its SIGKILL.

The confinement: it reads the ruleset, drops every capability (the bounding, ambient
and own sets, so a root caller's command holds none after exec), sets
``no_new_privs``, creates the ruleset, adds one rule per path, restricts itself, then
runs the command, which inherits the Landlock domain, as does everything it starts.
Without network it also installs a seccomp filter refusing (EACCES) every IPv4 and
IPv6 socket, UDP included, which Landlock does not cover (``ip_filter_supported``:
x86_64 and aarch64). When
the ruleset cannot be applied the command does not run (exit 125): it never falls back
to running unconfined.

Why a launcher and not ``preexec_fn``: Python code between fork and exec in a
threaded parent (harnessnb runs an event-loop thread) can deadlock on a lock another
thread held at the fork. ``-I -S``: the interpreter reads no ``PYTHON*`` variable, no
``.pth`` file and not the current folder, so nothing from the command's environment or
the workspace runs before the ruleset is in force. Stdlib only: harnessnb is not
importable there, and its import time would be paid by every command; for the same
reason the plan is NUL-separated fields (``encode_plan``), not JSON (``json`` and
``typing`` were a third of the launcher's start-up).

Why our own module: the one PyPI binding (``landlock`` 1.0.0.dev5, a single-author
alpha) handles filesystem rights only (no TCP rules, no scopes, nothing past ABI 5) and
opens rule paths following symlinks. The interface is three syscalls and two structs.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

# The builtin behind ``signal``, which imports enum: a fifth of the launcher's start-up.
_signal = __import__("_signal")

# No typing or collections import: the launcher's start-up is paid by every command.

__all__ = [
    "FILE_RIGHTS",
    "FS_ABI1",
    "FS_EXECUTE",
    "FS_IOCTL_DEV",
    "FS_MAKE_REG",
    "FS_READ_DIR",
    "FS_READ_FILE",
    "FS_REFER",
    "FS_REMOVE_DIR",
    "FS_REMOVE_FILE",
    "FS_TRUNCATE",
    "FS_WRITE_FILE",
    "NET_BIND_TCP",
    "NET_CONNECT_TCP",
    "SCOPE_ABSTRACT_UNIX_SOCKET",
    "SCOPE_SIGNAL",
    "Plan",
    "abi_version",
    "decode_plan",
    "descendants",
    "encode_plan",
    "ip_filter_supported",
    "main",
    "restrict",
]

# Filesystem rights (include/uapi/linux/landlock.h). ABI 1 (5.13) knows bits 0-12.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_REG = 1 << 8
FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM: read, write, remove, make every kind
FS_REFER = 1 << 13  # ABI 2 (5.19): link or rename into another folder
FS_TRUNCATE = 1 << 14  # ABI 3 (6.2)
FS_IOCTL_DEV = 1 << 15  # ABI 5 (6.10): ioctl on a device file
# The rights a rule on a file (not a folder) may carry; the others are folder rights.
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
NET_BIND_TCP = 1 << 0  # ABI 4 (6.7)
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6 (6.12)
SCOPE_SIGNAL = 1 << 1
# ABI 7 (6.15) adds audit-log flags only: no right to handle.

_PLAN_MAGIC = b"harnessnb-landlock-2"
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
# landlock_create_ruleset, landlock_add_rule, landlock_restrict_self: 444-446 in the
# numbering shared by every architecture since 5.1 (alpha and mips use other bases).
_UNIFIED = ("x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x", "i686", "armv7l")
_NR_CREATE, _NR_ADD_RULE, _NR_RESTRICT = 444, 445, 446
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAPABILITY_VERSION_3 = 0x20080522
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
# (AUDIT_ARCH_*, socket's number) where the IP socket filter is built.
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
_NR_IO_URING_SETUP = 425  # io_uring can make sockets without the socket syscall
_X32_BIT = 0x40000000
_EXIT_SANDBOX, _EXIT_NOT_EXECUTABLE, _EXIT_NOT_FOUND = 125, 126, 127


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),  # ABI 4
        ("scoped", ctypes.c_uint64),  # ABI 6
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]


_libc_handle: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
        _libc_handle.syscall.restype = ctypes.c_long
    return _libc_handle


def _syscall(number: int, *args: object) -> int:
    result = int(_libc().syscall(ctypes.c_long(number), *args))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    if sys.platform != "linux" or os.uname().machine not in _UNIFIED:
        return 0
    try:
        return _syscall(_NR_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except OSError:  # ENOSYS: not built in; EOPNOTSUPP: disabled at boot; EPERM: seccomp
        return 0


class Plan:
    """A ruleset as the launcher applies it (``tools/_landlock.Ruleset``, decoded)."""

    def __init__(
        self,
        abi: int,
        fs: int,
        net: int,
        scoped: int,
        rules: list[tuple[bytes, int]],
        denied: set[tuple[int, int]],
        no_ip: bool,
    ) -> None:
        self.abi, self.fs, self.net, self.scoped = abi, fs, net, scoped
        self.rules, self.denied, self.no_ip = rules, denied, no_ip


def encode_plan(plan: Plan) -> bytes:
    """``plan`` as NUL-separated fields (no path holds a NUL): the header, the number
    of denied inodes, each (device, inode), then (rights, path) for every rule."""
    head = (plan.abi, plan.fs, plan.net, plan.scoped, int(plan.no_ip))
    fields = [_PLAN_MAGIC, *(b"%d" % n for n in head)]
    fields.append(b"%d" % len(plan.denied))
    for dev, ino in sorted(plan.denied):
        fields += [b"%d" % dev, b"%d" % ino]
    for path, rights in plan.rules:
        fields += [b"%d" % rights, path]
    return b"\0".join(fields)


def decode_plan(data: bytes) -> Plan:
    """The plan ``encode_plan`` wrote. Raises ValueError when it is not one."""
    fields = data.split(b"\0")
    if fields[0] != _PLAN_MAGIC or len(fields) < 7:
        raise ValueError("not a harnessnb Landlock plan")
    abi, fs, net, scoped, no_ip, count = (int(f) for f in fields[1:7])
    inodes = [int(f) for f in fields[7 : 7 + 2 * count]]
    rest = fields[7 + 2 * count :]
    if len(inodes) != 2 * count or len(rest) % 2:
        raise ValueError("a truncated Landlock plan")
    rules = [(rest[i + 1], int(rest[i])) for i in range(0, len(rest), 2)]
    denied = set(zip(inodes[::2], inodes[1::2], strict=True))
    return Plan(abi, fs, net, scoped, rules, denied, bool(no_ip))


def ip_filter_supported() -> bool:
    """True where the launcher can refuse IP sockets with seccomp (x86_64, aarch64)."""
    return sys.platform == "linux" and os.uname().machine in _SECCOMP_ARCH


def ip_socket_filter(machine: str) -> list[tuple[int, int, int, int]]:
    """The classic-BPF seccomp program refusing IPv4 and IPv6 sockets with EACCES:
    (code, jump if true, jump if false, k) per instruction. Also refused: a syscall
    of another ABI (x32, or 32-bit ``int 0x80``, whose socket numbers differ) and
    ``io_uring_setup`` (io_uring's socket operation bypasses the socket syscall)."""
    arch, nr_socket = _SECCOMP_ARCH[machine]
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | 13  # SECCOMP_RET_ALLOW, RET_ERRNO | EACCES
    return [
        (load, 0, 0, 4),  # 0: seccomp_data.arch
        (jeq, 0, 8, arch),  # 1: another ABI: deny
        (load, 0, 0, 0),  # 2: seccomp_data.nr
        (jge, 6, 0, _X32_BIT),  # 3: x32: deny
        (jeq, 5, 0, _NR_IO_URING_SETUP),  # 4: deny
        (jeq, 0, 3, nr_socket),  # 5: not socket: allow
        (load, 0, 0, 16),  # 6: args[0], the domain (low half, little-endian)
        (jeq, 2, 0, 2),  # 7: AF_INET: deny
        (jeq, 1, 0, 10),  # 8: AF_INET6: deny
        (ret, 0, 0, allow),  # 9
        (ret, 0, 0, deny),  # 10
    ]


def _deny_ip_sockets() -> None:
    program = ip_socket_filter(os.uname().machine)
    filters = (_SockFilter * len(program))(*(_SockFilter(*i) for i in program))
    prog = _SockFprog(len(program), filters)
    args = (_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0)
    if _libc().prctl(*(ctypes.c_ulong(a) for a in args)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")


def restrict(plan: Plan) -> None:
    """Confine this process (and what it execs) to ``plan``. Irreversible.

    A rule path opened as a symlink (swapped in since the plan was made), gone, or
    holding a denied inode gets no rule: a change since planning can only take access
    away.

    Raises:
        OSError: the kernel refused the ruleset (the caller must not exec).
    """
    attr = _RulesetAttr(plan.fs, plan.net, plan.scoped)
    size = 8 if plan.abi < 4 else 16 if plan.abi < 6 else 24  # the struct that ABI knows
    ruleset = _syscall(_NR_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        for path, access in plan.rules:
            _add_rule(ruleset, path, access & plan.fs, plan.denied)
        _drop_capabilities()
        if _prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"no_new_privs: {os.strerror(err)}")
        if plan.no_ip:
            _deny_ip_sockets()
        _syscall(_NR_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def _add_rule(ruleset: int, path: bytes, access: int, denied: set[tuple[int, int]]) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # gone since the plan was made
    try:
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode) or (st.st_dev, st.st_ino) in denied:
            return
        if not stat.S_ISDIR(st.st_mode):
            access &= FILE_RIGHTS  # folder rights on a file are EINVAL
        if access:
            rule = _PathBeneathAttr(access, fd)
            _syscall(
                _NR_ADD_RULE,
                ctypes.c_int(ruleset),
                ctypes.c_int(_RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            )
    finally:
        os.close(fd)


def _prctl(option: int, arg: int) -> int:
    # Every argument as unsigned long: prctl is variadic, and some options refuse
    # (EINVAL) unused arguments that are not zero.
    args = (option, arg, 0, 0, 0)
    return int(_libc().prctl(*(ctypes.c_ulong(a) for a in args)))


def _drop_capabilities() -> None:
    """No capability survives into the command, even for a root caller (as bwrap's
    ``--cap-drop ALL``): the bounding set goes (root's exec would refill the others
    from it), then the ambient set and this process's own sets."""
    libc = _libc()
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        if _prctl(_PR_CAPBSET_DROP, cap) != 0:
            break  # EPERM: no CAP_SETPCAP, so no capability to pass on either
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)  # EINVAL before 4.3: none to clear
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero
    if libc.capset(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")


# ------------------------------------------------------------------ the command's tree

_CLONE_NEWNS, _CLONE_NEWPID, _CLONE_NEWUSER = 0x00020000, 0x20000000, 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
# Signals a supervisor ignores (the harness's SIGTERM is for the command) and the
# command gets back at their defaults (Python starts with SIGPIPE ignored).
_SUPERVISOR_IGNORES = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
_COMMAND_DEFAULTS = (*_SUPERVISOR_IGNORES, "SIGPIPE", "SIGXFSZ")
_MAX_KILL_ROUNDS = 1000


def _own_pid_namespace() -> bool:
    """Unshare a PID and a mount namespace; the next child forked is their init. Root
    may (CAP_SYS_ADMIN); an ordinary user through a user namespace of its own, where
    the kernel allows one, mapping only its own uid and gid to themselves. False where
    the kernel refuses both."""
    libc = _libc()
    if int(libc.unshare(ctypes.c_int(_CLONE_NEWPID | _CLONE_NEWNS))) == 0:
        return True
    uid, gid = os.getuid(), os.getgid()
    if int(libc.unshare(ctypes.c_int(_CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS))) != 0:
        return False
    try:  # until the maps are written the process has no uid here: nothing may run
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{uid} {uid} 1"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w", encoding="ascii") as f:
                f.write(text)
    except OSError:
        os._exit(_EXIT_SANDBOX)
    return True


def _mount_own_proc() -> None:
    """In the new mount namespace: nothing propagates back to the host (private), and
    a fresh ``/proc`` that shows this PID namespace only. Left as it is on failure."""
    libc = _libc()
    if libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None) != 0:
        return  # never mount over a /proc that could propagate to the host
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    libc.mount(b"proc", b"/proc", b"proc", flags, None)


def _signals(names: tuple[str, ...], handler: object) -> None:
    for name in names:
        _signal.signal(getattr(_signal, name), handler)


def _exec(command: list[str]) -> None:
    """In the forked child: signals back at their defaults, then exec (never returns)."""
    _signals(_COMMAND_DEFAULTS, _signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        os.write(2, f"{command[0]}: command not found\n".encode())
        os._exit(_EXIT_NOT_FOUND)
    except OSError as exc:
        os.write(2, f"{command[0]}: cannot run: {exc.strerror}\n".encode())
        os._exit(_EXIT_NOT_EXECUTABLE)
    os._exit(_EXIT_SANDBOX)  # not reached: execvp returns only by raising


def descendants(leader: int) -> list[tuple[int, int]]:
    """(pid, process group) of every live descendant of ``leader`` (from /proc; zombies
    left out). Shared with ``_process``, which kills a command's tree the same way."""
    children: dict[int, list[int]] = {}
    groups: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b") ", 1)[1].split()
        except (OSError, IndexError):  # gone meanwhile, or not ours to read
            continue
        if fields[0] == b"Z":
            continue  # dead already, waiting for its parent
        pid, ppid, pgrp = int(entry), int(fields[1]), int(fields[2])
        children.setdefault(ppid, []).append(pid)
        groups[pid] = pgrp
    found: list[tuple[int, int]] = []
    todo = list(children.get(leader, []))
    while todo:
        pid = todo.pop()
        found.append((pid, groups[pid]))
        todo += children.get(pid, [])
    return found


def _reap_all(block: bool) -> bool:
    """Reap every exited child; False once this process has no child left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return False
        except InterruptedError:
            continue
        if pid == 0:
            return True
        block = False


def _kill_the_rest(init: bool) -> None:
    """Kill every process the command left behind, ``setsid`` or not: the whole PID
    namespace from its init, else every descendant (orphans come to this subreaper),
    round after round until none is left (a fork bomb forks while it is killed)."""
    import time

    for _ in range(_MAX_KILL_ROUNDS):
        if init:
            _kill(-1)  # from init: all of the namespace but itself
            if not _reap_all(block=True):
                return
            continue
        left = descendants(os.getpid())
        if not left:
            _reap_all(block=False)
            return
        for pid, _ in left:
            _kill(pid)
        _reap_all(block=False)
        time.sleep(0.001)  # let the killed die before the next look


def _kill(pid: int) -> None:
    try:
        os.kill(pid, _signal.SIGKILL)
    except ProcessLookupError:  # gone already (contextlib costs a command its import)
        return


def _supervise(plan: Plan | None, command: list[str], *, init: bool) -> int:
    """Confine this process (``plan``), run ``command`` as its child, reap whatever
    comes to it, and once the command has exited kill everything it left. Returns the
    command's wait status."""
    if plan is not None:
        restrict(plan)
    if not init:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)  # orphans of the command's tree come here
    child = os.fork()
    if child == 0:
        _exec(command)
    _signals(_SUPERVISOR_IGNORES, _signal.SIG_IGN)
    status = (_EXIT_SANDBOX & 0xFF) << 8
    while True:
        try:
            pid, waited = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child:
            status = waited
            break
    _kill_the_rest(init)
    return status


def _exit_as(status: int) -> int:
    """End this process as the command ended: its exit code, or its signal raised."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (_signal.SIGKILL, _signal.SIGSTOP):  # no handler to reset there
            _signal.signal(sig, _signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig  # a signal this process cannot die of (SIGSTOP...)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else _EXIT_SANDBOX


def main(argv: list[str]) -> int:
    """``_landlock_exec.py PLAN|- -- PROGRAM ARG...``: the command, confined by ``PLAN``
    (``-``: no Landlock, supervision only), in its own PID namespace where the kernel
    allows it, every process it leaves killed when it exits."""
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: _landlock_exec.py PLAN|- -- PROGRAM [ARG...]\n")
        return _EXIT_SANDBOX
    command = argv[3:]
    try:
        plan = None
        if argv[1] != "-":
            with open(argv[1], "rb") as f:
                plan = decode_plan(f.read())
        if not _own_pid_namespace():
            return _exit_as(_supervise(plan, command, init=False))
        status_r, status_w = os.pipe()
        alive_r, alive_w = os.pipe()  # end of file once the launcher is gone
        init = os.fork()  # pid 1 of the new namespace
        if init == 0:
            os.close(status_r)
            os.close(alive_w)
            _prctl(_PR_SET_PDEATHSIG, _signal.SIGKILL)  # the launcher killed: all go
            os.set_blocking(alive_r, False)
            try:
                if os.read(alive_r, 1) == b"":
                    os._exit(_EXIT_SANDBOX)  # killed before the line above took hold
            except BlockingIOError:
                pass
            _mount_own_proc()
            os.write(status_w, b"%d" % _supervise(plan, command, init=True))
            os._exit(0)
        os.close(status_w)
        os.close(alive_r)
        _signals(_SUPERVISOR_IGNORES, _signal.SIG_IGN)
        os.waitpid(init, 0)
        with os.fdopen(status_r, "rb") as f:
            said = f.read()
        return _exit_as(int(said)) if said else _EXIT_SANDBOX
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"harnessnb: the Landlock sandbox could not be applied ({exc}); ")
        sys.stderr.write("the command did not run\n")
        return _EXIT_SANDBOX


if __name__ == "__main__":
    sys.exit(main(sys.argv))
