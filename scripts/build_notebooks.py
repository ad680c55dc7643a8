"""Execute the example notebooks and save them with their outputs, so GitHub and
nbviewer show the results.

    python scripts/build_notebooks.py            # every notebook in notebooks/
    python scripts/build_notebooks.py 01 02      # the ones whose name starts so

Each notebook runs in a copy of ``notebooks/`` in a temporary folder (what it writes
stays there), in a kernel on this interpreter, with no API key and proxies that lead
nowhere (only loopback works), as on Binder. Any error output stops the build and
nothing is written. Widget state is saved with the notebook, so a saved run's widgets
render in nbviewer and after a reload. Paths of the temporary folder are shown as
``<work>`` (in outputs and in the saved widget state: an approval panel's preview) and
timing metadata is dropped, so a rebuild changes only what changed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
KERNEL = "harnessnb-build"
KEYS = ("OPENROUTER_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "HARNESSNB_PROVIDER",
        "HARNESSNB_STORE")  # fmt: skip
TIMEOUT_S = 180


class NotebookFailed(RuntimeError):
    """A notebook printed an error; the message names the notebook and the cell."""


def isolated_environment(home: Path) -> None:
    """This process's environment as a notebook should see it (the kernel inherits it)."""
    spec = home / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "harnessnb build",
        "language": "python",
    }))  # fmt: skip
    os.environ["JUPYTER_PATH"] = str(home)
    for key in KEYS:
        os.environ.pop(key, None)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        os.environ[var] = "http://127.0.0.1:9"
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    os.environ["TMPDIR"] = str(home)
    tempfile.tempdir = None


def execute(path: Path, where: Path) -> nbformat.NotebookNode:
    """Run the notebook ``path`` inside ``where`` (a copy of notebooks/).

    Raises:
        NotebookFailed: a cell raised or printed an error output.
    """
    nb = nbformat.read(where / path.name, as_version=4)
    client = NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name=KERNEL,
        resources={"metadata": {"path": str(where)}},
        store_widget_state=True,
        record_timing=False,
    )
    try:
        client.execute()
    except Exception as exc:  # nbclient raises CellExecutionError and friends
        raise NotebookFailed(f"{path.name}: {exc}") from exc
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                raise NotebookFailed(f"{path.name} cell {index}: {out.get('ename')}")
    return nb


def tidy(nb: nbformat.NotebookNode, tmp: Path) -> nbformat.NotebookNode:
    """Outputs without this build's temporary folder or per-run timing."""
    pattern = re.compile(re.escape(str(tmp)))

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub("<work>", value)
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)
        if cell.cell_type == "code":
            cell["outputs"] = [nbformat.from_dict(clean(out)) for out in cell.outputs]
    if "widgets" in nb.metadata:  # saved widget state: an approval panel shows paths
        nb.metadata["widgets"] = nbformat.from_dict(clean(nb.metadata["widgets"]))
    nb.metadata.get("kernelspec", {}).update(
        {"name": "python3", "display_name": "Python 3 (ipykernel)"}
    )
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prefixes", nargs="*", help="build only notebooks whose name starts so")
    args = parser.parse_args(argv)
    chosen = [p for p in sorted(NOTEBOOKS.glob("*.ipynb"))
              if not args.prefixes or p.name.startswith(tuple(args.prefixes))]  # fmt: skip
    if not chosen:
        parser.error(f"no notebook in {NOTEBOOKS} starts with {args.prefixes}")
    with tempfile.TemporaryDirectory(prefix="harnessnb-notebooks-") as tmp:
        isolated_environment(Path(tmp) / "home")
        built = []
        for path in chosen:
            where = Path(tmp) / path.stem / "notebooks"
            shutil.copytree(NOTEBOOKS, where)
            print(f"running {path.name} ...", flush=True)
            built.append((path, tidy(execute(path, where), Path(tmp))))
        for path, nb in built:  # written only when every chosen notebook ran cleanly
            nbformat.write(nb, path)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except NotebookFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
