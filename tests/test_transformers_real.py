"""The rewrite on real model source: the installed ``transformers`` package, copied to a temp dir.

Plans compile the decoder-layer class (Llama, GPT-2) and disable a helper it calls; the diff must
pass ``git apply --check``; then, in subprocesses (the copy first on ``sys.path``), tiny models
built from configs (no download) must give the original's outputs from the original's
state_dict (same keys), and Dynamo's own counters must show the compile is live (graphs
captured) and the disable is honoured (a graph break at the disabled function). The original
package, run the same way, captures no graph: the compile comes from the rewrite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from rewriter.cli import main  # noqa: E402

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("transformers_worker.py")
PACKAGE = Path(transformers.__file__).parent
LLAMA = "models/llama/modeling_llama.py"
GPT2 = "models/gpt2/modeling_gpt2.py"


def plan(path: Path, *actions: str) -> Path:
    path.write_text("version: 1\nactions:\n" + "".join(actions))
    return path


def compile_action(target: str, backend: str | None) -> str:
    opts = f"    options: {{backend: {backend}}}\n" if backend else ""
    return f"  - action: compile\n    target: {target}\n{opts}"


def disable_action(target: str) -> str:
    return f"  - action: disable\n    target: {target}\n"


def copy_package(tmp: Path) -> Path:
    site = tmp / "site"
    shutil.copytree(PACKAGE, site / "transformers", ignore=shutil.ignore_patterns("__pycache__"))
    return site


def rewrite(capsysbinary, plan_path: Path, src: Path, *flags: str) -> tuple[int, bytes, str]:
    capsysbinary.readouterr()
    code = main(["rewrite", "--plan", str(plan_path), str(src), *flags])
    out, err = capsysbinary.readouterr()
    return code, out, err.decode()


def worker(mode: str, ref: Path, models: str, site: Path | None, tmp: Path, *extra: str) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp / "inductor"), TRANSFORMERS_OFFLINE="1",
               HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    if site is not None:
        env["PYTHONPATH"] = str(site)
    proc = subprocess.run([sys.executable, str(WORKER), mode, str(ref), models, *extra], env=env,
                          cwd=tmp, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_rewrite(capsysbinary, plan_path: Path, src: Path, expect: list[str]) -> None:
    """Print the diff, check it with git apply --check from SRC, then apply it."""
    code, patch, err = rewrite(capsysbinary, plan_path, src)
    assert code == 0, err
    added = [line for line in patch.decode().splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert [line.strip("+ ") for line in added] == expect
    proc = subprocess.run(["git", "apply", "--check", "-v", "-"], input=patch, cwd=src, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    code, _, err = rewrite(capsysbinary, plan_path, src, "--apply", "--no-validate")
    assert code == 0, err
    assert rewrite(capsysbinary, plan_path, src, "--check")[:2] == (0, b"")


def assert_same_model(report: dict, name: str, tol: float) -> None:
    r = report[name]
    assert r["keys_equal"], f"{name}: state_dict keys changed"
    assert r["max_abs_diff"] <= tol, f"{name}: outputs differ by {r['max_abs_diff']}"
    assert r["stats"].get("unique_graphs", 0) >= 1, f"{name}: no graph captured: {r}"


def test_llama_and_gpt2_decoder_layers(tmp_path, capsysbinary):
    site = copy_package(tmp_path)
    src = site / "transformers"
    check_rewrite(
        capsysbinary,
        plan(tmp_path / "llama.yaml",
             compile_action(f"{LLAMA}::LlamaDecoderLayer", "eager"),
             disable_action(f"{LLAMA}::apply_rotary_pos_emb")),
        src,
        # Innermost, under transformers' own decorators (use_kernel_forward_from_hub,
        # deprecate_kwarg), which keep wrapping the function eagerly.
        ["@torch.compiler.disable", '@torch.compile(backend="eager")'],
    )
    check_rewrite(
        capsysbinary,
        plan(tmp_path / "gpt2.yaml",
             compile_action(f"{GPT2}::GPT2Block", "eager"),
             disable_action(f"{GPT2}::eager_attention_forward")),
        src,
        ["@torch.compiler.disable", '@torch.compile(backend="eager")'],
    )
    ref = tmp_path / "ref.pt"
    original = worker("save", ref, "llama,gpt2", None, tmp_path)
    assert Path(original["transformers"]).parent == PACKAGE
    assert all(original[m]["stats"].get("unique_graphs", 0) == 0 for m in ("llama", "gpt2"))

    report = worker("check", ref, "llama,gpt2", site, tmp_path)
    assert Path(report["transformers"]).parent == src, "the rewritten copy was not the one imported"
    for name, disabled in (("llama", "apply_rotary_pos_emb"), ("gpt2", "eager_attention_forward")):
        assert_same_model(report, name, tol=1e-5)
        breaks = " ".join(report[name]["graph_break"])
        assert "torch.compiler.disable" in breaks and disabled in breaks, breaks


def test_gpt2_block_under_inductor(tmp_path, capsysbinary):
    """One tiny model through Inductor (the default backend: no options written)."""
    site = copy_package(tmp_path)
    check_rewrite(capsysbinary, plan(tmp_path / "p.yaml", compile_action(f"{GPT2}::GPT2Block", None)),
                  site / "transformers", ["@torch.compile"])
    ref = tmp_path / "ref.pt"
    worker("save", ref, "gpt2", None, tmp_path, "--tiny")
    report = worker("check", ref, "gpt2", site, tmp_path, "--tiny")
    assert_same_model(report, "gpt2", tol=1e-4)
    assert any((tmp_path / "inductor").rglob("*.py")), "Inductor wrote no generated code"


def test_many_model_files_rewrite_and_stay_idempotent(tmp_path, capsysbinary):
    """A sample of real modeling files (every 25th): compile every class that defines its own
    forward (up to 4, none of them holding another) and disable up to 2 module-level functions. Each rewritten file is valid
    Python that gained exactly one decorator per action, and the plan then asks for nothing."""
    import libcst as cst

    from rewriter.rewrite.enclosing import Enclosing
    from rewriter.targets import collect_definitions

    site = copy_package(tmp_path)
    src = site / "transformers"
    files = sorted(src.glob("models/*/modeling_*.py"))[::25]
    assert len(files) >= 15
    reading = Enclosing(src, 5000)  # the decorators the loop writes change no file's constructions
    for path in files:
        rel = path.relative_to(src).as_posix()
        before = path.read_text(encoding="utf-8")
        defs = collect_definitions(cst.parse_module(before), before)
        holds: dict[str, set[tuple[str, str]]] = {}
        once = sorted(q for q, d in defs.items() if len(d) == 1)  # sorted: the same plan in every process
        classes = [q for q in once if defs[q][0].kind == "class" and q + ".forward" in once]
        funcs = [q for q in once if defs[q][0].kind == "function" and "." not in q
                 and not defs[q][0].decorators]
        chosen: list[str] = []  # no compile inside another: the inner one would be refused (enclosed_compiles)
        for c in classes:
            if len(chosen) == 4:
                break
            held = set(reading.holds((rel, c)))
            if not held & {(rel, o) for o in chosen} and not any((rel, c) in holds[o] for o in chosen):
                chosen.append(c)
                holds[c] = held
        actions = [compile_action(f"{rel}::{c}", "eager") for c in chosen]
        actions += [disable_action(f"{rel}::{f}") for f in funcs[:2]]
        if not actions:
            continue
        plan_path = plan(tmp_path / "p.yaml", *actions)
        code, _, err = rewrite(capsysbinary, plan_path, src, "--apply", "--no-validate")
        assert code == 0, (rel, err)
        after = path.read_text(encoding="utf-8")
        compile(after, rel, "exec")
        added = [line.strip() for line in after.splitlines() if line not in before.splitlines()]
        assert len(added) == len(actions), (rel, added)
        assert all(a.startswith(("@torch.compile(", "@torch.compiler.disable")) for a in added), added
        assert rewrite(capsysbinary, plan_path, src, "--check")[:2] == (0, b""), rel
