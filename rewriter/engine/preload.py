"""Which model libraries a measurement child may find imported already: the libraries of
:data:`LIBRARIES` that its trees' Python files import, and that no tree holds a copy of its own.

A child forked from a server that has imported such a library (:mod:`.zygote`) skips the seconds of
CPU the import costs (transformers' ``modeling_utils``: about 1.7 s of CPU over torch's own import
on a 2-core CPU machine, ``/usr/bin/time python -c 'import torch, transformers.modeling_utils'``).
The library a child gets is the one its interpreter would import: the server runs with the child's
environment (its ``PYTHONPATH`` included), and a tree that holds a top-level package or module of
that name (a vendored or patched copy, which the child would import first since its tree comes
first on ``sys.path``) never gets the library preloaded. A tree that does not import the library
never gets it either: its process then holds only what it imports itself. Nor does a tree that sets
environment variables in its code (``os.environ[...] = ``, ``setdefault``, ``update``, ``putenv``):
the libraries read some when they are imported (huggingface_hub's ``HF_HUB_OFFLINE``), which a
preloaded one did before the tree's code ran.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from pathlib import Path

#: Library (top-level package) -> the modules a server imports for it: the ones that hold the
#: library's model base class, most of its import time.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "transformers": ("transformers", "transformers.modeling_utils"),
    "diffusers": ("diffusers", "diffusers.models.modeling_utils"),
}

#: Library -> the libraries its preloaded modules import in turn where installed (diffusers'
#: ``modeling_utils`` imports transformers): preloaded with it, and it is not preloaded where a tree
#: shadows one of them.
PULLS: dict[str, tuple[str, ...]] = {"diffusers": ("transformers",)}

#: Files read per tree before the scan gives up (a tree this large preloads nothing).
MAX_FILES = 5000

#: Directories never scanned: caches, environments, version control.
_SKIP = {".git", ".hg", "__pycache__", ".venv", "venv", "node_modules", ".tox", ".mypy_cache", "build", "dist"}

_SETS_ENV = re.compile(rb"os\.environ\s*\[[^\]]*\]\s*=(?!=)|environ\.(?:setdefault|update|__setitem__)\(|os\.putenv\(")

_IMPORT = re.compile(rb"^[ \t]*(?:from|import)[ \t]+(" + b"|".join(re.escape(n.encode()) for n in LIBRARIES) + rb")\b", re.M)


def shadowed(tree: Path, name: str) -> bool:
    """``tree`` holds its own top-level ``name`` (a package, a namespace directory or a module)."""
    return (tree / name).is_dir() or any((tree / f"{name}{ext}").exists() for ext in (".py", ".pyc", ".so"))


@functools.lru_cache(maxsize=64)
def _imports(tree: str) -> frozenset[str]:
    """The names of :data:`LIBRARIES` that a ``.py`` file under ``tree`` imports (an ``import`` or
    ``from`` statement at the start of a line); empty past :data:`MAX_FILES` files or where a file
    sets an environment variable."""
    found: set[str] = set()
    seen = 0
    for root, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d not in _SKIP and not d.startswith(".")]
        for f in files:
            if not f.endswith(".py"):
                continue
            seen += 1
            if seen > MAX_FILES:
                return frozenset()
            try:
                text = Path(root, f).read_bytes()
            except OSError:
                continue
            if _SETS_ENV.search(text):
                return frozenset()
            found.update(m.decode() for m in _IMPORT.findall(text))
    return frozenset(found)


def libraries_for(trees: Iterable[str | Path]) -> tuple[str, ...]:
    """The libraries a child of ``trees`` may find imported by its server (sorted names of
    :data:`LIBRARIES`): imported by a tree, shadowed by none, installed here."""
    import importlib.util

    paths = [Path(t) for t in trees if t]
    wanted = set().union(*(_imports(str(p.resolve())) for p in paths if p.is_dir())) if paths else set()
    out: set[str] = set()
    for name in wanted:
        if importlib.util.find_spec(name) is None:
            continue
        pulled = [n for n in PULLS.get(name, ()) if importlib.util.find_spec(n) is not None]
        if not any(shadowed(p, n) for p in paths for n in (name, *pulled)):
            out.update((name, *pulled))
    return tuple(sorted(out))
