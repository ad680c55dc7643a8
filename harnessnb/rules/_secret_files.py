"""The secrets layer's table: the secret file patterns, and its one carve-out.

``SECRET_PATTERNS`` are denied for read and write at any depth, in any case, with all
beneath a matching folder (``Policy.SECRET_PATTERNS``; README's "Security model" shows
the table).

The carve-out (``SECRET_EXCEPTIONS``): the table's ``.env.*`` leaves out the dotenv
templates ``.env.example``, ``.env.sample``, ``.env.template`` and ``.env.dist``, which
by convention hold placeholders and tell an agent which variables a project reads.
Only those exact names, case as written (``.ENV.EXAMPLE`` and ``.env.example.local``
stay denied), only in the built-in layer (a ``deny_read(".env.*")`` of your own covers
them), and only by name: another name of a denied file (a hard link to ``.env``) is
refused by its inode, a symlink by the path it leads to, and a template under a denied
folder (``.ssh/.env.example``) by that folder's rule.
"""

from __future__ import annotations

import posixpath
from typing import Final

__all__ = [
    "SECRETS_LAYER",
    "SECRETS_VERSION",
    "SECRET_EXCEPTIONS",
    "SECRET_PATTERNS",
    "dotenv_template",
]

SECRETS_LAYER: Final = "secrets"
# The table's version, stored in place of its rules when a policy holds the layer
# unchanged (``Policy.to_dict``). Raise it when the table changes; a stored reference
# expands to the current table, which only ever gains patterns.
SECRETS_VERSION: Final = 1

# fmt: off
SECRET_PATTERNS: Final[tuple[str, ...]] = (
    # dotenv files: .env, .env.local, .env.production, prod.env; direnv's .envrc
    ".env", ".env.*", "*.env", ".envrc",
    # cloud and cluster credentials
    ".aws/credentials", ".aws/config", "credentials.json", "service-account*.json",
    ".docker/config.json", ".kube/config",
    # SSH: all under .ssh/ but public keys. Globs have no "not", so "does not end in
    # .pub" is spelled by its last characters (then the names shorter than that).
    ".ssh/*[!b]", ".ssh/*[!u]b", ".ssh/*[!p]ub", ".ssh/*[!.]pub", ".ssh/b", ".ssh/ub",
    ".ssh/pub",
    # SSH private keys by their default names, wherever they lie
    "id_rsa", "id_dsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk",
    # private keys, certificates with keys, key stores
    "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore",
    # tools' login files: curl/ftp, git, npm, PyPI
    ".netrc", ".git-credentials", ".npmrc", ".pypirc",
)
# fmt: on

SECRET_EXCEPTIONS: Final[frozenset[str]] = frozenset(
    {".env.example", ".env.sample", ".env.template", ".env.dist"}
)


def dotenv_template(layer: str, pattern: str, path: str) -> bool:
    """True when ``path`` (workspace-relative, normalised) is a dotenv template that the
    secrets layer's ``.env.*`` rule leaves out."""
    return (
        layer == SECRETS_LAYER
        and pattern == ".env.*"
        and posixpath.basename(path) in SECRET_EXCEPTIONS
    )
