"""``kernel``: replace calls of one torch op inside the target with a generated Triton custom op.

The kernel comes from the catalog in ``kernels/`` (one file per kernel; its ``CATALOG`` literal
says which torch calls it replaces, their parameters, and which argument values it supports)
or is ``stub``: a Triton skeleton whose entry calls the original op until someone writes it.
The rewrite writes three files into the tree's vendored package (``_stackpart/``):

* ``triton_<kernel>.py``: the catalog file itself (kernel, launch helper, reference,
  FakeTensor rule), so the rewritten model never imports stackpart;
* ``kernel_<kernel>.py``: the custom-op module rendered from ``custom_op_<kernel>.py.j2``;
* ``test_kernel_<kernel>.py``: ``torch.library.opcheck`` plus a comparison with the original op.

Calls are found by what they resolve to (LibCST's ``QualifiedNameProvider``), so
``F.softmax`` under ``import torch.nn.functional as F``, ``torch.topk`` under ``import torch as
T`` and ``from torch import topk`` are all seen; method calls (``x.topk(k)``) on anything that is
not an imported module, ``self`` or ``cls`` are taken as Tensor methods. A call whose arguments the kernel does not
support (softmax over another dim, ``sorted=False``, ``*args``...) is left alone and reported in
:attr:`KernelCommand.notes` with the reason. Unsafe: written only with ``--unsafe``.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.metadata import PositionProvider, QualifiedNameProvider, QualifiedNameSource

from ..errors import StackpartError, near_names
from ..plan import KernelAction
from ..resources import kernels_dir
from ..vendor import VendorSite
from .base import TargetedCommand, imported_names
from .torch_api import NAMESPACES, is_tensor_method, is_torch_function

STUB = "stub"
_EQUAL = cst.AssignEqual(
    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
)
_IDENT = re.compile(r"[A-Za-z_]\w*\Z")  # \Z, not $: "$" also matches before a trailing newline


def _kernel_files() -> dict[str, Any]:
    return {p.stem: p for p in sorted(kernels_dir().glob("*.py")) if not p.name.startswith("_")}


@lru_cache(maxsize=None)
def catalog() -> dict[str, dict[str, Any]]:
    """Every catalog kernel's ``CATALOG`` literal, by kernel name (read with ``ast``, not imported).

    Raises:
        StackpartError: a catalog file without a literal ``CATALOG`` dict (a packaging bug).
    """
    found: dict[str, dict[str, Any]] = {}
    for name, path in _kernel_files().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "CATALOG"
            ):
                spec = ast.literal_eval(node.value)
                break
        else:
            raise StackpartError(f"kernel catalog file {path} has no literal CATALOG dict")
        if spec["name"] != name or not _IDENT.match(spec["entry"]):
            raise StackpartError(f"kernel catalog file {path}: CATALOG name/entry do not match")
        found[name] = spec
    return found


def kernel_source(name: str) -> str:
    """The catalog file's text, as vendored into the user's tree."""
    return _kernel_files()[name].read_text(encoding="utf-8")


def _literal(node: cst.BaseExpression, module: cst.Module) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(module.code_for_node(node).strip())
    except (ValueError, SyntaxError, TypeError):
        return False, None


def _same(value: Any, allowed: list[Any]) -> bool:
    return any(type(value) is type(a) and value == a for a in allowed)


def _plain_path(path: PurePosixPath) -> str:
    """``path`` for a generated docstring, or its file name when it has characters a docstring
    could not hold verbatim (only validated identifiers and plain literals reach generated code)."""
    text = str(path)
    return text if re.match(r"^[\w./-]+$", text) else path.name


#: For rendering an annotation as written.
_EMPTY = cst.Module(body=[])


class KernelCommand(TargetedCommand):
    """Replace the target's calls of ``action.call`` with a vendored Triton custom op."""

    DESCRIPTION = "kernel: a generated Triton custom op replaces one torch op's calls"
    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)
    action: KernelAction

    def __init__(
        self, context: CodemodContext, action: KernelAction, qualname: str, site: VendorSite
    ) -> None:
        super().__init__(context, action, qualname, site)
        #: One line per call left alone (``file:line:col: code left alone: reason``) and per stub.
        self.replaced = 0
        self.present = 0
        self.spec: dict[str, Any] | None = None
        self.canonical = ""
        #: per enclosing function, its parameters' annotations as written (``{"h": "Heap"}``)
        self._annotations: list[dict[str, str]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        params = [*node.params.posonly_params, *node.params.params, *node.params.kwonly_params]
        self._annotations.append({p.name.value: _EMPTY.code_for_node(p.annotation.annotation)
                                  for p in params if p.annotation is not None})
        return super().visit_FunctionDef(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._annotations.pop()
        return super().leave_FunctionDef(original, updated)

    def _not_a_tensor(self, receiver: cst.BaseExpression) -> str | None:
        """Why a method call's receiver is known not to be a tensor (a parameter annotated with
        another type: ``h: Heap``), or None."""
        if not isinstance(receiver, cst.Name):
            return None
        for scope in reversed(self._annotations):
            if receiver.value in scope:
                ann = scope[receiver.value]
                tensor = ann.rsplit(".", 1)[-1].strip("'\"") in ("Tensor", "Parameter")
                return None if tensor else f"{receiver.value} is annotated {ann}, not a Tensor: its method is left alone"
        return None

    # -- what to replace -------------------------------------------------------------------
    def needs_torch(self) -> bool:
        return False

    def visit_Module(self, node: cst.Module) -> bool:
        super().visit_Module(node)
        self.canonical = self._canonical_call(node)
        kernels = catalog()
        if self.action.kernel == STUB:
            if not is_torch_function(self.canonical):
                raise StackpartError(
                    f"call {self.action.call!r} ({self.canonical}) is not a torch function",
                    hint="name the op as written in the source or as torch.<...>: a public function of "
                    + ", ".join(NAMESPACES),
                )
            path = self.canonical.split(".")[1:]
            self.spec = {
                "name": "stub_" + "_".join(path),
                "functions": {self.canonical: None},
                "method": [path[-1], None] if is_tensor_method(path[-1]) else None,
                "entry": "stub_" + "_".join(path),
            }
            return True
        if self.action.kernel not in kernels:
            raise StackpartError(
                f"unknown kernel {self.action.kernel!r}; the catalog has "
                + ", ".join(sorted(kernels))
                + f" (or {STUB!r} for a skeleton)",
                hint=near_names(self.action.kernel, [*kernels, STUB]),
            )
        self.spec = kernels[self.action.kernel]
        if self.canonical not in self.spec["functions"]:
            raise StackpartError(
                f"kernel {self.action.kernel!r} replaces "
                + ", ".join(self.spec["functions"])
                + (f" and x.{self.spec['method'][0]}(...)" if self.spec["method"] else "")
                + f", not {self.action.call!r}",
                hint=near_names(self.canonical, self.spec["functions"]),
            )
        return True

    def _canonical_call(self, module: cst.Module) -> str:
        """``action.call`` with a leading module alias of this file resolved (``F.softmax`` ->
        ``torch.nn.functional.softmax``; :func:`.base.imported_names`)."""
        head, _, rest = self.action.call.partition(".")
        full = imported_names(module).get(head)
        return full + ("." + rest if rest else "") if full else self.action.call

    def _form(self, call: cst.Call) -> tuple[str, list[str] | None] | None:
        """``(spelling, params)`` when ``call`` is one of the op's spellings, else None."""
        assert self.spec is not None
        names = self.get_metadata(QualifiedNameProvider, call.func, set())
        for qn in names:
            if qn.name in self.spec["functions"]:
                return qn.name, self.spec["functions"][qn.name]
        method = self.spec.get("method")
        if (
            method
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == method[0]
            and not m.matches(call.func.value, m.Name("self") | m.Name("cls"))
            and not any(qn.source == QualifiedNameSource.IMPORT for qn in names)
            and not any(
                qn.source == QualifiedNameSource.IMPORT
                for qn in self.get_metadata(QualifiedNameProvider, call.func.value, set())
            )
        ):
            return "Tensor." + method[0], method[1]
        return None

    # -- the rewrite ---------------------------------------------------------------------------
    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self._inside():
            return updated
        assert self.spec is not None
        if isinstance(updated.func, cst.Name) and updated.func.value == self.spec["entry"]:
            self.present += 1
            return updated
        form = self._form(original)
        if form is None:
            return updated
        spelling, params = form
        if spelling.startswith("Tensor.") and isinstance(original.func, cst.Attribute) and (
                why := self._not_a_tensor(original.func.value)):
            self._note(original, why)
            return updated
        if self.action.kernel == STUB:
            return self._replace_stub(updated, spelling)
        bound, reason = self._bind(updated, spelling, params)
        if reason is None:
            reason = self._check(bound)
        if reason is not None:
            self._note(original, reason)
            return updated
        self.replaced += 1
        return self._entry_call(bound)

    def _bind(
        self, call: cst.Call, spelling: str, params: list[str]
    ) -> tuple[dict[str, cst.BaseExpression], str | None]:
        bound: dict[str, cst.BaseExpression] = {}
        positional = list(params)
        if spelling.startswith("Tensor."):
            assert isinstance(call.func, cst.Attribute)
            bound[positional.pop(0)] = call.func.value
        for arg in call.args:
            if arg.star:
                return bound, f"{arg.star}-arguments cannot be mapped to the kernel's parameters"
            if arg.keyword is None:
                if not positional:
                    return bound, f"more positional arguments than {spelling} takes"
                bound[positional.pop(0)] = arg.value
                continue
            name = arg.keyword.value
            if name not in params:
                return bound, f"argument {name}= is not supported by the {self.action.kernel} kernel"
            if name in positional:
                positional.remove(name)
            bound[name] = arg.value
        return bound, None

    def _check(self, bound: dict[str, cst.BaseExpression]) -> str | None:
        assert self.spec is not None and self.tree is not None
        for name, allowed in self.spec["allowed"].items():
            reason = self.spec["reasons"][name]
            if name not in bound:
                default = self.spec["defaults"].get(name)
                if not _same(default, allowed):
                    return f"{name} not given: {reason}"
                continue
            ok, value = _literal(bound[name], self.tree)
            code = self.tree.code_for_node(bound[name]).strip()
            if not ok:
                return f"{name}={code} is not a literal: {reason}"
            if not _same(value, allowed):
                return f"{name}={code}: {reason}"
        required = [p for p in self.spec["passes"] if p not in self.spec["defaults"]]
        missing = [p for p in required if p not in bound]
        if missing:
            return "missing argument " + ", ".join(missing)
        return None

    def _entry_call(self, bound: dict[str, cst.BaseExpression]) -> cst.Call:
        assert self.spec is not None
        args: list[cst.Arg] = []
        keyword = False
        for name in self.spec["passes"]:
            if name not in bound:
                keyword = True
                continue
            value = bound[name]
            if keyword:
                args.append(cst.Arg(value=value, keyword=cst.Name(name), equal=_EQUAL))
            else:
                args.append(cst.Arg(value=value))
        return cst.Call(func=cst.Name(self.spec["entry"]), args=args)

    def _replace_stub(self, call: cst.Call, spelling: str) -> cst.Call:
        assert self.spec is not None
        args = list(call.args)
        if spelling.startswith("Tensor."):
            assert isinstance(call.func, cst.Attribute)
            args.insert(0, cst.Arg(value=call.func.value))
        self.replaced += 1
        return cst.Call(func=cst.Name(self.spec["entry"]), args=args)

    def _note(self, node: cst.CSTNode, reason: str) -> None:
        assert self.tree is not None
        pos = self.get_metadata(PositionProvider, node)
        code = " ".join(self.tree.code_for_node(node).split())
        if len(code) > 60:
            code = code[:57] + "..."
        self.notes.append(
            f"{self.context.filename}:{pos.start.line}:{pos.start.column + 1}: {code} left alone: {reason}"
        )

    def rewrite(self, func: cst.FunctionDef) -> cst.FunctionDef:
        assert self.spec is not None
        if self.replaced == 0 and self.present == 0:
            if self.notes:
                return func
            raise StackpartError(
                f"{self.context.filename}::{self.qualname} has no call of {self.canonical} "
                "to replace",
                hint="the kernel action replaces calls inside the target function only",
            )
        self._write_files()
        module = f"kernel_{self.spec['name']}"
        if self.replaced:
            self.add_vendored_import(module, self.spec["entry"])
        if self.action.kernel == STUB:
            self.notes.append(
                f"{self.context.filename}::{self.qualname}: kernel stub for {self.canonical} "
                f"({self.site.dir}/{module}.py): it calls the original op until its Triton "
                "kernel is written"
            )
        return func

    def _write_files(self) -> None:
        assert self.spec is not None
        name = self.spec["name"]
        module = f"kernel_{name}"
        for value in (name, module, self.spec["entry"], self.site.namespace):
            if not _IDENT.match(value):
                raise StackpartError(f"cannot generate a kernel module named {value!r}")
        common = {
            "module": module,
            "entry": self.spec["entry"],
            "namespace": self.site.namespace,
            "call": self.canonical,
            "module_path": _plain_path(PurePosixPath(self.site.dir) / f"test_{module}.py"),
        }
        if self.action.kernel == STUB:
            self.generate(module, "custom_op_stub.py.j2", **common)
            self.generate(f"test_{module}", "kernel_stub_test.py.j2", **common)
            return
        kernel_module = f"triton_{name}"
        values = {**common, "kernel_module": kernel_module, "summary": self.spec["summary"]}
        self.generate(module, f"custom_op_{name}.py.j2", **values)
        self.generate(f"test_{module}", "kernel_test.py.j2", **values)
        header = (
            f"# Triton kernel `{name}` from stackpart's catalog (kernels/{name}.py), vendored by\n"
            "# `stackpart rewrite`; re-run it rather than editing.\n"
        )
        self.generated[str(PurePosixPath(self.site.dir) / f"{kernel_module}.py")] = (
            header + kernel_source(name)
        )
