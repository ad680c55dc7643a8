"""The secrets layer under attack: real runs, real tools, a real store file.

A scripted model asks for every kind of secret file the table names, at the root and
nested, in any case, directly (read_file) and sideways (list_dir, find_files, grep).
Every read is refused, no listing names a secret file, and no secret byte reaches the
model, the tool rows or the store file, under the default and the permissive policy.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from tests.files_helpers import SECRET_KINDS

# The same kinds nested deeper, and in upper case (a case-insensitive filesystem
# opens ``.ENV`` as ``.env``).
SECRET_FILES = [
    *SECRET_KINDS,
    *(f"app/config/{path}" for path in SECRET_KINDS),
    "deploy/.ENV.PRODUCTION",
    "deploy/CREDENTIALS.JSON",
    "deploy/.SSH/ID_RSA",
]
PUBLIC_FILES = {
    "README.md": "PUBLIC-TOKEN-readme\n",
    ".ssh/id_rsa.pub": "PUBLIC-TOKEN-ssh-rsa AAAA\n",
    "app/config/settings.toml": "PUBLIC-TOKEN-settings\n",
    ".environment.md": "PUBLIC-TOKEN-envdocs\n",
}
FOLDERS = [
    ".",
    ".aws",
    ".ssh",
    ".docker",
    ".kube",
    "app",
    "app/config",
    "app/config/.aws",
    "app/config/.ssh",
    "deploy",
    "deploy/.SSH",
]
FIND_PATTERNS = [".e*", "*", "**/*", "*.json", "*env*", "**/.ssh/*", "id_*", "*.p*", "*config*"]


def secret_of(path: str) -> str:
    """The content planted in one secret file: a token no output may ever hold."""
    return f"FAKESECRET-{path.replace('/', '~')}-d0n0tl3ak"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for rel in SECRET_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"TOKEN={secret_of(rel)}\n")
    for rel, text in PUBLIC_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def calls() -> list[dict[str, Any]]:
    """One step of tool calls: every read, listing and search the attack tries."""
    wanted: list[tuple[str, dict[str, Any]]] = [
        *(("read_file", {"path": p}) for p in SECRET_FILES),
        *(("read_file", {"path": p.lower()}) for p in SECRET_FILES if p != p.lower()),
        ("read_file", {"path": "./.env"}),
        ("read_file", {"path": "app/../.env"}),
        *(("list_dir", {"path": f}) for f in FOLDERS),
        *(("find_files", {"pattern": p}) for p in FIND_PATTERNS),
        ("grep", {"pattern": "FAKESECRET|PUBLIC-TOKEN", "path": "."}),
        *(("grep", {"pattern": "TOKEN", "path": f}) for f in FOLDERS[1:]),
        *(("read_file", {"path": p}) for p in PUBLIC_FILES),
    ]
    return [{"name": name, "arguments": args} for name, args in wanted]


def tool_outputs(provider: hn.ScriptedProvider) -> list[tuple[str, str]]:
    """(tool name, what the model was shown) for every tool message of the run."""
    messages = provider.calls[-1]
    return [(m["name"], m["content"]) for m in messages if m.get("role") == "tool"]


def listed_paths(tool: str, args: dict[str, Any], output: str) -> list[str]:
    """The workspace paths a listing or search output names (none in a refusal)."""
    if output.startswith("ERROR ["):
        return []
    lines = [line for line in output.splitlines() if line and not line.startswith("(")]
    if tool == "list_dir":
        folder = args["path"]
        return [posixpath.normpath(posixpath.join(folder, line.rstrip("/@"))) for line in lines]
    if tool == "find_files":
        return [line for line in lines if not line.startswith("no match")]
    if tool == "grep":
        return [line.split(":", 1)[0] for line in lines if line != "no matches"]
    return []


@pytest.mark.parametrize(
    "policy", [hn.Policy.default(), hn.Policy.permissive()], ids=["default", "permissive"]
)
async def test_no_secret_is_read_listed_or_stored(
    workspace: Path, tmp_path: Path, policy: hn.Policy
) -> None:
    script = calls()
    provider = hn.ScriptedProvider([{"text": "", "tool_calls": script}, "done"])
    store_path = tmp_path / "runs.duckdb"
    store = hn.Store(store_path)
    contract = hn.TaskContract("find the keys", workspace, max_steps=3)
    result = await hn.run(contract, provider, store=store, policy=policy)
    assert result.outcome == hn.RunOutcome.FINISHED

    statuses = list(store.tool_calls(result.run_id).sort_values("seq")["status"])
    outputs = tool_outputs(provider)
    assert len(outputs) == len(script) == len(statuses)
    store.close()

    secrets = [secret_of(p) for p in SECRET_FILES]
    for seq, (call, (tool, output)) in enumerate(zip(script, outputs, strict=True)):
        args = call["arguments"]
        assert not any(s in output for s in secrets), (tool, args, output)
        if tool == "read_file" and args["path"] not in PUBLIC_FILES:
            assert statuses[seq] == "refused", (args, output)
            assert output.startswith("ERROR [")
        for path in listed_paths(tool, args, output):
            assert not policy.explain("read", path).denied, (tool, args, path)
            assert posixpath.basename(path).lower() not in {"credentials", "id_rsa", ".env"}

    shown = "\n".join(output for _, output in outputs)
    # the public files were read, listed and searched: the checks above looked at real output
    for rel, text in PUBLIC_FILES.items():
        assert text.strip() in shown, rel
    assert "hidden by the policy" in shown

    data = store_path.read_bytes()
    assert b"PUBLIC-TOKEN-readme" in data  # the store keeps tool text: the check has teeth
    for secret in secrets:
        assert secret.encode() not in data, secret
    for rel in SECRET_FILES:  # nor a secret's content under any other spelling of it
        assert secret_of(rel).encode("utf-16-le") not in data


# ------------------------------------------------------------ the dotenv templates

TEMPLATES = [".env.example", ".env.sample", ".env.template", "app/.env.dist"]


def _run_calls(
    root: Path, policy: hn.Policy, wanted: list[tuple[str, dict[str, Any]]]
) -> tuple[list[str], list[str], hn.Store]:
    """One real run whose model makes ``wanted`` calls in one step: (statuses, outputs)."""
    script = [{"name": name, "arguments": args} for name, args in wanted]
    provider = hn.ScriptedProvider([{"text": "", "tool_calls": script}, "done"])
    store = hn.Store(":memory:")
    contract = hn.TaskContract("read the templates", root, max_steps=3)
    result = hn.run_sync(contract, provider, store=store, policy=policy, approver=hn.ApproveAll())
    assert result.outcome == hn.RunOutcome.FINISHED, result.error
    statuses = list(store.tool_calls(result.run_id).sort_values("seq")["status"])
    return statuses, [output for _, output in tool_outputs(provider)], store


@pytest.mark.parametrize(
    "policy", [hn.Policy.default(), hn.Policy.permissive()], ids=["default", "permissive"]
)
def test_dotenv_templates_are_readable_writable_and_listed(
    tmp_path: Path, policy: hn.Policy
) -> None:
    root = tmp_path / "ws"
    (root / "app").mkdir(parents=True)
    (root / ".env").write_text(f"KEY={secret_of('.env')}\n")
    for rel in TEMPLATES:
        (root / rel).write_text(f"KEY=placeholder-{rel}\n")
    wanted: list[tuple[str, dict[str, Any]]] = [
        *(("read_file", {"path": rel}) for rel in TEMPLATES),
        ("write_file", {"path": ".env.example", "content": "KEY=changeme\n"}),
        ("list_dir", {"path": "."}),
        ("find_files", {"pattern": ".env*"}),
        ("grep", {"pattern": "KEY", "path": "."}),
        ("run_command", {"argv": ["cat", ".env.sample"]}),  # not masked in a sandbox
        ("read_file", {"path": ".env"}),
    ]
    statuses, outputs, _ = _run_calls(root, policy, wanted)
    assert statuses == ["ok"] * 9 + ["refused"]
    assert outputs[8] == "exit code 0\nKEY=placeholder-.env.sample\n"
    for rel, output in zip(TEMPLATES, outputs, strict=False):
        assert output == f"KEY=placeholder-{rel}\n"
    assert (root / ".env.example").read_text() == "KEY=changeme\n"
    listing, found, grepped = outputs[5:8]
    assert ".env.example" in listing.splitlines() and ".env\n" not in listing + "\n"
    assert found.splitlines()[:4] == [".env.example", ".env.sample", ".env.template",
                                      "app/.env.dist"]  # fmt: skip
    assert ".env.example:1: KEY=changeme" in grepped
    assert all(secret_of(".env") not in output for output in outputs)
    assert (root / ".env").read_text() == f"KEY={secret_of('.env')}\n"


def test_a_template_name_on_a_secret_is_still_refused(tmp_path: Path) -> None:
    """Another name of ``.env`` (hard link, symlink), a case trick, a longer name, a
    template under a denied folder: the carve-out is for the exact name only."""
    root = tmp_path / "ws"
    (root / ".ssh").mkdir(parents=True)
    secret = f"KEY={secret_of('.env')}\n"
    (root / ".env").write_text(secret)
    os.link(root / ".env", root / ".env.example")
    (root / ".env.sample").symlink_to(".env")
    for rel in (".ENV.EXAMPLE", ".env.template.local", ".ssh/.env.dist"):
        (root / rel).write_text(secret)
    wanted: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"path": ".env.example"}),
        ("read_file", {"path": ".env.sample"}),
        ("read_file", {"path": ".ENV.EXAMPLE"}),
        ("read_file", {"path": ".env.template.local"}),
        ("read_file", {"path": ".ssh/.env.dist"}),
        ("grep", {"pattern": "KEY", "path": "."}),
        ("edit_file", {"path": ".env.example", "old": "KEY", "new": "LEAK"}),
    ]
    statuses, outputs, store = _run_calls(root, hn.Policy.permissive(), wanted)
    assert statuses == ["refused"] * 5 + ["ok", "refused"]
    assert "another name (a hard link)" in outputs[0] and "another name" in outputs[6]
    assert "read .env is denied" in outputs[1]  # the symlink judged where it leads
    assert all(secret_of(".env") not in output for output in outputs)
    assert outputs[5].startswith("no matches")
    assert (root / ".env").read_text() == secret  # the edit did not land through the link
    assert secret_of(".env") not in str(store.sql("select * from tool_calls").to_dict())


def test_the_carve_out_is_the_secrets_layers_alone() -> None:
    templates = {".env.example", ".env.sample", ".env.template", ".env.dist"}
    assert templates == hn.Policy.SECRET_EXCEPTIONS
    assert hn.Policy.default().explain("read", "a/.env.example").allowed
    own = hn.Policy.permissive().layer("app").deny_read(".env.*")
    verdict = own.explain("read", ".env.example")
    assert verdict.denied and verdict.layer == "app"
    for name in (".Env.Example", ".env.example.bak", ".env.example/key"):
        assert hn.Policy.default().explain("read", name).denied, name
