"""The pure rewrite: a plan's actions run over the files they target, giving the new bytes and the
diff (:class:`RewriteResult`); nothing is written here (:mod:`.apply` writes).

Only the files a plan names are read and parsed (a plan touching 5 files in a tree of thousands
costs 5 parses). All targets resolve and all consistency rules pass before any transform runs, so
a plan with one bad action changes nothing. :data:`COMMANDS` maps each plan action to its LibCST
transform (:mod:`rewriter.actions`). No torch and no command is imported here: ``check``'s plan
drift, the engine and diagnose's search run the same transform.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import libcst as cst
import libcst.matchers as m

from .. import consistency
from ..actions.allocator import AllocatorCommand
from ..actions.base import StatementInsertError, TargetedCommand
from ..actions.batch import ActionFailed, plan_passes
from ..actions.bucket import BucketCommand
from ..actions.cache import CompileCacheCommand
from ..actions.compile import CompileCommand
from ..actions.disable import DisableCommand
from ..actions.dynamic import MarkDynamicCommand
from ..actions.branchless import BranchlessCommand
from ..actions.dynamo_config import DynamoConfigCommand
from ..actions.kernel import KernelCommand
from ..actions.site import SiteCommand, site_spec
from ..errors import StackpartError, src_dir
from ..plan import ADVISORY_ACTIONS, LoadedPlan
from ..source import SourceFile, read_source, run_deep, safe_relpath
from ..splice import splice
from ..library_targets import LibraryTarget
from . import checkpoint_keys, decorated_enclosers, enclosed_compiles, program_compiles, regional_path
from .checkpoint_keys import KeyChange
from ..library_targets import resolve as resolve_library
from ..library_targets import resolve_source_only
from ..targets import Definition, collect_definitions, resolve
from ..vendor import is_generated, vendor_site

COMMANDS: dict[str, type[TargetedCommand]] = {
    "compile": CompileCommand,
    "disable": DisableCommand,
    "mark_dynamic": MarkDynamicCommand,
    "bucket": BucketCommand,
    "allocator": AllocatorCommand,
    "compile_cache": CompileCacheCommand,
    "dynamo_config": DynamoConfigCommand,
    "kernel": KernelCommand,
    "branchless": BranchlessCommand,
}


@dataclass
class FileChange:
    """One file the rewrite changes or creates.

    Attributes:
        relpath: POSIX path relative to SRC.
        old: the current bytes, or None for a new file.
        new: the bytes the plan asks for.
        mode: permission bits to keep (new files: 0o644).
    """

    relpath: str
    old: bytes | None
    new: bytes
    mode: int = 0o644


@dataclass
class RewriteResult:
    """What a plan does to a tree.

    Attributes:
        changes: files whose bytes differ from what the plan asks, in a stable order.
        skipped: ``(action index, reason)`` for actions not written (unsafe without ``--unsafe``).
        warnings: plan-level warnings (e.g. ``mark_dynamic`` with ``min < 2``).
        left_as_written: indices of the actions whose target carries their decorator with other
            options, left as written (a warning each, in ``warnings``): not written, nor applied.
        key_changes: the ``own_call`` edits that change the program's state_dict keys
            (:func:`.checkpoint_keys.key_changes`); ``stackpart rewrite`` reads SRC for where they are
            saved or loaded and warns (:func:`.checkpoint_keys.warnings`), so that diagnose's search,
            which rewrites each candidate, never walks SRC for it.
        read: the files under SRC the plan's targets are in (relative to SRC): an apply also
            clears their directories of temp files a killed apply left.
    """

    changes: list[FileChange] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    left_as_written: list[int] = field(default_factory=list)
    read: list[str] = field(default_factory=list)
    key_changes: list[KeyChange] = field(default_factory=list)

    def diff(self) -> str:
        """The git-style unified diff of all changes (see :mod:`rewriter.diff`)."""
        from ..diff import unified_diff

        return unified_diff(self.changes)

    @property
    def library_modules(self) -> list[str]:
        """The generated ``_stackpart/library.py`` files among the changes (the site's actions), which
        the measured candidate must import while its harness builds the model."""
        from ..actions.site import LIBRARY_MODULE
        from ..vendor import VENDOR_PACKAGE

        return [c.relpath for c in self.changes if c.relpath.endswith(f"{VENDOR_PACKAGE}/{LIBRARY_MODULE}.py")]

    def digest(self) -> str:
        """sha256 of :meth:`diff`: the identity validation reports are bound to."""
        return hashlib.sha256(self.diff().encode("utf-8", "surrogateescape")).hexdigest()


def _in_source(exc: StackpartError) -> str:
    """A source-level error's message prefixed with its ``file[:line[:col]]`` (plan errors carry
    the plan's own line; this keeps the source position too)."""
    if not exc.path:
        return exc.message
    where = exc.path
    if exc.line is not None:
        where += f":{exc.line}" + (f":{exc.col}" if exc.col is not None else "")
    return f"{where}: {exc.message}"


#: The index :func:`_action_error` reads as the plan's ``site`` (not an action).
SITE = -1


def _site_error(loaded: LoadedPlan, message: str, hint: str | None = None) -> StackpartError:
    """An error at the plan's ``site:`` line."""
    return StackpartError(f"site ({loaded.plan.site}): {message}", path=loaded.path, line=loaded.site_line, hint=hint)


def _action_error(loaded: LoadedPlan, index: int, exc: Exception) -> Exception:
    """A command's failure as the plan error at its action (other exceptions pass unchanged)."""
    if index == SITE and isinstance(exc, (StatementInsertError, StackpartError)):
        return _site_error(loaded, str(exc) if isinstance(exc, StatementInsertError) else exc.message,
                           getattr(exc, "hint", None))
    if isinstance(exc, StatementInsertError):
        return loaded.error(index, f"cannot insert a statement: {exc}")
    if isinstance(exc, StackpartError):
        return loaded.error(index, exc.message, exc.hint)
    return exc


def plan_rewrite(loaded: LoadedPlan, src: Path, unsafe: bool = False, check_library: bool = True,
                 read_src: bool | program_compiles.ProgramCompiles = True) -> RewriteResult:
    """Compute what ``loaded`` does to the tree at ``src``, writing nothing.

    Runs in :func:`rewriter.source.run_deep`'s thread (a large stack and a raised recursion
    limit), so a file CPython parses but LibCST recurses deep into (a 1,000-term sum, sympy's
    ``resolvent_lookup.py``) is rewritten rather than refused; nothing here writes, so an
    interrupt while it runs leaves the tree as it was.

    Args:
        loaded: a validated plan (see :func:`rewriter.plan.load_plan`).
        src: the root the plan's targets are relative to.
        unsafe: also write unsafe actions (``bucket``, ``kernel``).
        check_library: also import the installed classes and functions library targets name
            (:func:`rewriter.library_targets.resolve`); ``check``'s drift reads their source where
            the package is installed and takes them as written where it is not.
        read_src: also read SRC beyond the plan's files for the program's own whole-model compiles
            a plan's ``compile`` of a class would be inlined into
            (:func:`rewriter.rewrite.regional_path.check_compiled_whole`): True reads it for this
            plan; a :class:`~rewriter.rewrite.program_compiles.ProgramCompiles` is that reading made
            once for many plans (diagnose's, :func:`rewriter.diagnose.search.candidate_rewrite`);
            False skips it (diagnose's early anchor, started before the search knows whether
            its 'whole' stands in for a compile of the program's the harness does not run).

    Raises:
        StackpartError: a target that leaves SRC, a file that cannot be read or parsed, a
            target that does not resolve, an inconsistent plan — each at the plan's line.
    """
    return run_deep(_plan_rewrite, loaded, src, unsafe, check_library, read_src)


class _Files:
    """The files a plan's targets are in, each read and parsed once (keys: POSIX paths relative to SRC)."""

    def __init__(self, src: Path) -> None:
        self.src = src
        self.root = src.resolve()
        self.sources: dict[str, SourceFile] = {}
        self.modules: dict[str, cst.Module] = {}
        self.definitions: dict[str, dict[str, list[Definition]]] = {}

    def parse(self, file: str) -> str:
        """Read and parse ``file`` (a path relative to SRC) once; return its key.

        The key is the file's real path under SRC: a symlink inside SRC is rewritten where it
        points (the diff names that file, as git sees it), and two spellings of one file are one.

        Raises:
            StackpartError: the path leaves SRC, or the file cannot be read or parsed.
        """
        rel = safe_relpath(self.src, file).relative_to(self.root).as_posix()
        if rel not in self.sources:
            source = read_source(self.src, rel)
            module = source.parse()  # a file that fails to parse leaves no entry behind
            self.definitions[rel] = collect_definitions(module, source.text)
            self.sources[rel], self.modules[rel] = source, module
        return rel


def _plan_rewrite(loaded: LoadedPlan, src: Path, unsafe: bool, check_library: bool = True,
                  read_src: bool | program_compiles.ProgramCompiles = True) -> RewriteResult:
    src = src_dir(src)
    files = _Files(src)
    bounds, library = _bind(loaded, files, check_library)
    result = RewriteResult(warnings=_mark_dynamic_warnings(loaded, bounds))
    consistency.check(loaded, bounds)
    consistency.check_library(loaded, library)
    consistency.check_own_regional(loaded, bounds, library, src)
    parse = lambda rel: (key := files.parse(rel), files.definitions[key])  # noqa: E731
    containers = regional_path.check(loaded, bounds, parse, src)
    # one reading of SRC's own compiles for both checks (it reads and parses files lazily, once)
    reading = read_src if isinstance(read_src, program_compiles.ProgramCompiles) else (
        program_compiles.ProgramCompiles(src) if read_src else None)
    regional_path.check_compiled_whole(loaded, bounds, parse, reading)
    decorated_enclosers.check(loaded, bounds, reading)
    enclosed_compiles.check(loaded, bounds, reading)
    consistency.check_regional_blocks(loaded, bounds, parse, reading)
    consistency.check_program_loops(loaded, bounds, parse, reading)
    result.key_changes = checkpoint_keys.key_changes(bounds)
    site_at = _resolve_site(loaded, files) if library else None
    generated: dict[str, str] = {}
    owners: dict[str, int] = {}
    for rel, module in files.modules.items():
        site = vendor_site(src, rel)
        specs, indices = _file_commands(loaded, rel, bounds, unsafe, result.skipped, site, containers)
        if site_at is not None and site_at[0] == rel:
            specs.append((SiteCommand, (site_spec(loaded, library), site_at[1], site)))  # type: ignore[arg-type]
            indices.append(SITE)
        new = spaced_imports(module, imports_below_head(module, _transform(loaded, rel, module, specs, indices, generated,
                                                                           result, owners)))
        change = _file_change(loaded, files.sources[rel], rel, module, new, indices)
        if change is not None:
            result.changes.append(change)
    result.changes += _generated_changes(loaded, src, generated, owners)
    result.changes.sort(key=lambda c: c.relpath)
    result.read = sorted(files.sources)
    return result


def _bind(
    loaded: LoadedPlan, files: _Files, check_library: bool
) -> tuple[list[consistency.Bound], dict[int, LibraryTarget]]:
    """Resolve every action's target, in plan order: a file target to its function (parsing its
    file into ``files``), a library target to the installed class or function.

    Raises:
        StackpartError: at the first action whose target does not resolve (with the source
            position for a file target).
    """
    bounds: list[consistency.Bound] = []
    library: dict[int, LibraryTarget] = {}
    for i, action in enumerate(loaded.plan.actions):
        if action.library:
            try:
                library[i] = (resolve_library(action.module, action.qualname, action.action, by_import=True,
                                              implementation=getattr(action, "implementation", None))
                              if check_library else resolve_source_only(action.module, action.qualname))
            except StackpartError as exc:
                raise loaded.error(i, exc.message, exc.hint) from None
            continue
        try:
            rel = files.parse(action.file)
            target = resolve(files.modules[rel], rel, action.qualname, files.definitions[rel])
        except StackpartError as exc:
            raise loaded.error(i, _in_source(exc), exc.hint) from None
        bounds.append(consistency.Bound(i, action, target, files.modules[rel], files.definitions[rel]))
    return bounds, library


def _mark_dynamic_warnings(loaded: LoadedPlan, bounds: list[consistency.Bound]) -> list[str]:
    """The ``mark_dynamic`` bounds written otherwise than the plan spells them, each at its plan line."""
    out = []
    for b in bounds:
        action, where = b.action, f"{loaded.path}:{loaded.action_lines[b.index]}"
        if action.action == "mark_dynamic" and action.strict and (action.min is None) != (action.max is None):
            out.append(
                f"{where}: mark_dynamic with only "
                f"{'min' if action.max is None else 'max'}: the other bound is written too (one bound "
                "alone raises AssertionError in Dynamo on the first call, torch 2.13)"
            )
        if action.action == "mark_dynamic" and action.min is not None and action.min < 2:
            out.append(
                f"{where}: mark_dynamic min={action.min} written as min=2: "
                "sizes 0 and 1 are always specialised by Dynamo (what `stackpart check` SP106 asks too)"
            )
    return out


def _file_commands(
    loaded: LoadedPlan, rel: str, bounds: list[consistency.Bound], unsafe: bool,
    skipped: list[tuple[int, str]], site: object, containers: dict[int, str] | None = None,
) -> tuple[list[tuple[type[TargetedCommand], tuple]], list[int]]:
    """``(command class, arguments)`` and the action index of each action on ``rel`` to run, in
    plan order; an advisory action, or an unsafe one without ``unsafe``, goes to ``skipped``
    with the reason instead. ``containers``: the class of each ``own_call`` regional path's
    container the source says (:func:`.regional_path.check`), given to its command.

    Raises:
        StackpartError: at an action this version has no command for.
    """
    specs: list[tuple[type[TargetedCommand], tuple]] = []
    indices: list[int] = []
    for b in bounds:
        if b.target.relpath != rel:
            continue
        if b.action.action in ADVISORY_ACTIONS:
            skipped.append(
                (b.index, f"{b.action.action} is advisory (a launcher/wrapper setting, not a "
                 "source edit): apply it where the model is wrapped")
            )
            continue
        if not b.action.safe and not unsafe:
            skipped.append(
                (b.index, f"{b.action.action} is an unsafe action (it changes what runs); "
                 "pass --unsafe or validate first")
            )
            continue
        cls = COMMANDS.get(b.action.action)
        if cls is None:
            raise loaded.error(b.index, f"the {b.action.action!r} action is not supported by this version")
        known = ({"container": containers[b.index]},) if containers and b.index in containers else ()
        specs.append((cls, (b.action, b.target.qualname, site, *known)))
        indices.append(b.index)
    return specs, indices


def _transform(
    loaded: LoadedPlan, rel: str, module: cst.Module, specs: list[tuple[type[TargetedCommand], tuple]],
    indices: list[int], generated: dict[str, str], result: RewriteResult, owners: dict[str, int],
) -> cst.Module:
    """``module`` with ``specs``' commands run over it; the files they generate go to ``generated``
    (and the index of the first action that generates each to ``owners``), their notes (calls an
    action left alone, stubs written, with file:line and why) to ``result.warnings``, and the
    actions that left their target's decorator as written to ``result.left_as_written``.

    One pass over the file for each run of actions that only edit their target (one import scan
    per pass, not per action; see :mod:`rewriter.actions.batch`).

    Raises:
        StackpartError: a command's failure, at its action's plan line (the site's line for the site).
    """
    passes = plan_passes(specs, rel)
    built = [command for _, commands in passes for command in commands]  # in plan order
    index_of = {id(command): index for command, index in zip(built, indices)}
    for runner, commands in passes:
        try:
            module = runner.transform_module(module)
        except ActionFailed as exc:
            raise _action_error(loaded, index_of[id(exc.command)], exc.error) from None
        except (StatementInsertError, StackpartError) as exc:
            raise _action_error(loaded, index_of[id(commands[0])], exc) from None
        for command in commands:
            for path in command.generated:
                owners.setdefault(path, index_of[id(command)])
            generated.update(command.generated)
            result.warnings.extend(command.notes)
            if command.left_as_written:
                result.left_as_written.append(index_of[id(command)])
    return module


def _is_import_line(stmt: cst.CSTNode) -> bool:
    """A line of imports only (``import os``, ``from x import y; import z``)."""
    return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


def _head(module: cst.Module) -> int:
    """The index of the last top-level statement that must stay above any import the rewrite
    adds: the last line holding a ``from __future__`` import (CPython compiles one only before
    every other statement but the docstring, https://docs.python.org/3/reference/simple_stmts.html#future-statements),
    or the docstring's line where it holds more statements (``\"\"\"Doc.\"\"\"; import os``) or the
    docstring is an implicit concatenation (``"Doc " "more."``, which LibCST's ``AddImportsVisitor``
    does not read as one); -1 where there is none."""
    head = -1
    for i, stmt in enumerate(module.body):
        if not isinstance(stmt, cst.SimpleStatementLine):
            break
        small = stmt.body
        if any(m.matches(s, m.ImportFrom(module=m.Name("__future__"))) for s in small):
            head = i
        elif i == 0 and (len(small) > 1 or m.matches(small[0], m.Expr(value=m.ConcatenatedString()))) and m.matches(
                small[0], m.Expr(value=m.SimpleString() | m.ConcatenatedString())):
            head = i
        elif not (i == 0 and m.matches(small[0], m.Expr(value=m.SimpleString() | m.ConcatenatedString()))):
            break
    return head


def imports_below_head(old: cst.Module, new: cst.Module) -> cst.Module:
    """``new`` with the top-level imports the rewrite added moved below the file's head
    (:func:`_head`: its ``__future__`` imports and docstring) and the import lines right after it.

    LibCST's ``AddImportsVisitor`` (LibCST 1.9.0) counts only a line holding one import or one
    docstring as the head, so ``from __future__ import annotations; import os`` or
    ``\"\"\"Doc.\"\"\"; from __future__ import annotations`` got ``import torch`` above it: a file
    CPython refuses ("from __future__ imports must occur at the beginning of the file"; ``ast.parse``
    accepts it); above ``"Doc " "more."`` the docstring is no longer the module's. The head's
    lines are put back as they were (the blank line LibCST gives the line after its imports
    included), so only the import lines are added.
    """
    head = _head(old)
    if new is old or head < 0:
        return new

    def bare(module: cst.Module, stmt: cst.SimpleStatementLine) -> str:  # its code without the lines above it
        return module.code_for_node(stmt.with_changes(leading_lines=()))

    had = {bare(old, stmt) for stmt in old.body[: head + 1] if _is_import_line(stmt)}
    moved: list[cst.BaseStatement] = []
    body: list[cst.BaseStatement] = []
    kept = 0  # statements of ``old`` seen so far in ``new`` (the rewrite adds, it never removes, top-level lines)
    for stmt in new.body:
        if kept <= head and _is_import_line(stmt) and bare(new, stmt) not in had:  # type: ignore[arg-type]
            moved.append(stmt)
            continue
        body.append(old.body[kept] if kept <= head else stmt)  # the head exactly as it was
        kept += 1
    if not moved:
        return new
    at = head + 1
    while at < len(body) and _is_import_line(body[at]):  # the file's own imports below its head (LibCST's place)
        at += 1
    return new.with_changes(body=[*body[:at], *moved, *body[at:]])


def spaced_imports(old: cst.Module, new: cst.Module) -> cst.Module:
    """``new`` with two blank lines between a top-level import the rewrite added and a ``def`` or
    ``class`` right after it (PEP 8's, black's): LibCST's ``AddImportsVisitor`` leaves the
    statement's own blank lines, one or none. Only blank lines are added, right after the added
    import: no byte of the user's lines changes."""
    if new is old:
        return new

    def imports(stmt: cst.CSTNode) -> bool:
        return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)

    had = {old.code_for_node(stmt) for stmt in old.body if imports(stmt)}  # the import lines only: no print of the file
    body = list(new.body)
    changed = False
    for i, stmt in enumerate(body[:-1]):
        nxt = body[i + 1]
        added = imports(stmt) and new.code_for_node(stmt) not in had
        if not added or not isinstance(nxt, (cst.FunctionDef, cst.ClassDef)):
            continue
        blank = 0
        for line in nxt.leading_lines:
            if line.comment is not None:
                break
            blank += 1
        if blank < 2:
            body[i + 1] = nxt.with_changes(leading_lines=[*(cst.EmptyLine() for _ in range(2 - blank)), *nxt.leading_lines])
            changed = True
    return new.with_changes(body=body) if changed else new


def _file_change(
    loaded: LoadedPlan, source: SourceFile, rel: str, old: cst.Module, new: cst.Module, indices: list[int]
) -> FileChange | None:
    """The change of ``rel`` from ``old`` to ``new`` (spliced into the file's own text), or None
    when its bytes stay the same.

    Raises:
        StackpartError: the new text would not compile where the old one did (:func:`_compiles`),
            or the new bytes would be over the source-size cap (:func:`_fits_the_cap`).
    """
    code = splice(source.text, old, new)
    if code == source.text:
        return None
    _compiles(loaded, rel, source.text, code, indices)
    data = source.encode(code)
    _fits_the_cap(loaded, rel, len(data), indices)
    return FileChange(rel, source.raw, data, source.mode)


def _compile_error(text: str, rel: str) -> SyntaxError | None:
    """CPython's error compiling ``text`` (``compile``, warnings silenced), or None where it
    compiles or cannot be tried (a file nested too deep for this thread's stack)."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(text, rel, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError):
        return None
    return None


def _compiles(loaded: LoadedPlan, rel: str, text: str, code: str, indices: list[int]) -> None:
    """Refuse a rewrite whose file CPython compiled and would no longer compile.

    ``ast.parse`` accepts some files the compiler refuses (a ``__future__`` import below another
    statement, a name read above its ``global`` declaration), so the new text is compiled, the
    last check before anything is written. The original is compiled only when the new text fails:
    a file that never compiled (code for a newer Python) is not the rewrite's doing.

    Raises:
        StackpartError: at the first action on ``rel`` (the site's line for the site's file),
            naming the line and CPython's message; nothing is written.
    """
    error = _compile_error(code, rel)
    if error is None or _compile_error(text, rel) is not None:
        return
    message = (f"{rel}:{error.lineno}: the rewritten file would not compile: {error.msg}; nothing was written")
    index = indices[0] if indices else SITE
    raise _action_error(loaded, index, StackpartError(
        message, hint="a stackpart defect: please report it with the lines around that one"))


def _generated_changes(
    loaded: LoadedPlan, src: Path, generated: dict[str, str], owners: dict[str, int]
) -> list[FileChange]:
    """The generated files (relative path -> text) whose bytes differ from what is on disk, by path.

    A file already at such a path that stackpart did not generate (no :data:`~rewriter.vendor.GENERATED_MARKERS`
    in its first lines) is the user's own code, never replaced.

    Raises:
        StackpartError: at the first action that generates such a file, naming it.
    """
    out = []
    for rel, text in sorted(generated.items()):
        path = safe_relpath(src, rel)
        old = path.read_bytes() if path.exists() else None
        new = text.encode("utf-8")
        if old is not None and old != new and not is_generated(old):
            index = owners[rel]
            by = "the site's library actions" if index == SITE else f"the {loaded.plan.actions[index].action} action"
            message = f"{rel} exists and was not generated by stackpart; {by} would overwrite it with generated code"
            hint = f"move or rename it: stackpart generates its code into {PurePosixPath(rel).parent}/"
            raise _action_error(loaded, index, StackpartError(message, hint=hint))
        if old != new:
            out.append(FileChange(rel, old, new))
    return out


def _fits_the_cap(loaded: LoadedPlan, rel: str, size: int, indices: list[int]) -> None:
    """Refuse a rewrite whose file would be over the cap on source files stackpart reads
    (:data:`rewriter.source.MAX_SOURCE_BYTES`): a file just under it that the edits push over
    could not be read back by the next step on the same plan (``--check``, ``validate``, a
    second ``--apply``), so the cap holds for the output as for the input.

    Raises:
        StackpartError: at the first action on ``rel`` (the site's line for the site's file).
    """
    from .. import source as source_mod

    cap = source_mod.MAX_SOURCE_BYTES
    if size <= cap:
        return
    message = (f"{rel} would be {size:,} bytes once rewritten, over the {cap / 2**20:g} MiB cap on the source files "
               "stackpart reads, so the next run could not read it back; nothing was written")
    index = indices[0] if indices else SITE
    raise _action_error(loaded, index, StackpartError(message, hint="split the file, or leave it out of the plan"))


def _resolve_site(loaded: LoadedPlan, files: _Files) -> tuple[str, str]:
    """``(file, qualname)`` of the plan's site under SRC, its file parsed into ``files``.

    Raises:
        StackpartError: at the ``site:`` line: the file or function is missing (near names), or the
            site is a class (it must be the function that returns the model).
    """
    from ..plan import TARGET_RE

    assert loaded.plan.site is not None
    match = TARGET_RE.match(loaded.plan.site)
    assert match is not None
    try:
        rel = files.parse(match.group("file"))
        qual = match.group("qual")
        hits = files.definitions[rel].get(qual) or []
        if hits and hits[0].kind == "class":
            raise StackpartError(f"{qual} is a class; the site is the function that returns the model",
                                 hint="name the function that builds the model, e.g. train.py::build")
        target = resolve(files.modules[rel], rel, qual, files.definitions[rel])
    except StackpartError as exc:
        raise _site_error(loaded, _in_source(exc), exc.hint) from None
    return rel, target.qualname
