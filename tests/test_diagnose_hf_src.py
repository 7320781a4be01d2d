"""diagnose on an HF model whose decoder layer lies under SRC: SRC holds the harness and a
symlink-farm copy of the installed transformers (benchmarks/diagnose_hf.py::build_src) with
models/llama/ really copied, so the plan can target transformers' own LlamaDecoderLayer and
``stackpart rewrite`` diffs the copied modeling file and nothing else."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rewriter.cli import main

ROOT = Path(__file__).resolve().parents[1]
MODELING = "transformers/models/llama/modeling_llama.py"
BLOCK = f"{MODELING}::LlamaDecoderLayer"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")


def bench():
    """benchmarks/diagnose_hf.py as a module (the SRC builder and the harness live there)."""
    spec = importlib.util.spec_from_file_location("diagnose_hf_bench", ROOT / "benchmarks" / "diagnose_hf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_plan_targets_the_copied_decoder_layer_and_rewrite_touches_only_that_file(tmp_path, capsys):
    b = bench()
    src = b.build_src(tmp_path / "src", "llama", smoke=True, device="cpu")
    assert (src / "transformers" / "utils").is_symlink() and not (src / MODELING).is_symlink()
    out = tmp_path / "out"
    # a fresh interpreter, as a user runs it: the copy under SRC must win over the installed one
    env = dict(b.child_env(True, tmp_path), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", b.CLI, "diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"),
         "--device", "cpu", "--shape", "batch=2,seq=16", "--shape", "batch=2,seq=12", "--steps", "2",
         "--runs", "1000000", "--restarts", "30"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = (out / "stackpart-diagnose" / "diagnose.log").read_text()  # the harness's stderr, kept off the terminal
    assert "harness-info: " not in proc.stderr
    info = [json.loads(line.split(": ", 1)[1]) for line in printed.splitlines() if line.startswith("harness-info: ")]
    assert info and info[0]["modeling_file"] == MODELING  # the model class came from the copy

    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    by = {r["name"]: r for r in report["rungs"]}
    assert not {n: r["reason"] for n, r in by.items() if r["status"] == "error"}  # symlinks broke no rung
    assert by["granularity"]["measurement"]["target"] == BLOCK
    assert by["recompiles"]["measurement"]["recompiles"] >= 1  # seq 16 -> 12: shapes are not stable

    actions = (yaml.safe_load((out / "plan.yaml").read_text()) or {}).get("actions") or []
    assert all(a["target"].startswith(f"{MODELING}::") for a in actions), actions
    compiles = [a for a in actions if a["action"] == "compile"]
    opmix = by["op_mix"]["measurement"]
    launch = by["batch_scaling"]["measurement"]["fixed_share"] >= 0.15
    if opmix["gemm_share"] >= 0.80 and not launch:  # the planner's GEMM-dominated rule: no compile
        assert not compiles and any("GEMM-dominated" in n for n in report["notes"])
    else:  # shapes vary, so per-block compile of transformers' own decoder layer
        assert [(a["target"], a.get("strategy", "region")) for a in compiles] == [(BLOCK, "region")]

    capsys.readouterr()
    assert main(["rewrite", "--plan", str(out / "plan.yaml"), str(src)]) == 0
    diff = capsys.readouterr().out
    touched = sorted({line[6:] for line in diff.splitlines() if line.startswith("+++ b/")})
    assert touched == ([MODELING] if actions else [])
    if compiles:
        assert "+    @torch.compile" in diff
        # the diff applies to the tree it was made from
        check = subprocess.run(["git", "apply", "--check", "-"], cwd=src, input=diff, capture_output=True, text=True)
        assert check.returncode == 0, check.stderr

    # the applied plan runs: both lengths through the compiled layer, no ConstraintViolationError
    # (a mark on hidden_states alone, with cos/sin passed as position_embeddings, raised one)
    assert main(["rewrite", "--plan", str(out / "plan.yaml"), str(src), "--apply", "--no-validate"]) == 0
    run = subprocess.run([sys.executable, "-c", RUN_REWRITTEN, str(src)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["16", "12"]


# torch.compile's default backend is Inductor (~20 s a compile on CPU); the eager backend runs
# the same Dynamo capture, guards and recompiles
RUN_REWRITTEN = """
import sys, torch
compile_ = torch.compile
torch.compile = lambda *a, **k: compile_(*a, **{**k, "backend": "eager"})
sys.path.insert(0, sys.argv[1])
import harness
model = harness.build_model().eval()
with torch.no_grad():
    for seq in (16, 12):
        inputs = harness.make_inputs(batch=2, seq=seq)
        out = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
        print(seq)
"""


def test_guard_site_from_dynamo_guard_comment_skips_symlinks_out_of_src(tmp_path):
    """Dynamo's guard comment (``# code  # path:line in func``, older torch prints no user stack)
    is matched against SRC's files; a symlink farm's entries that point outside SRC are no
    target and must not stop the search (they raised ValueError before)."""
    from rewriter.diagnose.dynamo_log import DynamoLog

    src = bench().build_src(tmp_path / "src", "llama", smoke=True, device="cpu")
    lines = (src / MODELING).read_text().splitlines()
    start = next(i for i, t in enumerate(lines) if t.startswith("class LlamaDecoderLayer"))
    line = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("def forward")) + 2  # 1-based, inside
    text = (
        "Recompiling function forward in /elsewhere/modeling_llama.py:1\n"
        "    triggered by the following guard failure(s):\n"
        "    - 0/0: tensor 'hidden_states' size mismatch at index 1. expected 16, actual 12"
        f"  # hidden_states  # models/llama/modeling_llama.py:{line} in forward"
    )
    assert DynamoLog().guard_site(src, text) == (MODELING, line, "LlamaDecoderLayer.forward")
