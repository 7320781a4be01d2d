"""pre-commit installs stackpart's hook (``language: python``) from a local wheel directory, and
the hook's environment has no torch.

The directory holds stackpart's wheel built from this checkout and its dependencies' wheels,
repacked from this environment's installed files (``benchmarks/hook_install.py``, which also
times it for BENCHMARKS.md), and never torch: pip runs with no index and no config, so a
stackpart that still required torch could not be installed at all.
"""

from __future__ import annotations

import importlib.util
import shutil
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("hook_install_bench", ROOT / "benchmarks" / "hook_install.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    out = tmp_path_factory.mktemp("hook") / "wheels"
    wheel, names = bench.wheelhouse(out)
    return out, wheel, names


def test_the_wheel_needs_torch_only_for_its_extra(wheels):
    _, wheel, names = wheels
    assert not [n for n in names if n.lower().startswith(("torch", "triton", "nvidia"))], names
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith("METADATA"))).decode()
    torch_lines = [line for line in meta.splitlines() if line.startswith("Requires-Dist: torch")]
    assert torch_lines and all('extra == "torch"' in line for line in torch_lines), torch_lines
    assert [r.name for r in bench.requires(wheel) if r.name == "torch"] == []


def _assert_no_torch(env: Path) -> None:
    packages = bench.env_packages(env)
    assert any(p.startswith("stackpart==") for p in packages), packages
    assert not [p for p in packages if p.lower().startswith(("torch", "triton", "nvidia"))], packages
    proc = bench.in_env(env, "import torch")
    assert proc.returncode == 1 and "No module named 'torch'" in proc.stderr
    where = bench.in_env(env, "import rewriter; print(rewriter.__file__)").stdout.strip()
    assert where and Path(where).is_relative_to(env), where  # the installed wheel, not this checkout


def test_local_hook_installs_from_the_wheel_directory_without_torch(wheels, tmp_path):
    out, wheel, _ = wheels
    res = bench.install_local(tmp_path, out, wheel.name.split("-")[1])
    assert bench.FINDING in res["output"]
    _assert_no_torch(res["env"])


def test_repo_hook_builds_from_source_without_torch(wheels, tmp_path):
    out, _, _ = wheels
    res = bench.install_repo(tmp_path, out)
    assert bench.FINDING in res["output"]
    _assert_no_torch(res["env"])
