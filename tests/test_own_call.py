"""No second compile of code the user already compiles: the plan changes the user's call
instead, or says why not. ``compile`` with ``own_call`` edits the program's own
``torch.compile`` in place (:mod:`rewriter.actions.own_call`), and the search proposes variants of
that call (``as-is+reduce-overhead``), measured like any candidate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from rewriter.actions.base import imported_names
from rewriter.actions.own_call import OwnCallRefused, edited, find_sites
from rewriter.cli import main
from rewriter.plan import load_plan, parse_plan

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "fixtures" / "diagnose" / "own_whole_decorated"
DECORATOR = '    @torch.compile(backend="eager")\n'
EDITED = '    @torch.compile(backend="eager", mode="reduce-overhead")\n'
PLAN = ("version: 1\nactions:\n  - action: compile\n    target: model.py::Net\n    strategy: whole\n"
        "    own_call: {mode: reduce-overhead}\n")


def _edit(code: str, edits: dict, qual: str = "f") -> str:
    """``code`` with the own_call ``edits`` made to the function ``qual`` (top level or a method)."""
    module = cst.parse_module(code)
    imports = imported_names(module)

    class T(cst.CSTTransformer):
        def leave_FunctionDef(self, original, updated):  # noqa: ANN001, ANN202
            if updated.name.value != qual:
                return updated
            [site] = find_sites(updated, imports)
            new = edited(site, edits)
            return updated if new is None else updated.deep_replace(site.node, new)

    return module.visit(T()).code


@pytest.mark.parametrize("before, edits, after", [
    # a bare decorator gets its arguments
    ("import torch\n@torch.compile\ndef f(x): return x\n", {"mode": "reduce-overhead"},
     'import torch\n@torch.compile(mode="reduce-overhead")\ndef f(x): return x\n'),
    # the module's own spelling of torch.compile
    ("from torch import compile as tc\n@tc(fullgraph=True)\ndef f(x): return x\n", {"fullgraph": False},
     "from torch import compile as tc\n@tc()\ndef f(x): return x\n"),
    # a value replaced in place, the rest of the line kept
    ('import torch\n@torch.compile(mode="default",  dynamic=True)  # keep\ndef f(x): return x\n', {"mode": "max-autotune"},
     'import torch\n@torch.compile(mode="max-autotune",  dynamic=True)  # keep\ndef f(x): return x\n'),
    # mode=None is torch's default: already "default"
    ("import torch\n@torch.compile(mode=None)\ndef f(x): return x\n", {"mode": "default"},
     "import torch\n@torch.compile(mode=None)\ndef f(x): return x\n"),
    # a call in the body; a single argument with a trailing comma on its own line
    ("import torch\ndef f(m):\n    return torch.compile(\n        m,\n    )\n", {"dynamic": False},
     "import torch\ndef f(m):\n    return torch.compile(\n        m,\n        dynamic=False,\n    )\n"),
    # re.compile is not a module's compile; the model's is
    ("import re\ndef f(m):\n    re.compile('x')\n    m.compile(backend='eager')\n", {"fullgraph": True},
     "import re\ndef f(m):\n    re.compile('x')\n    m.compile(backend='eager', fullgraph=True)\n"),
])
def test_the_edit_changes_only_the_keywords_asked(before, edits, after):
    got = _edit(before, edits)
    assert got == after
    assert _edit(got, edits) == got  # idempotent


_MULTI = "import torch\n@torch.compile(\n%s)\ndef f(x): return x\n"


@pytest.mark.parametrize("args, edits, after", [
    # appended after a commented line: the comment stays on its own argument's line, not copied
    ('    backend="eager",  # kb\n    fullgraph=False,\n', {"fullgraph": True, "mode": "max-autotune"},
     '    backend="eager",  # kb\n    fullgraph=True,\n    mode="max-autotune",\n'),
    ('    backend="eager",  # kb\n', {"fullgraph": True},
     '    backend="eager",  # kb\n    fullgraph=True,\n'),
    # a comment line before the closing parenthesis stays last
    ('    backend="eager",  # kb\n    # closing remark\n', {"fullgraph": True},
     '    backend="eager",  # kb\n    fullgraph=True,\n    # closing remark\n'),
    # one argument a line without a trailing comma: none is added, the comments stay put
    ('    backend="eager",  # ka\n    dynamic=True  # kb\n', {"fullgraph": True},
     '    backend="eager",  # ka\n    dynamic=True,  # kb\n    fullgraph=True\n'),
    # the last argument removed: the one before keeps its comment, the parenthesis its line
    ('    backend="eager",  # keep me\n    fullgraph=True,  # drop with me\n', {"fullgraph": False},
     '    backend="eager",  # keep me\n'),
    ('    backend="eager",  # keep me\n    fullgraph=True  # drop with me\n', {"fullgraph": False},
     '    backend="eager"  # keep me\n'),
    # a middle one removed: the comment line above the next argument stays
    ('    fullgraph=True,\n    # about backend\n    backend="eager",\n', {"fullgraph": False},
     '    # about backend\n    backend="eager",\n'),
])
def test_an_edit_keeps_a_multiline_calls_comments_on_their_lines(args, edits, after):
    got = _edit(_MULTI % args, edits)
    assert got == _MULTI % after
    assert _edit(got, edits) == got


@pytest.mark.parametrize("before, after", [
    ("    m = torch.compile(  # wrap\n        m,\n    )\n", "    m = torch.compile(  # wrap\n        m,\n        fullgraph=True,\n    )\n"),
    ("    m = torch.compile(\n        m,  # ka\n    )\n", "    m = torch.compile(\n        m,  # ka\n        fullgraph=True,\n    )\n"),
])
def test_an_argument_appended_to_a_one_argument_call_copies_no_comment(before, after):
    code = "import torch\ndef f(m):\n%s    return m\n"
    assert _edit(code % before, {"fullgraph": True}) == code % after


@pytest.mark.parametrize("before, after", [
    ("    m = torch.compile(m, backend=\"eager\"  # kb\n    )\n",
     "    m = torch.compile(m, backend=\"eager\", fullgraph=True  # kb\n    )\n"),
    ("    m = torch.compile(m  # the model\n    )\n", "    m = torch.compile(m, fullgraph=True  # the model\n    )\n"),
])
def test_an_argument_appended_on_a_line_that_ends_in_a_comment_keeps_the_comment(before, after):
    """The arguments on one line, ``)`` on the next: the comment ending that line stays at its end,
    and ``disable: false`` after ``disable: true`` gives the call's bytes back."""
    code = "import torch\ndef f(m):\n%s    return m\n"
    assert _edit(code % before, {"fullgraph": True}) == code % after
    assert _edit(_edit(code % before, {"disable": True}), {"disable": False}) == code % before


@pytest.mark.parametrize("before, after", [
    ("    m = torch.compile(m,  # the model\n        fullgraph=True)\n", "    m = torch.compile(m  # the model\n    )\n"),
    ("    m = torch.compile(m,  # the model\n        fullgraph=True,)\n", "    m = torch.compile(m,  # the model\n    )\n"),
    ("    m = torch.compile(m,  # the model\n        # about fullgraph\n        fullgraph=True)\n",
     "    m = torch.compile(m  # the model\n        # about fullgraph\n    )\n"),
])
def test_the_last_argument_removed_keeps_the_comment_ending_the_line_before(before, after):
    """``fullgraph: false`` removes ``fullgraph=True`` from the line after ``m,  # the model``: the
    comment is the line's of ``m``, which stays, so the comment stays with it and ``)`` takes a
    line of its own at the statement's indent."""
    code = "import torch\ndef f(m):\n%s    return m\n"
    got = _edit(code % before, {"fullgraph": False})
    assert got == code % after, got
    assert _edit(got, {"fullgraph": False}) == got


def test_removing_the_only_argument_of_a_multiline_call_leaves_empty_parentheses():
    assert _edit(_MULTI % "    fullgraph=True,\n", {"fullgraph": False}) == "import torch\n@torch.compile()\ndef f(x): return x\n"


@pytest.mark.parametrize("code, edits, why", [
    ("import torch\nOPTS = {}\n@torch.compile(**OPTS)\ndef f(x): return x\n", {"mode": "reduce-overhead"}, "**OPTS"),
    ("import torch\n@torch.compile(mode=MODE)\ndef f(x): return x\n", {"mode": "reduce-overhead"}, "mode=MODE is not a literal"),
    ("import torch\n@torch.compile(options={'a': 1})\ndef f(x): return x\n", {"mode": "reduce-overhead"}, "mode and options"),
    ("import functools, torch\ndef f(m):\n    c = functools.partial(torch.compile, fullgraph=True)\n    return c(m)\n",
     {"mode": "reduce-overhead"}, "torch.compile is used as a value"),
])
def test_an_edit_that_cannot_be_made_safely_is_refused(code, edits, why):
    with pytest.raises(OwnCallRefused, match=None) as info:
        _edit(code, edits)
    assert why in info.value.message


@pytest.mark.parametrize("before, after", [
    ("    return torch.compile(m, fullgraph=True)(x)\n", "    return torch.compile(m, fullgraph=True, disable=True)(x)\n"),
    ("    y = torch.compile(m)(x)\n    return y\n", "    y = torch.compile(m, disable=True)(x)\n    return y\n"),
])
def test_a_compiled_result_called_at_once_is_one_compile_call(before, after):
    """``torch.compile(m)(x)``: the outer call calls what the compile returned; only the inner one
    is the program's compile, edited as any other (it was counted twice and refused)."""
    code = "import torch\ndef f(m, x):\n%s"
    assert _edit(code % before, {"disable": True}) == code % after
    assert _edit(code % after, {"disable": False}) == code % before


def test_an_edit_that_needs_no_new_value_is_refused_only_where_it_would_change(tmp_path):
    """``mode=MODE`` stays when only ``fullgraph`` is edited: the variable is not touched."""
    code = "import torch\n@torch.compile(mode=MODE)\ndef f(x): return x\n"
    assert _edit(code, {"fullgraph": True}) == "import torch\n@torch.compile(mode=MODE, fullgraph=True)\ndef f(x): return x\n"


def test_plan_fields_are_checked():
    base = "version: 1\nactions:\n  - {action: compile, target: m.py::f, %s}\n"
    with pytest.raises(Exception, match="own_call: unknown key .modes."):
        parse_plan(base % "own_call: {modes: reduce-overhead}")
    with pytest.raises(Exception, match="options .* must be left out"):
        parse_plan(base % "own_call: {mode: reduce-overhead}, options: {fullgraph: true}")
    with pytest.raises(Exception, match="nested"):
        parse_plan(base % "own_call: {fullgraph: true}, strategy: nested")
    assert parse_plan(base % "own_call: {fullgraph: false}").plan.actions[0].own_call.edits() == {"fullgraph": False}


@pytest.mark.parametrize("value, why", [
    # `own_call:` left empty is YAML null: not silently a second compile added
    ("null", "own_call: expected a mapping of fullgraph, dynamic, mode, backend, disable, regional to set, got null"),
    ("", "own_call: expected a mapping of fullgraph, dynamic, mode, backend, disable, regional to set, got null"),
    ("[disable]", "own_call: expected a mapping of fullgraph, dynamic, mode, backend, disable, regional to set, got"),
    # a typo of a backend would be written and fail at the first call (InvalidBackend)
    ("{backend: indcutor}", "own_call.backend: unknown backend 'indcutor'"),
    # a key YAML reads as a number or null: named with the keys expected, not pydantic's "[key]"
    ("{1: true}", "own_call: unknown key 1; expected one of fullgraph, dynamic, mode, backend, disable"),
    ("{null: true}", "own_call: unknown key None; expected one of fullgraph, dynamic, mode, backend, disable"),
    # a misspelt library method would be written as a container: `for block in model.compile_repeated_block`
    ("{regional: compile_repeated_block}", "own_call.regional: expected an attribute path (layers, model.layers) or "
     "compile_repeated_blocks, got 'compile_repeated_block' (did you mean 'compile_repeated_blocks'?"),
    ("{regional: transformer.compile_repeated_blocks}", "did you mean 'compile_repeated_blocks'?"),
    ("{regional: 'compile_repeated_blocks()'}", "did you mean 'compile_repeated_blocks'?"),
])
def test_own_call_null_or_an_unknown_backend_is_refused_at_its_line(tmp_path, capsys, value, why):
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text("import torch\n@torch.compile\ndef f(x):\n    return x\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"version: 1\nactions:\n  - action: compile\n    target: m.py::f\n    own_call: {value}\n")
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{plan}:5" in err and why in err, err
    if "indcutor" in value:
        assert "did you mean 'inductor'" in err, err


@pytest.mark.parametrize("path", ["compile_repeated_blocks", "repeated_blocks", "transformer_blocks", "model.layers"])
def test_a_regional_path_far_from_the_library_method_is_an_attribute_path(path):
    own = parse_plan(f"version: 1\nactions:\n  - action: compile\n    target: m.py::f\n    own_call: {{regional: {path}}}\n")
    assert own.plan.actions[0].own_call.regional == path


def test_own_call_is_a_schema_model_whose_errors_name_the_key_line_and_whose_edits_survive_the_plan_writer():
    """``own_call`` is :class:`rewriter.plan.OwnCall`: a wrong value in block style is reported at its
    own key's line, and ``dynamic: null`` (an edit: remove ``dynamic=``) is written back by diagnose's
    plan writer, not dropped as a default."""
    from rewriter.diagnose.report import plan_yaml
    from rewriter.errors import StackpartError
    from rewriter.plan import OwnCall

    base = "version: 1\nactions:\n  - action: compile\n    target: m.py::f\n    own_call:\n%s"
    with pytest.raises(StackpartError) as info:
        parse_plan(base % "      mode: reduce-overhead\n      fullgraph: 3\n")
    assert info.value.line == 7 and info.value.message.startswith("actions[0].own_call.fullgraph:"), str(info.value)
    loaded = parse_plan(base % "      dynamic: null\n      mode: reduce-overhead\n")
    own = loaded.plan.actions[0].own_call
    assert isinstance(own, OwnCall) and own.edits() == {"dynamic": None, "mode": "reduce-overhead"}
    again = parse_plan(plan_yaml(loaded.plan)).plan.actions[0].own_call
    assert again.edits() == own.edits()


def _src(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(CASE, src, ignore=shutil.ignore_patterns("__pycache__"))
    return src


def _run_script(src: Path, out: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH="")
    proc = subprocess.run([sys.executable, "predict.py", str(out)], cwd=src, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_rewrite_edits_the_users_decorator_in_place(tmp_path, capsys):
    src = _src(tmp_path)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    before = (src / "model.py").read_text()
    assert DECORATOR in before
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 0
    diff = capsys.readouterr().out
    changed = [x for x in diff.splitlines() if x[:1] in "+-" and not x.startswith(("+++", "---"))]
    # one changed line, and above it the suppression a whole compile the plan adds carries (check's
    # SP101 must not fail the commit that applies the measured choice)
    suppress = "    # stackpart: ignore[SP101]: strategy whole, as planned\n"
    assert changed == ["-" + DECORATOR.rstrip("\n"), "+" + suppress.rstrip("\n"), "+" + EDITED.rstrip("\n")], diff
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    assert (src / "model.py").read_text() == before.replace(DECORATOR, suppress + EDITED)  # the exact file after
    assert main(["rewrite", "--plan", str(plan), str(src), "--check"]) == 0  # idempotent
    assert main(["check", str(src), "--no-project"]) == 0, capsys.readouterr().out
    counts = _run_script(src, tmp_path / "after.pt")  # the user's script still runs, compiling once
    assert counts["unique_graphs"] == 1, counts


def test_rewrite_refuses_an_own_call_on_options_from_a_variable(tmp_path, capsys):
    src = _src(tmp_path)
    model = (src / "model.py").read_text().replace(DECORATOR, '    @torch.compile(backend="eager", **OPTIONS)\n')
    (src / "model.py").write_text(model.replace("import torch.nn as nn\n", "import torch.nn as nn\n\nOPTIONS = {}\n"))
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    tree = (src / "model.py").read_bytes()
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 2
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert f"{plan}:3: actions[0] (compile model.py::Net): model.py:25: own_call: the call passes **OPTIONS" in first, err
    assert (src / "model.py").read_bytes() == tree  # nothing written


def _diagnose(tmp_path: Path, monkeypatch=None):
    from rewriter.diagnose.runner import harness_from_flags, diagnose

    src = _src(tmp_path)
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 4}, {"batch": 6}], mode=None,
                                 dtype=None, device="cpu")
    return diagnose(spec, src, tmp_path / "out" / "plan.yaml", backend="eager"), src


SERVE = """\
import torch
from model import Net

def my_backend(gm, example_inputs):
    return gm.forward

model = Net().eval()
cmodel = torch.compile(model%s)
"""


@pytest.mark.parametrize("options, why", [
    (', mode="reduce-overhead"', "as-is+reduce-overhead: the program's own compile (serve.py:8: torch.compile(model, "
                                 "mode=\"reduce-overhead\")) already uses mode='reduce-overhead'"),
    (", backend=my_backend", "as-is+reduce-overhead: the call's backend is set by an expression, not the literal 'inductor' "
                             "(backend=my_backend: serve.py:8: torch.compile(model, backend=my_backend)): "),
    # nanoGPT's backend from its config: the source does not say it is not Inductor
    (", backend=backend", "as-is+reduce-overhead: the call's backend is set by an expression, not the literal 'inductor' "
                          "(backend=backend: serve.py:8: torch.compile(model, backend=backend)): CUDA graphs are "
                          "Inductor's mode='reduce-overhead', which an edit can set only where the backend is Inductor"),
    (', backend="eager"', "as-is+reduce-overhead: the call's backend is not Inductor (backend=eager: "),
    ("", "as-is+reduce-overhead: no CUDA (CUDA graphs need a GPU): the program's own compile (serve.py:8: "),
])
def test_what_the_call_already_says_prunes_reduce_overhead_before_the_device(tmp_path, options, why):
    """A module-level ``torch.compile(model, mode="reduce-overhead")`` was pruned for "no CUDA", as
    was one with ``backend=my_backend`` (a backend other than Inductor takes no mode of its own):
    what the call says is true on any host, so it is the reason; "no CUDA" only where it says neither."""
    from types import SimpleNamespace

    from rewriter.diagnose.candidates import OwnScope, _own_cudagraphs
    from rewriter.diagnose.own_compile import own_compiles

    (tmp_path / "serve.py").write_text(SERVE % options)
    [own] = own_compiles(tmp_path)
    ctx = SimpleNamespace(session=SimpleNamespace(cuda=False))
    pruned: list[str] = []
    assert _own_cudagraphs(ctx, OwnScope(whole=[own]), pruned) == []
    assert len(pruned) == 1 and pruned[0].startswith(why), pruned


@pytest.mark.slow
def test_the_reduce_overhead_variant_of_the_users_eager_backend_compile_is_pruned_for_its_backend(tmp_path, one_thread, monkeypatch):
    """The fixture's own compile is ``@torch.compile(backend="eager")``: CUDA graphs are Inductor's
    mode, so the variant is pruned for the backend, on this CPU host as on a GPU."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    outcome, _ = _diagnose(tmp_path)
    found = outcome.search
    assert "as-is+reduce-overhead" not in [c.name for c in found.candidates]
    assert any(p.startswith("as-is+reduce-overhead: the call's backend is not Inductor (backend=eager: ") and "model.py:23" in p
               for p in found.pruned), found.pruned
    # no second compile: a compile the plan holds edits the program's own call (as-is+dynamic: the
    # harness's shapes vary, so dynamic= on the user's decorator is a candidate of its own)
    assert all(a.own_call is not None for a in outcome.plan.actions if a.action == "compile"), outcome.plan.actions


@pytest.mark.slow
def test_the_forced_variant_runs_in_the_child_on_the_users_one_compile(tmp_path, one_thread, monkeypatch):
    """The candidate forced in (as on CUDA with stable shapes): its tree is the user's decorator
    edited, measured in the engine's child; Dynamo compiles the model once, as the program as it
    is does (the same graphs), never a second time."""
    from rewriter.diagnose.candidates import OWN_CUDAGRAPHS, Candidate
    from rewriter.rewrite.transform import plan_rewrite

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    harness = "version: 1\nharness: {file: harness.py, shapes: [{batch: 4}, {batch: 6}], device: cpu}\n"
    forced = parse_plan(harness + PLAN.split("\n", 1)[1]).plan

    def propose(ctx, own=None):  # noqa: ANN001, ANN202 - replaces candidates.propose
        return [Candidate(OWN_CUDAGRAPHS, forced), Candidate("as-is", parse_plan(harness + "actions: []\n").plan)], ["forced"]

    monkeypatch.setattr("rewriter.diagnose.search.propose", propose)
    outcome, src = _diagnose(tmp_path)
    table = {r["candidate"]: r for r in outcome.search.table()}
    row, asis = table[OWN_CUDAGRAPHS], table["as-is"]
    assert row["numerics"] == "ok" and not row["status"].startswith("failed"), row
    assert row["graphs"] == asis["graphs"] >= 1, (row, asis)  # compiled once: no second compile
    assert row["fallbacks"] == 0, row
    # what the child ran: the user's decorator with its mode edited, nothing added
    from rewriter.plan import LoadedPlan

    diff = plan_rewrite(LoadedPlan(plan=forced, path="plan.yaml", action_lines=[3]), src).diff()
    assert diff.count("\n-    @torch.compile(") == 1 and diff.count("\n+    @torch.compile(") == 1, diff
    assert "+" + EDITED.rstrip("\n") in diff, diff


def test_the_plans_rules_read_an_own_call_as_what_it_writes(tmp_path, capsys):
    """A ``disable`` inside the program's ``fullgraph=True`` compile is refused, unless the plan's
    own_call drops that fullgraph; a ``dynamo_config`` beside a ``model.compile()`` in the entry is
    not "inside" it (the call compiles the model, not the entry)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(
        "import torch\n\n\ndef route(x):\n    return x * 2 if x.sum() > 0 else x\n\n\n"
        "@torch.compile(fullgraph=True, backend=\"eager\")\ndef step(x):\n    return route(x) + 1\n\n\n"
        "def main(model):\n    model.compile(backend=\"eager\")\n    return model\n")
    plan = tmp_path / "plan.yaml"
    head = "version: 1\nactions:\n  - {action: disable, target: model.py::route}\n"
    plan.write_text(head)
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 2
    assert "which the source compiles with fullgraph=True" in capsys.readouterr().err
    plan.write_text(head + "  - {action: compile, target: model.py::step, own_call: {fullgraph: false}}\n")
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 0
    diff = capsys.readouterr().out
    assert '+@torch.compile(backend="eager")' in diff and "+@torch.compiler.disable" in diff, diff
    plan.write_text("version: 1\nactions:\n  - {action: compile, target: model.py::main, strategy: whole, own_call: {mode: reduce-overhead}}\n"
                    "  - {action: dynamo_config, target: model.py::main, settings: {capture_scalar_outputs: true}}\n")
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 0, capsys.readouterr().err
    assert '+    model.compile(backend="eager", mode="reduce-overhead")' in capsys.readouterr().out


@pytest.mark.parametrize("value, why", [
    ('options: {backend: "mine\\n", custom_backend: true}', "custom backend must be a registered name (an identifier), got 'mine\\n'"),
    ('own_call: {backend: "inductor\\n"}', "own_call.backend: expected a backend name (an identifier), got 'inductor\\n'"),
])
def test_a_name_with_a_trailing_newline_is_no_identifier(tmp_path, capsys, value, why):
    """The plan's identifier check is anchored at the end of the string (a regex ``$`` also matches
    before a trailing newline, so ``backend="mine\\n"`` was written into the source)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text("import torch\n@torch.compile\ndef f(x):\n    return x\n")
    before = (src / "m.py").read_text()
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"version: 1\nactions:\n  - action: compile\n    target: m.py::f\n    {value}\n")
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and f"{plan}:5" in captured.err, captured
    assert why in captured.err, captured.err
    assert (src / "m.py").read_text() == before


def test_an_own_call_on_a_dynamo_optimize_decorator_names_it(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text("import torch\n\n\n@torch._dynamo.optimize('eager')\ndef f(x):\n    return x\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: compile\n    target: model.py::f\n    strategy: whole\n    own_call: {dynamic: true}\n")
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "compiled by @torch._dynamo.optimize(...)" in err and "write it as @torch.compile(backend=...) first" in err, err


def test_a_reduce_overhead_call_is_not_turned_regional(tmp_path):
    """The regional loop passes the call's keyword arguments on to each block: a whole-model
    ``mode="reduce-overhead"`` would become one CUDA graph per block, which the search refuses
    for its own candidates (pytorch#152887); on CPU, with no gain measured, that form was the plan."""
    from types import SimpleNamespace

    from rewriter.diagnose.own_candidates import REGIONAL, _regional
    from rewriter.diagnose.own_compile import own_compiles

    (tmp_path / "serve.py").write_text(SERVE.replace("cmodel = torch.compile(model%s)", "def build():\n"
                                                     "    return torch.compile(Net(), mode=\"reduce-overhead\")"))
    [own] = own_compiles(tmp_path)
    assert own.mode == "reduce-overhead"
    pruned: list[str] = []
    assert _regional(SimpleNamespace(), own, pruned) == []
    assert len(pruned) == 1 and pruned[0].startswith(f"{REGIONAL}: the program's own compile (serve.py:") and \
        "one CUDA graph per block" in pruned[0], pruned


@pytest.mark.parametrize("line", ["    model = torch.compile(model) if compiled else model\n",
                                  "    return torch.compile(model) if compiled else model\n"])
def test_regional_of_a_compile_in_a_conditional_expression_says_so(tmp_path, capsys, line):
    """The call's result is held (in one branch), so the refusal says what it is and how to write
    it, not that the result is bound to no name; exit 2, nothing written."""
    src = tmp_path / "src"
    src.mkdir()
    code = "import torch\n\n\ndef main(model, compiled=True):\n" + line + ("    return model\n" if "return" not in line else "")
    (src / "train.py").write_text(code)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: compile\n    target: train.py::main\n    own_call: {regional: layers}\n")
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 2
    err = capsys.readouterr().err
    assert f"{plan}:3:" in err and "train.py:5: own_call: regional: the compile is a branch of a conditional expression" in err, err
    assert "not bound to a name" not in err and len(err.strip().splitlines()) == 1, err
    assert (src / "train.py").read_text() == code


@pytest.mark.parametrize("line", ["    build = lambda m: torch.compile(m, backend='eager')\n",
                                  "    build = lambda m: m.compile()\n"])
def test_a_compile_inside_a_lambda_is_refused_saying_so_and_how_to_write_it(tmp_path, capsys, line):
    """A lambda is a function of its own: the refusal says the compile is there, at its line, and
    the form the edit applies to; exit 2, nothing written."""
    src = tmp_path / "src"
    src.mkdir()
    code = "import torch\n\n\ndef main(model):\n" + line + "    return build(model)\n"
    (src / "train.py").write_text(code)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: compile\n    target: train.py::main\n    own_call: {mode: max-autotune}\n")
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{plan}:3:" in err and "train.py:5: own_call: main's compile is inside a lambda" in err, err
    assert "found none" not in err and "as a statement of main" in err, err
    assert (src / "train.py").read_text() == code


def test_a_backend_from_the_config_is_not_said_to_be_another_backend(tmp_path):
    """nanoGPT's ``torch.compile(model, backend=backend)`` with ``backend = config["backend"]``
    (``"inductor"`` in its config): on a GPU host the CUDA-graphs variant is still left out (an
    edit cannot tell the mode applies), and the reason says the backend is an expression, not
    that it is not Inductor."""
    from types import SimpleNamespace

    from rewriter.diagnose.candidates import OwnScope, _own_cudagraphs
    from rewriter.diagnose.own_compile import own_compiles

    [own] = own_compiles(Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "own_config_backend")
    pruned: list[str] = []
    assert _own_cudagraphs(SimpleNamespace(session=SimpleNamespace(cuda=True)), OwnScope(whole=[own]), pruned) == []
    assert pruned == ["as-is+reduce-overhead: the call's backend is set by an expression, not the literal 'inductor' "
                      "(backend=backend: train.py:22: torch.compile(model, backend=backend)): CUDA graphs are Inductor's "
                      "mode='reduce-overhead', which an edit can set only where the backend is Inductor"], pruned


def test_reduce_overhead_on_the_programs_own_compile_takes_a_few_varying_shapes_as_whole_cudagraphs_does(tmp_path, monkeypatch):
    """``as-is+reduce-overhead`` stands on the same conditions as ``whole+cudagraphs``: where shapes
    vary across at most ``CUDAGRAPH_SHAPES`` harness shapes it is proposed (one recording per shape,
    said in the why); more shapes prune it, with the count."""
    from types import SimpleNamespace

    from rewriter.diagnose import own_candidates
    from rewriter.diagnose.candidates import CUDAGRAPH_SHAPES, OwnScope, _own_cudagraphs
    from rewriter.diagnose.own_compile import own_compiles
    from rewriter.plan import Harness

    (tmp_path / "serve.py").write_text("import torch\nfrom model import Net\n\n\ndef build():\n    return torch.compile(Net().eval())\n")
    [own] = own_compiles(tmp_path)
    assert own.why_not is None and own.site is not None, own.why_not
    monkeypatch.setattr(own_candidates, "runs_own_compile", lambda ctx, own: True)

    def ctx(n):  # the recompiles rung ran and saw the shapes vary
        spec = Harness(file="harness.py", device="cuda", shapes=[{"batch": b} for b in range(1, n + 1)])
        varied = SimpleNamespace(ok=True, measurement={"recompiles": 1, "varying_input_dims": [{"tensor": 0, "dim": 0}]})
        return SimpleNamespace(session=SimpleNamespace(cuda=True, spec=spec, harness=None), results={"recompiles": varied},
                               amortization_assumed=True, site=None)

    pruned: list[str] = []
    [(name, decision)] = _own_cudagraphs(ctx(2), OwnScope(whole=[own]), pruned)
    assert pruned == [] and name == "as-is+reduce-overhead"
    [action] = decision.plan.actions
    assert action.own_call.mode == "reduce-overhead"
    assert "one recording per input shape, the harness's 2 shapes" in action.why and "shapes stable" not in action.why
    n = CUDAGRAPH_SHAPES + 1
    assert _own_cudagraphs(ctx(n), OwnScope(whole=[own]), pruned) == []
    assert pruned == [f"as-is+reduce-overhead: shapes vary across the harness's {n} shapes (more than {CUDAGRAPH_SHAPES}: "
                      "each new shape is a new CUDA graph recording)"], pruned
