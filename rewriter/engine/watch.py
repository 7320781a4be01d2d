"""Compile behaviour from Dynamo's own bookkeeping: graphs, graph breaks, recompiles, and frames
that hit the recompile limit and silently fell back to eager.

Sources (torch >= 2.6): ``torch._dynamo.utils.counters`` (``stats.unique_graphs``,
``graph_break`` reasons, ``frames``), ``torch._dynamo.utils.guard_failures`` (the guard-failure
reasons, keyed by code object) with the code's cache entries for the recompile count and the warning Dynamo logs on
``torch._dynamo.convert_frame`` when a frame hits ``config.recompile_limit`` (named
``cache_size_limit`` before torch 2.7); after it the frame runs eager with no error.

Which code compiled (:class:`FrameLog`, :func:`compiled_modules`): Dynamo's compile callbacks
(``torch._dynamo.callback_handler.register_start_callback`` / ``register_end_callback``,
torch/_dynamo/callback.py; older releases call them with no argument, torch 2.13 with a
``CallbackArgs``: the log takes either) fire once per frame compile, inside ``compile_inner(code,
one_graph, hooks)`` of torch/_dynamo/convert_frame.py (``(code, one_graph, hooks, transform)`` in
older releases), whose locals name the frame's code and whether it is compiled as one graph
(``fullgraph=True``); the nearest ``compile_wrapper`` of torch/_dynamo/eval_frame.py up the
stack (``_fn`` in older releases) holds ``fn``, the callable the program handed ``torch.compile``
(the compile's entry). Read in the installed torch 2.13 and in public torch sources of earlier
releases. Without the callbacks, the frames come from ``torch._dynamo.utils.get_compilation_metrics()``
(``co_name``, ``co_filename``, ``co_firstlineno``, ``graph_op_count``; no entry, no fullgraph).

What compiles a model object carries (:func:`carried_compiles`): ``torch.compile(module)``'s
``OptimizedModule`` at the root or as a child, ``module.compile()``'s ``_compiled_call_impl``, a
compiled ``forward`` instance attribute, ``@torch.compile`` on a method of the modules' classes.
Every reader of those forms goes through it (:func:`compiled_modules`, :func:`compiles_off`,
diagnose's ``own_raised.unwrap``), so a new form is added there alone.

Which frames ran eager after a compile error ``config.suppress_errors`` swallowed
(:meth:`CompileWatch.swallowed`): torch/_dynamo/convert_frame.py's ``ConvertFrame.__call__``
counts every frame it is asked to convert (``counters["frames"]["total"]``) and those converted
(``["ok"]``); a frame whose conversion raised and was not re-raised ran eager. Its
``CompilationMetrics`` (``torch._dynamo.utils.get_compilation_metrics()``, the last 64 compiles)
names it (``co_name``, ``co_filename``, ``co_firstlineno``) and the error (``fail_type``,
``fail_reason``). ``Unsupported`` and ``UserError`` (torch/_dynamo/exc.py) are Dynamo's soft
failures, swallowed whatever ``suppress_errors`` says (a graph break it cannot resume after, the
recompile limit): those are not counted. Read in the installed torch 2.13 and in public torch
sources of earlier releases (``fail_type`` is the exception's ``__qualname__``; before torch 2.3
``str(type(e))``).

Which of the program's compile calls ran (:class:`CompileCalls`): ``torch.compile`` and
``nn.Module.compile`` wrapped for the life of the process, each call's caller frame recorded
(``sys._getframe``; a decorator's call is at its ``@`` line, a call at the line its expression
starts on), so two calls of one model in two branches are told apart.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..dynamo_messages import GraphBreak, artifact_logs, parse_graph_break

LIMIT_RE = re.compile(r"hit config\.(recompile_limit|cache_size_limit|accumulated_\w+)")


class _LimitHandler(logging.Handler):
    """Recompile-limit warnings and graph breaks (with their user file:line) from Dynamo's log."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.hits: list[str] = []
        self.breaks: list[GraphBreak] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:  # a malformed record must not break the run
            return
        if LIMIT_RE.search(msg):
            lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
            self.hits.append(" | ".join(lines[:3])[:400])
        elif (b := parse_graph_break(msg)) is not None:
            self.breaks.append(b)


@dataclass
class CompileStats:
    """What Dynamo did during a run.

    Attributes:
        unique_graphs: graphs captured (``counters["stats"]["unique_graphs"]``).
        graph_breaks: total graph breaks, and the most frequent reasons (first line each).
        graph_break_sites: ``file:line: reason`` per distinct site, from Dynamo's graph-break log
            (the counters have no location).
        recompiles: recompilations (guard failures that compiled a new entry).
        recompile_reasons: one line per recompilation (at most 3 a frame, 10 in all):
            ``function (file:line): guard; guard``, each distinct guard that failed once
            (:func:`per_recompile`).
        recompile_limit_hits: one line per frame that hit the recompile limit and fell back to
            eager from then on (function, limit, last guard that failed).
        frames_total, frames_ok: frames Dynamo was asked to convert / converted.
    """

    unique_graphs: int = 0
    graph_breaks: int = 0
    graph_break_reasons: list[str] = field(default_factory=list)
    graph_break_sites: list[str] = field(default_factory=list)
    recompiles: int = 0
    recompile_reasons: list[str] = field(default_factory=list)
    recompile_limit_hits: list[str] = field(default_factory=list)
    frames_total: int = 0
    frames_ok: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SwallowedError:
    """One frame whose compile raised an error ``torch._dynamo.config.suppress_errors`` swallowed:
    Dynamo ran the frame eager instead (and skips it from then on).

    Attributes:
        name: the frame's code name (``forward``).
        file: its file, as Dynamo recorded it (absolute).
        line: the first line of its code (the ``def``).
        error: ``Type: reason`` on one line, the reason cut at 200 characters
            (``BackendCompilerFailed: backend='f' raised: RuntimeError: ...``).
    """

    name: str
    file: str
    line: int
    error: str


#: Dynamo's soft failures (torch/_dynamo/exc.py): a frame whose compile raised one runs eager
#: whatever ``suppress_errors`` says (``ConvertFrame.__call__``'s ``soft_fail``).
SOFT_FAILURES = ("Unsupported", "UserError")


def _type_name(fail_type: str) -> str:
    """The class name in a ``CompilationMetrics.fail_type``: ``Unsupported``, or before torch 2.3
    ``<class 'torch._dynamo.exc.Unsupported'>``."""
    return fail_type.strip("<> ").removeprefix("class ").strip("'").split(".")[-1]


def _soft(fail_type: str) -> bool:
    """Whether ``fail_type`` (a ``CompilationMetrics.fail_type``, :func:`_type_name`) names one of
    :data:`SOFT_FAILURES` or a subclass of one in torch/_dynamo/exc.py; an exception class not
    defined there is not soft."""
    from torch._dynamo import exc

    cls = getattr(exc, _type_name(fail_type), None)
    soft = tuple(c for c in (getattr(exc, n, None) for n in SOFT_FAILURES) if isinstance(c, type))
    return isinstance(cls, type) and issubclass(cls, soft)


class CompileWatch:
    """Reset Dynamo, then read its counters: ``with CompileWatch() as w: ...; w.stats()``.

    Resetting (``torch._dynamo.reset()``) drops compiled code and counters, so create the watch
    before the first compiled call of the variant it measures.
    """

    def __init__(self) -> None:
        self._handler = _LimitHandler()
        self._logs: Any = None
        self.frame_log = FrameLog()

    def __enter__(self) -> "CompileWatch":
        import torch._dynamo
        from torch._dynamo.utils import counters

        torch._dynamo.reset()  # clears the callback handler too: the frame log registers after
        counters.clear()
        self._guard_failures().clear()
        _clear_compilation_metrics()  # :meth:`swallowed` reads the compiles since here
        self.frame_log.install()
        self._logs = artifact_logs(self._handler, "graph_breaks")
        self._logs.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._logs.__exit__(None, None, None)
        self.frame_log.remove()

    def frames(self, model: Any = None) -> list[dict[str, Any]]:
        """The frames Dynamo compiled since ``__enter__`` (:meth:`FrameLog.frames`)."""
        return self.frame_log.frames(model)

    def swallowed(self) -> list[SwallowedError]:
        """The frames that ran eager since ``__enter__`` after a compile error
        ``torch._dynamo.config.suppress_errors`` swallowed, in the order compiled (see the module
        docstring): none where the knob is off (such an error raises) or where Dynamo's counters
        say every frame it was asked to convert was converted; at most as many as the counters'
        failed frames (``frames.total - frames.ok``). Raises nothing: a torch without these
        records gives ``[]``."""
        try:
            import torch._dynamo.config as config
            from torch._dynamo.utils import counters, get_compilation_metrics

            frames = counters.get("frames", {})
            failed = int(frames.get("total", 0)) - int(frames.get("ok", 0))
            if not config.suppress_errors or failed <= 0:
                return []
            out = [SwallowedError(m.co_name, str(m.co_filename), int(m.co_firstlineno or 0),
                                  f"{_type_name(str(m.fail_type))}: "
                                  f"{' '.join(str(m.fail_reason or '').split())[:200]}")
                   for m in get_compilation_metrics()
                   if getattr(m, "fail_type", None) and getattr(m, "co_name", None) and not _soft(str(m.fail_type))]
            return out[:failed]
        except Exception:  # noqa: BLE001 - a reading for the report never breaks the run
            return []

    @property
    def breaks(self) -> list[GraphBreak]:
        """Every graph break Dynamo logged since ``__enter__`` (file as Dynamo printed it, line,
        one-line reason), in the order logged."""
        return list(self._handler.breaks)

    @staticmethod
    def _guard_failures() -> dict[Any, list[Any]]:
        from torch._dynamo import utils

        return getattr(utils, "guard_failures", {})

    def stats(self) -> CompileStats:
        """A snapshot of the counters since ``__enter__``."""
        from torch._dynamo.utils import counters

        breaks = counters.get("graph_break", {})
        reasons = sorted(breaks.items(), key=lambda kv: -kv[1])
        failures = self._guard_failures()
        recompile_reasons: list[str] = []
        for code, items in failures.items():
            name = getattr(code, "co_name", str(code))
            where = f"{getattr(code, 'co_filename', '?')}:{getattr(code, 'co_firstlineno', '?')}"
            for guards in per_recompile(items)[:3]:
                recompile_reasons.append(f"{name} ({where}): {'; '.join(guards)[:200]}")
        unimpl = counters.get("unimplemented", {})
        limit_hits = list(self._handler.hits)
        if not limit_hits:
            limit_hits = [k.splitlines()[0] for k in unimpl if "recompile limit" in k.lower()]
        return CompileStats(
            unique_graphs=int(counters.get("stats", {}).get("unique_graphs", 0)),
            graph_breaks=int(sum(breaks.values())),
            graph_break_reasons=[f"{n}x {r.splitlines()[0][:200]}" for r, n in reasons[:5]],
            graph_break_sites=list(dict.fromkeys(f"{b.file}:{b.line}: {b.reason}" for b in self._handler.breaks))[:5],
            recompiles=sum(_recompiles(code, items) for code, items in failures.items()),
            recompile_reasons=recompile_reasons[:10],
            recompile_limit_hits=limit_hits,
            frames_total=int(counters.get("frames", {}).get("total", 0)),
            frames_ok=int(counters.get("frames", {}).get("ok", 0)),
        )


def _clear_compilation_metrics() -> None:
    """Empty Dynamo's ``CompilationMetrics`` record (``torch._dynamo.utils.clear_compilation_metrics``),
    where the torch in use has it."""
    try:
        from torch._dynamo.utils import clear_compilation_metrics

        clear_compilation_metrics()
    except Exception:  # noqa: BLE001 - an older layout: the records then reach back further
        pass


#: The cache entry a failure of ``torch._dynamo.utils.guard_failures`` names (``0/1: ...``): the
#: frame's compile id, then the entry's.
_ENTRY = re.compile(r"^\[?\d+/(?P<entry>\d+)\]?:\s*")


def per_recompile(failures: list[Any]) -> list[list[str]]:
    """The failed guards of one code object grouped by recompilation, oldest first: each a list of
    the distinct guard texts (first line, the ``N/M:`` entry label dropped) in the order Dynamo
    checked them. ``guard_failures`` holds one failure per cache entry a call failed, newest entry
    first, so a recompilation's failures end at entry ``N/0``; after an automatic-dynamic recompile
    a new batch size fails the static and the dynamic entry on the same guard (``0/1: tensor 'x'
    size mismatch at index 0. expected 2, actual 3`` and ``0/0: ...`` alike), said once here.
    Failures with no entry label (another torch's format) are one recompilation each."""
    groups: list[list[str]] = []
    current: list[str] = []
    for item in failures:
        text = str(item).strip()
        first = text.splitlines()[0] if text else ""
        label = _ENTRY.match(first)
        current.append(first[label.end():] if label else first)
        if label is None or label["entry"] == "0":
            groups.append(list(dict.fromkeys(current)))
            current = []
    if current:
        groups.append(list(dict.fromkeys(current)))
    return groups


def _recompiles(code: Any, failures: list[Any]) -> int:
    """Recompilations of one code object: its cache entries minus the first. ``guard_failures``
    holds one reason per failed *entry* (a third compile fails two entries), so it overcounts;
    without the cache-entry API, count the failures of entry ``N/0``, which every recompilation
    of the frame checks and fails."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        return max(0, len(_debug_get_cache_entry_list(code)) - 1)
    except Exception:  # API missing or moved in this torch
        return sum(1 for r in failures if re.match(r"^\[?\d+/0\]?:", str(r)))


def fail_on_recompile_supported() -> bool:
    """Whether this torch has ``torch.compiler.set_stance("fail_on_recompile")`` (torch >= 2.6)."""
    import torch

    return hasattr(torch, "compiler") and hasattr(torch.compiler, "set_stance")


_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<name>.+)_at_(?P<line>\d+)$")
#: At most this many frame compiles are kept (a recompiling model compiles a frame per shape).
MAX_COMPILES = 2000


def _unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters.get("stats", {}).get("unique_graphs", 0))


def _callable_owner(fn: Any) -> tuple[str, Any]:
    """``("module", module)`` when ``fn`` (what the program handed ``torch.compile``, perhaps wrapped
    by torch: ``OptimizedModule`` passes ``module.__call__`` or ``external_utils.wrap_inline``'s
    ``inner``, ``nn.Module.compile`` passes ``module._call_impl``) belongs to an ``nn.Module``;
    else ``("function", the innermost function)``."""
    import torch

    for _ in range(5):
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, torch.nn.Module):
            return "module", owner
        cells = []
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        mods = [c for c in cells if isinstance(c, torch.nn.Module)]
        if mods:
            return "module", mods[0]
        inner = getattr(fn, "__wrapped__", None) or getattr(fn, "__func__", None)
        if inner is None:
            inner = next((c for c in cells if callable(c) and hasattr(c, "__code__")), None)
        if inner is None or inner is fn:
            break
        fn = inner
    return "function", fn


def _module_file(cls: type) -> tuple[str, int | None]:
    """Where ``cls``'s ``forward`` is defined (its code's file and line: an inherited forward is its
    base class's, and a class the harness defines has no module in ``sys.modules``), else the
    class's module file with no line."""
    code = getattr(getattr(cls, "forward", None), "__code__", None)
    if code is not None:
        return code.co_filename, code.co_firstlineno
    return (getattr(sys.modules.get(cls.__module__), "__file__", None) or "?"), None


def _entry(fn: Any) -> dict[str, Any] | None:
    """What a compile's entry is (see :func:`_callable_owner`): ``{"kind": "module", "class",
    "file", "line", "id"}`` or ``{"kind": "function", "name" (qualified), "file", "line"}``."""
    try:
        kind, obj = _callable_owner(fn)
        if kind == "module":
            file, line = _module_file(type(obj))
            return {"kind": "module", "class": type(obj).__name__, "file": file, "line": line, "id": id(obj)}
        code = getattr(obj, "__code__", None)
        if code is None:
            return None
        return {"kind": "function", "name": getattr(obj, "__qualname__", code.co_name), "file": code.co_filename,
                "line": code.co_firstlineno}
    except Exception:  # noqa: BLE001 - an odd callable is left unnamed, never an error
        return None


def _compiling() -> dict[str, Any] | None:
    """The frame Dynamo is compiling, read off the stack from inside a compile callback:
    ``compile_inner``'s ``code`` and ``one_graph`` (torch/_dynamo/convert_frame.py), then the
    nearest ``compile_wrapper``/``_fn`` of torch/_dynamo/eval_frame.py, whose ``fn`` is the
    compile's entry. None when no Dynamo frame compile is on the stack (a lazy backward compile)."""
    f = sys._getframe(2)
    found: dict[str, Any] | None = None
    while f is not None:
        name, file = f.f_code.co_name, f.f_code.co_filename.replace("\\", "/")
        if found is None and name == "compile_inner" and file.endswith("_dynamo/convert_frame.py"):
            code = f.f_locals.get("code")
            if code is None or not hasattr(code, "co_filename"):
                return None
            one = f.f_locals.get("one_graph")
            found = {"co_name": code.co_name, "name": getattr(code, "co_qualname", code.co_name),
                     "file": code.co_filename, "line": code.co_firstlineno,
                     "fullgraph": bool(one) if isinstance(one, bool) else None, "entry": None}
        elif found is not None and name in ("compile_wrapper", "_fn") and file.endswith("_dynamo/eval_frame.py"):
            fn = f.f_locals.get("fn")
            if fn is not None:
                found["entry"] = _entry(fn)
                break
        f = f.f_back
    return found


class FrameLog:
    """Which frames Dynamo compiled, with the graphs each compile added (``counters["stats"]
    ["unique_graphs"]`` at the end callback minus at the start), its ``fullgraph`` and its entry
    (see the module docstring). Costs a stack walk per frame compile, nothing per call."""

    def __init__(self) -> None:
        self.compiles: list[dict[str, Any]] = []
        self._open: tuple[dict[str, Any] | None, int] | None = None
        self._installed = False

    def _start(self, *args: Any) -> None:
        try:
            self._open = (_compiling(), _unique_graphs())
        except Exception:  # noqa: BLE001 - the log must never break a compile
            self._open = None

    def _end(self, *args: Any) -> None:
        opened, self._open = self._open, None
        if opened is None or opened[0] is None or len(self.compiles) >= MAX_COMPILES:
            return
        info, before = opened
        try:
            info["graphs"] = _unique_graphs() - before
        except Exception:  # noqa: BLE001 - the log must never break a compile
            info["graphs"] = 0
        self.compiles.append(info)

    def install(self) -> None:
        try:
            from torch._dynamo import callback_handler

            callback_handler.register_start_callback(self._start)
            callback_handler.register_end_callback(self._end)
            self._installed = True
        except Exception:  # noqa: BLE001 - a torch without the callbacks: compilation metrics instead
            self._installed = False
            try:
                from torch._dynamo.utils import clear_compilation_metrics

                clear_compilation_metrics()
            except Exception:  # noqa: BLE001
                pass

    def remove(self) -> None:
        if not self._installed:
            return
        try:
            from torch._dynamo import callback_handler

            callback_handler.remove_start_callback(self._start)
            callback_handler.remove_end_callback(self._end)
        except Exception:  # noqa: BLE001 - reset() may have cleared them already
            pass
        self._installed = False

    def _from_metrics(self) -> list[dict[str, Any]]:
        try:
            from torch._dynamo.utils import get_compilation_metrics

            metrics = get_compilation_metrics()
        except Exception:  # noqa: BLE001
            return []
        out = []
        for m in metrics:
            if not getattr(m, "co_name", None) or getattr(m, "is_runtime", False):
                continue  # a backward or runtime entry
            out.append({"co_name": m.co_name, "name": m.co_name, "file": m.co_filename, "line": m.co_firstlineno,
                        "fullgraph": None, "entry": None, "graphs": 1 if getattr(m, "graph_op_count", 0) else 0})
        return out

    def frames(self, model: Any = None) -> list[dict[str, Any]]:
        """One dict per frame Dynamo compiled (code object, by file, first line and name), in the
        order first compiled: ``name`` (qualified), ``file``, ``line``, ``graphs`` (over its
        compiles and its resume functions'), ``compiles``, ``recompiles`` (its compiles after the
        first, and each resume function's compiles after that function's first: a guard on a
        value read after the graph break, ``.item()``'s float, recompiles the resume function
        alone; so the frames' recompiles add up to :meth:`CompileWatch.stats`' count, one per
        cache entry after a code object's first), ``resumes`` (compiles of the
        ``torch_dynamo_resume_in_<name>_at_<line>`` functions Dynamo made after a graph break in
        it, merged in), ``fullgraph`` (True/False, None
        when not known) and ``entry``: what the program handed ``torch.compile`` (``{"kind":
        "module", "class", "file", "line", "path"}``, ``path`` the module's name in ``model`` when
        given; or ``{"kind": "function", "name", "file", "line"}``; None when not known)."""
        compiles = list(self.compiles) if self._installed else self._from_metrics()
        frames: dict[tuple[str, int, str], dict[str, Any]] = {}
        resumes: list[dict[str, Any]] = []
        for c in compiles:
            if _RESUME.match(c["co_name"]):
                resumes.append(c)
                continue
            key = (c["file"], c["line"], c["co_name"])
            f = frames.get(key)
            if f is None:
                frames[key] = {"name": c["name"], "file": c["file"], "line": c["line"], "graphs": c["graphs"], "compiles": 1,
                               "resumes": 0, "fullgraph": c["fullgraph"], "entry": c["entry"]}
            else:
                f["graphs"] += c["graphs"]
                f["compiles"] += 1
                f["fullgraph"] = f["fullgraph"] or c["fullgraph"]
                f["entry"] = f["entry"] or c["entry"]
        resumed: set[tuple[str, int, str]] = set()
        for c in resumes:
            m = _RESUME.match(c["co_name"])
            assert m is not None
            name, at = m.group("name"), int(m.group("line"))
            key = (c["file"], c["line"], c["co_name"])
            again = key in resumed  # the resume function's own code object compiled before: a recompile
            resumed.add(key)
            parents = [f for k, f in frames.items() if k[0] == c["file"] and k[2] == name and k[1] <= at]
            orphan = frames.get((c["file"], at, c["co_name"]))
            if parents:
                parent = max(parents, key=lambda f: f["line"])
                parent["graphs"] += c["graphs"]
                parent["resumes"] += 1
                parent["resume_recompiles"] = parent.get("resume_recompiles", 0) + again
            elif orphan is not None:  # a later compile of a resume function whose frame the log never saw
                orphan["graphs"] += c["graphs"]
                orphan["compiles"] += 1
            else:  # its frame was compiled before the log began
                frames[(c["file"], at, c["co_name"])] = {"name": f"{name} (resumed at line {at})", "file": c["file"], "line": at,
                                                        "graphs": c["graphs"], "compiles": 1, "resumes": 0,
                                                        "fullgraph": c["fullgraph"], "entry": c["entry"]}
        paths = _module_paths(model) if model is not None else {}
        out = []
        for f in frames.values():
            f["recompiles"] = f["compiles"] - 1 + f.pop("resume_recompiles", 0)
            entry = dict(f["entry"]) if f["entry"] else None
            if entry is not None and "id" in entry:
                path = paths.get(entry.pop("id"))
                if path is not None:
                    entry["path"] = path
            f["entry"] = entry
            out.append(f)
        return out


def without_compile_hops(name: str) -> str:
    """A module's or parameter's name with ``OptimizedModule``'s ``_orig_mod`` hops dropped
    (``enc._orig_mod.fc.weight`` -> ``enc.fc.weight``): the name the user's model gives it,
    whether or not a compile wraps it."""
    return ".".join(p for p in name.split(".") if p and p != "_orig_mod")


def _clean_path(name: str) -> str:
    """:func:`without_compile_hops`, ``<model>`` for the root."""
    return without_compile_hops(name) or "<model>"


def _module_paths(model: Any) -> dict[int, str]:
    try:
        return {id(m): _clean_path(n) for n, m in model.named_modules(remove_duplicate=False)}
    except Exception:  # noqa: BLE001
        return {}


def _ctx_fullgraph(ctx: Any) -> bool | None:
    """``fullgraph`` of a Dynamo context (``OptimizedModule.dynamo_ctx``, the context in a compiled
    function's closure): its callback's ``_one_graph`` (``ConvertFrameAssert``), reached through
    ``CatchErrorsWrapper`` / ``ConvertFrame._inner_convert`` (torch 2.13: ``_torchdynamo_orig_backend``;
    torch 2.6: ``_torchdynamo_orig_callable``). None when not found."""
    obj = getattr(ctx, "callback", None)
    for _ in range(6):
        if obj is None:
            return None
        one = getattr(obj, "_one_graph", None)
        if isinstance(one, bool):
            return one
        obj = (getattr(obj, "_inner_convert", None) or getattr(obj, "_torchdynamo_orig_backend", None)
               or getattr(obj, "_torchdynamo_orig_callable", None))
    return None


def _fn_fullgraph(fn: Any) -> bool | None:
    """``fullgraph`` of a ``torch.compile``d function (its wrapper's closure holds the context)."""
    from torch._dynamo.eval_frame import _TorchDynamoContext

    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, _TorchDynamoContext):
            return _ctx_fullgraph(value)
    return None


#: The forms a model object carries a compile in (:attr:`CarriedCompile.how`).
WRAPPED = "torch.compile(module)"
COMPILED_CALL = "module.compile()"
FORWARD_ATTRIBUTE = "forward = torch.compile(forward)"
DECORATED = "@torch.compile"


@dataclass
class CarriedCompile:
    """One compile a model object carries (:func:`carried_compiles`), where it sits, and how to
    take it off (the module or method as written runs) and put it back.

    Attributes:
        how: its form: :data:`WRAPPED` (an ``OptimizedModule``, which holds the module it wraps as
            ``_orig_mod``), :data:`COMPILED_CALL` (``nn.Module.compile()``: a non-None
            ``_compiled_call_impl``, torch/nn/modules/module.py, other than the module's own ``_call_impl``
            that ``module.compile(disable=True)`` leaves there), :data:`FORWARD_ATTRIBUTE` (a
            compiled function as an instance's ``forward`` attribute, ``block.forward =
            torch.compile(block.forward)``), :data:`DECORATED` (a method compiled by a decorator in
            a class's source, on the class of one of the model's modules or a base of it).
        path: the module's name in the model, ``_orig_mod`` hops dropped (``<model>`` for the
            root); for a decorated method, ``Class.method``.
        owner: what is compiled: the module a wrapper wraps (its ``_orig_mod``), the module that
            carries the compiled call or ``forward``, the class of a decorated method.
        compiled: the compiled object: the wrapper, the compiled call, the compiled function.
        slots: ``(object, attribute)`` where ``compiled`` sits: each parent module holding a
            wrapper under a child name (none for a wrapper at the root, which the caller holds:
            :func:`unwrapped`), the module's ``_compiled_call_impl`` or ``forward``, the class's
            method name.
    """

    how: str
    path: str
    owner: Any
    compiled: Any
    slots: tuple[tuple[Any, str], ...]

    @property
    def fullgraph(self) -> bool | None:
        """``fullgraph`` of the compile, None when not known."""
        if self.how == WRAPPED:
            return _ctx_fullgraph(self.compiled.dynamo_ctx)
        return _fn_fullgraph(self.compiled)

    def take_off(self) -> None:
        """Leave the module or method as written where the compile sat: a wrapper replaced by the
        module it wraps now, the compiled call set to None, the ``forward`` attribute deleted (the
        class's own runs), the method set back to the function the decorator was given."""
        for obj, name in self.slots:
            if self.how == FORWARD_ATTRIBUTE:
                del obj.__dict__[name]
            elif self.how == WRAPPED:
                setattr(obj, name, self.compiled._orig_mod)
            elif self.how == COMPILED_CALL:
                setattr(obj, name, None)
            else:
                setattr(obj, name, self.compiled._torchdynamo_orig_callable)

    def put_back(self) -> None:
        """The compile where :meth:`take_off` found it."""
        for obj, name in self.slots:
            if self.how == FORWARD_ATTRIBUTE:
                obj.__dict__[name] = self.compiled
            else:
                setattr(obj, name, self.compiled)


def unwrapped(module: Any) -> Any:
    """``module`` itself where ``torch.compile(module)`` wrapped it: the ``OptimizedModule``'s
    ``_orig_mod``, through every wrapper. Its names are the module's own (``blocks.0``); through
    the wrapper each gains ``_orig_mod.``, which names nothing in the user's model or plan."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except Exception:  # noqa: BLE001 - no Dynamo: nothing is wrapped
        return module
    while isinstance(module, OptimizedModule):
        module = module._orig_mod
    return module


def _module_compiles(name: str, m: Any, slots: dict[int, list[tuple[Any, str]]], wrapper: type) -> list[CarriedCompile]:
    """The compiles module ``m`` (named ``name``) carries itself: a wrapper (an instance of
    ``wrapper``, ``OptimizedModule``) is one, and nothing else (its own ``forward`` attribute is
    the wrapper's compiled call); else ``module.compile()``'s call and a compiled ``forward``
    attribute, each one."""
    path = _clean_path(name)
    if isinstance(m, wrapper):
        return [CarriedCompile(WRAPPED, path, m._orig_mod, m, tuple(slots.get(id(m), ())))]
    out = []
    impl = m.__dict__.get("_compiled_call_impl")
    # module.compile(disable=True) leaves the module's own _call_impl there (torch.compile returned
    # what it was given): no compile
    if impl is not None and getattr(impl, "__func__", None) is not type(m)._call_impl:
        out.append(CarriedCompile(COMPILED_CALL, path, m, m._compiled_call_impl, ((m, "_compiled_call_impl"),)))
    forward = m.__dict__.get("forward")
    if getattr(forward, "_torchdynamo_orig_callable", None) is not None:
        out.append(CarriedCompile(FORWARD_ATTRIBUTE, path, m, forward, ((m, "forward"),)))
    return out


def _decorated(modules: list[Any]) -> list[CarriedCompile]:
    """The methods compiled by a decorator on the classes of ``modules`` and their bases, each
    class once, in the modules' order."""
    out = []
    seen: set[type] = set()
    for cls in dict.fromkeys(type(m) for m in modules):
        for klass in cls.__mro__:
            if klass in seen:
                continue
            seen.add(klass)
            for name, value in list(vars(klass).items()):
                if getattr(value, "_torchdynamo_orig_callable", None) is not None:
                    out.append(CarriedCompile(DECORATED, f"{klass.__name__}.{name}", klass, value, ((klass, name),)))
    return out


def carried_compiles(model: Any, classes: bool = True) -> list[CarriedCompile]:
    """Every compile ``model`` carries (:class:`CarriedCompile`): the modules' own in model order
    (a wrapper before the modules it wraps), then, with ``classes``, the decorated methods of the
    modules' classes. The one place that knows the forms; :func:`compiled_modules` reads them, and
    :func:`take_off` and :func:`compiles_off` set them aside. Empty without Dynamo; a module whose
    attributes cannot be read carries none."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule

        named = list(model.named_modules())
    except Exception:  # noqa: BLE001 - no Dynamo, or no modules to walk: nothing compiled
        return []
    slots: dict[int, list[tuple[Any, str]]] = {}
    for _, parent in named:
        for name, child in parent.named_children():
            slots.setdefault(id(child), []).append((parent, name))
    out: list[CarriedCompile] = []
    for name, m in named:
        try:
            out.extend(_module_compiles(name, m, slots, OptimizedModule))
        except Exception:  # noqa: BLE001 - an odd module is not a compiled one
            continue
    return out + (_decorated([m for _, m in named]) if classes else [])


def take_off(carried: list[CarriedCompile]) -> None:
    """Each of ``carried`` off (:meth:`CarriedCompile.take_off`), the innermost first: a wrapper
    of a wrapper is replaced by what the inner one wraps."""
    for c in reversed(carried):
        c.take_off()


@contextlib.contextmanager
def compiles_off(model: Any, classes: bool = True) -> Iterator[list[CarriedCompile]]:
    """The compiles ``model`` carries (:func:`carried_compiles`) set aside for the duration, then
    put back where they were; a wrapper at the root stays (the caller runs :func:`unwrapped`)."""
    carried = carried_compiles(model, classes)
    take_off(carried)
    try:
        yield carried
    finally:
        for c in carried:
            c.put_back()


def compiled_modules(model: Any, limit: int = 50) -> list[dict[str, Any]]:
    """The modules of ``model`` that carry a compile (:func:`carried_compiles`, decorated methods
    aside: a class's, not a module's), one row each (a module's first form where it carries
    two). Each: ``path`` (name in ``model``, ``<model>`` for the root), ``class``, ``file`` (the
    class's), ``how`` and ``fullgraph`` (None when not known). Model order, at most ``limit``."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    for c in carried_compiles(model, classes=False):
        module = c.compiled if c.how == WRAPPED else c.owner  # the module that carries it
        if id(module) in seen:
            continue
        seen.add(id(module))
        try:
            fullgraph = c.fullgraph
        except Exception:  # noqa: BLE001 - an odd module is not a compiled one
            continue
        file, line = _module_file(type(c.owner))
        out.append({"path": c.path, "class": type(c.owner).__name__, "file": file, "line": line,
                    "how": c.how, "fullgraph": fullgraph})
        if len(out) >= limit:
            break
    return out


class CompileCalls:
    """Where the program called ``torch.compile`` or ``nn.Module.compile`` under ``tree``: ``sites``,
    ``(path relative to tree, line)`` of each call's caller frame, in call order, each once.
    :meth:`install` wraps both for the life of the process (before the harness imports the tree,
    so decorators are seen; after any backend forcing, whose wrapper it then calls). A call from
    outside the tree (torch's own ``nn.Module.compile`` calling ``torch.compile``, an installed
    library) is not recorded. Each wrapper calls the original with the same arguments and returns
    its result."""

    def __init__(self, tree: Any) -> None:
        from pathlib import Path

        self.tree = Path(tree).resolve()
        self.sites: list[tuple[str, int]] = []

    def _record(self, frame: Any) -> None:
        from pathlib import Path

        try:
            rel = Path(frame.f_code.co_filename).resolve().relative_to(self.tree).as_posix()
        except (ValueError, OSError):
            return
        site = (rel, frame.f_lineno)
        if site not in self.sites:
            self.sites.append(site)

    def install(self) -> None:
        import functools

        import torch

        original, module_compile = torch.compile, torch.nn.Module.compile
        record = self._record

        @functools.wraps(original)
        def compile_recorded(*args: Any, **kwargs: Any) -> Any:
            record(sys._getframe(1))
            return original(*args, **kwargs)

        @functools.wraps(module_compile)
        def module_compile_recorded(module: Any, *args: Any, **kwargs: Any) -> Any:
            record(sys._getframe(1))
            return module_compile(module, *args, **kwargs)

        torch.compile = compile_recorded
        torch.nn.Module.compile = module_compile_recorded  # type: ignore[method-assign]
