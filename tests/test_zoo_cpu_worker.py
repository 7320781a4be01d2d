"""The comparison worker of the zoo CPU tests (tests/zoo_cpu.py) on a two-layer toy: it finds a changed
output leaf, one held in an object's attribute included, and counts the graphs the rewritten model's
compile traced and its modules compiled in place; and benchmarks/zoo.py's smoke shapes are ones
diagnose accepts. Fast (no transformers): the zoo tests themselves are slow."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parent / "zoo_cpu.py"

HARNESS = textwrap.dedent('''\
    import torch


    class Held:  # stands in for a KV cache: tensors on an object's attributes
        def __init__(self, keys):
            self.keys = keys


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            h = self.a(x).relu()
            return {"logits": self.b(h) SCALE_OUT, "cache": [Held(h SCALE_HELD)]}


    def build_model():
        torch.manual_seed(0)
        return COMPILE(Net().eval())


    def make_inputs(batch: int = 2):
        return {"x": torch.randn(batch, 8, generator=torch.Generator().manual_seed(batch))}
''')


def _tree(path: Path, scale_out: str = "", scale_held: str = "", compile_: str = "") -> Path:
    path.mkdir()
    (path / "harness.py").write_text(HARNESS.replace("SCALE_OUT", scale_out).replace("SCALE_HELD", scale_held)
                                     .replace("COMPILE", compile_))
    return path


def _compare(orig: Path, new: Path) -> dict:
    proc = subprocess.run([sys.executable, str(WORKER), str(orig), str(new), json.dumps([{"batch": 2}, {"batch": 3}])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_same_model_compiled_matches_and_counts_its_graphs(tmp_path):
    res = _compare(_tree(tmp_path / "orig"), _tree(tmp_path / "new", compile_="torch.compile"))
    assert res["differ"] == [] and res["max_abs"] == 0.0
    assert res["orig_graphs"] == 0 and res["new_graphs"] > 0
    assert res["new_compiled"] == 0  # torch.compile(model) wraps the model: no module compiled in place
    assert res["float_leaves"] == 2 * 2  # the logits and the held tensor, at two shapes


def test_modules_compiled_in_place_are_counted(tmp_path):
    """``module.compile()`` (what a plan's site applies) on the model: one module counted for the
    rewritten model, none for the original."""
    res = _compare(_tree(tmp_path / "orig"), _tree(tmp_path / "new", compile_="(lambda m: (m.compile(), m)[1])"))
    assert res["differ"] == [] and (res["orig_compiled"], res["new_compiled"]) == (0, 1)
    assert res["new_graphs"] > 0


@pytest.mark.parametrize("scale_out, scale_held, leaf", [("* 1.001", "", "out.logits"), ("", "* 1.001", "out.cache.0.keys")])
def test_changed_math_is_named(tmp_path, scale_out, scale_held, leaf):
    res = _compare(_tree(tmp_path / "orig"), _tree(tmp_path / "new", scale_out=scale_out, scale_held=scale_held))
    assert [d.split(":")[1].strip() for d in res["differ"]] == [leaf, leaf]  # at both shapes


def test_smoke_shapes_are_distinct():
    """diagnose refuses a repeated shape (exit 2), so each family's --smoke shapes are distinct: ViT's
    two GPU batches (32, 16) both scale to 2 and are kept once; Whisper's decoder lengths 64 and 48
    scale to 8 and 6, not both to 2."""
    from zoo_cpu import zoo

    z = zoo()
    for name in z.FAMILIES:
        shapes = z.shapes_of(name, True)
        assert shapes and all(s not in shapes[:i] for i, s in enumerate(shapes)), (name, shapes)
    assert z.shapes_of("vit", True) == [{"batch": 2, "image": 32}]
    assert z.shapes_of("whisper", True) == [{"batch": 2, "dec": 8}, {"batch": 2, "dec": 6}]
    assert z.shapes_of("llama", True) == [{"batch": 2, "seq": 8}, {"batch": 2, "seq": 6}]


def test_gpu_shapes_are_distinct():
    """The same rule on the H200's shapes: DiT's two shapes were both 8x32, so its diagnose would
    have exited 2 before measuring anything; its second is now 8x24 (DiT's patch embedding
    recomputes the sin-cos position table for another latent size)."""
    from zoo_cpu import zoo

    z = zoo()
    for name in z.FAMILIES:
        shapes = z.shapes_of(name, False)
        assert len(shapes) == 2 and shapes[0] != shapes[1], (name, shapes)
    assert z.shapes_of("dit", False) == [{"batch": 8, "latent": 32}, {"batch": 8, "latent": 24}]


def test_the_zoo_says_where_diagnoses_seconds_went(tmp_path):
    """zoo.json's ``where_the_seconds_went``: diagnose's own seconds (its process's interpreter
    and imports are the rest of ``ladder_search_s``), each rung's, the search's clock and the
    reference's child phases, from report.json; empty without one, and the diagnose-only row of
    the markdown table says the seconds and the plan's actions."""
    from zoo_cpu import zoo

    z = zoo()
    report = {"seconds": 180.54, "rungs": [
        {"name": "memory", "seconds": 3.1},
        {"name": "search", "seconds": 106.7, "measurement": {
            "clock": {"timing_s": 14.0}, "notes": ["cold phases ran 2 at a time: ...", "other"],
            "candidates": [{"candidate": "as-is", "phases_s": {"import_torch": 0.0, "build": 3.88}}]}}]}
    (tmp_path / "report.json").write_text(json.dumps(report))
    got = z.seconds_breakdown(tmp_path / "report.json")
    assert got == {"diagnose_s": 180.54, "rungs_s": {"memory": 3.1, "search": 106.7}, "search_clock_s": {"timing_s": 14.0},
                   "as_is_phases_s": {"import_torch": 0.0, "build": 3.88}, "notes": ["cold phases ran 2 at a time: ..."],
                   "search_ms": {"chosen": None}}
    assert z.seconds_breakdown(tmp_path / "missing.json") == {}
    # the search's own figures of the candidates it timed, beside the zoo's process of the plan
    # (Mixtral, part 12: nested+whole 6.91 / 6.06 ms in the search's two processes at 8x512)
    timed = {"candidate": "nested+whole", "step_ms": 5.9566, "process_ms_per_shape": {"8x512": [6.9129, 6.0643]},
             "contended_ms_per_shape": {"8x512": 14.9691}}
    figures = z.search_figures({"chosen": "nested+whole", "candidates": [timed, {"candidate": "per-block", "step_ms": None}]})
    assert figures == {"chosen": "nested+whole", "nested+whole": {"step_ms": 5.9566, "process_ms_per_shape": {"8x512": [6.9129, 6.0643]},
                                                                  "contended_ms_per_shape": {"8x512": 14.9691}}}
    windows = dict(timed, contended_windows_ms_per_shape={"8x512": [13.9, 16.1]})
    assert z.search_figures({"chosen": "nested+whole", "candidates": [windows]})["nested+whole"][
        "contended_windows_ms_per_shape"] == {"8x512": [13.9, 16.1]}
    row = {"variant": "diagnose", "diagnose_exit": 0, "apply_exit": 0, "ladder_search_s": 187.5,
           "actions": [{"action": "compile", "target": "m:T5", "strategy": "whole"}]}
    table = z.markdown({"t5": {"variants": {"diagnose": row}, "verdicts": z.verdicts({"diagnose": row})}})
    assert "| t5 | diagnose | | | | | | exit 0, apply exit 0, actions: compile m:T5 whole, ladder+search 188 s |" in table
    # the 3-minute bar in the verdicts: missed at 187.5 s, met at 150 s, and not met by a diagnose killed at its timeout
    plan = {"diagnose_exit": 0, "ladder_search_s": 187.5}
    assert z.verdicts({"diagnose": row}, plan)["ladder_search_within_3_min"] is False
    assert z.verdicts({"diagnose": row}, {**plan, "ladder_search_s": 150.0})["ladder_search_within_3_min"] is True
    assert z.verdicts({"diagnose": row}, {"diagnose_exit": 124, "ladder_search_s": 150.0})["ladder_search_within_3_min"] is False
