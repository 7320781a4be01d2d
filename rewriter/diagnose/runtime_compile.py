"""The program's own compiles as the harness ran them, beside the static reading (they are read
statically with check's facts and at run time; docs/design.md, "The search": the program as it is
comes first).

The engine's eager reference child (the search's ``as-is`` row) records which code Dynamo compiled
in its cold phase (:func:`rewriter.engine.child.runtime_compiles`: frames with graphs, recompiles,
fullgraph and the compile's entry, from Dynamo's compile callbacks; the model's compiled modules;
the SRC files the harness imported). :func:`granularity` says what the compile covers (the whole
model, or per layer: N blocks of one class), :func:`per_call` what each of the program's own
calls compiled (frames, graphs, recompiles; or nothing), :func:`seen` one line per frame;
:func:`disagreements` sets it against :func:`.own_compile.own_compiles`: a compile found in SRC
that never ran in the harness (it lives in ``train.py``, which the harness does not import), one
that compiles nothing (:attr:`.own_compile.OwnCompile.idle`, with what the run showed), and
code compiled at run time that no compile in SRC names (a compile in an installed library, or one
made through an alias the static reading does not follow). Paths are as the row has them after
:func:`rewriter.engine.measure.relabel` (SRC's files relative to SRC).
"""

from __future__ import annotations

from typing import Any

#: At most this many frames and modules are named (the rest are counted).
MAX_NAMED = 6


def _short(file: str | None) -> str:
    """A path for the report: SRC's files are already relative; an installed file from its
    package on (``.../site-packages/transformers/x.py`` -> ``transformers/x.py``)."""
    file = (file or "?").replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in file:
            return file.rsplit(marker, 1)[1]
    return file


def _torch_internal(file: str | None) -> bool:
    """A frame in torch's own files (``external_utils.wrap_inline``'s ``inner`` around a module
    Dynamo would skip, an ``nn.Module`` method): named by its entry instead."""
    return _short(file).startswith("torch/")


def _where(f: dict[str, Any]) -> tuple[str, str, Any]:
    """(name, file, line) of a frame as the report names it."""
    entry = f.get("entry") or {}
    if _torch_internal(f.get("file")) and entry.get("kind") == "module":
        return f"{entry['class']}.forward", _short(entry.get("file")), entry.get("line")
    return f["name"], _short(f.get("file")), f.get("line")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _entry_text(entry: dict[str, Any] | None, modules: dict[str, dict[str, Any]]) -> str:
    if not entry:
        return ""
    if entry.get("kind") == "module":
        m = modules.get(entry.get("path") or "")
        how = f", {m['how']}" if m else ""
        return f"module {entry.get('path') or '?'} ({entry['class']}{how})"
    return f"{entry.get('name')} ({_short(entry.get('file'))}:{entry.get('line')})"


def _own_entry(f: dict[str, Any]) -> bool:
    """Whether the frame is its compile's entry itself (``Block.forward`` of a compiled Block)."""
    entry = f.get("entry") or {}
    name = _where(f)[0]
    if entry.get("kind") == "module":
        return name == f"{entry.get('class')}.forward"
    return entry.get("kind") == "function" and name == entry.get("name")


def _frame_parts(f: dict[str, Any], modules: dict[str, dict[str, Any]] | None = None) -> tuple[str, str]:
    """(``Block.forward (model.py:20)``, ``3 graphs, 1 recompile, fullgraph, compiled as ...``)."""
    modules = modules or {}
    name, file, line = _where(f)
    details = _plural(int(f.get("graphs") or 0), "graph")
    if f.get("recompiles"):
        details += f", {_plural(int(f['recompiles']), 'recompile')}"
    if f.get("fullgraph"):
        details += ", fullgraph"
    entry = f.get("entry") or {}
    if entry.get("kind") == "module":
        details += f", compiled as {_entry_text(entry, modules)}"
    elif entry and not _own_entry(f):
        details += f", inside the compile of {_entry_text(entry, modules)}"
    return f"{name} ({file}:{line})", details


def frame_text(f: dict[str, Any], modules: dict[str, dict[str, Any]] | None = None) -> str:
    """``Block.forward (model.py:20), 3 graphs, 1 recompile, fullgraph, compiled as module enc
    (Encoder, torch.compile(module))``."""
    head, details = _frame_parts(f, modules)
    return f"{head}, {details}"


def granularity(rc: dict[str, Any] | None) -> str | None:
    """What the program's compile covers at run time, read from the compiled modules
    (:func:`rewriter.engine.watch.compiled_modules`) and Dynamo's frames: ``whole model: Net
    (torch.compile(module)), 1 frame, 4 graphs, 1 recompile``, ``per layer: 3 x DecoderLayer
    (layers.0-2, module.compile()), ...``; None when no module of the model is compiled (a compiled
    function, or nothing)."""
    if not rc or not rc.get("modules"):
        return None
    modules = list(rc["modules"])
    frames = [f for f in rc.get("frames") or [] if f.get("graphs")]

    def figures(paths: set[str]) -> str:
        fr = [f for f in frames if ((f.get("entry") or {}).get("path") or "") in paths]
        graphs = sum(int(f.get("graphs") or 0) for f in fr)
        rec = sum(int(f.get("recompiles") or 0) for f in fr)
        return f"{_plural(len(fr), 'frame')}, {_plural(graphs, 'graph')}, {_plural(rec, 'recompile')}"

    root = [m for m in modules if m["path"] in ("<model>", "")]
    if root:
        m = root[0]
        return f"whole model: {m['class']} ({m['how']}{', fullgraph' if m.get('fullgraph') else ''}), {figures({m['path']})}"
    by_parent: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for m in modules:
        parent, _, last = m["path"].rpartition(".")
        if last.isdigit():
            by_parent.setdefault((parent, m["class"]), []).append(m)
    if by_parent:
        (parent, cls), group = max(by_parent.items(), key=lambda kv: len(kv[1]))
        if len(group) > 1:
            idx = sorted(int(m["path"].rsplit(".", 1)[1]) for m in group)
            rest = len(modules) - len(group)
            return (f"per layer: {len(group)} x {cls} ({parent}.{idx[0]}-{idx[-1]}, {group[0]['how']}"
                    f"{', fullgraph' if group[0].get('fullgraph') else ''}), {figures({m['path'] for m in group})}"
                    + (f"; {_plural(rest, 'other compiled module')}" if rest else ""))
    return f"submodules: {', '.join(m['path'] + ' (' + m['class'] + ')' for m in modules[:MAX_NAMED])}, {figures({m['path'] for m in modules})}"


def seen(rc: dict[str, Any] | None) -> list[str]:
    """What the program's compile covers (:func:`granularity`), then one line per frame that
    compiled a graph (most graphs first), then the compiled modules no frame ran under; [] when
    nothing compiled or nothing was recorded."""
    if not rc:
        return []
    modules = {m["path"]: m for m in rc.get("modules") or []}
    frames = sorted((f for f in rc.get("frames") or [] if f.get("graphs")), key=lambda f: -int(f["graphs"]))
    out = [frame_text(f, modules) for f in frames[:MAX_NAMED]]
    if len(frames) > MAX_NAMED:
        out.append(f"{len(frames) - MAX_NAMED} more frame(s), {sum(int(f['graphs']) for f in frames[MAX_NAMED:])} graph(s)")
    ran = {(f.get("entry") or {}).get("path") for f in rc.get("frames") or []}
    idle = [m for m in modules.values() if m["path"] not in ran]
    out += [f"compiled module {m['path']} ({m['class']}, {m['how']}{', fullgraph' if m.get('fullgraph') else ''}): "
            "no frame of it compiled in the harness's run" for m in idle[:MAX_NAMED]]
    unit = granularity(rc)
    return ([f"granularity: {unit}"] if unit else []) + out


def _segments(path: str | None) -> list[str]:
    return (path or "").split(".")


def _covers(o: Any, f: dict[str, Any] | None = None, m: dict[str, Any] | None = None) -> bool:
    """Whether the static compile ``o`` (:class:`.own_compile.OwnCompile`) accounts for the run-time
    frame ``f`` or compiled module ``m``."""
    kind, what = o.covers
    entry = (f or {}).get("entry") or {}
    if kind == "function":
        file, _, qual = what.partition("::")
        names = [(n, _short(fl)) for n, fl in (((f or {}).get("name"), (f or {}).get("file")),
                                                (entry.get("name"), entry.get("file"))) if n]
        return any(fl == file and (n == qual or n.endswith("." + qual) or qual.endswith("." + n)) for n, fl in names)
    if kind == "class":
        if m is not None:
            return m["class"] == what
        return entry.get("class") == what or (f or {}).get("name", "").startswith(what + ".")
    if kind == "children":
        path = m["path"] if m is not None else entry.get("path")
        return what in _segments(path)
    attr = _unknown_attr(o)  # "unknown": the attribute it names, when the call's text shows one
    path = m["path"] if m is not None else entry.get("path")
    return attr is not None and path is not None and _segments(path)[-1] == attr


def _unknown_attr(o: Any) -> str | None:
    """``enc`` for a compile whose value the static reading could not resolve but whose text names
    a module attribute (``torch.compile(model.enc)``, ``model.enc.compile()``); None otherwise
    (then it may cover anything)."""
    import re

    if o.covers[0] != "unknown":
        return None
    m = re.search(r"compile\(\s*[A-Za-z_][\w]*\.([A-Za-z_]\w*)\s*[,)]", o.code) or re.search(
        r"^[A-Za-z_]\w*\.([A-Za-z_]\w*)\.compile\(", o.code)
    return m.group(1) if m else None


def _static_file(o: Any) -> str:
    return o.where.rsplit(":", 1)[0]


#: The path :func:`rewriter.engine.watch.compiled_modules` gives the harness's model itself.
ROOT = "<model>"


def _made(o: Any, rc: dict[str, Any]) -> bool:
    """Whether the run-time reading recorded the call ``o`` made (a call on its lines)."""
    if rc.get("calls") is None or o.lines is None:
        return False
    first, last = o.lines
    return any(f == _static_file(o) and first <= line <= last for f, line in rc["calls"])


def _root_owner(live: list[Any], rc: dict[str, Any]) -> Any:
    """The compile of an attribute that accounts for the harness's model itself, or None: a
    harness may return the attribute a script compiles (diffusers' ``pipe.unet =
    torch.compile(pipe.unet)`` on a plain pipeline object, ``build_model`` returning
    ``load_pipeline().unet``), so the compiled module is the model's root (:data:`ROOT`), not an
    attribute ``unet`` of it. It is the only compile of an attribute (:func:`_unknown_attr`) whose
    call was made, where the root is a compiled module that no compile accounts for otherwise."""
    root = next((m for m in rc.get("modules") or [] if m.get("path") == ROOT), None)
    if root is None or any(_covers(o, m=root) for o in live):
        return None
    made = [o for o in live if _unknown_attr(o) is not None and _made(o, rc)]
    return made[0] if len(made) == 1 else None


def _accounts(o: Any, owner: Any, f: dict[str, Any] | None = None, m: dict[str, Any] | None = None) -> bool:
    """:func:`_covers`, and the harness's model itself for its :func:`_root_owner` ``owner``."""
    if _covers(o, f=f, m=m):
        return True
    path = m["path"] if m is not None else ((f or {}).get("entry") or {}).get("path")
    return o is owner and path == ROOT


def unreached(o: Any, rc: dict[str, Any] | None) -> bool:
    """Whether the program's compile call ``o`` was never made in the harness's run although its
    file was imported: the run-time reading recorded where the program called ``torch.compile``
    and ``module.compile()`` (``rc["calls"]``, :class:`rewriter.engine.watch.CompileCalls`) and
    none of those calls is on ``o``'s lines (a call in the branch not taken, ``if cfg.backend ==
    ...: torch.compile(...) else: torch.compile(...)``). False where nothing was recorded, or the
    file was not imported (said as such by :func:`disagreements`)."""
    if rc is None or rc.get("calls") is None or o.lines is None:
        return False
    file = _static_file(o)
    imported = set(rc.get("src_imported") or [])
    if imported and file not in imported:
        return False
    first, last = o.lines
    return not any(f == file and first <= line <= last for f, line in rc["calls"])


def disagreements(own: list[Any], rc: dict[str, Any] | None) -> list[str]:
    """One sentence per disagreement between the static reading (``own``:
    :func:`.own_compile.own_compiles`) and the run-time one (``rc``: the as-is row's
    ``runtime_compiles``): each static compile that never ran in the harness, then each frame
    that compiled a graph (and each compiled module) that no static compile accounts for. [] when
    there was no run-time reading."""
    if rc is None or "frames" not in rc:
        return []
    imported = set(rc.get("src_imported") or [])
    frames = [f for f in rc.get("frames") or [] if f.get("graphs")]
    modules = list(rc.get("modules") or [])
    out: list[str] = []
    live = [o for o in own if o.idle is None and not unreached(o, rc)]
    known = [o for o in live if o.covers[0] != "unknown" or _unknown_attr(o) is not None]
    unknown = [o for o in live if o.covers[0] == "unknown" and _unknown_attr(o) is None
               and (not imported or _static_file(o) in imported)]
    owner = _root_owner(known, rc)
    for o in own:
        file = _static_file(o)
        if o.idle is not None:
            ran = any(_covers(o, f=f) for f in frames) or any(_covers(o, m=m) for m in modules)
            seen_too = ("" if imported and file not in imported else
                        "; at run time, code it names did compile (through another compile)" if ran else
                        "; at run time, no frame or module of it compiled, as the source says")
            out.append(f"the program's own compile {o.text} compiles nothing: {o.idle}{seen_too}")
            continue
        if imported and file not in imported:
            out.append(f"the program's own compile {o.text} did not run in the harness: the harness's run never imported {file}, "
                       "so the as-is row measures the model without it")
            continue
        if unreached(o, rc):
            out.append(f"the program's own compile {o.text} did not run in the harness: {file} is imported, but the harness's "
                       "run never made that call (a branch not taken, or a function not called)")
            continue
        if o.covers[0] == "unknown" and _unknown_attr(o) is None:
            ran = bool(frames or modules)
        else:
            ran = any(_accounts(o, owner, f=f) for f in frames) or any(_accounts(o, owner, m=m) for m in modules)
        if not ran:
            out.append(f"the program's own compile {o.text} did not run in the harness: {file} is imported, but no frame "
                       "or module it compiles was seen compiled (the call is not on the harness's path)")
    by_path = {m["path"]: m for m in modules}
    for f in frames:
        entry_module = by_path.get((f.get("entry") or {}).get("path") or "")
        if unknown or any(_accounts(o, owner, f=f) or (entry_module is not None and _accounts(o, owner, m=entry_module))
                          for o in known):
            continue
        why = (f"it is code outside SRC ({_short((f.get('entry') or {}).get('file') or f.get('file'))}), compiled by an "
               "installed library or by a call in SRC the static reading does not follow (an alias, a wrapper)"
               if _entry_outside(f) else
               "no torch.compile call or decorator in SRC was read for it (a compile through an alias or a wrapper the "
               "static reading does not follow, or one an installed library makes)")
        head, details = _frame_parts(f, by_path)
        out.append(f"{head} compiled at run time ({details}), but the static reading found no compile of it: {why}")
    entries = {(f.get("entry") or {}).get("path") for f in frames}
    for m in modules:
        if unknown or m["path"] in entries or any(_accounts(o, owner, m=m) for o in known):
            continue  # accounted for, or said with its frame above
        out.append(f"module {m['path']} ({m['class']}) is compiled at run time ({m['how']}), but the static reading found "
                   "no compile of it in SRC")
    return out


def _entry_outside(f: dict[str, Any]) -> bool:
    """Whether the compile's entry (or the frame, without one) is code outside SRC: an absolute
    path after relabelling (SRC's files are relative), or an installed package's."""
    entry = f.get("entry") or {}
    file = (entry.get("file") or f.get("file") or "").replace("\\", "/")
    return file.startswith("/") or "site-packages/" in file or "dist-packages/" in file


def per_call(own: list[Any], rc: dict[str, Any] | None) -> list[str]:
    """One line per compile the program does itself (``own``: :func:`.own_compile.own_compiles`),
    with what it compiled at run time in the as-is process: ``train.py:15: torch.compile(model):
    2 frames, 9 graphs, 2 recompiles at run time (whole model)``, ``...: compiled nothing at run
    time``. The frames are Dynamo's own (``rc``: the as-is row's ``runtime_compiles``), each given
    to the static compile that accounts for it (:func:`_covers`; a compile whose value the static
    reading cannot resolve gets the frames no other accounts for, when it is the only such one).
    [] when there was no run-time reading."""
    if rc is None or "frames" not in rc:
        return []
    imported = set(rc.get("src_imported") or [])
    frames = [f for f in rc.get("frames") or [] if f.get("graphs")]
    by_path = {m["path"]: m for m in rc.get("modules") or []}
    live = [o for o in own if getattr(o, "idle", None) is None and not unreached(o, rc)]
    vague = [o for o in live if o.covers[0] == "unknown" and _unknown_attr(o) is None]
    owner = _root_owner([o for o in live if o not in vague], rc)

    def mine(o: Any, f: dict[str, Any]) -> bool:
        entry_module = by_path.get((f.get("entry") or {}).get("path") or "")
        return _accounts(o, owner, f=f) or (entry_module is not None and _accounts(o, owner, m=entry_module))

    out: list[str] = []
    for o in own:
        if imported and _static_file(o) not in imported:
            continue  # not run at all: said once, by disagreements()
        if unreached(o, rc):
            out.append(f"{o.text}: compiled nothing (the call was not made)")
            continue
        if o in vague:
            fr = [f for f in frames if not any(mine(k, f) for k in live if k not in vague)] if len(vague) == 1 else []
        else:
            fr = [f for f in frames if mine(o, f)]
        if not fr:
            out.append(f"{o.text}: compiled nothing" + (f" ({o.idle_kind})" if getattr(o, "idle_kind", None) else ""))
            continue
        graphs = sum(int(f.get("graphs") or 0) for f in fr)
        rec = sum(int(f.get("recompiles") or 0) for f in fr)
        out.append(f"{o.text}: {_plural(len(fr), 'frame')}, {_plural(graphs, 'graph')}, {_plural(rec, 'recompile')}")
    return out
