"""How long pre-commit takes to install stackpart's hook, and how large its environment is.

Offline, from a local wheel directory: stackpart's wheel (built from this checkout) and the
wheels of its dependencies, repacked from the installed distributions of the running
environment (each one's RECORD: the same files at the same versions, no network). torch is never
put there: an install that asked for it would fail, which is what ``tests/test_hook_install.py``
relies on. pip runs with ``PIP_NO_INDEX=1``, ``PIP_FIND_LINKS=<that directory>`` and no pip
config file, so nothing else can be found.

Two ways a project gets the hook:

* ``local``: a ``repo: local`` hook with ``language: python`` and
  ``additional_dependencies: [stackpart==<version>]`` (the hook definition copied from
  ``.pre-commit-hooks.yaml``): pre-commit makes a virtualenv and pip-installs stackpart's wheel.
* ``repo``: ``repo: <a git copy of this checkout>`` with ``rev:`` (what a project lists; also what
  ``pre-commit try-repo`` does): pip builds stackpart from source, setuptools from the directory.

Each is timed from an empty ``PRE_COMMIT_HOME`` to the hook's first result on a one-file
project with a finding; the environment's size is its directory's bytes on disk.

    python benchmarks/hook_install.py [--mode local|repo|both] [--json PATH]
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from importlib import metadata
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
DIST_FILES = ["pyproject.toml", "setup.py", "README.md", "rewriter", "templates", "kernels"]
#: Never in the wheel directory: the hook's environment must not need them.
NEVER = {"torch", "triton"}
BAD = "import torch\n\n@torch.compile\ndef step(x):\n    return x / x.sum().item()\n"
FINDING = "train.py:5:16: SP103"


def run(*cmd: object, **kw: object) -> subprocess.CompletedProcess:
    """Run ``cmd``; a non-zero exit raises with its output's tail."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def source_tree(dest: Path) -> Path:
    """Copy the distribution's files (what a wheel or sdist is built from) to ``dest``."""
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in [*DIST_FILES, ".pre-commit-hooks.yaml"]:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, dest / name, ignore=ignore)
        else:
            shutil.copy(path, dest / name)
    return dest


def build_wheel(tree: Path, out: Path) -> Path:
    """stackpart's wheel, built from ``tree`` with this environment's setuptools (no isolation)."""
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, tree)
    return next(out.glob("stackpart-*.whl"))


def requires(wheel: Path) -> list[Requirement]:
    """The wheel's own ``Requires-Dist`` lines that hold without extras, on this machine."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = zf.read(name).decode()
    reqs = [Requirement(line.split(":", 1)[1].strip()) for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def closure(reqs: list[Requirement]) -> list[metadata.Distribution]:
    """The installed distributions ``reqs`` need, transitively (extras not followed)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(reqs)
    while todo:
        req = todo.pop()
        key = canonicalize_name(req.name)
        if key in seen:
            continue
        dist = metadata.distribution(req.name)
        if not req.specifier.contains(dist.version, prereleases=True):
            raise RuntimeError(f"installed {req.name} {dist.version} does not satisfy {req}")
        seen[key] = dist
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append(sub)
    return list(seen.values())


def _tag(dist: metadata.Distribution) -> str:
    """A wheel tag from the distribution's WHEEL file that this interpreter accepts."""
    wheel_file = dist.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel_file.splitlines() if line.startswith("Tag:")]
    ours = {str(t) for t in sys_tags()}
    for tag in tags:
        if tag in ours:
            return tag
    raise RuntimeError(f"{dist.metadata['Name']}: no tag of {tags} fits this interpreter")


def repack(dist: metadata.Distribution, out: Path) -> Path:
    """Write an installed distribution back as a wheel: the files its RECORD lists under
    site-packages (scripts and data outside it are left out: pip makes console scripts from
    entry_points.txt), a fresh RECORD, and none of pip's install markers."""
    files = [f for f in dist.files or [] if ".." not in f.parts and "__pycache__" not in f.parts]
    info = next(f.parts[0] for f in files if f.parts[0].endswith(".dist-info"))
    skip = {f"{info}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    wheel = out / f"{info[: -len('.dist-info')]}-{_tag(dist)}.whl"
    rows = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            name = f.as_posix()
            if name in skip:
                continue
            data = Path(dist.locate_file(f)).read_bytes()
            zf.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append((name, f"sha256={digest}", str(len(data))))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([*rows, (f"{info}/RECORD", "", "")])
        zf.writestr(f"{info}/RECORD", buf.getvalue())
    return wheel


def wheelhouse(out: Path) -> tuple[Path, list[str]]:
    """stackpart's wheel, its dependencies' and setuptools' (pre-commit builds a placeholder
    package for ``local``, and stackpart from source for ``repo``) in ``out``; returns (stackpart's wheel, file names)."""
    out.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(source_tree(out.parent / "stackpart-src"), out)
    dists = closure(requires(wheel) + [Requirement("setuptools>=77")])
    names = {canonicalize_name(d.metadata["Name"]) for d in dists}
    if names & NEVER:
        raise RuntimeError(f"stackpart's install needs {sorted(names & NEVER)}: the hook would carry them")
    for dist in dists:
        repack(dist, out)
    return wheel, sorted(p.name for p in out.iterdir())


def offline_env(wheels: Path, home: Path) -> dict[str, str]:
    """The environment pre-commit runs in: pip sees only ``wheels``; pip's cache and
    virtualenv's seed cache start empty under ``home`` (a first install on a fresh machine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUALENV_", "PYTHONPATH"))}
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels), PIP_CONFIG_FILE=os.devnull,
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_CACHE_DIR=str(home / "pip-cache"),
               VIRTUALENV_NO_PERIODIC_UPDATE="1", VIRTUALENV_OVERRIDE_APP_DATA=str(home / "virtualenv-data"),
               PRE_COMMIT_HOME=str(home), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    return env


def project(dest: Path, hook_config: str | None) -> Path:
    """A one-file git project with a finding (and ``.pre-commit-config.yaml`` when given)."""
    dest.mkdir(parents=True)
    (dest / "train.py").write_text(BAD)
    if hook_config is not None:
        (dest / ".pre-commit-config.yaml").write_text(hook_config)
    run("git", "init", "-q", "-b", "main", cwd=dest)
    run("git", "add", ".", cwd=dest)
    return dest


def local_config(version: str, hook_id: str = "stackpart-check") -> str:
    """A ``repo: local`` hook as ``.pre-commit-hooks.yaml`` defines it, installing stackpart's wheel."""
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    hook = dict(next(h for h in hooks if h["id"] == hook_id))
    hook["additional_dependencies"] = [f"stackpart=={version}"]
    return yaml.safe_dump({"repos": [{"repo": "local", "hooks": [hook]}]})


def pre_commit() -> str:
    """The pre-commit executable next to this Python."""
    return str(Path(sys.executable).with_name("pre-commit"))


def _hook_run(proc: subprocess.CompletedProcess) -> str:
    out = proc.stdout + proc.stderr
    if proc.returncode != 1 or FINDING not in out:  # the hook must run and report the finding
        raise RuntimeError(f"hook exited {proc.returncode} without {FINDING!r}\n{out[-3000:]}")
    return out


def install_local(work: Path, wheels: Path, version: str) -> dict:
    """Install and run the ``local`` hook; returns seconds, the environment and the output."""
    home = work / "pc-home"
    proj = project(work / "proj", local_config(version))
    env = offline_env(wheels, home)
    start = time.perf_counter()
    run(pre_commit(), "install-hooks", cwd=proj, env=env)
    installed = time.perf_counter() - start
    proc = subprocess.run([pre_commit(), "run", "--files", "train.py"], cwd=proj, env=env,
                          capture_output=True, text=True, timeout=600)
    total = time.perf_counter() - start
    return {"install_s": installed, "first_result_s": total, "env": hook_env(home), "output": _hook_run(proc)}


def install_repo(work: Path, wheels: Path) -> dict:
    """A ``repo: <git copy of this checkout>`` entry with ``rev:``, as a project lists the hook;
    pip builds stackpart from that source (setuptools from the wheel directory)."""
    repo = source_tree(work / "stackpart-repo")
    home = work / "pc-home"
    env = offline_env(wheels, home)
    run("git", "init", "-q", "-b", "main", cwd=repo)
    run("git", "add", ".", cwd=repo)
    run("git", "commit", "-q", "-m", "stackpart", cwd=repo, env=env)
    rev = run("git", "rev-parse", "HEAD", cwd=repo).stdout.strip()
    config = {"repos": [{"repo": str(repo), "rev": rev, "hooks": [{"id": "stackpart-check"}]}]}
    proj = project(work / "proj", yaml.safe_dump(config))
    start = time.perf_counter()
    run(pre_commit(), "install-hooks", cwd=proj, env=env)
    installed = time.perf_counter() - start
    proc = subprocess.run([pre_commit(), "run", "--files", "train.py"], cwd=proj, env=env,
                          capture_output=True, text=True, timeout=600)
    total = time.perf_counter() - start
    return {"install_s": installed, "first_result_s": total, "env": hook_env(home), "output": _hook_run(proc)}


def hook_env(home: Path) -> Path:
    """The one python environment pre-commit made under ``home``."""
    [env] = list(home.glob("repo*/py_env-*"))
    return env


def env_bytes(env: Path) -> int:
    """Bytes on disk of the files under ``env`` (links not followed)."""
    return sum(p.lstat().st_size for p in env.rglob("*") if p.is_file() and not p.is_symlink())


def in_env(env: Path, code: str) -> subprocess.CompletedProcess:
    """Run ``code`` with ``env``'s python as the hook runs it (no PYTHONPATH), from ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run([str(env / "bin" / "python"), "-c", code], capture_output=True, text=True,
                          cwd=env, env=clean, timeout=120)


def env_packages(env: Path) -> list[str]:
    """The distributions installed in ``env``, as ``name==version``."""
    return in_env(env, "from importlib import metadata; print('\\n'.join(sorted("
                  "f\"{d.metadata['Name']}=={d.version}\" for d in metadata.distributions())))").stdout.split()


def measure(mode: str) -> dict:
    """Build the wheel directory, install the hook each way ``mode`` says, and describe it."""
    out: dict = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
                 "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
                 "load_1min": round(os.getloadavg()[0], 2)}
    try:
        out["torch_in_runner"] = metadata.version("torch")
    except metadata.PackageNotFoundError:
        out["torch_in_runner"] = None
    with tempfile.TemporaryDirectory(prefix="stackpart-hook-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        wheel, names = wheelhouse(work / "wheels")
        version = out["stackpart"] = wheel.name.split("-")[1]
        out["wheelhouse_s"] = round(time.perf_counter() - start, 2)
        out["wheels"] = names
        for name, fn in (("local", lambda: install_local(work / "l", work / "wheels", version)),
                         ("repo", lambda: install_repo(work / "r", work / "wheels"))):
            if mode not in (name, "both"):
                continue
            res = fn()
            env = res.pop("env")
            res.pop("output")
            res = {k: round(v, 2) for k, v in res.items()}
            res["env_mb"] = round(env_bytes(env) / 2**20, 1)
            res["packages"] = env_packages(env)
            res["torch_importable"] = in_env(env, "import torch").returncode == 0
            out[name] = res
    return out


def main(argv: list[str] | None = None) -> int:
    """Print (and with ``--json`` write) the measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["local", "repo", "both"], default="both")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = measure(args.mode)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
