"""The Landlock backend: its rules by ABI (pure, on a made-up tree), then real commands
through ``run_command`` under ``Policy.permissive()``, with Landlock forced
(``HARNESSNB_SANDBOX=landlock``) and chosen on its own with ``bwrap`` gone from PATH.

The shared attacks (secret files, loopback, capabilities, the real home's credential
files, timeouts) also run on Landlock in ``test_sandbox.py``; here is what only
Landlock does, or cannot do. The real-run tests skip where the kernel has no Landlock.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb.tools import _landlock
from harnessnb.tools._landlock_exec import (
    FILE_RIGHTS,
    FS_ABI1,
    FS_EXECUTE,
    FS_IOCTL_DEV,
    FS_MAKE_REG,
    FS_READ_DIR,
    FS_READ_FILE,
    FS_REFER,
    FS_REMOVE_FILE,
    FS_TRUNCATE,
    FS_WRITE_FILE,
    NET_BIND_TCP,
    NET_CONNECT_TCP,
    SCOPE_ABSTRACT_UNIX_SOCKET,
    SCOPE_SIGNAL,
    decode_plan,
    ip_filter_supported,
)
from harnessnb.tools._sandbox import _LAUNCHER, landlock_abi
from tests.security import test_sandbox
from tests.security.seccomp_helpers import refusing
from tests.security.test_sandbox import (
    FAKE_KEY,
    _accepted,
    _dial,
    _listener,
    _private_folder_denied,
    _run,
    _unix_dial,
    _unix_listener,
)

ABI = landlock_abi()
needs_landlock = pytest.mark.skipif(ABI < 1, reason="this kernel has no Landlock")
IP_FILTER = ip_filter_supported()
# What a command without network is told here: no IP socket at all where the
# launcher's seccomp filter is built (x86_64, aarch64), else no TCP (ABI >= 4).
TCP = (
    "sandbox: landlock, no network" if IP_FILTER else "sandbox: landlock, no TCP (UDP not blocked)"
)

# ---------------------------------------------------------------- the rules, pure

TCP_BOTH = NET_BIND_TCP | NET_CONNECT_TCP
SCOPES = SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET


@pytest.mark.parametrize(
    ("abi", "net", "expected"),
    [
        (1, False, (FS_ABI1, 0, 0)),
        (2, False, (FS_ABI1 | FS_REFER, 0, 0)),
        (3, False, (FS_ABI1 | FS_REFER | FS_TRUNCATE, 0, 0)),
        (4, False, (FS_ABI1 | FS_REFER | FS_TRUNCATE, TCP_BOTH, 0)),
        (4, True, (FS_ABI1 | FS_REFER | FS_TRUNCATE, 0, 0)),
        (5, False, (FS_ABI1 | FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV, TCP_BOTH, 0)),
        (6, False, ((1 << 16) - 1, TCP_BOTH, SCOPES)),
        (6, True, ((1 << 16) - 1, 0, SCOPE_SIGNAL)),
        (7, False, ((1 << 16) - 1, TCP_BOTH, SCOPES)),
        (9, False, ((1 << 16) - 1, TCP_BOTH, SCOPES)),  # newer: what we know of
    ],
)
def test_the_rights_handled_follow_the_abi(
    abi: int, net: bool, expected: tuple[int, int, int]
) -> None:
    assert _landlock.handled(abi, net=net) == expected


@pytest.mark.parametrize(
    ("abi", "net", "no_ip", "said"),
    [
        (7, False, True, "sandbox: landlock, no network"),
        (1, False, True, "sandbox: landlock, no network"),
        (7, False, False, "sandbox: landlock, no TCP (UDP not blocked)"),
        (4, False, False, "sandbox: landlock, no TCP (UDP not blocked)"),
        (3, False, False, "sandbox: landlock, network not blocked (kernel Landlock ABI 3 < 4)"),
        (1, True, False, "sandbox: landlock, network allowed"),
        (7, True, False, "sandbox: landlock, network allowed"),
    ],
)
def test_the_label_says_what_is_in_force(abi: int, net: bool, no_ip: bool, said: str) -> None:
    assert _landlock.label(abi, net=net, no_ip=no_ip) == said


TREE = {  # folder -> children (True: a folder, False: a file, None: a symlink)
    "/": {"etc": True, "root": True, "tmp": True, "dev": True, "w": True, "vmlinuz": None},
    "/root": {".ssh": True, ".profile": False},
    "/w": {"ws": True, "other": True},
    "/w/ws": {".env": False, "README.md": False, "src": True, "sub": True, "ln": None},
    "/w/ws/sub": {".env": False, "a.txt": False},
}


def _lister(folder: str) -> list[tuple[str, bool | None]]:
    children = TREE.get(folder, {})
    return [(os.path.join(folder, name), kind) for name, kind in children.items()]


def _plan(abi: int = 7, net: bool = False) -> _landlock.Ruleset:
    return _landlock.build(
        abi,
        workspace="/w/ws",
        tmp="/tmp/scratch/tmp",
        secrets=["/w/ws/.env", "/w/ws/sub/.env"],
        hidden=["/root/.ssh"],
        readable=["/tmp/venv"],
        net=net,
        lister=_lister,
    )


def test_reading_is_granted_entry_by_entry_around_each_secret() -> None:
    rules = dict(_plan().rules)
    read = FS_READ_FILE | FS_EXECUTE
    assert rules["/"] == FS_READ_DIR  # names everywhere, contents below
    assert rules["/etc"] & read == read and rules["/w/other"] & read == read
    assert "/root/.ssh" not in rules and rules["/root/.profile"] & read
    assert not {"/tmp", "/dev", "/w/ws/.env", "/w/ws/sub/.env", "/w/ws/ln", "/vmlinuz"} & set(rules)
    assert rules["/w/ws/README.md"] & ~FILE_RIGHTS == 0  # a file gets file rights only
    assert rules["/w/ws/src"] == (1 << 15) - 1  # a folder with no secret: everything


@pytest.mark.parametrize("abi", [1, 2, 3, 4, 5, 6, 7])
def test_a_plan_reads_no_secret_and_writes_only_the_workspace_and_its_tmp(abi: int) -> None:
    plan = _plan(abi)
    assert all(rights & ~plan.fs == 0 for _, rights in plan.rules)
    assert all(rights & FS_IOCTL_DEV == 0 for _, rights in plan.rules)
    for secret in ("/w/ws/.env", "/w/ws/sub/.env", "/root/.ssh/id_ed25519", "/tmp/x", "/dev/sda"):
        assert plan.access(secret) & (FS_READ_FILE | FS_EXECUTE) == 0, secret
    for path in ("/etc/passwd", "/w/other/f", "/tmp/venv/bin/python", "/w/ws/src/m.py"):
        assert plan.access(path) & FS_READ_FILE, path
    writes = FS_WRITE_FILE | FS_MAKE_REG
    for path in ("/w/ws/README.md", "/w/ws/new.txt", "/w/ws/src/x", "/tmp/scratch/tmp/h"):
        assert plan.access(path) & writes == writes, path
    for path in ("/etc/passwd", "/w/other/f", "/root/.profile", "/tmp/venv/x", "/tmp/y"):
        assert plan.access(path) & writes == 0, path
    assert plan.access("/dev/null") & FS_WRITE_FILE
    # A secret's folder cannot give it another name: no remove, rename or link out.
    assert plan.access("/w/ws/.env") & (FS_REMOVE_FILE | FS_REFER) == 0
    assert plan.access("/w/ws/src/x") & FS_REMOVE_FILE


# ---------------------------------------------------------------- real commands

ws = test_sandbox.ws  # the same workspace fixture: a README and a .env holding a key


def _path_without_bwrap(folder: Path) -> str:
    """A PATH folder holding every program of the current PATH but ``bwrap``."""
    folder.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(entry):
            continue
        for name in os.listdir(entry):
            link = folder / name
            if name != "bwrap" and not os.path.lexists(link):
                link.symlink_to(os.path.join(entry, name))
    return str(folder)


@pytest.fixture(params=["forced", "chosen"])
def landlock(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> str:
    """Landlock in force: forced, or chosen on its own once bwrap is off PATH."""
    if ABI < 1:
        pytest.skip("this kernel has no Landlock")
    if request.param == "forced":
        monkeypatch.setenv("HARNESSNB_SANDBOX", "landlock")
    else:
        monkeypatch.delenv("HARNESSNB_SANDBOX", raising=False)
        monkeypatch.setenv("PATH", _path_without_bwrap(tmp_path / "bin"))
    assert hn.sandbox_backend() == "landlock"
    return str(request.param)


def test_landlock_is_chosen_when_bwrap_is_missing(landlock: str) -> None:
    assert hn.sandbox_backend() == "landlock"  # the fixture's own check, named


def test_secrets_stay_unreadable_whatever_name_the_command_gives_them(
    ws: Path, store: hn.Store, landlock: str
) -> None:
    os.link(ws / ".env", ws / "notes.txt")
    result, outputs = _run(
        ws,
        store,
        ["cat", ".env"],
        ["cat", "notes.txt"],
        ["sh", "-c", "ln .env again; cat again"],  # a link made after the plan
        ["mv", ".env", "innocent.txt"],
        ["cat", "innocent.txt"],
        ["cat", "README.md"],
    )
    assert result.outcome is hn.RunOutcome.FINISHED
    assert all(FAKE_KEY not in out for out in outputs)
    assert outputs[0] == "exit code 1\ncat: .env: Permission denied\n"
    assert outputs[3].startswith("exit code 1")  # mv refused
    assert (ws / ".env").read_text() == f"OPENAI_API_KEY={FAKE_KEY}\n"
    assert outputs[-1] == "exit code 0\nhello sandbox\n"


def test_a_command_writes_only_in_the_workspace_and_its_own_tmp(
    ws: Path, tmp_path: Path, store: hn.Store, landlock: str
) -> None:
    probe = f"harnessnb-probe-{uuid.uuid4().hex}"
    (ws / "src").mkdir()
    outside = [tmp_path / probe, Path.home() / probe, Path("/tmp") / probe]
    _, outputs = _run(
        ws,
        store,
        [
            "sh",
            "-c",
            'echo t > "$TMPDIR/t" && cat "$TMPDIR/t" && echo h > "$HOME/h" && cat "$HOME/h"',
        ],
        ["sh", "-c", "echo made > src/made.txt && cat src/made.txt && rm src/made.txt"],
        ["sh", "-c", "echo top > top.txt"],
        *[["sh", "-c", f"echo x > {path}"] for path in outside],
    )
    assert outputs[0] == "exit code 0\nt\nh\n"
    assert outputs[1] == "exit code 0\nmade\n"
    assert (ws / "top.txt").read_text() == "top\n"
    for path, out in zip(outside, outputs[3:], strict=True):
        assert "Permission denied" in out and not path.exists(), out


def test_a_file_made_beside_a_secret_is_readable_from_the_next_command_on(
    ws: Path, store: hn.Store, landlock: str
) -> None:
    """The known cost of an allow-list: the folder holding ``.env`` grants no reading,
    so a file created there is readable only once a new plan grants it by name."""
    _, outputs = _run(ws, store, ["sh", "-c", "echo n > new.txt; cat new.txt"], ["cat", "new.txt"])
    assert "cat: new.txt: Permission denied" in outputs[0]
    assert outputs[1] == "exit code 0\nn\n"


def test_a_denied_folder_keeps_its_names_but_not_its_contents(
    ws: Path, store: hn.Store, landlock: str
) -> None:
    policy = _private_folder_denied(ws)
    _, outputs = _run(
        ws, store, ["cat", "private/key.txt"], ["ls", "private"], ["mv", "private", "public"],
        policy=policy,
    )  # fmt: skip
    assert all(FAKE_KEY not in out for out in outputs)
    assert outputs[1] == "exit code 0\nkey.txt\n"  # Landlock cannot hide a name
    assert (ws / "private" / "key.txt").exists()  # and it cannot be renamed out


def test_tcp_is_refused_without_net_and_open_with_allow_net_star(
    ws: Path, store: hn.Store, landlock: str
) -> None:
    open_net = hn.Policy.permissive().layer("app").allow_net("*")
    with _listener() as server:
        _, refused = _run(ws, store, _dial(server.getsockname()[1]))
        assert not _accepted(server)
        _, allowed = _run(ws, store, _dial(server.getsockname()[1]), policy=open_net)
        assert _accepted(server)
    assert refused[0].startswith("exit code 1") and "PermissionError" in refused[0]
    assert allowed[0] == "exit code 0\n"


@pytest.mark.skipif(not IP_FILTER, reason="the IP socket filter is built for x86_64 and aarch64")
def test_udp_and_ipv6_are_refused_without_net_and_open_with_allow_net_star(
    ws: Path, store: hn.Store, landlock: str
) -> None:
    """What Landlock leaves open (UDP: DNS tunnels), the launcher's seccomp filter shuts."""
    open_net = hn.Policy.permissive().layer("app").allow_net("*")
    six = "import socket; socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)"
    unix = "import socket; a, b = socket.socketpair(); a.send(b'u'); print(b.recv(1))"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        server.settimeout(0.5)
        port = server.getsockname()[1]
        udp = "socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
        send = f"import socket; {udp}.sendto(b'k', ('127.0.0.1', {port}))"
        _, refused = _run(
            ws, store, ["python3", "-c", send], ["python3", "-c", six], ["python3", "-c", unix]
        )
        with pytest.raises(TimeoutError):
            server.recvfrom(16)
        _, allowed = _run(ws, store, ["python3", "-c", send], policy=open_net)
        assert server.recvfrom(16)[0] == b"k"
    assert "PermissionError" in refused[0] and "PermissionError" in refused[1]
    assert refused[2] == "exit code 0\nb'u'\n"  # local IPC still works
    assert allowed[0] == "exit code 0\n"


def test_a_command_never_sees_a_provider_key_not_even_through_proc(
    ws: Path, store: hn.Store, landlock: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    _, outputs = _run(
        ws,
        store,
        ["printenv", "OPENAI_API_KEY"],
        ["cat", f"/proc/{os.getpid()}/environ"],  # the harness itself
        ["sh", "-c", f"cat /proc/{os.getpid()}/task/*/environ"],
    )
    assert outputs[0] == "exit code 1\n"
    assert all(FAKE_KEY not in out for out in outputs)
    # Not even there to be refused where the command has its own PID namespace (root).
    assert "Permission denied" in outputs[1] or "No such file" in outputs[1]


@pytest.mark.skipif(ABI < 6, reason="Landlock scopes need ABI 6 (Linux 6.12)")
def test_abstract_sockets_and_signals_outside_the_sandbox_are_refused(
    ws: Path, store: hn.Store, landlock: str
) -> None:
    name = f"\0harnessnb-probe-{uuid.uuid4().hex}"
    with _unix_listener(name) as server:
        _, outputs = _run(ws, store, _unix_dial(name), ["kill", "-0", str(os.getpid())])
        assert not _accepted(server)
    assert "PermissionError" in outputs[0], outputs[0]
    assert outputs[1].startswith("exit code 1")  # kill: Operation not permitted


def test_the_command_never_runs_when_the_ruleset_is_refused(tmp_path: Path) -> None:
    if ABI < 1:
        pytest.skip("this kernel has no Landlock")
    plan = tmp_path / "landlock.plan"
    bad = _landlock.Ruleset(ABI, 1 << 62, 0, 0, (("/", 1 << 62),))
    plan.write_bytes(bad.encode())  # a right no kernel knows: EINVAL
    marker = tmp_path / "ran"
    argv = [sys.executable, "-I", "-S", _LAUNCHER, str(plan), "--", "touch", str(marker)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 125 and not marker.exists()
    assert "could not be applied" in done.stderr


def test_a_plan_reaches_the_launcher_whole_whatever_its_paths_hold() -> None:
    odd = "/w/ws/a\nb\tc d\udcff"  # a newline, a tab, a byte that is not UTF-8
    plan = _landlock.Ruleset(7, 3, 1, 2, (("/", 8), (odd, 5)), ((2049, 7), (2049, 9)))
    back = decode_plan(plan.encode())
    assert (back.abi, back.fs, back.net, back.scoped) == (7, 3, 1, 2)
    assert back.rules == [(b"/", 8), (os.fsencode(odd), 5)]
    assert back.denied == {(2049, 7), (2049, 9)}
    with pytest.raises(ValueError, match="not a harnessnb Landlock plan"):
        decode_plan(b'{"abi": 7}')
    with pytest.raises(ValueError, match="truncated"):
        decode_plan(plan.encode()[:-4].rsplit(b"\0", 1)[0])


# A kernel without Landlock, made real for one interpreter: a seccomp filter answers
# landlock_create_ruleset (444) with ENOSYS, as a kernel built without it does.
NO_LANDLOCK = refusing(
    {"x86_64": 444, "aarch64": 444}, errno.ENOSYS,
    "import harnessnb as hn\nprint(hn.sandbox_backend())\n",
)


@pytest.mark.skipif(not IP_FILTER, reason="the test's seccomp filter is for x86_64 and aarch64")
def test_without_landlock_forcing_it_is_a_config_error_and_none_is_chosen(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PATH": _path_without_bwrap(tmp_path / "bin")}
    env.pop("HARNESSNB_SANDBOX", None)
    argv = [sys.executable, "-c", NO_LANDLOCK]
    chosen = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert chosen.stdout == "none\n", chosen.stderr
    env["HARNESSNB_SANDBOX"] = "landlock"
    forced = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert forced.returncode == 1
    assert "HARNESSNB_SANDBOX=landlock but this kernel has no Landlock" in forced.stderr
