"""The tree reads as the architecture, and stays that way.

ARCHITECTURE.md names every module; no module or function grows past what a reader can
hold; the import contract (pyproject's import-linter section) holds.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "harnessnb"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# The chaos server is one protocol simulator (OpenAI and Anthropic, streaming and not,
# every fault): its docstring says why it stays whole.
LONG_MODULES = {"demo/_chaos.py"}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_architecture_names_every_module_and_only_modules_that_exist() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    unnamed = [_rel(p) for p in _modules() if _rel(p) not in text
               and p.name not in ("__init__.py", "__main__.py")]
    assert unnamed == [], "add these to ARCHITECTURE.md"
    import re

    packages = "|".join(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    named = set(re.findall(rf"`((?:{packages})/_?[a-z_]+\.py|[a-z_]+\.py)`", text))
    missing = sorted(n for n in named if not (PACKAGE / n).exists())
    assert missing == [], "ARCHITECTURE.md names modules that are gone"


def test_every_subpackage_says_what_it_holds_and_may_import() -> None:
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc, f"{_rel(init)}: say what the package may import"


def test_no_module_is_too_long_to_read() -> None:
    long = {_rel(p): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
            and _rel(p) not in LONG_MODULES}
    assert long == {}


def test_no_function_is_too_long_to_read() -> None:
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long[f"{_rel(path)}:{node.lineno} {node.name}"] = size
    assert long == {}


def test_the_import_contract_holds() -> None:
    linter = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert linter is not None, "import-linter is in the test extra: pip install -e '.[test]'"
    done = subprocess.run([linter], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_package_docstring_lists_exactly_its_modules() -> None:
    """A package's docstring names each of its modules (as ````_name````), and no other:
    a module added, moved or renamed is said there too."""
    import re

    wrong = {}
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        named = set(re.findall(r"``(_[a-z0-9_]+)``", doc))
        there = {p.stem for p in init.parent.glob("*.py") if not p.name.startswith("__")}
        if named != there:
            missing, gone = sorted(there - named), sorted(named - there)
            wrong[_rel(init)] = {"not listed": missing, "listed, not there": gone}
    assert wrong == {}, f"fix these package docstrings: {wrong}"


def test_the_rules_contract_names_every_third_party_package_harnessnb_imports() -> None:
    """``rules/``: the standard library only, so its import-linter contract must forbid
    every package outside it that harnessnb imports (a new dependency joins the list)."""
    import tomllib

    import grimp

    graph = grimp.build_graph("harnessnb", include_external_packages=True)
    external = {m for m in graph.modules if not m.startswith("harnessnb")}
    third_party = external - set(sys.stdlib_module_names)
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (rules,) = [c for c in contracts["contracts"] if c.get("source_modules") == ["harnessnb.rules"]]
    assert third_party and third_party <= set(rules["forbidden_modules"])
