"""Which paths a Landlock-confined command may touch and how: the ruleset, by ABI.

Pure apart from listing folders (``lister``, injectable): ``tools/_sandbox`` builds a
``Ruleset`` here and hands it (``Ruleset.encode``) to ``tools/_landlock_exec``, which
applies it to itself before exec.

Landlock rules are an allow-list of file hierarchies: a right granted on a folder holds
for everything beneath it, and nothing beneath can be carved out. So a folder holding a
path the command must not read gets folder rights only (list it; in the workspace also
create, write), and its other entries get the read rights one by one, recursing
towards each denied path (``carve``). Such a folder also loses the rights to remove,
rename or link out what it holds: otherwise ``mv .env notes`` would give the secret an
innocent name that the next command (or ``read_file``) may read. Consequences, told in
README's security model:

* an entry created in such a folder after the plan was made (a new file beside
  ``.env``) is not readable by the command that made it: it has no rule of its own
  until the next command's plan grants it (each command gets a fresh ruleset);
* names stay listable everywhere (listing is a folder right), contents do not;
* in the workspace a secret file can be overwritten (writing is granted on its
  folder), never read, moved or removed; nor can anything else directly in a folder
  on the way to a denied path (``rm`` or ``mv`` of a top-level file beside ``.env``
  fails; inside its subfolders everything works).

What a command gets: read and execute on the whole filesystem except the host's
``/tmp``, ``/dev``, the real home's credential files and the workspace; the workspace
read, written and executed except its secret paths (read denied); its private scratch
``TMPDIR`` (holding ``HOME``) entirely; the programs on PATH that live under ``/tmp``
read-only; ``/dev/null``, ``zero``, ``full``, ``random``, ``urandom`` and ``tty``; no
ioctl on a device (ABI >= 5).
Without network (ABI >= 4): no TCP connect or bind. UDP and other IP sockets are not
Landlock's to refuse: the launcher's seccomp filter refuses every IPv4/IPv6 socket
where it is built (``no_ip``; x86_64 and aarch64), and the label says which holds.
Unix sockets named in the filesystem stay reachable. ABI >= 6 also scopes abstract
Unix sockets (when network is denied) and signals to the command's own domain.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection, Iterable

from ._landlock_exec import (
    FILE_RIGHTS,
    FS_ABI1,
    FS_EXECUTE,
    FS_IOCTL_DEV,
    FS_READ_DIR,
    FS_READ_FILE,
    FS_REFER,
    FS_REMOVE_DIR,
    FS_REMOVE_FILE,
    FS_TRUNCATE,
    FS_WRITE_FILE,
    NET_BIND_TCP,
    NET_CONNECT_TCP,
    SCOPE_ABSTRACT_UNIX_SOCKET,
    SCOPE_SIGNAL,
    Plan,
    encode_plan,
)

__all__ = ["DEVICES", "READ", "Ruleset", "build", "carve", "handled", "label", "list_children"]

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# What a folder holding a denied path loses of a grant: the contents, and moving or
# removing entries (a secret renamed would lose the name that denies it).
_HOLDER_LOSES = FS_READ_FILE | FS_EXECUTE | FS_REMOVE_FILE | FS_REMOVE_DIR | FS_REFER
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
_DEVICE_RIGHTS = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE

# A folder's children as (path, is_folder); None for what gets no rule (symlinks:
# reached through them, the target is judged where it lives).
Lister = Callable[[str], Iterable[tuple[str, bool | None]]]


def handled(abi: int, *, net: bool) -> tuple[int, int, int]:
    """The rights this ABI can handle: (filesystem, network, scopes), best effort as
    the kernel documentation's sample does (a right an older ABI does not know is
    dropped; below ABI 2 a link or rename into another folder is always refused)."""
    fs = FS_ABI1
    if abi >= 2:
        fs |= FS_REFER
    if abi >= 3:
        fs |= FS_TRUNCATE
    if abi >= 5:
        fs |= FS_IOCTL_DEV
    tcp = 0 if net or abi < 4 else NET_BIND_TCP | NET_CONNECT_TCP
    scoped = 0
    if abi >= 6:
        # Abstract sockets are the network namespace's: denied with the network.
        scoped = SCOPE_SIGNAL | (0 if net else SCOPE_ABSTRACT_UNIX_SOCKET)
    return fs, tcp, scoped


def label(abi: int, *, net: bool, no_ip: bool) -> str:
    """How every surface names a Landlock command's containment, truthfully: by
    whether IP sockets are refused (seccomp) and what the ABI refuses."""
    if net:
        return "sandbox: landlock, network allowed"
    if no_ip:
        return "sandbox: landlock, no network"
    if abi >= 4:
        return "sandbox: landlock, no TCP (UDP not blocked)"
    return f"sandbox: landlock, network not blocked (kernel Landlock ABI {abi} < 4)"


@dataclasses.dataclass(frozen=True)
class Ruleset:
    """A Landlock ruleset as ``tools/_landlock_exec`` applies it.

    ``denied`` holds the (device, inode) of every denied file: a rule path that is
    one of them when applied (replaced by a hard link since planning) gets no rule.
    """

    abi: int
    fs: int
    net: int
    scoped: int
    rules: tuple[tuple[str, int], ...]
    denied: tuple[tuple[int, int], ...] = ()
    no_ip: bool = False  # IPv4/IPv6 sockets refused by the launcher's seccomp filter

    def encode(self) -> bytes:
        """The plan as ``tools/_landlock_exec`` reads it."""
        rules = [(os.fsencode(path), rights) for path, rights in self.rules]
        denied = set(self.denied)
        plan = Plan(self.abi, self.fs, self.net, self.scoped, rules, denied, self.no_ip)
        return encode_plan(plan)

    def access(self, path: str) -> int:
        """The rights ``path`` gets: the union of the rules on it and its ancestors
        (how Landlock judges; for tests and for reading a plan)."""
        got = 0
        for rule_path, rights in self.rules:
            if _beneath(path, rule_path):
                got |= rights
        return got & self.fs


def build(
    abi: int,
    *,
    workspace: str,
    tmp: str,
    secrets: Collection[str],
    hidden: Collection[str],
    host_tmp: str = "/tmp",
    readable: Collection[str] = (),
    net: bool,
    ip_filter: bool = False,
    denied: Collection[tuple[int, int]] = (),
    lister: Lister | None = None,
) -> Ruleset:
    """The ruleset for one command.

    Args:
        workspace: Read, written, executed, except ``secrets`` (never readable).
        tmp: The private scratch folder (``TMPDIR``, holding ``HOME``): every right.
        secrets: Workspace paths the policy denies reading (and hard links to them).
        hidden: Paths never readable (the real home's credential files).
        host_tmp: The host's temporary folder: not readable, but the workspace,
            ``tmp`` and ``readable`` may lie beneath it (as ``/dev``: only the
            devices above are granted there).
        readable: Folders under ``host_tmp`` to read and execute (programs on PATH).
        net: The command may use the network (no TCP rights handled).
        ip_filter: The launcher can refuse IP sockets here (``no_ip`` when not ``net``).
    """
    lister = list_children if lister is None else lister
    fs, tcp, scoped = handled(abi, net=net)
    everything = fs & ~FS_IOCTL_DEV  # no device ioctl anywhere
    no_read = {*secrets, *hidden}
    rules = carve("/", READ, {*no_read, host_tmp, "/dev", workspace}, lister)
    for folder in readable:
        rules += carve(folder, READ, no_read, lister)  # none beneath a credential path
    rules += carve(workspace, everything, no_read, lister)
    rules.append((tmp, everything))
    rules += [(device, _DEVICE_RIGHTS) for device in DEVICES]
    masked = tuple((path, rights & fs) for path, rights in rules if rights & fs)
    no_ip = ip_filter and not net
    return Ruleset(abi, fs, tcp, scoped, masked, tuple(sorted(denied)), no_ip)


def carve(
    root: str, access: int, exclude: Collection[str], lister: Lister
) -> list[tuple[str, int]]:
    """Rules granting ``access`` on ``root`` except beneath each ``exclude`` path.

    A folder with an excluded path beneath it keeps ``access`` without the rights to
    read or execute contents and to remove, rename or link out entries; each of its
    children is granted (or carved) on its own.
    Nothing when ``root`` is itself at or beneath an excluded path.
    """
    if any(_beneath(root, path) for path in exclude):
        return []
    above: set[str] = set()  # folders with an excluded path beneath them
    for path in exclude:
        while path != "/" and _beneath(path, root):
            path = os.path.dirname(path)
            above.add(path)
    rules: list[tuple[str, int]] = []
    todo: list[tuple[str, bool]] = [(root, True)]
    while todo:  # a stack, not recursion: depth is the filesystem's
        path, is_folder = todo.pop()
        if path in exclude:
            continue
        if path not in above:
            rules.append((path, access if is_folder else access & FILE_RIGHTS))
            continue
        rules.append((path, access & ~_HOLDER_LOSES))
        todo += [(child, kind) for child, kind in lister(path) if kind is not None]
    return rules


def list_children(folder: str) -> list[tuple[str, bool | None]]:
    """A folder's entries as ``carve`` wants them; an unreadable folder has none."""
    found: list[tuple[str, bool | None]] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        try:
            kind = None if entry.is_symlink() else entry.is_dir(follow_symlinks=False)
        except OSError:  # gone meanwhile
            continue
        found.append((entry.path, kind))
    return found


def _beneath(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or inside it (both absolute and normalised)."""
    return path == folder or folder == "/" or path.startswith(folder.rstrip("/") + "/")
