"""Plans on installed packages (docs/library-models.md): targets by import path, applied from the
plan's site.

A small package installed outside SRC (``fakelib``, on ``sys.path`` like site-packages) stands in
for transformers so that every action can be run quickly with the eager backend; the real
transformers models are in test_diagnose_hf.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from programs import last_json, run_programs  # tests/programs.py: several programs in one process

from rewriter.cli import main
from rewriter.engine.build import site_ran
from rewriter.errors import StackpartError
from rewriter.plan import Harness, load_plan, parse_plan
from rewriter.rewrite.transform import plan_rewrite

LIB = textwrap.dedent("""\
    import torch
    from torch import nn


    def route(x):
        return x * 2


    class Block(nn.Module):
        def __init__(self, width=8):
            super().__init__()
            self.fc = nn.Linear(width, width)

        def forward(self, x, scale=1.0):
            return route(self.fc(x)).relu() * scale


    class Net(nn.Module):
        def __init__(self, n=3):
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(n))

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x


    class Config:
        width = 8


    class SubBlock(Block):  # not Block itself: a plan naming Block leaves it alone
        pass


    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block(), SubBlock(), Block()])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x
""")

HARNESS = textwrap.dedent("""\
    import torch
    from fakelib.blocks import Net


    def build_model():
        torch.manual_seed(0)
        return Net().eval()


    def make_inputs(batch=2):
        return (torch.randn(batch, 8),)
""")


@pytest.fixture
def lib(tmp_path, monkeypatch):
    """``fakelib`` installed in a directory on sys.path (and PYTHONPATH for subprocesses)."""
    site = tmp_path / "site-packages"
    (site / "fakelib").mkdir(parents=True)
    (site / "fakelib" / "__init__.py").write_text("from .blocks import Block\n")
    (site / "fakelib" / "blocks.py").write_text(LIB)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    for name in [n for n in sys.modules if n.startswith("fakelib")]:
        monkeypatch.delitem(sys.modules, name)
    return site


def project(tmp_path, actions: str, site: str = "harness.py::build_model") -> tuple[Path, Path]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "harness.py").write_text(HARNESS)
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"version: 1\nsite: {site}\nactions:\n" + textwrap.indent(textwrap.dedent(actions), "  "))
    return src, plan


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


RUN = textwrap.dedent("""\
    import json, sys
    import torch
    from rewriter.engine.build import force_backend
    force_backend("eager")
    sys.path.insert(0, sys.argv[1])
    import harness
    from torch._dynamo.utils import counters
    model = harness.build_model()
    again = harness.build_model()  # a second model through the site: applied to it as well
    outs = []
    for batch in (2, 3, 4):
        torch.manual_seed(batch)
        with torch.no_grad():
            outs.append(model(*harness.make_inputs(batch)))
    torch.save(outs, sys.argv[2])
    import fakelib.blocks as lib
    print(json.dumps({
        "graphs": counters["stats"]["unique_graphs"],
        "breaks": sum(counters["graph_break"].values()),
        "compiled": sum(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules()),
        "route_disabled": getattr(lib.route, "_stackpart_disabled", False),
        "hooks": sum(len(m._forward_pre_hooks) for m in model.modules()),
    }))
""")


def run_trees(*runs: tuple[Path, Path]) -> list[dict]:
    """:data:`RUN` on each ``(tree, out)``, one after the other in one process (tests/programs.py:
    each tree's modules and ``fakelib`` imported afresh): the JSON each prints."""
    results = run_programs([{"code": RUN, "cwd": tree, "args": [tree, out]} for tree, out in runs], timeout=240)
    return [last_json(r, f"RUN on {tree}") for r, (tree, _) in zip(results, runs)]


def run_tree(tree: Path, out: Path) -> dict:
    return run_trees((tree, out))[0]


def test_plan_accepts_import_path_targets_with_a_site():
    loaded = parse_plan(textwrap.dedent("""\
        version: 1
        site: train.py::build
        actions:
          - action: compile
            target: transformers.models.llama.modeling_llama:LlamaDecoderLayer
          - action: disable
            target: transformers.cache_utils:DynamicLayer.update
    """))
    assert [a.library for a in loaded.plan.actions] == [True, True]
    assert loaded.plan.actions[1].module == "transformers.cache_utils"
    assert loaded.plan.actions[1].qualname == "DynamicLayer.update"
    assert loaded.site_line == 2


@pytest.mark.parametrize("text,where,says", [
    ("version: 1\nactions:\n  - action: compile\n    target: pkg.mod:Block\n", "plan.yaml:3:", "the plan has no 'site:'"),
    ("version: 1\nsite: train.py::build\nactions:\n  - action: bucket\n    target: pkg.mod:Block\n    arg: x\n    dim: 1\n    buckets: [8]\n",
     "plan.yaml:4:", "bucket writes code into a file under SRC"),
    ("version: 1\nsite: pkg.mod:build\nactions: []\n", "plan.yaml:2:", "the function under SRC that returns the model"),
    ("version: 1\nsite: train.py::build\nactions:\n  - action: compile\n    target: 'pkg.mod:'\n", "plan.yaml:5:", "import path"),
])
def test_bad_library_plans_are_refused_at_their_line(text, where, says):
    with pytest.raises(StackpartError) as info:
        parse_plan(text, "plan.yaml")
    assert str(info.value).startswith(where) and says in str(info.value), str(info.value)


def test_rewrite_writes_the_site_decorator_and_the_generated_module(tmp_path, lib):
    src, plan = project(tmp_path, """\
        - action: compile
          target: fakelib.blocks:Block
        - action: disable
          target: fakelib.blocks:route
    """)
    result = plan_rewrite(load_plan(plan), src)
    assert sorted(c.relpath for c in result.changes) == ["_stackpart/__init__.py", "_stackpart/library.py", "harness.py"]
    diff = result.diff()
    # the user's file gets one import and one decorator, nothing else
    harness_hunk = diff[diff.index("diff --git a/harness.py"):]
    assert [ln for ln in harness_hunk.splitlines() if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))] == [
        "+from _stackpart.library import apply_plan", "+@apply_plan"]
    library = next(c for c in result.changes if c.relpath == "_stackpart/library.py").new.decode()
    assert "from fakelib.blocks import Block" in library and "import fakelib.blocks as blocks" in library
    assert "module.compile()" in library and '_disable(blocks, "route", recursive=True)' in library


#: compile Block in place and mark its x dim 0 dynamic at the block boundary, from the site
COMPILE_AND_MARK = """\
    - action: compile
      target: fakelib.blocks:Block
    - action: mark_dynamic
      target: fakelib.blocks:Block
      arg: x
      dim: 0
      strict: false
"""


def test_rewritten_program_runs_with_the_library_actions_live(tmp_path, lib):
    src, plan = project(tmp_path, COMPILE_AND_MARK)
    shutil.copytree(src, tmp_path / "pristine")  # the program before the rewrite
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    before, after = run_trees((tmp_path / "pristine", tmp_path / "before.pt"), (src, tmp_path / "after.pt"))
    assert before["graphs"] == 0 and before["compiled"] == 0
    # 3 blocks compiled in place; one graph serves 3 batch sizes (marked dynamic where x enters
    # the block; automatic dynamic shapes would need 2), and the marking hook breaks no graph
    assert after["compiled"] == 3 and after["breaks"] == 0, after
    assert after["graphs"] == 1, after
    assert after["hooks"] == 3  # one pre-hook per block, not one per build
    import torch

    for a, b in zip(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "before.pt")):
        torch.testing.assert_close(a, b)
    # idempotent: the applied tree is what the plan asks
    assert plan_rewrite(load_plan(plan), src).changes == []


def test_a_library_action_means_what_the_decorator_under_src_means(tmp_path, lib):
    """compile + disable on the installed package, and the same plan on a copy of it under SRC
    (decorators): the same graphs, the same graph breaks (the disabled helper), the same outputs."""
    src, plan = project(tmp_path, """\
        - action: compile
          target: fakelib.blocks:Block
        - action: disable
          target: fakelib.blocks:route
    """)
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    copy = tmp_path / "copy"
    (copy / "mylib").mkdir(parents=True)
    (copy / "mylib" / "__init__.py").write_text("")
    (copy / "mylib" / "blocks.py").write_text(LIB)
    (copy / "harness.py").write_text(HARNESS.replace("fakelib.blocks", "mylib.blocks"))
    (copy / "fakelib").mkdir()  # the RUN script reads fakelib.blocks.route: point it at the copy
    (copy / "fakelib" / "__init__.py").write_text("")
    (copy / "fakelib" / "blocks.py").write_text("from mylib.blocks import *  # noqa\nfrom mylib.blocks import route\n")
    in_src = tmp_path / "plan_src.yaml"
    in_src.write_text("version: 1\nactions:\n  - action: compile\n    target: mylib/blocks.py::Block\n"
                      "  - action: disable\n    target: mylib/blocks.py::route\n")
    assert main(["rewrite", "--plan", str(in_src), str(copy), "--apply", "--no-validate"]) == 0
    by_site, by_decorator = run_trees((src, tmp_path / "site.pt"), (copy, tmp_path / "decorator.pt"))
    assert by_site["compiled"] == 3 and by_site["route_disabled"] is True
    assert (by_site["graphs"], by_site["breaks"]) == (by_decorator["graphs"], by_decorator["breaks"]), (by_site, by_decorator)
    assert by_site["breaks"] > 0  # the disabled helper is outside the graph in both
    import torch

    for a, b in zip(torch.load(tmp_path / "site.pt"), torch.load(tmp_path / "decorator.pt")):
        torch.testing.assert_close(a, b)


def test_whole_and_nested_compile_from_the_site(tmp_path, lib):
    src, plan = project(tmp_path, """\
        - action: disable
          target: fakelib.blocks:route
        - action: compile
          target: fakelib.blocks:Net
          strategy: whole
    """)
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    after = run_tree(src, tmp_path / "after.pt")
    assert after["compiled"] == 1 and after["route_disabled"] is True  # the model itself, once


@pytest.mark.parametrize("target,action,says,near", [
    ("fakelib.blcks:Block", "compile", "'fakelib.blcks' does not import", "fakelib.blocks"),
    ("fakelib.blocks:Blok", "compile", "no class or function 'Blok' in fakelib.blocks", "Block"),
    ("fakelib.blocks:Config", "compile", "is not an nn.Module subclass", None),
    ("fakelib.blocks:Block.fwd", "disable", "no 'Block.fwd' in fakelib.blocks", "Block.forward"),
])
def test_bad_library_target_is_one_line_exit_2_nothing_written(tmp_path, lib, capsys, target, action, says, near):
    src, plan = project(tmp_path, f"- action: {action}\n  target: {target}\n")
    before = tree_bytes(src)
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {plan}:4:"), err
    assert says in err and (near is None or f"did you mean '{near}'" in err), err
    assert tree_bytes(src) == before


@pytest.mark.parametrize("site,says,near", [
    ("harness.py::build_modle", "no class or function 'build_modle' in harness.py", "build_model"),
    ("harnes.py::build_model", "harnes.py", None),
    ("harness.py::Holder", "Holder is a class; the site is the function that returns the model", None),
    ("harness.py::abuild", "is an async function", None),
])
def test_bad_site_is_one_line_at_the_site_line(tmp_path, lib, capsys, site, says, near):
    src, plan = project(tmp_path, "- action: compile\n  target: fakelib.blocks:Block\n", site=site)
    (src / "harness.py").write_text(HARNESS + "\n\nclass Holder:\n    pass\n\n\nasync def abuild():\n    return build_model()\n")
    before = tree_bytes(src)
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {plan}:2:"), err
    assert f"site ({site})" in err and says in err and (near is None or f"did you mean '{near}'" in err), err
    assert tree_bytes(src) == before


def test_a_site_the_harness_never_calls_is_reported(tmp_path, lib):
    """The call site that never has the model: the generated module exists but never ran."""
    src, plan = project(tmp_path, "- action: compile\n  target: fakelib.blocks:Block\n", site="harness.py::unused")
    (src / "harness.py").write_text(HARNESS + "\n\ndef unused():\n    return build_model()\n")
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    sys.path.insert(0, str(src))
    try:
        import harness  # noqa: F401  (the tree's harness: builds the model without the site)

        harness.build_model()
        with pytest.raises(StackpartError, match="the plan's site never ran"):
            site_ran(src, Harness(file="harness.py"), ["_stackpart/library.py"])
        # diagnose's candidates have no plan file: the site came from --site, and the hint says so
        with pytest.raises(StackpartError) as err:
            site_ran(src, Harness(file="harness.py"), ["_stackpart/library.py"],
                     {"target": "harness.py::unused", "option": "diagnose --site"})
        assert str(err.value).startswith("site (harness.py::unused) never ran: harness.model build_model()"), str(err.value)
        assert "pass diagnose --site file.py::func" in (err.value.hint or ""), err.value.hint
        assert err.value.path is None and err.value.line is None
    finally:
        sys.path.remove(str(src))
        for name in [n for n in sys.modules if n == "harness" or n.startswith("_stackpart")]:
            del sys.modules[name]


def test_validate_cites_the_site_line_when_the_harness_never_calls_it(tmp_path, lib, capsys, monkeypatch):
    """validate's "site never ran" is at the plan's ``site:`` line (plan.yaml:LINE: site (...)), as
    rewrite's site errors are, not a line without a place."""
    src, plan = project(tmp_path, "- action: compile\n  target: fakelib.blocks:Block\n", site="harness.py::unused")
    (src / "harness.py").write_text(HARNESS + "\n\ndef unused():\n    return build_model()\n")
    plan.write_text(plan.read_text().replace("version: 1\n", "version: 1\nharness: {file: harness.py, device: cpu}\n"))
    monkeypatch.chdir(tmp_path)
    code = main(["validate", "--plan", "plan.yaml", "src", "--baselines", "none", "--reps", "2", "--warmup", "1"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and errors == [
        "error: the rewritten tree failed: harness: plan.yaml:3: site (harness.py::unused) never ran: harness.model "
        "build_model() in harness.py built the model without calling the function decorated with @apply_plan "
        "(_stackpart/library.py); the plan's library actions were not applied (set the plan's site: to the function "
        "the harness's model function calls to build the model)"], errors


@pytest.mark.slow
def test_validate_nproc_checks_the_site_ran_on_every_rank(tmp_path, lib, capsys, monkeypatch):
    """Under --nproc the ranks build the model too: a site the harness never calls is the same
    error at the plan's ``site:`` line (it was the program timed without its library actions)."""
    src, plan = project(tmp_path, "- action: compile\n  target: fakelib.blocks:Block\n", site="harness.py::unused")
    (src / "harness.py").write_text(HARNESS + "\n\ndef unused():\n    return build_model()\n")
    plan.write_text(plan.read_text().replace("version: 1\n", "version: 1\nharness: {file: harness.py, device: cpu}\n"))
    monkeypatch.chdir(tmp_path)
    code = main(["validate", "--plan", "plan.yaml", "src", "--nproc", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "error: plan.yaml:3: rank 0: site (harness.py::unused) never ran: " in err, err


def test_drift_check_reads_library_plans_without_importing_them(tmp_path):
    """`check`'s drift (the pre-commit hook, which has neither torch nor the model's packages)
    sees the site's pending change without resolving the library target."""
    src, plan = project(tmp_path, "- action: compile\n  target: notinstalled.models:Block\n")
    result = plan_rewrite(load_plan(plan), src, check_library=False)
    assert "harness.py" in [c.relpath for c in result.changes]
    with pytest.raises(StackpartError, match="'notinstalled.models' does not import"):
        plan_rewrite(load_plan(plan), src)


def test_check_reports_the_pending_site_as_drift_and_nothing_once_applied(tmp_path, lib, capsys):
    """`stackpart check` with the plan (the pre-commit hook): the site's decorator and the generated
    module are drift until applied; once applied, the same files are clean (idempotent)."""
    src, plan = project(tmp_path, "- action: compile\n  target: fakelib.blocks:Block\n")
    harness = str(src / "harness.py")
    assert main(["check", "--plan", str(plan), "--src", str(src), harness]) == 1
    assert "+@apply_plan" in capsys.readouterr().out
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    capsys.readouterr()
    assert main(["check", "--plan", str(plan), "--src", str(src), harness]) == 0, capsys.readouterr()


def test_check_counts_a_missing_generated_module_as_drift(tmp_path, lib, capsys):
    """A commit of the site alone, with `_stackpart/library.py` deleted (or never added), must not
    pass the hook; and SRC is inferred from the site when only the site's file is given."""
    src, plan = project(tmp_path, "- action: compile\n  target: fakelib.blocks:Block\n")
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    (src / "_stackpart" / "library.py").unlink()
    capsys.readouterr()
    harness = str(src / "harness.py")
    assert main(["check", "--plan", str(plan), harness]) == 1  # no --src: inferred from the site
    out = capsys.readouterr()
    assert "_stackpart/library.py" in out.out + out.err


def test_check_reads_an_installed_library_target_from_source(tmp_path, lib, capsys):
    """Where the package is installed, check catches a mistyped class (with the near name) without
    importing it; a package that is not installed is taken as written (test above)."""
    src, plan = project(tmp_path, "- action: compile\n  target: fakelib.blocks:Blok\n")
    assert main(["check", "--plan", str(plan), "--src", str(src), str(src / "harness.py")]) == 2
    err = capsys.readouterr().err
    assert "no class or function 'Blok'" in err and "did you mean 'Block'" in err


@pytest.mark.parametrize("site,says", [("harness.py::Holder", "is a class"), ("harness.py::abuild", "is an async function")])
def test_diagnose_refuses_a_class_or_async_site_before_any_rung(tmp_path, lib, capsys, site, says):
    src, _ = project(tmp_path, "- action: compile\n  target: fakelib.blocks:Block\n")
    (src / "harness.py").write_text(HARNESS + "\n\nclass Holder:\n    pass\n\n\nasync def abuild():\n    return build_model()\n")
    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(tmp_path / "out" / "plan.yaml"),
               "--device", "cpu", "--site", site])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and f"--site: {site.split('::')[1]} {says}" in err[-1], err
    assert not (tmp_path / "out" / "plan.yaml").exists()


def test_a_library_block_is_marked_by_keyword_too():
    """GPT-2's blocks get position_ids by keyword: the pre-hook binds it by name, so a library
    block's varying keyword input is marked with the positional one (all or nothing)."""
    import torch

    from rewriter.diagnose.planner import _mark_dynamic

    class Block(torch.nn.Module):
        def forward(self, hidden_states, position_ids=None):
            return hidden_states

    block = {"cls": Block, "owner": object(), "attr": "h", "owner_target": None, "target": None}
    rc = {"recompiles": 1, "shapes": 2, "varying_block_dims": [{"arg": 0, "dim": 1, "sizes": [16, 12]}],
          "varying_block_other_dims": [{"input": "position_ids", "dim": 1, "sizes": [16, 12]}]}
    actions, notes = [], []
    _mark_dynamic(actions, notes, block, rc, "fakelib.blocks:Block")
    assert [(a.target, a.arg, a.dim, a.strict) for a in actions] == [
        ("fakelib.blocks:Block", "hidden_states", 1, False), ("fakelib.blocks:Block", "position_ids", 1, False)], notes
    nested = dict(rc, varying_block_other_dims=[{"input": "position_embeddings[0]", "dim": 1, "sizes": [16, 12]}])
    actions, notes = [], []
    _mark_dynamic(actions, notes, block, nested, "fakelib.blocks:Block")
    assert actions == [] and "position_embeddings[0] dim 1 (a keyword or nested argument)" in notes[0]


MIXED = textwrap.dedent("""\
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import harness
    model = harness.build_model()
    print(json.dumps([[type(m).__name__, getattr(m, "_compiled_call_impl", None) is not None, len(m._forward_pre_hooks)]
                      for m in model.blocks]))
""")


def test_a_subclass_of_a_targeted_block_is_not_compiled_from_the_site(tmp_path, lib):
    """The plan names Block: its instances are compiled and marked, a SubBlock(Block) instance is
    not (exact class, as diffusers' compile_repeated_blocks matches _repeated_blocks by name)."""
    src, plan = project(tmp_path, COMPILE_AND_MARK)
    (src / "harness.py").write_text(HARNESS.replace("import Net", "import Mixed").replace("Net()", "Mixed()"))
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    proc = subprocess.run([sys.executable, "-c", MIXED, str(src)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [["Block", True, 1], ["SubBlock", False, 0], ["Block", True, 1]]


SUBCLASS_ONLY = textwrap.dedent("""\
    import torch
    from torch import nn
    import fakelib.blocks


    class MyBlock(fakelib.blocks.Block):  # the user's own subclass, in another module
        pass


    class MyNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([MyBlock(), MyBlock()])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x


    def build_model():
        return MyNet().eval()


    def make_inputs(batch=2):
        return (torch.randn(batch, 8),)
""")


def test_a_model_holding_only_a_subclass_of_the_targeted_block_says_so(tmp_path, lib):
    """Exact matching (type(m) is cls) finds no Block in a model of MyBlock(Block) only: the error
    said the model "holds no fakelib.blocks.Block", which reads false (isinstance says it does); it
    names the subclass and says the plan matches its class exactly."""
    src, plan = project(tmp_path, """\
        - action: compile
          target: fakelib.blocks:Block
    """)
    (src / "harness.py").write_text(SUBCLASS_ONLY)
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    code = "import sys; sys.path.insert(0, sys.argv[1]); import harness; harness.build_model()"
    proc = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=240)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("LookupError: ") and "holds no fakelib.blocks.Block itself, only its subclass harness.MyBlock; " \
        "the plan matches its class exactly, not a subclass; re-run `stackpart diagnose`" in last, last


KWLIB = textwrap.dedent("""\
    import torch
    from torch import nn


    class KwBlock(nn.Module):  # transformers' GPT2Block takes position_ids through **kwargs
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, hidden_states, **kwargs):
            return self.fc(hidden_states) * kwargs["gate"]


    class KwNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(KwBlock() for _ in range(3))

        def forward(self, x):
            gate = torch.ones(x.shape[0], 1)
            for block in self.blocks:
                x = block(x, gate=gate)
            return x
""")

KWHARNESS = HARNESS.replace("from fakelib.blocks import Net", "from fakelib.kw import KwNet as Net")


def kw_project(tmp_path, lib, arg: str) -> tuple[Path, Path]:
    (lib / "fakelib" / "kw.py").write_text(KWLIB)
    src, plan = project(tmp_path, f"""\
        - action: compile
          target: fakelib.kw:KwBlock
        - action: mark_dynamic
          target: fakelib.kw:KwBlock
          arg: hidden_states
          dim: 0
          strict: false
        - action: mark_dynamic
          target: fakelib.kw:KwBlock
          arg: {arg}
          dim: 0
          strict: false
    """)
    (src / "harness.py").write_text(KWHARNESS)
    return src, plan


def test_a_library_mark_on_an_input_forward_takes_through_kwargs_is_live(tmp_path, lib):
    """diagnose marks GPT2Block's ``position_ids``, which its forward takes through ``**kwargs``:
    the hook looked only at the named parameters and marked nothing (two graphs for three batch
    sizes, automatic dynamic, instead of one)."""
    src, plan = kw_project(tmp_path, lib, "gate")
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    after = run_tree(src, tmp_path / "after.pt")
    assert after["compiled"] == 3 and after["breaks"] == 0, after
    assert after["graphs"] == 1, after


def test_a_misspelt_library_mark_arg_is_refused_at_its_line(tmp_path, lib, capsys):
    """``arg: hidden_state`` for ``hidden_states`` was written and ran as a silent no-op."""
    src, plan = kw_project(tmp_path, lib, "hidden_state")
    before = tree_bytes(src)
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{plan}:" in err, err
    assert "mark_dynamic arg 'hidden_state' is not a parameter of fakelib.kw:KwBlock.forward" in err, err
    assert "kw.py:" in err and "did you mean 'hidden_states'?" in err, err
    assert tree_bytes(src) == before
