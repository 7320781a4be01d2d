"""Round trip over a real corpus: no byte outside an edit changes (issue 16, "What must hold" 2).

The corpus is the ``.py`` files of the installed packages this interpreter can see: the venv's
site-packages, the base interpreter's site-packages and its standard library (the venv alone holds
11,580 files, fewer than the 20,000 the issue asks for). Files with the same bytes are counted
once; ``--files`` (default 20,400) samples them at random (``--seed``) to fit the time budget.

(a) **No-op round trip**, on every sampled file: read and decode through
:func:`rewriter.source.read_source`, CPython's ``ast.parse`` as the gate, parse with LibCST
(:meth:`rewriter.source.SourceFile.parse`) and :func:`rewriter.splice.splice` of the unchanged tree
in :func:`rewriter.source.run_deep`'s thread (as ``plan_rewrite`` runs), encoded back
(:meth:`rewriter.source.SourceFile.encode`): it must give the file's bytes on every file CPython
parses. LibCST's own print (``module.code``) is compared too: the files where the
old ``module.code`` path changed bytes. (The no-op through real transforms is (b)'s second run.)

(b) **compile + mark_dynamic rewrite**, on a sample of the files with two distinct functions or
methods (top level, or in a top-level class) with a block body, one of them with a positional
first parameter (after ``self``): a real plan (:func:`rewriter.plan.parse_plan`) with
``mark_dynamic`` on that parameter (dim 0) and ``compile`` on another function, run by
:func:`rewriter.rewrite.transform.plan_rewrite` on a copy of the file in a temp SRC. The parameter is a
tensor-like one (:data:`TENSORISH`, or annotated Tensor/ndarray/Array) where the file has one;
the rewrite does not depend on it. The sample takes every file whose LibCST print differs from
its bytes (what splice works on), then files with a tensor-like parameter, then the rest, at
random, among files of at most ``--max-size`` bytes (12 KiB: a rewrite costs ~5x the parse per
byte, so the budget allows 5,000 files of that size). Checks: every old line is kept, in order
(insertion-only bytes), CPython parses the result, the same plan on the rewritten copy changes
nothing; the ``-`` lines of the printed diff (:mod:`rewriter.diff`) are counted apart.

    OMP_NUM_THREADS=1 python benchmarks/roundtrip_corpus.py [--jobs 2] [--files 20400] [--rewrite 5300]

Writes ``benchmarks/results/roundtrip-<UTC date>.json`` (``--out`` to change); exit 1 when a
CPython-parsed file does not round-trip, a rewrite breaks a check, or fewer than 20,000 / 5,000
files were checked. About 22 minutes on the shared 2-vCPU VM. CPU only.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import importlib.metadata
import json
import os
import platform
import random
import re
import shutil
import sys
import sysconfig
import tempfile
import time
import warnings
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install`

#: First-parameter names taken as a tensor or array (plus any annotation naming Tensor, ndarray or
#: Array): the array-like names among the most frequent first parameters of the corpus's functions.
TENSORISH = {
    "x", "y", "z", "t", "a", "b", "v", "u", "w", "A", "B", "M", "X", "Y", "W", "xs", "ys",
    "input", "inputs", "inp", "input_ids", "inputs_embeds", "input_tensor", "tensor", "tensors",
    "hidden_states", "hidden_state", "pixel_values", "attention_mask", "logits", "features", "feats",
    "embeddings", "emb", "images", "image", "img", "tokens", "outputs", "output", "grad", "grads",
    "grad_output", "grad_outputs", "data", "arr", "array", "mat", "matrix", "vec", "vector",
    "values", "value", "val", "query", "q", "batch", "sample", "samples", "weight", "weights",
    "points", "coords", "signal", "seq", "sequence", "state", "states", "scores", "probs",
}
EXAMPLES = 12  # examples kept per failure kind
PRIMARY_ROOTS = 3  # venv, base interpreter site-packages, base interpreter standard library


def corpus_roots() -> list[tuple[str, Path]]:
    """(label, directory) of the trees scanned, in order (earlier wins for duplicate bytes).

    This venv's site-packages; the base interpreter's site-packages and standard library; the
    system Python's (``/usr/lib/python3/dist-packages``, ``/usr/lib/python3.N``); the other
    interpreters installed next to the base one (pyenv's ``versions/``) whose version CPython
    here can parse (not newer than this one). A standard library root skips its site-packages.
    """
    here = sys.version_info[:2]
    venv = Path(sysconfig.get_paths()["purelib"])
    base_vars = {"base": sys.base_prefix, "platbase": sys.base_prefix, "installed_base": sys.base_prefix}
    base_site = Path(sysconfig.get_paths(vars=base_vars)["purelib"])
    stdlib = Path(sysconfig.get_paths(vars=base_vars)["stdlib"])
    roots = [("venv site-packages", venv)]
    if base_site != venv and base_site.is_dir():
        roots.append((f"CPython {platform.python_version()} site-packages", base_site))
    roots.append((f"CPython {platform.python_version()} standard library", stdlib))
    system = Path(f"/usr/lib/python{here[0]}.{here[1]}")
    if Path("/usr/lib/python3/dist-packages").is_dir():
        roots.append(("system Python dist-packages", Path("/usr/lib/python3/dist-packages")))
    if system.is_dir() and system.resolve() != stdlib.resolve():
        roots.append((f"system Python {here[0]}.{here[1]} standard library", system))
    others = []
    for lib in Path(sys.base_prefix).parent.glob("*/lib/python3.*"):
        version = tuple(int(x) for x in lib.name.removeprefix("python").split(".")[:2])
        if lib.resolve() != stdlib.resolve() and version <= here and lib.is_dir():
            others.append((version, lib))
    for version, lib in sorted(others, reverse=True):
        name = lib.parent.parent.name
        if (lib / "site-packages").is_dir():
            roots.append((f"CPython {name} site-packages", lib / "site-packages"))
        roots.append((f"CPython {name} standard library", lib))
    return roots


def collect(roots: list[tuple[str, Path]]) -> list[dict]:
    """Every regular ``.py`` file under ``roots`` (no symlinks, no ``__pycache__``), distinct bytes.

    Returns dicts with root index, relative path, top-level package and sha256.
    """
    seen: set[str] = set()
    out = []
    skip = {"site-packages", "__pycache__"}
    for index, (_, root) in enumerate(roots):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in skip)
            for name in sorted(filenames):
                if not name.endswith(".py"):
                    continue
                path = Path(dirpath) / name
                if path.is_symlink() or not path.is_file():
                    continue
                data = path.read_bytes()
                digest = hashlib.sha256(data).hexdigest()
                if digest in seen:
                    continue
                seen.add(digest)
                rel = path.relative_to(root).as_posix()
                top = rel.split("/")[0] if "/" in rel else Path(rel).stem
                out.append({"root": index, "rel": rel, "top": top, "size": len(data)})
    return out


def versions(roots: list[tuple[str, Path]], tops: Counter) -> list[dict]:
    """Distribution name and version of each top-level package of the corpus, by file count."""
    owner: dict[tuple[int, str], tuple[str, str]] = {}
    for index, (_, root) in enumerate(roots):
        for dist in importlib.metadata.distributions(path=[str(root)]):
            names = set()
            top_level = dist.read_text("top_level.txt")
            if top_level:
                names |= {n.strip() for n in top_level.split() if n.strip()}
            for f in dist.files or ():
                parts = Path(str(f)).parts
                if parts and not parts[0].endswith((".dist-info", ".egg-info", ".data")) and parts[0] != "..":
                    names.add(Path(parts[0]).stem if parts[0].endswith(".py") else parts[0])
            for n in names:
                owner.setdefault((index, n), (dist.metadata["Name"], dist.version))
    rows = []
    for (index, top), count in tops.most_common():
        stdlib = "standard library" in roots[index][0]
        name, version = owner.get((index, top), ("(standard library)" if stdlib else "?", ""))
        rows.append({"root": roots[index][0], "package": top, "distribution": name, "version": version, "files": count})
    return rows


# --- workers -------------------------------------------------------------------------------------


def _cpython(text: str) -> str | None:
    """None when CPython parses ``text``, else the reason."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
        return None
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg}"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"{type(exc).__name__}: {exc}"[:120]


def _params(fn) -> list:
    p = fn.params
    return [*p.posonly_params, *p.params]


def _first_arg(fn, method: bool) -> tuple[str, bool] | None:
    """``fn``'s first positional parameter (after self/cls for a method) and whether it is
    tensor-like; None when it has none (or is a staticmethod, classmethod or property)."""
    import libcst as cst

    params = _params(fn)
    if method:
        decorators = {getattr(d.decorator, "value", None) for d in fn.decorators}
        if decorators & {"staticmethod", "classmethod", "property"} or not params:
            return None
        params = params[1:]
    if not params:
        return None
    first = params[0]
    name = first.name.value
    annotation = ""
    if first.annotation is not None:
        annotation = cst.Module([]).code_for_node(first.annotation.annotation)
    return name, name in TENSORISH or any(word in annotation for word in ("Tensor", "ndarray", "Array"))


def candidates(module) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[str]]:
    """Top-level functions and methods of top-level classes with a block body, names defined once.

    Returns ``(tensor, positional, every)``: ``(qualname, first parameter)`` of those whose first
    parameter (after self/cls) is tensor-like (:data:`TENSORISH`, or an annotation naming Tensor,
    ndarray or Array), of those with any positional first parameter, and every qualname.
    """
    import libcst as cst

    found: list[tuple[str, object, bool]] = []
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef):
            found.append((stmt.name.value, stmt, False))
        elif isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
            for inner in stmt.body.body:
                if isinstance(inner, cst.FunctionDef):
                    found.append((f"{stmt.name.value}.{inner.name.value}", inner, True))
    counts = Counter(q for q, _, _ in found)
    tensor, positional, every = [], [], []
    for qual, fn, method in found:
        if counts[qual] != 1 or not isinstance(fn.body, cst.IndentedBlock):
            continue
        every.append(qual)
        arg = _first_arg(fn, method)
        if arg is not None:
            positional.append((qual, arg[0]))
            if arg[1]:
                tensor.append((qual, arg[0]))
    return tensor, positional, every


def roundtrip(job: tuple[str, str]) -> dict:
    """(a) for one file: the no-op round trip and LibCST's own print, plus its candidates."""
    started = time.perf_counter()
    root, rel = job
    out: dict = {"rel": rel, "root": root, "size": (Path(root) / rel).stat().st_size}
    try:
        return _roundtrip(root, rel, out)
    finally:
        out["s"] = round(time.perf_counter() - started, 3)


def _roundtrip(root: str, rel: str, out: dict) -> dict:
    from rewriter import source as source_mod
    from rewriter.errors import StackpartError
    from rewriter.source import read_source

    # As plan_rewrite does: LibCST's work in run_deep's thread (large stack, raised limit).
    run_deep = getattr(source_mod, "run_deep", lambda fn, *a: fn(*a))
    try:
        source = read_source(Path(root), rel)
    except StackpartError as exc:
        out["status"] = "undecodable"
        out["why"] = exc.message[:160]
        return out
    why = _cpython(source.text)
    return run_deep(_parse_and_splice, source, why, out)


def _parse_and_splice(source, why: str | None, out: dict) -> dict:
    from rewriter.errors import StackpartError
    from rewriter.splice import splice

    try:
        module = source.parse()
    except StackpartError as exc:
        out["status"] = "cpython_refused" if why else "libcst_refused"
        out["why"] = why or f"{exc.line}:{exc.col}: {exc.message}"[:200]
        return out
    except RecursionError:
        out["status"] = "cpython_refused" if why else "libcst_recursion"
        out["why"] = why or "RecursionError in the parser"
        return out
    if why:
        out["status"] = "cpython_refused"
        out["why"] = why
        out["libcst_parsed"] = True
        return out
    try:
        printed = module.code
        out["libcst_print_identical"] = printed == source.text
        if printed != source.text:
            out["print_why"] = _first_difference(source.text.encode(), printed.encode())
            out["lossy_line"] = int(out["print_why"].split(":")[0].split()[1])
        data = source.encode(splice(source.text, module, module))
    except RecursionError:
        out["status"] = "libcst_recursion"
        out["why"] = "RecursionError in LibCST's visitor or code generation"
        return out
    out["status"] = "identical" if data == source.raw else "differs"
    if data != source.raw:
        out["why"] = _first_difference(source.raw, data)
    out["tensor"], out["positional"], out["every"] = candidates(module)
    return out


def _first_difference(old: bytes, new: bytes) -> str:
    i = next((k for k in range(min(len(old), len(new))) if old[k] != new[k]), min(len(old), len(new)))
    line = old[:i].count(b"\n") + 1
    return f"line {line}: {old[max(0, i - 20): i + 20]!r} -> {new[max(0, i - 20): i + 20]!r}"


def _subsequence(old: list[str], new: list[str]) -> bool:
    """Whether ``old`` is ``new`` with some lines taken out (an insertion-only edit)."""
    it = iter(new)
    return all(any(line == n for n in it) for line in old)


def rewrite(job: dict) -> dict:
    """(b) for one file: compile + mark_dynamic through plan_rewrite, then the checks."""
    started = time.perf_counter()
    out = {"rel": job["rel"], "root": job["root"], "lossy": job["lossy"], "size": job["size"]}
    try:
        return _rewrite(job, out)
    finally:
        out["s"] = round(time.perf_counter() - started, 3)


def _rewrite(job: dict, out: dict) -> dict:
    from rewriter.errors import StackpartError
    from rewriter.plan import parse_plan
    from rewriter.rewrite.transform import plan_rewrite
    from rewriter.splice import split_lines

    name = Path(job["rel"]).name
    tmp = Path(tempfile.mkdtemp(prefix="stackpart-rt-"))
    try:
        src = tmp / "src"
        src.mkdir()
        raw = (Path(job["root"]) / job["rel"]).read_bytes()
        (src / name).write_bytes(raw)
        tensor, positional, every = job["tensor"], job["positional"], job["every"]
        if job.get("lossy_line"):
            # Edit next to the line LibCST prints differently: the splice's hard case.
            near = _distance(raw, job["lossy_line"])
            positional = sorted(positional, key=lambda c: near(c[0]))
            tensor = []
            every = sorted(every, key=near)
        md_qual, arg = (tensor or positional)[0]
        out["tensor_like"] = bool(tensor)
        # A compile target that calls the mark_dynamic target would hold it in its compiled
        # region (the plan is refused for that): try those last.
        mentions = _mentions(raw)
        leaf = md_qual.rsplit(".", 1)[-1]
        others = sorted((q for q in every if q != md_qual), key=lambda q: leaf in mentions.get(q, ()))
        last = None
        for compile_qual in others[:8]:
            plan_text = (
                "version: 1\nactions:\n"
                f"  - action: mark_dynamic\n    target: {json.dumps(name + '::' + md_qual)}\n"
                f"    arg: {json.dumps(arg)}\n    dim: 0\n"
                f"  - action: compile\n    target: {json.dumps(name + '::' + compile_qual)}\n"
            )
            try:
                loaded = parse_plan(plan_text)
                result = plan_rewrite(loaded, src)
            except StackpartError as exc:
                last = exc.message
                if "compiled region" in last:
                    continue  # consistency: mark_dynamic inside the compile target's region
                break
            except RecursionError:
                last = "RecursionError"
                break
            out["plan"] = f"mark_dynamic {md_qual}({arg}, 0) + compile {compile_qual}"
            break
        if "plan" not in out:
            out["status"] = "refused"
            out["why"] = (last or "no second function")[:200]
            return out
        if len(result.changes) != 1:
            out["status"] = "no_change" if not result.changes else "several_files"
            return out
        new = result.changes[0].new
        diff = result.diff()
        old_lines, new_lines = split_lines(raw.decode("latin-1")), split_lines(new.decode("latin-1"))
        minus = [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
        out["inserted_lines"] = len(new_lines) - len(old_lines)
        out["diff_minus_lines"] = len(minus)
        out["diff_minus_blank"] = sum(1 for line in minus if not line[1:].strip())
        # The same diff without difflib's autojunk heuristic (rewriter.diff uses the default):
        # whether an insertion-only diff of these lines exists at all.
        a, b = (re.findall(r"[^\n]*\n|[^\n]+\Z", x.decode("latin-1")) for x in (raw, new))
        opcodes = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
        out["minus_without_autojunk"] = any(tag in ("replace", "delete") for tag, *_ in opcodes)
        out["insertion_only"] = _subsequence(old_lines, new_lines)
        text = new.decode(result_encoding(raw))
        out["cpython_parses"] = _cpython(text) is None
        (src / name).write_bytes(new)
        try:
            again = plan_rewrite(loaded, src)
            out["idempotent"] = again.changes == []
        except StackpartError as exc:
            out["idempotent"] = False
            out["why"] = f"second run: {exc.message}"[:200]
        # The bytes are what counts: every old line kept, in order; the result parses; a second
        # run changes nothing. '-' lines of the printed diff are counted apart (see BENCHMARKS.md).
        ok = out["insertion_only"] and out["cpython_parses"] and out["idempotent"]
        out["status"] = "ok" if ok else "failed"
        if minus or not ok:
            out["minus"] = minus[:3]
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _functions(raw: bytes):
    """(qualname, node) of the top-level functions and the methods of top-level classes."""
    for node in ast.parse(raw).body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for f in node.body:
                if isinstance(f, ast.FunctionDef):
                    yield f"{node.name}.{f.name}", f


def _mentions(raw: bytes) -> dict[str, set[str]]:
    """qualname -> the names and attribute names its body uses."""
    out = {}
    for qual, fn in _functions(raw):
        out[qual] = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | {
            n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
    return out


def _distance(raw: bytes, line: int):
    """qualname -> how many lines its ``def`` (or body) lies from ``line`` (CPython's ast)."""
    spans = {qual: (fn.lineno, fn.end_lineno or fn.lineno) for qual, fn in _functions(raw)}
    def near(qual: str) -> int:
        lo, hi = spans.get(qual, (10**9, 10**9))
        return 0 if lo <= line <= hi else min(abs(lo - line), abs(hi - line))
    return near


def result_encoding(raw: bytes) -> str:
    """The encoding :func:`rewriter.source.read_source` decodes ``raw`` with."""
    from rewriter.source import _CODING_RE

    for line in raw.removeprefix(b"\xef\xbb\xbf").splitlines()[:2]:
        match = _CODING_RE.match(line)
        if match:
            return match.group(1).decode("ascii")
    return "utf-8-sig"


def _init() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def run_pool(fn, jobs: list, workers: int, chunksize: int) -> list[dict]:
    """``fn`` over ``jobs`` in ``workers`` processes; a crashed worker's chunk is retried one file
    per process, and a file that crashes alone is reported as ``status: crashed``."""
    results: list[dict] = []
    pending = list(jobs)
    while pending:
        try:
            with ProcessPoolExecutor(workers, initializer=_init) as pool:
                for r in pool.map(fn, pending, chunksize=chunksize):
                    results.append(r)
            pending = []
        except BrokenProcessPool:
            done = {(r["root"], r["rel"]) for r in results}
            left = [j for j in pending if _key(j) not in done]
            pending = []
            for j in left:
                try:
                    with ProcessPoolExecutor(1, initializer=_init) as pool:
                        results.append(pool.submit(fn, j).result())
                except BrokenProcessPool:
                    root, rel = _key(j)
                    results.append({"root": root, "rel": rel, "status": "crashed"})
    return results


def _key(job) -> tuple[str, str]:
    return (job[0], job[1]) if isinstance(job, tuple) else (job["root"], job["rel"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--files", type=int, default=20400, help="sample this many files for (a) (0: all)")
    ap.add_argument("--rewrite", type=int, default=5200, help="files attempted in (b)")
    ap.add_argument("--max-size", type=int, default=10240,
                    help="(b) samples files up to this many bytes (files LibCST prints differently: any size)")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    started = time.perf_counter()
    roots = corpus_roots()
    files = collect(roots)
    rng = random.Random(args.seed)
    if args.files and args.files < len(files):
        # Every file of this interpreter's own trees (venv, base site-packages and stdlib), then
        # a random sample of the other installations' files up to --files.
        own = [f for f in files if f["root"] < PRIMARY_ROOTS]
        rest = [f for f in files if f["root"] >= PRIMARY_ROOTS]
        if len(own) >= args.files:
            files = rng.sample(own, args.files)
        else:
            files = own + rng.sample(rest, args.files - len(own))
    tops = Counter((f["root"], f["top"]) for f in files)
    t_collect = time.perf_counter() - started

    jobs_a = [(str(roots[f["root"]][1]), f["rel"]) for f in files]
    jobs_a.sort(key=lambda j: -(Path(j[0]) / j[1]).stat().st_size)  # large files first: no long tail
    t0 = time.perf_counter()
    res_a = run_pool(roundtrip, jobs_a, args.jobs, chunksize=8)
    t_a = time.perf_counter() - t0

    status = Counter(r["status"] for r in res_a)
    parsed = [r for r in res_a if r["status"] in ("identical", "differs", "libcst_refused", "libcst_recursion", "crashed")]
    lossy = [r for r in res_a if r.get("libcst_print_identical") is False]

    eligible = [r for r in res_a if r.get("positional") and len(r.get("every", [])) >= 2]
    pool = [r for r in eligible if r["size"] <= args.max_size or r.get("libcst_print_identical") is False]
    rng.shuffle(pool)
    # files LibCST prints differently first, then those with a tensor-like parameter (stable sort)
    pool.sort(key=lambda r: (r.get("libcst_print_identical", True), not r.get("tensor")))
    chosen = sorted(pool[: args.rewrite], key=lambda r: -r["size"])  # large first: no long tail
    jobs_b = [
        {"root": r["root"], "rel": r["rel"], "tensor": r["tensor"], "positional": r["positional"],
         "every": r["every"], "size": r["size"], "lossy_line": r.get("lossy_line"),
         "lossy": r.get("libcst_print_identical") is False}
        for r in chosen
    ]
    t0 = time.perf_counter()
    res_b = run_pool(rewrite, jobs_b, args.jobs, chunksize=4)
    t_b = time.perf_counter() - t0
    status_b = Counter(r["status"] for r in res_b)

    def examples(rows, keys=("rel", "why")) -> list[dict]:
        return [{k: r.get(k) for k in keys if r.get(k) is not None} | {"tree": _label(roots, r["root"])} for r in rows[:EXAMPLES]]

    import libcst  # noqa: F401
    import torch

    rewritten = [r for r in res_b if r["status"] in ("ok", "failed")]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}",
        "load_avg_1m_end": os.getloadavg()[0],
        "torch": torch.__version__,
        "libcst": importlib.metadata.version("libcst"),
        "jobs": args.jobs,
        "seed": args.seed,
        "roots": [{"label": label, "path": str(path), "files": sum(1 for f in files if f["root"] == i)}
                  for i, (label, path) in enumerate(roots)],
        "seconds": {"collect": round(t_collect, 1), "roundtrip": round(t_a, 1), "rewrite": round(t_b, 1),
                    "total": round(time.perf_counter() - started, 1)},
        "roundtrip": {
            "files": len(res_a),
            "bytes": sum(f["size"] for f in files),
            "undecodable": status["undecodable"],
            "cpython_refused": status["cpython_refused"],
            "cpython_refused_libcst_parsed": sum(1 for r in res_a if r.get("libcst_parsed")),
            "cpython_parsed": len(parsed),
            "libcst_refused": status["libcst_refused"],
            "libcst_recursion": status["libcst_recursion"],
            "crashed": status["crashed"],
            "identical": status["identical"],
            "differs": status["differs"],
            "libcst_print_differs": len(lossy),
            "examples": {
                "differs": examples([r for r in res_a if r["status"] == "differs"]),
                "libcst_refused": examples([r for r in res_a if r["status"] == "libcst_refused"]),
                "libcst_recursion": examples([r for r in res_a if r["status"] == "libcst_recursion"]),
                "crashed": examples([r for r in res_a if r["status"] == "crashed"]),
                "libcst_print_differs": [{"rel": r["rel"], "tree": _label(roots, r["root"]), "print_why": r["print_why"],
                                          "candidate": bool(r.get("positional")) and len(r.get("every", [])) >= 2}
                                         for r in lossy],
                "cpython_refused": examples([r for r in res_a if r["status"] == "cpython_refused"]),
            },
        },
        "rewrite": {
            "eligible": len(eligible),
            "eligible_tensor_like": sum(1 for r in eligible if r.get("tensor")),
            "max_size": args.max_size,
            "eligible_within_max_size_or_lossy": len(pool),
            "bytes": sum(r["size"] for r in chosen),
            "attempted": len(res_b),
            "rewritten": len(rewritten),
            "lossy_rewritten": sum(1 for r in rewritten if r["lossy"]),
            "tensor_like_rewritten": sum(1 for r in rewritten if r.get("tensor_like")),
            "ok": status_b["ok"],
            "failed": status_b["failed"],
            "refused": status_b["refused"],
            "no_change": status_b["no_change"],
            "crashed": status_b["crashed"],
            "diff_with_minus_lines": sum(1 for r in rewritten if r["diff_minus_lines"]),
            "diff_minus_lines_total": sum(r["diff_minus_lines"] for r in rewritten),
            "diff_minus_lines_blank": sum(r["diff_minus_blank"] for r in rewritten),
            "minus_without_autojunk": sum(1 for r in rewritten if r["minus_without_autojunk"]),
            "not_insertion_only": sum(1 for r in rewritten if not r["insertion_only"]),
            "not_parsed_by_cpython": sum(1 for r in rewritten if not r["cpython_parses"]),
            "not_idempotent": sum(1 for r in rewritten if not r["idempotent"]),
            "inserted_lines_total": sum(r["inserted_lines"] for r in rewritten),
            "refusals": Counter(_reason(r.get("why", "")) for r in res_b if r["status"] == "refused").most_common(),
            "examples": {
                "failed": examples([r for r in res_b if r["status"] == "failed"],
                                   ("rel", "plan", "why", "minus", "diff_minus_lines", "insertion_only",
                                    "cpython_parses", "idempotent")),
                "refused": examples([r for r in res_b if r["status"] == "refused"]),
                "diff_minus_lines": examples([r for r in rewritten if r["diff_minus_lines"]], ("rel", "plan", "minus")),
                "lossy_ok": examples([r for r in res_b if r["lossy"] and r["status"] == "ok"], ("rel", "plan")),
            },
        },
        "packages": versions(roots, tops),
    }
    ok = (
        result["roundtrip"]["differs"] == 0
        and result["roundtrip"]["crashed"] == 0
        and status_b["failed"] == 0
        and len(rewritten) >= 5000
        and result["roundtrip"]["files"] >= 20000
    )
    result["pass"] = ok
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"roundtrip-{time.strftime('%Y-%m-%d', time.gmtime())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    if os.environ.get("ROUNDTRIP_RAW"):
        Path(os.environ["ROUNDTRIP_RAW"]).write_text(json.dumps({"a": res_a, "b": res_b}))
    ra, rb = result["roundtrip"], result["rewrite"]
    print(
        f"(a) {ra['files']} files ({ra['bytes'] / 1e6:.0f} MB): CPython parsed {ra['cpython_parsed']}, "
        f"LibCST refused {ra['libcst_refused']}, recursion {ra['libcst_recursion']}, crashed {ra['crashed']}; "
        f"identical {ra['identical']}, differs {ra['differs']} (LibCST's own print differs on {ra['libcst_print_differs']})\n"
        f"(b) {rb['rewritten']} rewritten of {rb['attempted']} attempted ({rb['eligible']} eligible): ok {rb['ok']}, "
        f"failed {rb['failed']}, refused {rb['refused']}; '-' lines {rb['diff_with_minus_lines']}, not insertion-only "
        f"{rb['not_insertion_only']}, not idempotent {rb['not_idempotent']}, lossy files rewritten {rb['lossy_rewritten']}\n"
        f"time: {result['seconds']}\n{'PASS' if ok else 'FAIL'}; wrote {out}"
    )
    return 0 if ok else 1


def _label(roots, root: str) -> str:
    return next((label for label, path in roots if str(path) == root), root)


def _reason(why: str) -> str:
    """A refusal message without its names and positions (to count kinds)."""

    why = re.sub(r"'[^']*'|`[^`]*`|\"[^\"]*\"|\([^)]*\)", "'…'", why)
    return re.sub(r"\d+", "N", why)[:120]


if __name__ == "__main__":
    sys.exit(main())
