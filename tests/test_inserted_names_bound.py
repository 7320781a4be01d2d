"""Every name an action inserts is bound where the inserted line runs, so the edited function and
its module still run: a statement inserted into a function that binds the name itself (a later
``import torch.nn.functional`` makes ``torch`` local: UnboundLocalError) gets its own import
before it; a decorator above the module's only ``import torch`` (NameError at import) gets an
``import torch`` at the top. Checked by running the two forms, and over real installed
transformers/diffusers source with Python's own ``symtable`` (independent of LibCST)."""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import symtable
import sys
from pathlib import Path

import pytest

from rewriter.cli import main
from rewriter.errors import StackpartError
from rewriter.plan import parse_plan
from rewriter.rewrite.transform import plan_rewrite


def _rewrite(tmp_path: Path, source: str, actions: str) -> str:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "m.py").write_text(source)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n" + actions)
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    assert main(["rewrite", "--plan", str(plan), str(src), "--check"]) == 0  # idempotent
    return (src / "m.py").read_text()


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCAL_IMPORT = '''import torch


def pool(x, y=None):
    """Mean over the batch."""
    import torch.nn.functional

    return torch.nn.functional.relu(x).mean(0)


def entry():
    print("start")
    import os

    return os.getpid()


def configure():
    from torch import nn
    import torch._dynamo

    return nn
'''


def test_a_statement_inserted_where_the_function_binds_torch_itself_runs(tmp_path, monkeypatch):
    """mark_dynamic (also the guarded form for an optional tensor), allocator's os.environ line
    and dynamo_config's lines in functions that import torch / os further down: before, every call
    raised UnboundLocalError."""
    import torch

    out = _rewrite(tmp_path, LOCAL_IMPORT, """\
  - action: mark_dynamic
    target: m.py::pool
    arg: x
    dim: 0
  - action: mark_dynamic
    target: m.py::pool
    arg: y
    dim: 1
  - action: allocator
    target: m.py::entry
  - action: dynamo_config
    target: m.py::configure
    settings: {capture_scalar_outputs: true, capture_dynamic_output_shape_ops: true}
""")
    assert '    """Mean over the batch."""\n    import torch\n    if y is not None:\n' in out, out
    assert "def entry():\n    import os\n    os.environ.setdefault(" in out, out
    assert ("def configure():\n    import torch\n    torch._dynamo.config.capture_scalar_outputs = True\n"
            "    torch._dynamo.config.capture_dynamic_output_shape_ops = True\n    from torch import nn\n") in out, out
    module = _import(tmp_path / "src" / "m.py", "local_import_after")
    x = torch.ones(3, 4)
    assert torch.equal(module.pool(x), torch.ones(4))
    assert 0 in x._dynamo_dynamic_indices  # the mark ran
    module.pool(torch.ones(2, 2), torch.ones(2, 5))
    # the inserted setdefault writes the allocator variable into this process: undone after the test
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    assert isinstance(module.entry(), int)
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    import torch._dynamo.config as config

    saved = (config.capture_scalar_outputs, config.capture_dynamic_output_shape_ops)
    try:
        module.configure()
        assert config.capture_scalar_outputs is True
    finally:
        config.capture_scalar_outputs, config.capture_dynamic_output_shape_ops = saved


def test_a_decorator_above_the_modules_only_torch_import_gets_one_at_the_top(tmp_path):
    """compile on a function, a method and nested_compile_region, disable on another, in a module
    whose only `import torch as T` is its last line: importing it raised NameError."""
    source = ('"""doc"""\n\n\ndef f(x):\n    return x + 1\n\n\nclass Block:\n    def forward(self, x):\n'
              '        return x * 2\n\n\ndef off(x):\n    return x\n\n\nimport torch as T\n\n\n'
              'def after(x):\n    return x\n')
    out = _rewrite(tmp_path, source, """\
  - action: compile
    target: m.py::f
  - action: compile
    target: m.py::Block.forward
  - action: disable
    target: m.py::off
  - action: compile
    target: m.py::after
""")
    assert out.startswith('"""doc"""\nimport torch\n'), out
    assert "@torch.compile\ndef f" in out and "    @torch.compile\n    def forward" in out
    assert "@torch.compiler.disable\ndef off" in out
    assert "@T.compile\ndef after" in out  # below the module's own import: its own name is bound there
    module = _import(tmp_path / "src" / "m.py", "late_import_after")  # no NameError
    assert module.Block.forward.__wrapped__ is not None or callable(module.Block.forward)


def test_a_decorator_in_a_class_that_rebinds_torch_uses_an_alias_the_class_does_not_hide(tmp_path):
    """A method's decorator runs in the class body, where `torch = torch.float32` hides the
    module: `@torch.compile` there was an AttributeError at import."""
    source = ("import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    torch = torch.float32\n\n"
              "    def f(self, x):\n        return x\n\n    def g(self, x):\n        return x\n\n\n"
              "class Plain(nn.Module):\n    def forward(self, x):\n        return x\n")
    out = _rewrite(tmp_path, source, """\
  - action: compile
    target: m.py::M.f
  - action: disable
    target: m.py::M.g
  - action: compile
    target: m.py::Plain
""")
    assert out.count("import torch as _torch\n") == 1, out
    assert "    torch = torch.float32\n\n    @_torch.compile\n    def f" in out
    assert "    @_torch.compiler.disable\n    def g" in out
    assert "    @torch.compile\n    def forward" in out  # a class that hides nothing keeps the module's name
    module = _import(tmp_path / "src" / "m.py", "class_rebinds_torch")  # no AttributeError
    assert module.M.torch is module.torch.float32


def test_a_class_that_rebinds_torch_uses_the_modules_own_alias(tmp_path):
    source = ("import torch\nimport torch as T\n\n\nclass M:\n    torch = None\n\n"
              "    def f(self, x):\n        return x\n")
    out = _rewrite(tmp_path, source, "  - action: compile\n    target: m.py::M.f\n")
    assert "    @T.compile\n    def f" in out and "_torch" not in out
    _import(tmp_path / "src" / "m.py", "class_rebinds_torch_alias")


def test_an_import_of_torch_inside_a_top_level_try_binds_it(tmp_path):
    """`try: import torch` / `except ImportError: torch = None` binds the module's torch: no second
    `import torch` is added above it, for a decorator or a statement."""
    source = ("try:\n    import torch as T\nexcept ImportError:\n    T = None\n\n\ndef f(x):\n    return x\n\n\n"
              "def g(x):\n    return x\n")
    out = _rewrite(tmp_path, source, """\
  - action: compile
    target: m.py::f
  - action: mark_dynamic
    target: m.py::g
    arg: x
    dim: 0
""")
    assert out.startswith("try:\n    import torch as T\n"), out
    assert out.count("import torch") == 1, out
    assert "@T.compile\ndef f" in out and "    T._dynamo.mark_dynamic(x, 0)\n" in out
    _import(tmp_path / "src" / "m.py", "torch_in_try")


def test_a_parameter_named_torch_is_refused_not_shadowed(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("import torch\n\n\ndef f(x, torch):\n    import torch.nn\n    return x\n")
    loaded = parse_plan("version: 1\nactions:\n  - action: mark_dynamic\n    target: m.py::f\n    arg: x\n    dim: 0\n")
    with pytest.raises(StackpartError) as info:
        plan_rewrite(loaded, tmp_path / "src")
    assert "has a parameter named 'torch'" in str(info.value)


# -- the check, by Python's own symbol tables ------------------------------------------------------


WATCHED = ("torch", "os")


def _reads(node: ast.AST, name: str) -> bool:
    """Whether ``node`` reads ``name`` outside nested functions, classes and lambdas."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load):
            return True
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.append(child)
    return False


def _binds(stmt: ast.stmt, name: str) -> bool:
    """Whether ``stmt`` binds ``name`` by an import or an assignment (also inside if/try)."""
    for n in ast.walk(stmt):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            for alias in n.names:
                if (alias.asname or alias.name.split(".")[0]) == name:
                    return True
        elif isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store):
            return True
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name:
            return True
    return False


def unbound_reads(source: str) -> set[tuple[str, str, str]]:
    """``(function or module, name, statement)`` for each top-level statement of a function that
    reads a local ``torch``/``os`` no earlier top-level statement of it binds, and each top-level
    decorator (or a method's, in a top-level class) that reads a module name bound only below."""
    tree = ast.parse(source)
    table = symtable.symtable(source, "m.py", "exec")
    tables: dict[tuple[str, int], symtable.SymbolTable] = {}
    todo = [table]
    while todo:
        t = todo.pop()
        for child in t.get_children():
            tables[(child.get_name(), child.get_lineno())] = child
            todo.append(child)
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        t = tables.get((node.name, node.lineno))
        if t is None:
            continue
        for name in WATCHED:
            try:
                local = t.lookup(name).is_local()
            except KeyError:
                continue
            if not local:
                continue
            for k, stmt in enumerate(node.body):
                if _reads(stmt, name) and not any(_binds(s, name) for s in node.body[:k]) and not _binds(stmt, name):
                    out.add((node.name, name, ast.unparse(stmt).splitlines()[0]))
    for i, stmt in enumerate(tree.body):
        decorated = [stmt] if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []
        if isinstance(stmt, ast.ClassDef):
            decorated += [s for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for d in decorated:
            for dec in d.decorator_list:
                root = dec
                while isinstance(root, (ast.Attribute, ast.Call)):
                    root = root.value if isinstance(root, ast.Attribute) else root.func
                if isinstance(root, ast.Name) and root.id in WATCHED and not any(_binds(s, root.id) for s in tree.body[:i]):
                    out.add(("<module>", root.id, f"@{ast.unparse(dec)} on {d.name}"))
    return out


def test_the_check_finds_both_forms_it_is_for():
    assert unbound_reads("import torch\ndef f(x):\n    torch._dynamo.mark_dynamic(x, 0)\n    import torch.nn\n") == {
        ("f", "torch", "torch._dynamo.mark_dynamic(x, 0)")}
    assert unbound_reads("@torch.compile\ndef f(x):\n    return x\nimport torch\n") == {
        ("<module>", "torch", "@torch.compile on f")}
    assert unbound_reads("import torch\ndef f(x):\n    import torch\n    torch.ones(1)\n    import torch.nn\n") == set()


# -- real installed source -------------------------------------------------------------------------


def _functions(source: str) -> list[tuple[str, str | None, bool]]:
    """``(qualname, first parameter or None, binds torch locally)`` of each top-level function
    and method with an indented body, undecorated, defined once."""
    tree = ast.parse(source)
    seen: dict[str, int] = {}
    out = []
    table = symtable.symtable(source, "m.py", "exec")
    local = {}
    for child in table.get_children():
        for t in [child, *child.get_children()]:
            if t.get_type() == "function":
                try:
                    local[(t.get_name(), t.get_lineno())] = t.lookup("torch").is_local()
                except KeyError:
                    local[(t.get_name(), t.get_lineno())] = False
    for stmt in tree.body:
        pairs = [("", stmt)] if isinstance(stmt, ast.FunctionDef) else []
        if isinstance(stmt, ast.ClassDef):
            pairs = [(stmt.name + ".", s) for s in stmt.body if isinstance(s, ast.FunctionDef)]
        for prefix, f in pairs:
            qual = prefix + f.name
            seen[qual] = seen.get(qual, 0) + 1
            args = [a.arg for a in f.args.posonlyargs + f.args.args + f.args.kwonlyargs]
            if prefix and args and args[0] in ("self", "cls"):
                args = args[1:]
            if f.body[0].lineno == f.lineno or f.decorator_list or "torch" in args:
                continue
            out.append((qual, args[0] if args else None, local.get((f.name, f.lineno), False)))
    return [f for f in out if seen[f[0]] == 1]


def _real_files(limit: int) -> list[Path]:
    """Installed transformers/diffusers modules (under 40 KB) with the most function-level
    ``import torch...`` lines: the sites that broke."""
    found = []
    for package in ("transformers", "diffusers"):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            continue
        for path in sorted(Path(spec.origin).parent.rglob("*.py")):
            if not 2_000 < path.stat().st_size < 40_000:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            count = text.count("\n        import torch") + text.count("\n    import torch")
            if count:
                found.append((-count, str(path), path))
    found.sort()
    return [p for _, _, p in found[:limit]]


def _apply_dropping_refused(tmp_path: Path, src: Path, actions: list[str]) -> tuple[str | None, int]:
    """Rewrite ``src/m.py`` with ``actions``, dropping each action the rewrite refuses (a target a
    consistency rule rejects); the rewritten text and how many actions were written."""
    import re

    while actions:
        loaded = parse_plan("version: 1\nactions:\n" + "".join(actions), "plan.yaml")
        try:
            result = plan_rewrite(loaded, src, check_library=False)
        except StackpartError as exc:
            match = re.search(r"actions\[(\d+)\]", str(exc))
            assert match, str(exc)
            del actions[int(match.group(1))]
            continue
        changed = [c for c in result.changes if c.relpath == "m.py"]
        return (changed[0].new.decode() if changed else None), len(actions)
    return None, 0


@pytest.mark.slow
def test_real_sites_keep_every_inserted_name_bound(tmp_path):
    """In installed transformers/diffusers modules that import torch inside functions: a statement
    at the top of every function and method (mark_dynamic on its first parameter where it has one,
    else dynamo_config's torch._dynamo.config line; allocator's os.environ line), then compile on
    each. Every rewritten module compiles, and Python's symbol tables find no inserted read of a
    local torch/os before it is bound, nor a decorator above its module's binding (none that the
    original did not have)."""
    files = _real_files(12)
    if len(files) < 4:
        pytest.skip("transformers/diffusers not installed")
    counts = {"statements": 0, "in functions binding torch": 0, "decorators": 0}
    for n, path in enumerate(files):
        src = tmp_path / f"t{n}"
        src.mkdir()
        shutil.copyfile(path, src / "m.py")
        original = (src / "m.py").read_text(encoding="utf-8")
        functions = _functions(original)
        before = unbound_reads(original)
        tops = [f"  - action: mark_dynamic\n    target: m.py::{q}\n    arg: {a}\n    dim: 0\n" if a else
                f"  - action: dynamo_config\n    target: m.py::{q}\n    settings: {{capture_scalar_outputs: true}}\n"
                for q, a, _ in functions]
        tops += [f"  - action: allocator\n    target: m.py::{q}\n" for q, _, _ in functions[::3]]
        compiles = [f"  - action: compile\n    target: m.py::{q}\n" for q, _, _ in functions]
        for kind, actions in (("statements", tops), ("decorators", compiles)):
            out, written = _apply_dropping_refused(tmp_path, src, actions)
            if out is None:
                continue
            compile(out, str(path), "exec")
            assert unbound_reads(out) <= before, (path, unbound_reads(out) - before)
            counts[kind] += written
            if kind == "statements":
                kept = "".join(actions)  # the actions written (refused ones were dropped)
                counts["in functions binding torch"] += sum(is_local and f"m.py::{q}\n" in kept for q, _, is_local in functions)
    print(f"\n{len(files)} files: {counts}")
    assert counts["statements"] >= 50 and counts["in functions binding torch"] >= 5 and counts["decorators"] >= 30, counts


LOCAL = [
    ("def f(x):\n    torch.a()\n    import torch.nn\n", "torch", "other"),
    ("def f(x):\n    torch.a()\n    import torch.nn as nn\n", "torch", None),
    ("def f(x):\n    from a import torch\n", "torch", "other"),
    ("def f(x):\n    from a import b as torch\n", "torch", "other"),
    ("def f(x, torch):\n    pass\n", "torch", "param"),
    ("def f(x):\n    global torch\n    torch = 1\n", "torch", None),
    ("def f(x):\n    [torch for torch in x]\n", "torch", None),
    ("def f(x):\n    with a as (torch, b):\n        pass\n", "torch", "other"),
    ("def f(x):\n    def g():\n        import torch\n", "torch", None),
    ("def f(x):\n    for os in x:\n        pass\n", "os", "other"),
    ("def f(x):\n    if (torch := x):\n        pass\n", "torch", "other"),
    ("def f(x):\n    torch.ones(1)\n    os.getpid()\n", "torch", None),
]


@pytest.mark.parametrize("source,name,kind", LOCAL)
def test_local_binding_agrees_with_python(source, name, kind):
    import libcst as cst

    from rewriter.actions.base import local_binding

    assert local_binding(cst.parse_module(source).body[0], name) == kind
    table = symtable.symtable(source, "m.py", "exec").get_children()[0]
    try:
        python = table.lookup(name)
    except KeyError:
        python = None
    assert (python is not None and python.is_local()) == (kind is not None)
    assert (python is not None and python.is_parameter()) == (kind == "param")
