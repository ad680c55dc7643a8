"""Folders with files in them, for the tests' workspaces, and the secret files' names."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def folder(path: Path, files: Mapping[str, str] | None = None) -> Path:
    """``path`` made (with its parents), holding ``files`` (relative path -> text)."""
    path.mkdir(parents=True)
    for rel, text in (files or {}).items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    return path



def keyed_workspace(path: Path, readme: str, key: str) -> Path:
    """A workspace at ``path`` holding ``README.md`` (``readme``) and a ``.env`` with
    ``key`` as its ``OPENAI_API_KEY``: the secret a sandbox or the policy must keep."""
    return folder(path, {"README.md": readme, ".env": f"OPENAI_API_KEY={key}\n"})

# One file per kind in the secrets table (the path as a workspace would hold it): the
# policy's and the sandbox's secrets tests both start from it.
SECRET_KINDS = [
    ".env",
    ".env.local",
    ".env.production",
    "prod.env",
    ".envrc",
    ".aws/credentials",
    ".aws/config",
    "credentials.json",
    "service-account-ci.json",
    ".docker/config.json",
    ".kube/config",
    ".ssh/id_rsa",
    ".ssh/id_ecdsa",
    ".ssh/deploy_key",
    "id_ed25519",
    "server.pem",
    "server.key",
    "client.p12",
    "client.pfx",
    "store.jks",
    "release.keystore",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
]
