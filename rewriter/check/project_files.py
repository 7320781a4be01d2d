"""The ``.py`` files under one project root and the summary of each, read once and cached.

:class:`ProjectFiles` walks a root, tells which of its files can start a reach, and gives each
file's summary (:func:`.file_summary.summarize`) on demand; the project index (:mod:`.project`)
builds on it.

**What is read.** Only files that can start a reach are parsed up front: those whose bytes
contain ``torch`` and a compile call or decorator (the runner's compile needle). Every other file
is parsed only when a reach needs one of its classes (on demand, through the imports). A class's
block being a repeated block of *some* model (SP101's exception) is known from the files read.

**Cache.** ``<root>/.stackpart_cache/project-v1.json`` (the directory holds a ``.gitignore`` of
``*``, as ruff's and pytest's caches do, so git ignores it without a rule): per file, keyed by
its path relative to the root, ``st_mtime_ns`` and ``st_size``, whether it can start a reach and
its summary once parsed. A file whose key is unchanged is neither read nor parsed again; the
cache is rewritten (atomically) only when something changed, and a root that cannot be written
just runs without it. The key is that of ruff's and mypy's caches (mtime + size): an edit that
keeps both within one timestamp tick is missed until the next change.
"""

from __future__ import annotations

import ast
import json
import os

from .file_summary import can_start_reach, compile_lines, summarize

CACHE_DIR = ".stackpart_cache"
CACHE_FILE = "project-v1.json"
#: Bumped when the summary's format or meaning changes (an old cache is then ignored).
CACHE_VERSION = 6
#: Folders never walked for project files (besides hidden ones): not the user's code.
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", CACHE_DIR})
#: The most ``.py`` files a project walk reads; past it the project is not read (a root such as
#: a home directory with a ``.git``) and files are checked on their own.
MAX_PROJECT_FILES = 50_000


def _strs(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _str_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _is_class(value: object) -> bool:
    return (isinstance(value, dict) and _strs(value.get("bases")) and _strs(value.get("methods"))
            and _strs(value.get("disabled")) and _str_map(value.get("children"))
            and isinstance(value.get("repeated"), list)
            and all(isinstance(r, list) and len(r) == 4 and _strs(r[:3]) and isinstance(r[3], bool)
                    for r in value["repeated"]))


def _is_site(value: object) -> bool:
    """``[kind, target, attr, fullgraph, mode, line]`` (:func:`.file_summary.summarize`)."""
    return (isinstance(value, list) and len(value) == 6 and isinstance(value[0], str) and isinstance(value[1], str)
            and (value[2] is None or isinstance(value[2], str)) and (value[3] is None or isinstance(value[3], bool))
            and (value[4] is None or isinstance(value[4], str)) and isinstance(value[5], int))


def _is_summary(value: object) -> bool:
    """The shape of a :func:`.file_summary.summarize` result, all the way down: the cache is data from disk,
    and an entry that is not one (edited, or written by another version under the same
    :data:`CACHE_VERSION`) is read again here rather than failing later in the reach."""
    return (isinstance(value, dict) and _str_map(value.get("imports")) and _str_map(value.get("defs"))
            and _strs(value.get("disabled"))
            and isinstance(value.get("classes"), dict)
            and all(isinstance(k, str) and _is_class(c) for k, c in value["classes"].items())
            and isinstance(value.get("sites"), list) and all(_is_site(s) for s in value["sites"])
            and isinstance(value.get("calls"), dict) and all(isinstance(k, str) and _strs(v) for k, v in value["calls"].items()))


def _is_entry(value: object) -> bool:
    """The shape of a cache entry, ``[mtime_ns, size, can_start_a_reach, summary or None]``
    (:meth:`ProjectFiles._entry`)."""
    return isinstance(value, list) and len(value) == 4 and (value[3] is None or _is_summary(value[3]))


def walked(rel: str) -> bool:
    """Whether a path relative to the root lies where :meth:`ProjectFiles._walk` looks."""
    parts = rel.replace(os.sep, "/").split("/")[:-1]
    return not rel.startswith("..") and not any(p.startswith(".") or p in SKIP_DIRS for p in parts)


class ProjectFiles:
    """The ``.py`` files under one root and their cached summaries.

    ``files`` (relative path -> absolute path) is walked at construction (hidden folders,
    :data:`SKIP_DIRS` and links to folders left out). Summaries are computed on demand and kept
    in the cache (see the module docstring).
    """

    def __init__(self, root: str, files: dict[str, str] | None = None, use_cache: bool = True,
                 keep: frozenset[str] = frozenset()) -> None:
        """Walk ``root`` (or take ``files``, relpath -> abspath, as the project: tests, a single
        file) and load the cache when ``use_cache``. ``keep``: absolute paths whose bytes are
        kept in :attr:`kept` once read (the files given to ``check``, which reads them next)."""
        self.root = root
        self._keep = keep
        self.kept: dict[str, bytes] = {}
        self.files = files if files is not None else self._walk()
        self.use_cache = use_cache and files is None
        self._cache: dict[str, list] = self._load() if self.use_cache else {}
        self._dirty = False
        self._summaries: dict[str, dict] = {}
        self.parsed = 0  # files parsed (not taken from the cache) in this run
        self._seeds: list[str] | None = None

    def _walk(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
            rel_folder = os.path.relpath(folder, self.root).replace(os.sep, "/")
            prefix = "" if rel_folder == "." else rel_folder + "/"
            for name in names:
                if name.endswith(".py"):
                    out[prefix + name] = os.path.join(folder, name)
            if len(out) > MAX_PROJECT_FILES:
                return {}
        return out

    # cache ------------------------------------------------------------------------------------
    def _cache_path(self) -> str:
        return os.path.join(self.root, CACHE_DIR, CACHE_FILE)

    def _load(self) -> dict[str, list]:
        try:
            with open(self._cache_path(), encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError, RecursionError):  # unreadable, not UTF-8 JSON, nested too deep
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("files"), dict):
            return {}
        # each entry's shape checked once, here: one that is not an entry is read again by _entry
        return {rel: entry for rel, entry in data["files"].items() if rel in self.files and _is_entry(entry)}

    def save(self) -> None:
        """Write the cache when something changed (atomically; an unwritable root is no error)."""
        if not (self.use_cache and self._dirty):
            return
        folder = os.path.join(self.root, CACHE_DIR)
        try:
            os.makedirs(folder, exist_ok=True)
            ignore = os.path.join(folder, ".gitignore")
            if not os.path.exists(ignore):
                with open(ignore, "w", encoding="utf-8") as fh:
                    fh.write("# written by stackpart check: the project facts cache\n*\n")
            live = {rel: entry for rel, entry in self._cache.items() if rel in self.files}
            import tempfile  # only to write (its import pulls random, shutil...)

            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"version": CACHE_VERSION, "files": live}, fh, separators=(",", ":"))
            os.replace(tmp, self._cache_path())
        except OSError:
            return
        self._dirty = False

    def _entry(self, rel: str) -> list | None:
        """``[mtime_ns, size, can_start_a_reach, summary or None]`` of ``rel``, fresh."""
        full = self.files.get(rel)
        if full is None:
            return None
        try:
            st = os.stat(full)
        except OSError:
            return None
        entry = self._cache.get(rel)  # of the shape _is_entry checks (loaded so, or made here)
        if entry is not None and entry[0] == st.st_mtime_ns and entry[1] == st.st_size:
            return entry
        data = self._read(rel)
        seed = can_start_reach(data)
        entry = [st.st_mtime_ns, st.st_size, seed, None]
        self._cache[rel] = entry
        self._dirty = True
        if seed:
            entry[3] = self._parse(data)
        return entry

    def _read(self, rel: str) -> bytes:
        """The bytes of project file ``rel`` (``b""`` when it cannot be read); a file in
        ``keep`` is read once and its bytes kept."""
        full = self.files[rel]
        key = os.path.abspath(full)
        if key in self.kept:
            return self.kept[key]
        from ..source import Skipped, read_bytes
        from ..errors import StackpartError

        try:
            data, _ = read_bytes(full)
        except (Skipped, StackpartError):
            return b""
        if key in self._keep:
            self.kept[key] = data
        return data

    def _parse(self, data: bytes) -> dict:
        self.parsed += 1
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return {"imports": {}, "defs": {}, "disabled": [], "classes": {}, "sites": [], "calls": {}}
        try:
            return summarize(tree, compile_lines(data))
        except RecursionError:
            return {"imports": {}, "defs": {}, "disabled": [], "classes": {}, "sites": [], "calls": {}}

    def summary(self, rel: str) -> dict | None:
        """The summary of project file ``rel`` (parsed now if the cache has none), or None."""
        cached = self._summaries.get(rel)
        if cached is not None:
            return cached
        entry = self._entry(rel)
        if entry is None:
            return None
        if entry[3] is None:
            entry[3] = self._parse(self._read(rel))
            self._dirty = True
        self._summaries[rel] = entry[3]
        return entry[3]

    def seeds(self) -> list[str]:
        """Project files that can start a reach (they mention torch and call compile)."""
        if self._seeds is None:
            self._seeds = [rel for rel in self.files if (e := self._entry(rel)) is not None and e[2]]
        return self._seeds
