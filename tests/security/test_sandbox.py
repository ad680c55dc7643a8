"""Commands in an OS sandbox, tried as an attacker would: a scripted model calls
``run_command`` through a real ``hn.run`` under ``Policy.permissive()``, with real
processes, a real loopback listener and a real store.

The containment tests run on bubblewrap (``.ci/run`` installs it) and on Landlock
(forced with ``HARNESSNB_SANDBOX=landlock``), each skipped where it cannot run; the
environment and "uncontained" tests run on every backend. What only Landlock does (or
cannot do) is pinned in ``test_sandbox_landlock.py``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.tools._process import run_argv
from harnessnb.tools._sandbox import (
    command_env,
    command_net_allowed,
    landlock_abi,
    sandbox_label,
    secret_env_name,
    secret_paths,
)
from tests.files_helpers import keyed_workspace

FAKE_KEY = "sk-fake-0123456789abcdefSECRET"


def _bubblewrap_here() -> bool:
    try:
        return hn.sandbox_backend() == "bubblewrap"
    except hn.ConfigError:
        return False


needs_bwrap = pytest.mark.skipif(not _bubblewrap_here(), reason="bubblewrap cannot run here")
needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock")
CONTAINED = [
    pytest.param("bubblewrap", marks=needs_bwrap),
    pytest.param("landlock", marks=needs_landlock),
]
BACKENDS = [*CONTAINED, "none"]


def _no_net(backend: str) -> str:
    """The label of a contained command without network, as each backend words it
    (Landlock's by what this kernel and machine can refuse; pinned in its own tests)."""
    return sandbox_label(backend, net=False)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return keyed_workspace(tmp_path / "ws", "hello sandbox\n", FAKE_KEY)


@pytest.fixture
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    name: str = request.param
    monkeypatch.setenv("HARNESSNB_SANDBOX", name)
    return name


def _run(
    ws: Path,
    store: hn.Store,
    *argvs: list[str],
    policy: hn.Policy | None = None,
    approver: Any = None,
    verification: Any = None,
) -> tuple[hn.RunResult, list[str]]:
    """One real run whose scripted model calls ``run_command`` with each argv in turn."""
    replies: list[Any] = [{"tool": "run_command", "args": {"argv": a}} for a in argvs]
    provider = hn.ScriptedProvider([*replies, "done", "done"])
    contract = hn.TaskContract("probe the sandbox", ws, max_steps=len(argvs) + 2)
    if verification is not None:
        contract = hn.TaskContract("probe", ws, verification=verification, max_steps=2)
    result = hn.run_sync(
        contract,
        provider,
        store=store,
        policy=policy or hn.Policy.permissive(),
        approver=approver,
    )
    rows = store.tool_calls(result.run_id).sort_values(["step", "seq"])
    return result, [str(o) for o in rows["output"].tolist()]


# ---------------------------------------------------------------- the backend


def test_the_backend_can_be_forced_and_a_missing_one_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HARNESSNB_SANDBOX", "none")
    assert hn.sandbox_backend() == "none"
    monkeypatch.setenv("HARNESSNB_SANDBOX", "firejail")
    with pytest.raises(hn.ConfigError, match="expected none, bubblewrap or landlock"):
        hn.sandbox_backend()
    monkeypatch.setenv("PATH", str(tmp_path))  # bwrap hidden
    monkeypatch.delenv("HARNESSNB_SANDBOX")
    assert hn.sandbox_backend() == ("landlock" if landlock_abi() >= 1 else "none")
    monkeypatch.setenv("HARNESSNB_SANDBOX", "bubblewrap")
    with pytest.raises(hn.ConfigError, match="bwrap"):
        hn.sandbox_backend()


@needs_bwrap
def test_bubblewrap_is_chosen_where_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESSNB_SANDBOX", raising=False)
    assert hn.sandbox_backend() == "bubblewrap"


# ---------------------------------------------------------------- containment (bubblewrap)


@pytest.mark.parametrize("backend", CONTAINED, indirect=True)
def test_a_command_cannot_read_secret_files_even_through_a_hard_link(
    ws: Path, store: hn.Store, backend: str
) -> None:
    os.link(ws / ".env", ws / "notes.txt")
    (ws / "sub").mkdir()
    (ws / "sub" / ".env").write_text(f"KEY={FAKE_KEY}\n")
    result, outputs = _run(
        ws,
        store,
        ["cat", ".env"],
        ["cat", "notes.txt"],
        ["cat", "sub/.env"],
        ["grep", "-r", "sk-", "."],
        ["cat", "README.md"],
    )
    assert result.outcome is hn.RunOutcome.FINISHED
    assert all(FAKE_KEY not in out for out in outputs)
    # What a masked secret looks like (README, "Security model"): an empty file under
    # bubblewrap, a file that cannot be opened (EACCES) under Landlock.
    if backend == "bubblewrap":
        assert outputs[0] == outputs[1] == outputs[2] == "exit code 0\n"
    else:
        assert outputs[0].startswith("exit code 1\n") and "Permission denied" in outputs[0]
    assert outputs[-1] == "exit code 0\nhello sandbox\n"
    assert FAKE_KEY in (ws / ".env").read_text()  # masked, not touched


def _private_folder_denied(ws: Path) -> hn.Policy:
    """``private/key.txt`` in ``ws``, holding the fake key; a policy that denies reading
    the folder."""
    (ws / "private").mkdir()
    (ws / "private" / "key.txt").write_text(FAKE_KEY)
    policy = hn.Policy.permissive().layer("app").deny_read("private")
    return policy


@needs_bwrap
@pytest.mark.parametrize("backend", ["bubblewrap"], indirect=True)
def test_a_folder_the_policy_denies_is_empty_to_a_command(
    ws: Path, store: hn.Store, backend: str
) -> None:
    policy = _private_folder_denied(ws)
    _, outputs = _run(ws, store, ["cat", "private/key.txt"], ["ls", "private"], policy=policy)
    assert all(FAKE_KEY not in out for out in outputs)
    assert outputs[1] == "exit code 0\n"


@needs_bwrap
@pytest.mark.parametrize("backend", ["bubblewrap"], indirect=True)
def test_a_command_writes_only_in_the_workspace_and_its_own_tmp(
    ws: Path, store: hn.Store, backend: str
) -> None:
    probe = f"harnessnb-probe-{uuid.uuid4().hex}"
    home_probe = Path.home() / probe
    _, outputs = _run(
        ws,
        store,
        ["sh", "-c", f"echo x > /tmp/{probe} && cat /tmp/{probe}"],
        ["sh", "-c", f"echo x > {home_probe}"],
        ["sh", "-c", f"echo x > {ws.parent / probe}"],
        ["sh", "-c", 'echo x > "$HOME/cache" && echo "$HOME" "$TMPDIR"'],
        ["sh", "-c", "echo made > made.txt"],
    )
    assert outputs[0].startswith("exit code 0") and outputs[0].endswith("\nx\n")
    assert not (Path("/tmp") / probe).exists()  # the command's /tmp was its own
    assert "Read-only file system" in outputs[1] and not home_probe.exists()
    assert not (ws.parent / probe).exists()  # beside the workspace: not on the host
    assert outputs[3].endswith("\n/tmp/home /tmp\n")
    assert (ws / "made.txt").read_text() == "made\n"


def _listener() -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    return server


def _accepted(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except TimeoutError:
        return False
    conn.close()
    return True


def _dial(port: int) -> list[str]:
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2).sendall(b'x')"
    return ["python3", "-c", code]


@contextlib.contextmanager
def _unix_listener(address: str) -> Iterator[socket.socket]:
    """A host service's Unix socket at ``address`` (a path, removed afterwards, or an
    abstract name, starting with NUL), listening like ``_listener``."""
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(address)
        try:
            server.listen(1)
            server.settimeout(0.5)
            yield server
        finally:
            if not address.startswith("\0"):
                os.unlink(address)


def _unix_dial(address: str) -> list[str]:
    return ["python3", "-c", f"import socket; socket.socket(socket.AF_UNIX).connect({address!r})"]


@pytest.mark.parametrize("backend", CONTAINED, indirect=True)
def test_a_command_cannot_reach_a_loopback_listener(
    ws: Path, store: hn.Store, backend: str
) -> None:
    with _listener() as server:
        _, outputs = _run(ws, store, _dial(server.getsockname()[1]))
        assert not _accepted(server)
    refused = ("ConnectionRefusedError", "unreachable", "PermissionError")  # Landlock: EACCES
    assert any(word in outputs[0] for word in refused), outputs[0]


@pytest.mark.parametrize("backend", CONTAINED, indirect=True)
def test_an_explicit_allow_net_star_gives_commands_the_network(
    ws: Path, store: hn.Store, backend: str
) -> None:
    policy = hn.Policy.permissive().layer("app").allow_net("*")
    with _listener() as server:
        _, outputs = _run(ws, store, _dial(server.getsockname()[1]), policy=policy)
        assert _accepted(server)
    assert outputs[0] == "exit code 0\n"


def test_only_an_explicit_rule_for_every_host_opens_the_network() -> None:
    assert not command_net_allowed(hn.Policy.permissive())
    assert not command_net_allowed(hn.Policy.default().with_provider_hosts(["api.openai.com"]))
    assert command_net_allowed(hn.Policy.default().allow_net("*"))
    assert not command_net_allowed(hn.Policy.default().allow_net("*").deny_net("evil.test"))
    assert not command_net_allowed(hn.Policy.permissive().deny_net("*"))


@pytest.mark.parametrize("backend", CONTAINED, indirect=True)
async def test_a_timeout_kills_the_sandboxed_tree(ws: Path, backend: str) -> None:
    script = "(while :; do echo x >> beat.txt; sleep 0.05; done) & echo started; sleep 30"
    started = time.monotonic()
    result = await run_argv(["sh", "-c", script], cwd=ws, timeout_s=0.5)
    assert result.timed_out and result.output == "started\n"
    assert time.monotonic() - started < 4
    size = (ws / "beat.txt").stat().st_size
    time.sleep(0.3)
    assert (ws / "beat.txt").stat().st_size == size  # the background loop is gone


# ---------------------------------------------------------------- every backend


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_command_never_sees_a_provider_key(
    ws: Path, store: hn.Store, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.setenv("GITHUB_TOKEN", FAKE_KEY)
    monkeypatch.setenv("DB_PASSWORD", FAKE_KEY)
    _, outputs = _run(ws, store, ["printenv", "OPENAI_API_KEY"], ["env"])
    assert outputs[0] == "exit code 1\n"  # printenv: not set
    names = {line.split("=", 1)[0] for line in outputs[1].splitlines()[1:]}
    assert names <= {"PATH", "LANG", "TERM", "TMPDIR", "HOME", "PWD", "SHLVL", "_"}
    assert all(FAKE_KEY not in out for out in outputs)
    assert FAKE_KEY not in str(store.sql("select * from tool_calls").to_dict())


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("anthropic_api_key", True),
        ("GITHUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_SESSION_TOKEN", True),
        ("DB_PASSWORD", True),
        ("PGPASSWORD", True),
        ("CLIENT_SECRET", True),
        ("SSH_KEY", True),
        ("PATH", False),
        ("LANG", False),
        ("KEYBOARD", False),
        ("PYTHONPATH", False),
    ],
)
def test_which_variable_names_look_secret(name: str, secret: bool) -> None:
    assert secret_env_name(name) is secret


def test_a_secret_looking_name_passed_explicitly_is_dropped_too() -> None:
    env = command_env({"FOO": "1", "MY_API_KEY": "x", "X_TOKEN": "y"}, home="/h", tmp="/t")
    assert set(env) == {"PATH", "LANG", "TERM", "TMPDIR", "HOME", "FOO"}
    assert (env["HOME"], env["TMPDIR"]) == ("/h", "/t")


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_the_approval_and_the_tool_row_name_the_containment_the_model_text_does_not(
    ws: Path, store: hn.Store, backend: str
) -> None:
    asked: list[hn.ApprovalRequest] = []

    def approver(request: hn.ApprovalRequest) -> bool:
        asked.append(request)
        return True

    policy = hn.Policy.default()  # exec asks
    result, outputs = _run(ws, store, ["cat", "README.md"], policy=policy, approver=approver)
    said = f"sandbox: {backend}" if backend != "none" else "uncontained: no sandbox backend"
    assert said in asked[0].preview
    # The model's text is the same on every backend (a recording replays anywhere);
    # the row says where the command ran.
    assert outputs[0] == "exit code 0\nhello sandbox\n"  # a normal command works either way
    rows = store.tool_calls(result.run_id)
    assert rows["sandbox"].tolist() == [backend]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_command_verification_runs_in_the_same_sandbox(
    ws: Path, store: hn.Store, backend: str
) -> None:
    check = hn.Command(["grep", "-q", "sk-fake", ".env"])
    result, _ = _run(ws, store, verification=check)
    # Only the sandbox hides .env from the check; uncontained, it reads it.
    assert result.verified is (backend == "none")
    made = hn.Command(["sh", "-c", "echo ok > checked.txt"])
    result, _ = _run(ws, store, verification=made)
    assert result.verified is True and (ws / "checked.txt").read_text() == "ok\n"


def test_secret_paths_follow_the_policy_verdict(ws: Path) -> None:
    (ws / "deep" / "er").mkdir(parents=True)
    (ws / "deep" / "er" / "server.pem").write_text("x")
    os.link(ws / ".env", ws / "deep" / "alias")
    found = {p.relative_to(ws).as_posix() for p in secret_paths(ws, hn.Policy.default())}
    assert found == {".env", "deep/er/server.pem", "deep/alias"}
    assert secret_paths(ws, hn.Policy.permissive(secrets=False)) == []


def test_a_secret_added_after_a_walk_is_masked_by_the_next_one(ws: Path) -> None:
    policy = hn.Policy.default()
    (ws / "src").mkdir()
    assert {p.name for p in secret_paths(ws, policy)} == {".env"}
    (ws / "src" / "server.pem").write_text("x")
    os.link(ws / ".env", ws / "src" / "copy.txt")
    assert {p.name for p in secret_paths(ws, policy)} == {".env", "server.pem", "copy.txt"}
    (ws / "src" / "server.pem").unlink()
    assert {p.name for p in secret_paths(ws, policy)} == {".env", "copy.txt"}


@pytest.mark.parametrize("backend", CONTAINED, indirect=True)
async def test_a_workspace_too_large_to_scan_refuses_the_command(
    ws: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harnessnb.tools import _sandbox

    monkeypatch.setattr(_sandbox, "MAX_SCAN_ENTRIES", 1)
    with pytest.raises(hn.SandboxError, match="too many to scan"):
        await run_argv(["true"], cwd=ws, timeout_s=5)


@pytest.mark.parametrize("backend", CONTAINED, indirect=True)
def test_a_command_holds_no_capability_even_when_the_caller_is_root(
    ws: Path, store: hn.Store, backend: str
) -> None:
    probe = Path("/etc") / f"harnessnb-probe-{uuid.uuid4().hex}"
    script = f"mount -o remount,rw / ; touch {probe}; grep CapEff /proc/self/status"
    _, outputs = _run(ws, store, ["sh", "-c", script])
    assert not probe.exists()
    assert "CapEff:\t0000000000000000" in outputs[0]


@needs_bwrap
@pytest.mark.skipif(not os.access("/run", os.W_OK), reason="needs a writable /run")
@pytest.mark.parametrize("backend", ["bubblewrap"], indirect=True)
def test_a_command_cannot_reach_a_host_service_socket(
    ws: Path, store: hn.Store, backend: str
) -> None:
    path = f"/run/harnessnb-probe-{uuid.uuid4().hex}.sock"
    with _unix_listener(path) as server:
        _, outputs = _run(ws, store, _unix_dial(path))
        assert not _accepted(server)
    # masked by a read-only empty file: connect needs write permission on it
    assert "ConnectionRefusedError" in outputs[0] or "PermissionError" in outputs[0]


@pytest.mark.parametrize("backend", CONTAINED, indirect=True)
def test_the_credential_files_of_the_real_home_are_masked(
    ws: Path, store: hn.Store, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Path(tempfile.mkdtemp(dir="/var/tmp"))  # not under /tmp, which is private anyway
    try:
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_ed25519").write_text(FAKE_KEY)
        (home / ".netrc").write_text(FAKE_KEY)
        (home / ".claude").mkdir()  # the agent CLIs' logins
        (home / ".claude" / ".credentials.json").write_text(FAKE_KEY)
        (home / ".claude" / "settings.json").write_text("plain\n")
        (home / ".codex").mkdir()
        (home / ".codex" / "auth.json").write_text(FAKE_KEY)
        (home / ".profile").write_text("plain\n")
        monkeypatch.setenv("HOME", str(home))
        _, outputs = _run(
            ws,
            store,
            ["cat", f"{home}/.ssh/id_ed25519"],
            ["cat", f"{home}/.netrc"],
            ["cat", f"{home}/.claude/.credentials.json"],
            ["cat", f"{home}/.codex/auth.json"],
            ["cat", f"{home}/.profile"],
            ["cat", f"{home}/.claude/settings.json"],
        )
    finally:
        shutil.rmtree(home)
    assert all(FAKE_KEY not in out for out in outputs)
    assert outputs[4].endswith("\nplain\n")  # the rest of the host stays readable
    assert outputs[5].endswith("\nplain\n")


@pytest.mark.parametrize("backend", CONTAINED, indirect=True)
def test_programs_that_live_under_the_host_tmp_still_run(
    ws: Path, store: hn.Store, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A virtual environment made with mktemp (as CI makes one) sits under /tmp, which
    the sandbox replaces with a private one: its programs must stay reachable, read-only,
    while the rest of the host's /tmp stays hidden."""
    import shutil
    import sys
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="harnessnb-bin-", dir="/tmp"))
    try:
        tool = folder / "bin" / "hello-from-tmp"
        tool.parent.mkdir()
        tool.write_text("#!/bin/sh\necho hello from tmp\n")
        tool.chmod(0o755)
        (folder / "other.txt").write_text("not on PATH\n")
        monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
        _, outputs = _run(ws, store, ["hello-from-tmp"], [sys.executable, "-c", "print(42)"],
                          ["cat", str(folder / "other.txt")],
                          ["sh", "-c", f"echo x > {tool.parent}/new"])  # fmt: skip
        assert outputs[0].endswith("\nhello from tmp\n"), outputs[0]
        assert outputs[1].endswith("\n42\n"), outputs[1]
        # The rest of the host /tmp stays hidden (Landlock cannot hide a name: EACCES).
        assert "No such file" in outputs[2] or "Permission denied" in outputs[2]
        assert not (tool.parent / "new").exists()  # and what is bound back is read-only
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_the_run_card_names_the_containment(ws: Path, store: hn.Store, backend: str) -> None:
    result, _ = _run(ws, store, ["true"])
    expected = f"sandbox: {backend}" if backend != "none" else "uncontained"
    assert result.commands is not None and expected in result.commands
    assert f"commands: {result.commands}" in result.summary_text()
    html = result._repr_mimebundle_()["text/html"]
    assert "commands" in html and expected in html
