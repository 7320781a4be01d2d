"""The ``+mask-eager`` twins (rewriter/diagnose/kinds/mask.py): a whole-model compile with
transformers' attention-mask builders kept eager, where the compiled trace gives SDPA a mask that
eager does not (huggingface/transformers#48925; BENCHMARKS.md, "Model zoo, part 18": on CUDA that
mask put BERT's and ViT's whole compiles on SDPA's math path).

The installed transformers skips the mask under ``torch.compile`` already; the rule of the
versions that do not (5.17's ``_ignore_bidirectional_mask_sdpa``, which declines under any trace)
is set here, as a harness on such a version runs. Tiny BERT, random weights, no download."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from rewriter.diagnose.evidence import Evidence

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

BUILDER = "transformers.models.bert.modeling_bert:create_bidirectional_mask"

#: transformers 5.17's rule (masking_utils._ignore_bidirectional_mask_sdpa), set at import.
OLD_RULE = textwrap.dedent('''\
    from transformers import masking_utils
    from transformers.utils.import_utils import is_tracing


    def _declines_under_tracing(padding_mask, kv_length, local_attention_size=None):
        return (not is_tracing(padding_mask) and (padding_mask is None or padding_mask.all())
                and (local_attention_size is None or kv_length < local_attention_size))


    masking_utils._ignore_bidirectional_mask_sdpa = _declines_under_tracing
''')

HARNESS = OLD_RULE + textwrap.dedent('''\
    import torch
    import transformers


    def build_model():
        torch.manual_seed(0)
        return transformers.BertModel(transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=128)).eval()


    def make_inputs(batch: int = 2, seq: int = 16):
        return {"input_ids": torch.randint(0, 128, (batch, seq), generator=torch.Generator().manual_seed(seq))}
''')


def _harness(tmp_path: Path, name: str = "harness.py", text: str = HARNESS):
    import importlib.util

    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / name).write_text(text)
    spec = importlib.util.spec_from_file_location(f"_mask_{tmp_path.name}", src / name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Dynamo reads a traced function's globals through its module
    spec.loader.exec_module(module)
    return src, module


@pytest.fixture
def old_rule(monkeypatch):
    """The 5.17 rule for this test only (the harness sets it at import, as a program on that version has it)."""
    from transformers import masking_utils

    monkeypatch.setattr(masking_utils, "_ignore_bidirectional_mask_sdpa", masking_utils._ignore_bidirectional_mask_sdpa)


def _rewritten_harness(tree: Path, monkeypatch):
    """The rewritten tree's harness, imported (its ``build_model`` run) with the generated
    ``_stackpart`` package of this tree, not one another test left in ``sys.modules``; the mask
    builder the site replaces is restored after the test."""
    import importlib.util

    import transformers.models.bert.modeling_bert as bert

    monkeypatch.setattr(bert, "create_bidirectional_mask", bert.create_bidirectional_mask)  # restored after
    generated = lambda: [k for k in sys.modules if k == "_stackpart" or k.startswith("_stackpart.")]  # noqa: E731
    for name in generated():
        monkeypatch.delitem(sys.modules, name)  # restored after the test
    spec = importlib.util.spec_from_file_location("_mask_rewritten_harness", tree / "harness.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, str(tree))
    try:
        spec.loader.exec_module(module)
        module.model = module.build_model()
    finally:
        sys.path.remove(str(tree))
        sys.modules.pop(spec.name, None)
        for name in generated():
            sys.modules.pop(name, None)
    return module


def _traced(model, inputs):
    import torch

    from rewriter.diagnose.sdpa_masks import traced_masks

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch._dynamo.explain(model)(**inputs)
    torch._dynamo.reset()
    return traced_masks(out.graphs), out.graph_count


def test_the_trace_passes_sdpa_a_mask_eager_does_not_and_the_builder_kept_eager_drops_it(tmp_path, old_rule, monkeypatch):
    import torch
    import transformers.models.bert.modeling_bert as bert

    from rewriter.diagnose.sdpa_masks import builders
    from rewriter.diagnose.sdpa_masks import eager_masks

    _, h = _harness(tmp_path)
    model, inputs = h.build_model(), h.make_inputs()
    traced, graphs = _traced(model, inputs)
    assert len(traced) == 2 and graphs == 1  # one SDPA call per layer, one graph
    # an all-true mask expanded over the keys: last-dim stride 0, which no fused CUDA kernel takes
    assert all(m["dtype"] == "torch.bool" and m["shape"] == [2, 1, 16, 16] and m["stride"][-1] == 0 for m in traced), traced
    assert eager_masks(model, inputs) == [None, None]
    assert BUILDER in builders(model)
    monkeypatch.setattr(bert, "create_bidirectional_mask", torch.compiler.disable(bert.create_bidirectional_mask))
    traced, graphs = _traced(model, inputs)
    assert traced == [None, None] and graphs == 2  # the builder eager at a graph break: no mask, one graph more


def _candidates():
    from rewriter.diagnose.candidate import Candidate
    from rewriter.plan import parse_plan

    plan = parse_plan("version: 1\nactions:\n  - {action: compile, target: 'model.py::Net', strategy: whole}\n"
                      "  - {action: compile, target: 'model.py::Block', strategy: region}\n", "x").plan
    whole, region = plan.actions
    cudagraphs = whole.model_copy(update={"options": whole.options.model_copy(update={"mode": "reduce-overhead"})})
    return [Candidate("per-block", plan.model_copy(update={"actions": [region]})),
            Candidate("whole", plan.model_copy(update={"actions": [whole]})),
            Candidate("nested+whole", plan.model_copy(update={"actions": [whole, region]})),
            Candidate("whole+cudagraphs", plan.model_copy(update={"actions": [cudagraphs]})),
            Candidate("as-is", plan.model_copy(update={"actions": []}))]


def _ctx(model, inputs, traced):
    evidence = Evidence()
    evidence.traced_sdpa_masks = traced
    spec = SimpleNamespace(call=None, file="harness.py", model="build_model")
    return SimpleNamespace(evidence=evidence, reference=lambda: (model, inputs, None), site=None,
                           session=SimpleNamespace(spec=spec, harness=None))


def test_a_twin_follows_each_whole_model_compile_where_the_trace_adds_a_mask(tmp_path, old_rule):
    from rewriter.diagnose.kinds.mask import with_mask_eager

    _, h = _harness(tmp_path)
    model, inputs = h.build_model(), h.make_inputs()
    traced, _ = _traced(model, inputs)
    out, pruned = with_mask_eager(_ctx(model, inputs, traced), _candidates())
    # a twin after the first whole-model compile of each mode: one or two more cold phases in the budget
    assert [c.name for c in out] == ["per-block", "whole", "whole+mask-eager", "nested+whole", "whole+cudagraphs",
                                     "whole+cudagraphs+mask-eager", "as-is"] and pruned == []
    twin = out[2]
    assert [a.action for a in twin.plan.actions] == ["compile", "disable", "disable"]
    assert BUILDER in [a.target for a in twin.plan.actions] and twin.plan.site == "harness.py::build_model"
    assert "passes 2 SDPA call(s) a mask (torch.bool (2, 1, 16, 16) strides (0, 16, 1, 0)) where eager passes none" in twin.notes[-1]
    # no mask in the trace (the installed rule, or a model without SDPA): no twin, nothing said
    assert with_mask_eager(_ctx(model, inputs, [None, None]), _candidates())[0] == _candidates()
    assert with_mask_eager(_ctx(model, inputs, None), _candidates()) == (_candidates(), [])


def test_no_twin_where_eager_passes_sdpa_a_mask_too(tmp_path, old_rule):
    """Padding: eager builds the mask as well, so keeping the builder eager would not drop it."""
    import torch

    from rewriter.diagnose.kinds.mask import with_mask_eager

    _, h = _harness(tmp_path)
    model = h.build_model()
    inputs = dict(h.make_inputs(), attention_mask=torch.tensor([[1] * 16, [1] * 12 + [0] * 4]))
    traced, _ = _traced(model, inputs)
    out, pruned = with_mask_eager(_ctx(model, inputs, traced), _candidates())
    assert [c.name for c in out] == ["per-block", "whole", "nested+whole", "whole+cudagraphs", "as-is"]
    assert len(pruned) == 1 and pruned[0].startswith("mask-eager: eager passes SDPA a mask too (torch.bool"), pruned


@pytest.mark.slow
def test_diagnose_measures_the_twin_and_its_rewrite_keeps_the_builder_eager(tmp_path, old_rule, monkeypatch):
    """End to end on the CPU: the harness (the 5.17 rule set at import, as on that version) is
    diagnosed; the search proposes ``+mask-eager`` after each whole-model compile and measures it
    (numerics ok). The twin's plan, rewritten from the site, keeps the builder eager: the rewritten
    model's trace passes SDPA no mask. Before the harness was registered in ``sys.modules`` the
    graph-break rung and every whole-model compile raised ModuleNotFoundError on this harness
    (Dynamo imports the module of a function it inlines: here the harness's rule, called from
    ``masking_utils``)."""
    import json
    import shutil

    import yaml

    from rewriter.cli import main

    src, _ = _harness(tmp_path)
    out = tmp_path / "out"
    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"), "--device", "cpu",
               "--shape", "batch=2,seq=16", "--shape", "batch=2,seq=12", "--steps", "1"])
    assert rc == 0
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    rungs = {r["name"]: r for r in report["rungs"]}
    assert rungs["graph_breaks"]["status"] == "ok", rungs["graph_breaks"]
    rows = {r["candidate"]: r for r in rungs["search"]["measurement"]["candidates"]}
    assert "whole+mask-eager" in rows and list(rows).index("whole+mask-eager") == list(rows).index("whole") + 1, list(rows)
    assert not any(n.endswith("+mask-eager") for n in rows if n != "whole+mask-eager"), list(rows)
    twin = rows["whole+mask-eager"]
    assert twin["numerics"] == "ok" and twin["step_ms"] is not None, twin
    assert any(a.startswith(f"disable {BUILDER}") for a in twin["actions"]), twin["actions"]
    # the twin's plan, written out and rewritten: the builder is kept eager from the site
    plan = yaml.safe_load((out / "plan.yaml").read_text())
    plan["actions"] = [{"action": "compile", "target": "transformers.models.bert.modeling_bert:BertModel", "strategy": "whole"},
                       {"action": "disable", "target": BUILDER}]
    (tmp_path / "twin.yaml").write_text(yaml.safe_dump(plan))
    tree = tmp_path / "tree"
    shutil.copytree(src, tree)
    assert main(["rewrite", "--plan", str(tmp_path / "twin.yaml"), str(tree), "--apply", "--no-validate"]) == 0
    library = (tree / "_stackpart" / "library.py").read_text()
    assert "create_bidirectional_mask" in library and "torch.compiler.disable" in library, library
    # run the rewritten harness's model function: the site applies the disable (the compile it also
    # applies is never called here: Inductor on the CPU is not this test's business)
    module = _rewritten_harness(tree, monkeypatch)
    plain = transformers.BertModel(transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=128)).eval()
    traced, graphs = _traced(plain, module.make_inputs())
    assert traced == [None, None] and graphs == 2, traced


def _compiles_itself(options: str) -> str:
    """The harness whose model function compiles the whole model itself, ``torch.compile(model, <options>)``."""
    built = "    return transformers.BertModel(transformers.BertConfig(\n"
    assert built in HARNESS
    text = HARNESS.replace(built, "    model = transformers.BertModel(transformers.BertConfig(\n")
    return text.replace("vocab_size=128)).eval()\n", f"vocab_size=128)).eval()\n    return torch.compile(model, {options})\n")


def _diagnose(src: Path, out: Path) -> dict:
    import json

    from rewriter.cli import main

    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"), "--device", "cpu",
               "--shape", "batch=2,seq=16", "--shape", "batch=2,seq=12", "--steps", "1"])
    assert rc == 0
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    return {r["name"]: r for r in report["rungs"]}["search"]["measurement"]


@pytest.mark.slow
def test_a_program_that_compiles_bert_whole_gets_its_compile_with_the_builder_eager(tmp_path, old_rule, monkeypatch):
    """The program's own ``torch.compile(model)`` builds the mask in its graph as a whole-model
    compile of ours does: the search measures that compile as written with the builder kept eager
    (``as-is+mask-eager``, no second compile) and twins an edit of its call
    (``as-is+dynamic+mask-eager``); the plan, rewritten, keeps the program's compile and the
    builder eager, and the compiled model's trace passes SDPA no mask."""
    import shutil

    import yaml

    from rewriter.cli import main

    src, _ = _harness(tmp_path, text=_compiles_itself('backend="aot_eager"'))
    search = _diagnose(src, tmp_path / "out")
    rows = {r["candidate"]: r for r in search["candidates"]}
    own = rows.get("as-is+mask-eager")
    assert own is not None, list(rows)
    assert own["numerics"] == "ok" and own["step_ms"] is not None, own
    assert [a.split(" ")[0] for a in own["actions"]] == ["disable"] * len(own["actions"])  # no compile of ours
    assert f"disable {BUILDER}" in own["actions"], own["actions"]
    assert "as-is+dynamic+mask-eager" in rows, list(rows)  # the edit of the program's call, twinned
    plan = yaml.safe_load((tmp_path / "out" / "plan.yaml").read_text())
    plan["actions"] = [{"action": "disable", "target": BUILDER}]
    plan["site"] = "harness.py::build_model"
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(plan))
    tree = tmp_path / "tree"
    shutil.copytree(src, tree)
    assert main(["rewrite", "--plan", str(tmp_path / "own.yaml"), str(tree), "--apply", "--no-validate"]) == 0
    assert (tree / "harness.py").read_text().count("torch.compile(model, backend=\"aot_eager\")") == 1  # kept as written
    module = _rewritten_harness(tree, monkeypatch)
    model = module.model
    assert hasattr(model, "_orig_mod")  # still the program's compile
    traced, graphs = _traced(model._orig_mod, module.make_inputs())
    assert traced == [None, None] and graphs == 2, traced


@pytest.mark.slow
def test_a_fullgraph_program_gets_no_builder_kept_eager_and_says_why(tmp_path, old_rule):
    """``fullgraph=True``: the disable's graph break would be an error inside the program's compile."""
    src, _ = _harness(tmp_path, text=_compiles_itself('backend="aot_eager", fullgraph=True'))
    search = _diagnose(src, tmp_path / "out")
    names = [r["candidate"] for r in search["candidates"]]
    assert not any(n.endswith("+mask-eager") for n in names), names
    line = next(p for p in search["pruned"] if p.startswith("as-is+mask-eager: "))
    assert f"disable {BUILDER}: inside the program's own fullgraph=True compile" in line, line
