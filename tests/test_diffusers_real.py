"""diffusers' ``_repeated_blocks`` on the installed package: a tiny
``FluxTransformer2DModel`` built from a config (no download), used the way a user has it.

Flux declares ``_repeated_blocks = ["FluxTransformerBlock", "FluxSingleTransformerBlock"]``.
With one ``FluxTransformerBlock`` (stackpart's own detection needs two instances of a class) the
finder alone would compile only the single-stream blocks; the declaration makes both classes the
per-block targets, by import path, applied from the harness's model function (the site). The
rewrite touches only SRC, ``git apply`` takes it, and the rewritten program runs with the blocks
compiled (``module.compile()`` in place) and the original's outputs. The search measures that
candidate like any other (eager backend: failures measured, gains not).
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

diffusers = pytest.importorskip("diffusers")

from rewriter.cli import main  # noqa: E402
from rewriter.plan import load_plan  # noqa: E402

pytestmark = pytest.mark.slow

FLUX = "diffusers.models.transformers.transformer_flux"
TARGETS = [f"{FLUX}:FluxTransformerBlock", f"{FLUX}:FluxSingleTransformerBlock"]

HARNESS = textwrap.dedent("""\
    import torch
    from diffusers import FluxTransformer2DModel


    def build_model():
        torch.manual_seed(0)
        return FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=2,
                                      attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                      pooled_projection_dim=8, guidance_embeds=False, axes_dims_rope=(2, 2, 4)).eval()


    def make_inputs(batch: int = 1, tokens: int = 16):
        return {"hidden_states": torch.randn(batch, tokens, 4), "encoder_hidden_states": torch.randn(batch, 8, 16),
                "pooled_projections": torch.randn(batch, 8), "timestep": torch.ones(batch),
                "img_ids": torch.zeros(tokens, 3), "txt_ids": torch.zeros(8, 3)}
""")

RUN = textwrap.dedent("""\
    import json, sys
    import torch
    from rewriter.engine.build import force_backend
    force_backend("eager")
    sys.path.insert(0, sys.argv[1])
    import harness
    from torch._dynamo.utils import counters
    model = harness.build_model()
    torch.manual_seed(1)
    with torch.no_grad():
        out = model(**harness.make_inputs())
    torch.save(out.sample, sys.argv[2])
    compiled = {}
    for m in model.modules():
        if getattr(m, "_compiled_call_impl", None) is not None:
            compiled[type(m).__name__] = compiled.get(type(m).__name__, 0) + 1
    print(json.dumps({"graphs": counters["stats"]["unique_graphs"], "compiled": compiled,
                      "keys": sorted(model.state_dict())[:3]}))
""")


def _project(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(HARNESS)
    return src


def _run_both(before: Path, src: Path, tmp_path: Path) -> tuple[dict, dict]:
    """:data:`RUN` on the original tree, then on the rewritten one, one after the other in one
    process (tests/programs.py: each tree's modules imported afresh)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    results = run_programs([{"code": RUN, "cwd": before, "args": [before, tmp_path / "a.pt"]},
                            {"code": RUN, "cwd": src, "args": [src, tmp_path / "b.pt"]}], env=env)
    return last_json(results[0], "the original program"), last_json(results[1], "the rewritten program")


def _diagnose(src: Path, out: Path, only: set[str] | None) -> None:
    from rewriter.diagnose.runner import diagnose, harness_from_flags

    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 1, "tokens": 16}],
                                 mode=None, dtype=None, device="cpu")
    diagnose(spec, src, out / "plan.yaml", backend="eager", only=only)


def test_the_declared_repeated_blocks_are_planned_rewritten_and_run_compiled(tmp_path, capsysbinary):
    import torch

    from rewriter.diagnose.declared import read
    from rewriter.diagnose.rungs.granularity import find_blocks

    src = _project(tmp_path)
    sys.path.insert(0, str(src))
    try:
        import harness

        model = harness.build_model()
    finally:
        sys.path.remove(str(src))
        sys.modules.pop("harness", None)
    # stackpart's own detection alone: only the two single-stream blocks (one FluxTransformerBlock)
    found = [b["cls"].__name__ for b in find_blocks(model, src)]
    assert found[0] == "FluxSingleTransformerBlock" and "FluxTransformerBlock" not in found, found
    assert read(model).declarers == ["FluxTransformer2DModel._repeated_blocks"]

    # the rungs the per-block plan rests on (no batch scaling: on shared CPU cores its timing can
    # read this tiny model as launch-bound and make the rule prefer a whole compile)
    out = tmp_path / "out"
    _diagnose(src, out, {"graph_breaks", "recompiles", "granularity"})
    plan = load_plan(out / "plan.yaml").plan
    compiles = [a for a in plan.actions if a.action == "compile"]
    assert [a.target for a in compiles] == TARGETS and all(a.strategy == "region" for a in compiles), plan.actions
    assert all("declared: FluxTransformer2DModel._repeated_blocks lists" in a.why for a in compiles), [a.why for a in compiles]
    assert plan.site == "harness.py::build_model"
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    gran = next(r for r in report["rungs"] if r["name"] == "granularity")
    assert gran["measurement"]["declared"]["targets"] == TARGETS, gran

    # the diff: only files under SRC (the site's two lines and _stackpart/), and git apply takes it
    before = tmp_path / "before"
    shutil.copytree(src, before)
    capsysbinary.readouterr()
    assert main(["rewrite", "--plan", str(out / "plan.yaml"), str(src)]) == 0
    patch = capsysbinary.readouterr().out
    files = sorted({ln.split(" b/", 1)[1] for ln in patch.decode().splitlines() if ln.startswith("diff --git ")})
    assert files == ["_stackpart/__init__.py", "_stackpart/library.py", "harness.py"], files
    proc = subprocess.run(["git", "apply", "--check", "-v", "-"], input=patch, cwd=src, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert main(["rewrite", "--plan", str(out / "plan.yaml"), str(src), "--apply", "--no-validate"]) == 0
    assert main(["rewrite", "--plan", str(out / "plan.yaml"), str(src), "--check"]) == 0  # idempotent: nothing pending
    library = (src / "_stackpart" / "library.py").read_text()
    assert f"from {FLUX} import FluxTransformerBlock" in library and "FluxSingleTransformerBlock" in library

    # the rewritten program: every declared block compiled in place, the original's outputs
    original, rewritten = _run_both(before, src, tmp_path)
    assert original["graphs"] == 0 and original["compiled"] == {}
    assert rewritten["compiled"] == {"FluxTransformerBlock": 1, "FluxSingleTransformerBlock": 2}, rewritten
    assert rewritten["graphs"] >= 2, rewritten  # one graph per declared class at least: the compile is live
    assert rewritten["keys"] == original["keys"]  # in place: no _orig_mod. in the state_dict
    torch.testing.assert_close(torch.load(tmp_path / "b.pt"), torch.load(tmp_path / "a.pt"))


def test_the_search_measures_the_declared_blocks_as_one_candidate_among_others(tmp_path):
    """The full ladder and search: the per-block candidate compiles the declared classes and is
    measured by the engine (numerics against eager, diffusers' output object compared by its
    tensors), beside whole-model compile and the program as it is; the measurement decides."""
    src = _project(tmp_path)
    out = tmp_path / "out"
    _diagnose(src, out, None)
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    text = json.dumps(report)
    assert "Did not find a flatten_with_keys_fn" not in text
    plan = load_plan(out / "plan.yaml").plan
    # whichever wins, a written plan compiles something the model has, from the site
    assert all(a.target.startswith(FLUX) for a in plan.actions), plan.actions
    search = next(r for r in report["rungs"] if r["name"] == "search")["measurement"]
    cands = {c["candidate"]: c for c in search["candidates"]}
    assert "per-block" in cands and "as-is" in cands, list(cands)
    per_block = cands["per-block"]
    assert per_block["actions"] == [f"compile {t} (region)" for t in TARGETS], per_block
    # measured by the engine like every other candidate: compiled graphs, numerics against eager
    assert per_block["numerics"] == "ok" and per_block["graphs"] >= 2 and per_block["fallbacks"] == 0, per_block
    assert not per_block["status"].startswith("failed"), per_block
