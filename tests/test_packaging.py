"""`pip install .` works: the built wheel, installed into a fresh venv, runs `stackpart --help`
and rewrites the bundled example with --unsafe, which renders a template (so templates/ is
found inside the installed wheel, not in the checkout).

Offline and fast: the wheel is built without build isolation from a copy of the distribution's
files, installed with --no-deps, and the fresh venv reaches torch, libcst, ... through a ``.pth``
line naming this environment's site-packages (placed after the venv's own, so the wheel's
``rewriter`` wins over the editable checkout).
"""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DIST_FILES = ["pyproject.toml", "setup.py", "README.md", "rewriter", "templates", "kernels"]


def run(*cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    tree = tmp / "dist-src"
    tree.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in DIST_FILES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, tree / name, ignore=ignore)
        else:
            shutil.copy(path, tree / name)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp / "dist", tree)
    wheel = next((tmp / "dist").glob("stackpart-*.whl"))

    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel)
    purelib = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip())
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()] or [sysconfig.get_path("purelib")]
    (purelib / "zz_stackpart_test_deps.pth").write_text("\n".join(ours) + "\n")
    return wheel, venv


def test_wheel_carries_templates_and_kernels(installed):
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for template in (ROOT / "templates").glob("*.j2"):
        assert f"rewriter/_data/templates/{template.name}" in names
    for kernel in (ROOT / "kernels").glob("*.py"):
        assert f"rewriter/_data/kernels/{kernel.name}" in names
    assert not any(n.startswith(("templates/", "kernels/", "tests/", "fixtures/")) for n in names)


def test_installed_wheel_runs_help_and_the_example(installed, tmp_path):
    _, venv = installed
    python, exe = venv / "bin" / "python", venv / "bin" / "stackpart"
    where = run(python, "-c", "import rewriter, rewriter.resources as r; print(rewriter.__file__); "
                "print(r.templates_dir()); print(r.kernels_dir())", cwd=tmp_path).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in where), where
    assert "rewrite" in run(exe, "--help", cwd=tmp_path).stdout

    shutil.copytree(ROOT / "examples" / "gpt", tmp_path / "gpt")
    diff = run(exe, "rewrite", "--plan", "gpt/plan.yaml", "gpt/src", "--unsafe", cwd=tmp_path).stdout
    assert "+++ b/_stackpart/bucketing.py" in diff and "def pad_to_bucket" in diff
    assert "+    @torch.compile\n" in diff
    # The diff applies to the example as shipped.
    run("git", "apply", "--check", "-", input=diff, cwd=tmp_path / "gpt" / "src")
