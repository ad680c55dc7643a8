#!/usr/bin/env bash
# The closest check to Binder these machines allow: a fresh virtual environment built
# from binder/requirements.txt ALONE (as repo2docker does, from the repository root),
# then every notebook in notebooks/ executed in it, headless, with no API key and
# proxies that lead nowhere (only loopback works).
#
#   bash scripts/check_binder.sh            # ~1-3 min, most of it pip
#
# Uses python3.12 when there is one (binder/runtime.txt asks for 3.12), else python3.
# KEEP_VENV=DIR reuses/keeps the environment in DIR.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# The first interpreter that runs: a python3.12 on PATH, a pyenv 3.12, else python3.
pick() { for c in "$@"; do "$c" -c 'import sys' >/dev/null 2>&1 && { echo "$c"; return; }; done; }
python_bin="$(pick python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 python3)"
work="$(mktemp -d -t harnessnb-binder-XXXXXX)"
venv="${KEEP_VENV:-$work/venv}"
trap 'rm -rf "$work"' EXIT
started=$SECONDS

echo "== venv with $("$python_bin" --version) in $venv"
[ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
# A copy of the repository, as Binder clones it (and so pip's in-tree build/ lands in
# the copy, not here). repo2docker installs from the repository root: "." in the file
# means the repository.
mkdir "$work/repo"
tar -C "$root" --exclude=./.git --exclude=./build --exclude='*.egg-info' --exclude=.venv \
  -cf - . | tar -C "$work/repo" -xf -
(cd "$work/repo" && "$venv/bin/python" -m pip install -q -r binder/requirements.txt) \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
echo "== installed in $((SECONDS - started)) s"

# A kernelspec on the venv's own interpreter, found before any other "python3".
"$venv/bin/python" -m ipykernel install --prefix "$venv" --name harnessnb-binder >/dev/null
export JUPYTER_PATH="$venv/share/jupyter"
unset OPENROUTER_API_KEY ANTHROPIC_API_KEY OPENAI_API_KEY HARNESSNB_PROVIDER HARNESSNB_STORE
export HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY=127.0.0.1,localhost
export http_proxy=$HTTP_PROXY https_proxy=$HTTPS_PROXY no_proxy=$NO_PROXY

cd "$work/repo/notebooks"
"$venv/bin/python" - <<'PY'
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

failed = 0
for path in sorted(Path(".").glob("*.ipynb")):
    started = time.monotonic()
    nb = nbformat.read(path, as_version=4)
    try:
        NotebookClient(nb, timeout=300, kernel_name="harnessnb-binder",
                       resources={"metadata": {"path": "."}}).execute()
        status = "ok"
    except Exception as exc:  # report every notebook, then fail
        failed += 1
        status = f"FAILED: {type(exc).__name__}: {str(exc)[-2000:]}"
    print(f"{path.name}: {status} ({time.monotonic() - started:.1f} s)", flush=True)
sys.exit(1 if failed else 0)
PY
echo "== all notebooks ran in the Binder environment; total $((SECONDS - started)) s"
