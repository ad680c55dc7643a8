"""The wheel a normal install gets holds the whole package, and works outside the checkout.

A non-editable install (``pip install harnessnb``, Binder's ``.`` line) once left out
``harnessnb.agents`` because the package list was written by hand; an editable install
hides that, so this builds the real wheel and installs it into a fresh environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _subpackages() -> list[str]:
    """Every package folder under harnessnb/ in the source tree, as wheel paths."""
    return sorted(
        str(init.parent.relative_to(ROOT)).replace(os.sep, "/")
        for init in (ROOT / "harnessnb").rglob("__init__.py")
        if "__pycache__" not in init.parts
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy without build/ or *.egg-info: setuptools reuses a stale build/lib,
    # which would hide a package the current configuration leaves out.
    source = tmp_path_factory.mktemp("source") / "harnessnb"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".venv", "notebooks",
    ))
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("harnessnb-*.whl")
    return built


def test_wheel_holds_every_subpackage_and_py_typed(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = _subpackages()
    assert "harnessnb/agents" in packages and "harnessnb/notebook" in packages
    missing = [p for p in packages if f"{p}/__init__.py" not in names]
    assert missing == []
    assert "harnessnb/py.typed" in names
    # Every module of the source tree is in the wheel, not only the __init__ files.
    sources = {
        str(f.relative_to(ROOT)).replace(os.sep, "/")
        for f in (ROOT / "harnessnb").rglob("*.py")
        if "__pycache__" not in f.parts
    }
    assert sorted(sources - names) == []


def test_installed_wheel_imports_agents_and_runs_the_command(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / "python"
    # The dependencies come from the test environment (no download): its site-packages
    # is appended by a plain path line, which does not run the .pth files there (so the
    # editable install's finder stays out); the wheel lands in the new site-packages,
    # which comes first on sys.path.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    deps = sysconfig.get_paths()["purelib"]
    Path(site, "zz_test_dependencies.pth").write_text(deps + "\n")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    clean_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [str(python), "-c",
         "import harnessnb, harnessnb.agents, harnessnb.notebook, harnessnb.chaos;"
         "print(harnessnb.__file__)"],
        cwd=elsewhere, env=clean_env, capture_output=True, text=True, timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    where = Path(probe.stdout.strip()).resolve()
    assert env_dir.resolve() in where.parents, where  # the wheel, not the checkout
    helped = subprocess.run(
        [str(bindir / "harnessnb"), "--help"],
        cwd=elsewhere, env=clean_env, capture_output=True, text=True, timeout=120,
    )
    assert helped.returncode == 0, helped.stderr
    assert "demo" in helped.stdout and "run" in helped.stdout
    # The wheel has no notebooks/: the demo's next line points at the notebook online.
    demo = subprocess.run(
        [str(bindir / "harnessnb"), "demo", "--no-chaos", "--store", "d.duckdb"],
        cwd=elsewhere, env=clean_env, capture_output=True, text=True, timeout=120,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    (line,) = [x for x in demo.stdout.splitlines() if x.startswith("next: ")]
    assert line.endswith("or open https://github.com/harnessnb/harnessnb/blob/main/notebooks/"
                         "01-quickstart.ipynb"), line


def _requirements(lines: list[str]) -> set[str]:
    """Requirement lines, normalised (name canonicalised, extras and specifiers sorted)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    out = set()
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line or line == ".":  # "." is harnessnb itself (Binder installs the checkout)
            continue
        req = Requirement(line)
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        out.add(f"{canonicalize_name(req.name)}{extras}{req.specifier}")
    return out


def test_the_notebooks_extra_installs_what_binder_installs() -> None:
    # `pip install -e '.[notebooks]'` once lacked Dask, which 05-sweep needs: Binder had it.
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["notebooks"]
    binder = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    assert _requirements(extra) == _requirements(binder)
    assert any(r.startswith("dask[distributed]") for r in _requirements(extra))
