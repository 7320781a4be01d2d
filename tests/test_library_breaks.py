"""Graph breaks inside an installed package's code (library ``disable``s planned from
graph breaks). The graph-break rung locates a break no frame under SRC holds in the package's
function it is in (``package.module:Qual``, :func:`rewriter.diagnose.locate.first_in_library`);
the planner keeps that function eager from the plan's site where the compiled unit's call chain
leads to it, and says why not where it does not. The package here is the graph-break workload's
model installed outside SRC (on ``sys.path`` and the children's ``PYTHONPATH``), used the way a
user has transformers."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
from programs import last_json, run_programs  # tests/programs.py: several programs in one process

from rewriter.cli import main
from rewriter.plan import load_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

#: Before the blocks, a helper of the model itself that breaks the graph too: outside every block.
PREP = '''

def prep(x):
    """Scale by a value read from the data: a graph break outside the blocks."""
    if x.abs().max() > 100:
        return x / 100
    return x
'''


def _install(tmp_path: Path, monkeypatch) -> Path:
    site = tmp_path / "site"
    pkg = site / "routelib"
    pkg.mkdir(parents=True)
    text = (FIXTURES / "workloads" / "graph_break" / "model.py").read_text()
    text = text.replace("class Block(nn.Module):", PREP.lstrip("\n") + "\n\nclass Block(nn.Module):")
    text = text.replace("        for block in self.blocks:", "        x = prep(x)\n        for block in self.blocks:")
    (pkg / "__init__.py").write_text(text)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(textwrap.dedent("""\
        import torch

        from routelib import BranchNet


        def build_model():
            return BranchNet(dim=128, depth=4)


        def make_inputs(batch: int = 32, seq: int = 16):
            return (torch.randn(batch, seq, 128),)
    """))
    return src


RUN = textwrap.dedent("""\
    import json, sys
    import torch
    from rewriter.engine.build import force_backend
    force_backend("eager")
    sys.path.insert(0, sys.argv[1])
    import harness, routelib
    torch.manual_seed(0)
    model = harness.build_model()
    torch.manual_seed(1)
    (x,) = harness.make_inputs()
    with torch.no_grad():
        out = model(x)
    torch.save(out, sys.argv[2])
    from torch._dynamo.utils import counters
    print(json.dumps({"graphs": counters["stats"]["unique_graphs"],
                      "route_disabled": bool(getattr(routelib.route, "_torchdynamo_disable", False)),
                      "prep_disabled": bool(getattr(routelib.prep, "_torchdynamo_disable", False))}))
""")


def _run_both(before: Path, src: Path, tmp_path: Path) -> tuple[dict, dict]:
    """:data:`RUN` on the tree before the rewrite, then on the rewritten one, one after the other
    in one process (tests/programs.py: the tree's modules and ``routelib`` imported afresh)."""
    results = run_programs([{"code": RUN, "cwd": before, "args": [before, tmp_path / "a.pt"]},
                            {"code": RUN, "cwd": src, "args": [src, tmp_path / "b.pt"]}])
    return last_json(results[0], "the program before the rewrite"), last_json(results[1], "the rewritten program")


@pytest.mark.slow
def test_a_break_in_an_installed_packages_helper_is_kept_eager_from_the_site(tmp_path, monkeypatch, capsys):
    import torch

    src = _install(tmp_path, monkeypatch)
    out = tmp_path / "out"
    from rewriter.diagnose.runner import diagnose
    from rewriter.diagnose.runner import harness_from_flags

    # the rungs the per-block plan rests on, without batch scaling: on these shared cores its CPU
    # timing can read this small model as launch-bound and make the rule prefer a whole compile
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 32, "seq": 16}],
                                 mode=None, dtype=None, device="cpu")
    diagnose(spec, src, out / "plan.yaml", backend="eager", only={"graph_breaks", "recompiles", "granularity"})
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    breaks = next(r for r in report["rungs"] if r["name"] == "graph_breaks")
    located = {f.get("library") for f in breaks["findings"]}
    # both breaks are located in the package, by import path, not "no line under SRC"
    assert {"routelib:route", "routelib:prep"} <= located, breaks["findings"]
    plan = load_plan(out / "plan.yaml").plan
    kinds = {(a.action, a.target) for a in plan.actions}
    assert ("disable", "routelib:route") in kinds and ("compile", "routelib:Block") in kinds, kinds
    # prep runs before the blocks: a per-block compile never reaches it, so it gets no disable
    assert ("disable", "routelib:prep") not in kinds, kinds
    notes = json.dumps(report)
    assert "routelib:prep: no call chain leading to it was recorded" in notes  # not shown inside a block: no disable
    assert plan.site == "harness.py::build_model"

    shutil.copytree(src, tmp_path / "before")
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(out / "plan.yaml"), str(src), "--apply", "--no-validate"]) == 0, capsys.readouterr().err
    before, after = _run_both(tmp_path / "before", src, tmp_path)
    assert before == {"graphs": 0, "route_disabled": False, "prep_disabled": False}
    # the compile is live and route stays eager: each block is one graph before route and one after,
    # shared by the 4 instances (module.compile() on each: one code object)
    assert after["route_disabled"] and not after["prep_disabled"] and after["graphs"] == 2, after
    torch.testing.assert_close(torch.load(tmp_path / "b.pt"), torch.load(tmp_path / "a.pt"))


@pytest.mark.parametrize("fullgraph", [True, False])
def test_a_library_disable_inside_a_library_fullgraph_compile_is_refused(tmp_path, monkeypatch, capsys, fullgraph):
    """Block.forward calls route: with fullgraph=True the compile would raise at the first call
    ('Skip inlining torch.compiler.disable()d function'); read from the package's source, before
    anything is written. Without fullgraph the disable is a graph break, and the plan stands."""
    src = _install(tmp_path, monkeypatch)
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent(f"""\
        version: 1
        harness: {{file: harness.py, shapes: [{{batch: 32, seq: 16}}], device: cpu}}
        site: harness.py::build_model
        actions:
          - action: compile
            target: routelib:Block
            options: {{fullgraph: {str(fullgraph).lower()}}}
          - action: disable
            target: routelib:route
    """))
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    rc = main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"])
    err = capsys.readouterr().err
    if fullgraph:
        assert rc == 2, err
        assert "plan.yaml:8: actions[1] (disable routelib:route)" in err and "disable inside a fullgraph=True region (actions[0], routelib:Block)" in err, err
        assert "Block reaches route" in err, err
        assert {p: p.read_bytes() for p in src.rglob("*") if p.is_file()} == before  # nothing written
    else:
        assert rc == 0, err


def test_a_library_disable_of_a_name_the_compiled_module_imports_is_refused_under_fullgraph(tmp_path, monkeypatch, capsys):
    """The ``+mask-eager`` twin's form (``transformers.models.bert.modeling_bert:create_bidirectional_mask``,
    defined in ``masking_utils``): the disable replaces the name in the module it names, whose
    compiled class calls it, so fullgraph=True would raise at the first call there even though the
    function is defined in another file of the package."""
    site = tmp_path / "site"
    pkg = site / "maskpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "builders.py").write_text("def make_mask(x):\n    return None\n")
    (pkg / "model.py").write_text(textwrap.dedent("""\
        import torch

        from .builders import make_mask


        class Net(torch.nn.Module):
            def forward(self, x):
                mask = make_mask(x)
                return x * 2 if mask is None else x
    """))
    monkeypatch.syspath_prepend(str(site))
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(textwrap.dedent("""\
        import torch

        from maskpkg.model import Net


        def build_model():
            return Net()


        def make_inputs(batch: int = 2):
            return (torch.randn(batch, 4),)
    """))
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent("""\
        version: 1
        harness: {file: harness.py, shapes: [{batch: 2}], device: cpu}
        site: harness.py::build_model
        actions:
          - {action: compile, target: 'maskpkg.model:Net', strategy: whole, options: {fullgraph: true}}
          - {action: disable, target: 'maskpkg.model:make_mask'}
    """))
    rc = main(["rewrite", "--plan", str(plan), str(src), "--no-validate"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "disable inside a fullgraph=True region (actions[0], maskpkg.model:Net)" in err and "Net reaches make_mask" in err, err
