"""``compile``: ``@torch.compile(...)`` on the target (regional or whole-model), or
``@torch.compiler.nested_compile_region`` for ``strategy: nested``.

With ``own_call`` the program's own compile of the target is edited instead
(:mod:`.own_call`): its keyword arguments only, nothing added. That compile may also be a
rebinding of the function's name below its ``def``, ``f = torch.compile(f, ...)`` at module level
or in a class body (:func:`rewriter.compile_facts.rebound_compiles`): the call there is edited
(never made regional: it compiles a function, not a model), and a plain ``compile`` of such a
function is left alone, as one carrying ``@torch.compile`` is.

Never ``self.x = torch.compile(self.x)``: wrapping a module adds ``_orig_mod.`` to state_dict keys
and skips module hooks (torch.compile docs, "Compiling modules"). Options are written only where
they differ from torch's defaults; a target already compiled is left alone, with a warning where
its own ``@torch.compile(...)`` passes other options than the plan's (:mod:`.written`).
"""

from __future__ import annotations

import libcst as cst

from ..compile_facts import (DYNAMO_OPTIMIZE, SMALL_STATEMENTS, SUPPRESS_RE, SourceSite, as_compile_call, body_size,
                             is_optimize_call, rebinding_code, rebound_compiles, suppressed_codes)
from ..errors import StackpartError
from ..plan import OWN_CALL_DEFAULTS, CompileAction
from .base import TargetedCommand, call_args, find_decorator, has_decorator
from .own_call import COMPILE, OwnCallRefused, OwnSite, check_unwrapped, compile_in_lambda, edited, find_sites, regional
from .written import call_options, code, flow, note_other_options, options

#: Decorators that compile the function they wrap (``torch._dynamo.optimize`` is the older spelling
#: of ``torch.compile``): a target carrying one is left alone, and a ``disable`` of it is refused.
COMPILE_DECORATORS = {"torch.compile", DYNAMO_OPTIMIZE}
#: The suppression written on a whole-model compile (:data:`rewriter.compile_facts.SUPPRESS_RE`'s syntax).
SUPPRESS_WHOLE = "stackpart: ignore[SP101]"
NESTED_DECORATORS = {"torch.compiler.nested_compile_region"}


def _sp109_small(func: cst.FunctionDef, mode: object) -> bool:
    """Whether ``stackpart check``'s SP109 would read ``func`` compiled in ``mode`` as a small region:
    a one-call ``forward`` (``return self.body(x)``) reads as small though it is the whole model,
    the one large CUDA-graphs capture SP109 asks for, so its compile carries an SP109 suppression."""
    return mode == "reduce-overhead" and body_size(func) <= SMALL_STATEMENTS


def _codes(comment: cst.Comment | None) -> set[str] | None | bool:
    """The codes a ``# stackpart: ignore[...]`` comment names (None: every code), False when it is
    not one (:data:`rewriter.compile_facts.SUPPRESS_RE`, the syntax ``check`` reads)."""
    match = SUPPRESS_RE.search(comment.value) if comment is not None else None
    if match is None:
        return False
    return suppressed_codes(match)


def _suppress(func: cst.FunctionDef, old: cst.Decorator, dec: cst.Decorator, codes: set[str]) -> cst.FunctionDef:
    """``func`` with its decorator ``old`` replaced by ``dec`` and ``codes`` suppressed the way
    ``check`` reads it: kept where the decorator line's comment or the own-line comment right above
    it already covers them; that comment gains the missing codes where it names others (a second
    line above would push it off the decorator); else one line is added above. The lines above the
    first decorator are the function's ``leading_lines`` in LibCST, those above a later one its own."""
    first = bool(func.decorators) and func.decorators[0] is old
    above_lines = list(func.leading_lines if first else dec.leading_lines)
    trailing = _codes(dec.trailing_whitespace.comment)
    last = above_lines[-1] if above_lines else None
    above = _codes(last.comment) if last is not None else False
    covered = (trailing or set()) | (above or set())
    if trailing is None or above is None or codes <= covered:
        return func.deep_replace(old, dec)  # type: ignore[return-value]
    if above:
        joined = ",".join(sorted(above | codes))
        text = SUPPRESS_RE.sub(f"# stackpart: ignore[{joined}]", last.comment.value, count=1)  # type: ignore[union-attr]
        above_lines[-1] = last.with_changes(comment=cst.Comment(text))  # type: ignore[union-attr]
    else:
        above_lines.append(cst.EmptyLine(indent=True, comment=cst.Comment(
            f"# stackpart: ignore[{','.join(sorted(codes - covered))}]: strategy whole, as planned")))
    if first:
        func = func.deep_replace(old, dec)  # type: ignore[assignment]
        return func.with_changes(leading_lines=above_lines)
    return func.deep_replace(old, dec.with_changes(leading_lines=above_lines))  # type: ignore[return-value]


class CompileCommand(TargetedCommand):
    """Decorate the target with ``torch.compile`` (or mark it a nested compile region)."""

    VISIT_TARGET_BODY = False

    DESCRIPTION = "regional compilation: @torch.compile on the target"
    action: CompileAction

    def rewrite(self, func: cst.FunctionDef) -> cst.FunctionDef:
        if self.action.own_call is not None:
            return self.edit_own(func)
        if self.action.strategy == "nested":
            if has_decorator(func, NESTED_DECORATORS, self.imports):
                return func
            return self.add_decorator(func, f"{self.decorator_torch()}.compiler.nested_compile_region")
        if has_decorator(func, COMPILE_DECORATORS, self.imports) or self._rebound() is not None:
            self._note_other_options(func)
            return func
        args = call_args(self.action.options.non_default())
        torch = self.decorator_torch()
        expr = f"{torch}.compile({args})" if args else f"{torch}.compile"
        # a whole-model compile is the plan's measured choice: `stackpart check`'s regional
        # suggestion (SP101) must not fail the commit that applies it
        suppress = f"{SUPPRESS_WHOLE[:-1]},SP109]" if _sp109_small(func, self.action.options.mode) else SUPPRESS_WHOLE
        comment = f"{suppress}: strategy whole, as planned" if self.action.strategy == "whole" else None
        return self.add_decorator(func, expr, comment=comment)

    def _source_compile(self, func: cst.FunctionDef) -> tuple[cst.CSTNode, str, str, dict | None, bool] | None:
        """The source's own compile of the target, as :meth:`_note_other_options` compares it:
        ``(node, code, what it is, options in torch.compile's keys or None where they cannot be
        read, whether an own_call edit can edit it)``. Read: ``@torch.compile(...)``,
        ``@torch._dynamo.optimize(...)`` (its options in torch.compile's keys,
        :func:`rewriter.compile_facts.as_compile_call`; own_call refuses it), and the rebinding below the ``def``, ``f = torch.compile(f, ...)`` or
        ``f = torch._dynamo.optimize(...)(f)``; None where the target carries none of them."""
        dec = find_decorator(func, {COMPILE}, self.imports)
        if dec is not None:
            return dec, code(dec), "decorator", options(dec), True
        dec = find_decorator(func, {DYNAMO_OPTIMIZE}, self.imports)
        if dec is not None:
            call = as_compile_call(dec.decorator, self.imports) if isinstance(dec.decorator, cst.Call) else None
            return dec, code(dec), "decorator", call_options(call) if call is not None else None, False
        site = self._rebound()
        if site is None or not isinstance(site.node, cst.Call):
            return None
        call, shown = site.node, rebinding_code(self.qualname.rsplit('.', 1)[-1], site.node)
        if is_optimize_call(call, self.imports):
            return call, shown, "rebinding", call_options(as_compile_call(call, self.imports)), False  # type: ignore[arg-type]
        return call, shown, "rebinding", call_options(call, skip_first=True), True

    def _note_other_options(self, func: cst.FunctionDef) -> None:
        """Where the target's own compile (:meth:`_source_compile`) passes other options than the
        plan's, say so (:meth:`leave_as_written`), naming the ``own_call`` edit that makes them the
        plan's (for ``torch._dynamo.optimize``, which own_call does not edit: its rewrite as
        ``torch.compile`` by hand)."""
        found = self._source_compile(func)
        if found is None:
            return
        node, written, kind, have, editable_call = found
        asked = self.action.options.non_default()
        said = f"the plan's options {flow(asked) if asked else '(torch.compile defaults)'}"
        kept = f"the {kind} is left as written and the plan's compile is not in the tree"

        def differs(diff: dict) -> str:
            if not editable_call:
                args, name = call_args(asked), self.qualname.rsplit(".", 1)[-1]
                wanted = (f"@torch.compile({args})" if kind == "decorator"
                          else f"{name} = torch.compile({', '.join(a for a in (name, args) if a)})")
                return (f"not with {said}: {kept}; own_call does not edit torch._dynamo.optimize (its arguments are "
                        f"not torch.compile's): write it as {wanted} by hand, or drop this action")
            editable = {k: v for k, v in diff.items() if k in OWN_CALL_DEFAULTS}
            other = ", ".join(f"{k}=" for k in diff if k not in OWN_CALL_DEFAULTS)
            lever = (f"own_call: {flow(editable)} on this action edits the program's own compile to them "
                     "(docs/plan-reference.md)" if editable else "")
            if other:
                lever += ("; " if lever else "") + f"own_call leaves {other} as written: change it by hand"
            return f"not with {said}: {kept}; {lever}"

        note_other_options(self, node, written, have, "compiled", asked, OWN_CALL_DEFAULTS, plan_asks=said,
                           compare="compare it with them by hand", differs=differs, kind=kind)

    def needs_torch(self) -> bool:
        return self.action.own_call is None  # an edit of the program's call adds no torch reference

    def _rebound(self) -> SourceSite | None:
        """The module's ``f = torch.compile(f, ...)`` of the target, read once per module for every
        action of a batched pass (the context's scratch)."""
        assert self.tree is not None
        cached = self.context.scratch.get("stackpart.rebound")
        if not (isinstance(cached, tuple) and cached[0] is self.tree):
            cached = (self.tree, rebound_compiles(self.tree, self.imports, optimize=True))
            self.context.scratch["stackpart.rebound"] = cached
        return cached[1].get(self.qualname)

    def rewrite_module(self, module: cst.Module) -> cst.Module:
        """The module with the rebinding call :meth:`edit_own` found edited, where it found one.

        The call is read again from ``module`` as it is now: another action's edit outside its
        target (a second rebinding in the same file) rebuilds the tree with ``deep_replace``, after
        which the node :meth:`edit_own` saw is no longer in it."""
        edits = getattr(self, "_pending", None)
        if edits is None:
            return module
        self._pending = None
        site = rebound_compiles(module, self.imports).get(self.qualname)
        new = edited(OwnSite(site.node, site.node, "call"), edits) if site is not None else None
        return module if new is None else module.deep_replace(site.node, new)  # type: ignore[union-attr, return-value]

    def edit_own(self, func: cst.FunctionDef) -> cst.FunctionDef:
        """The program's own compile on ``func`` with the plan's ``own_call`` keyword arguments."""
        edits = self.action.own_call.edits() if self.action.own_call is not None else {}
        try:
            sites = find_sites(func, self.imports)
            rebound = self._rebound() if not sites else None
            if rebound is not None:
                return self._edit_rebound(func, rebound, edits)
            if not sites and has_decorator(func, {"torch._dynamo.optimize"}, self.imports):
                raise OwnCallRefused(
                    f"own_call: {self.qualname} is compiled by @torch._dynamo.optimize(...), whose arguments are not "
                    "torch.compile's (backend first, nopython=...): expected @torch.compile to edit; write it as "
                    "@torch.compile(backend=...) first, or drop own_call", func.name)
            lam = compile_in_lambda(func, self.imports) if not sites else None
            if lam is not None:
                name, code = self.qualname.rsplit(".", 1)[-1], " ".join(cst.Module([]).code_for_node(lam).split())
                raise OwnCallRefused(
                    f"own_call: {self.qualname}'s compile is inside a lambda ({code}), a function of its own "
                    f"whose call the edit cannot name; write it as a statement of {name} (model = torch.compile(model, "
                    "...)) or a def decorated with @torch.compile, then own_call applies", lam)
            if not sites:
                raise OwnCallRefused(
                    f"own_call: expected {self.qualname} to carry the program's own @torch.compile or hold one "
                    "torch.compile(...) / module.compile(...) / model.compile_repeated_blocks(...) call, or to be rebound to its "
                    f"compiled self ({self.qualname.rsplit('.', 1)[-1]} = torch.compile({self.qualname.rsplit('.', 1)[-1]}, ...)) "
                    "in its file; found none "
                    "(a compile in a file outside SRC, or "
                    "one built dynamically, cannot be edited: drop own_call to add a compile instead)", func.name)
            if len(sites) > 1:
                lines = ", ".join(self._line(s.node).rsplit(":", 1)[-1] for s in sites)
                raise OwnCallRefused(
                    f"own_call: {self.qualname} holds {len(sites)} compile calls (lines {lines}); expected one, so that "
                    "the edit names its call", sites[1].node)
            if self.action.own_call is not None and self.action.own_call.regional is not None:
                return regional(func, sites[0], edits, self.action.own_call.regional, self.known.get("container"),
                                self._holding_class())
            check_unwrapped(func, sites[0], edits, self._holding_class())
            new = edited(sites[0], edits)
        except OwnCallRefused as exc:
            msg = exc.message if exc.message.startswith("own_call:") else f"own_call: {exc.message}"
            raise StackpartError(f"{self._line(exc.node)}: {msg}") from None
        if new is None:
            return func  # already as asked
        if isinstance(new, cst.Decorator) and self.action.strategy == "whole" and self.action.compiles:
            # the measured choice must not fail `stackpart check` (SP101's regional suggestion, SP109's
            # small region) in the commit that applies it, as the compile the plan adds does not (a
            # call turned off is no compile to check's rules: nothing to suppress)
            codes = {"SP101", "SP109"} if _sp109_small(func, edits.get("mode")) else {"SP101"}
            return _suppress(func, sites[0].node, new, codes)
        return func.deep_replace(sites[0].node, new)  # type: ignore[return-value]

    def _holding_class(self) -> cst.ClassDef | None:
        """The class of the module whose method the target is (``Model`` for ``Model.__init__``,
        found by the target's qualified name in :attr:`tree`), or None for a function."""
        parts = self.qualname.split(".")[:-1]
        body: object = self.tree.body if self.tree is not None else ()
        cls = None
        for part in parts:
            cls = next((s for s in body if isinstance(s, cst.ClassDef) and s.name.value == part), None)  # type: ignore[union-attr]
            if cls is None:
                return None
            body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
        return cls

    def _edit_rebound(self, func: cst.FunctionDef, rebound: SourceSite, edits: dict) -> cst.FunctionDef:
        """Edit the program's ``f = torch.compile(f, ...)`` of the target: the call is outside the
        target, so :meth:`rewrite_module` writes it once the traversal is done; the target is
        returned unchanged.

        Raises:
            OwnCallRefused: ``torch._dynamo.optimize(...)(f)`` (not torch.compile's arguments),
                ``regional`` asked (the call compiles a function, which has no blocks), or
                :func:`.own_call.check`'s refusals.
        """
        assert isinstance(rebound.node, cst.Call)
        if is_optimize_call(rebound.node, self.imports):
            name = self.qualname.rsplit(".", 1)[-1]
            raise OwnCallRefused(
                f"own_call: {self.qualname} is compiled by {name} = torch._dynamo.optimize(...)({name}), whose "
                "arguments are not torch.compile's (backend first, nopython=...): expected torch.compile to edit; write "
                f"it as {name} = torch.compile({name}, backend=...) first, or drop own_call", rebound.node)
        if self.action.own_call is not None and self.action.own_call.regional is not None:
            raise OwnCallRefused(
                f"own_call: regional turns a torch.compile(model) / model.compile() call regional; {self.qualname} is "
                "a function the program compiles by rebinding its name, which has no blocks to compile: drop regional, "
                "or compile the block instead (strategy region on its class)", rebound.node)
        if edited(OwnSite(rebound.node, rebound.node, "call"), edits) is not None:  # refused here, at its action
            self._pending = edits
        return func
