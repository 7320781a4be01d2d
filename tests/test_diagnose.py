"""``stackpart diagnose`` end to end on CPU: outputs, the harness forms, bad input, classification."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rewriter.cli import main
from rewriter.diagnose.classify import classify_cpu_op, classify_kernel
from rewriter.plan import load_plan
from rewriter.rewrite.transform import plan_rewrite
from tiny_programs import NET_HARNESS

WORKLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_whole_ladder_writes_plan_report_json_charts_and_trace(tmp_path, capsys):
    src = tmp_path / "src"
    shutil.copytree(WORKLOADS / "graph_break", src)
    out = tmp_path / "out"
    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"), "--device", "cpu",
               "--shape", "batch=8,seq=16", "--shape", "batch=8,seq=12", "--runs", "1000000", "--restarts", "4"])
    assert rc == 0
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    assert report["version"] == 1 and report["complete"] is True and report["error"] is None
    names = [r["name"] for r in report["rungs"]]
    assert names == ["batch_scaling", "memory", "device_time", "op_mix", "top_ops", "gaps", "graph_breaks", "recompiles",
                     "instance_recompiles", "granularity", "search"]
    by = {r["name"]: r for r in report["rungs"]}
    assert by["memory"]["verdict"] == "skipped: no CUDA"
    assert by["device_time"]["measurement"]["self_device_ms"] == "skipped: no CUDA"
    assert all(r["status"] in ("ok", "skipped") for r in report["rungs"]), [r["reason"] for r in report["rungs"]]
    assert all(r["threshold"] for r in report["rungs"] if r["status"] == "ok")
    md = (out / "stackpart-diagnose" / "report.md").read_text()
    assert "| rung | status | measurement | threshold (source) | verdict | implies | s |" in md
    assert "![op_mix.png](op_mix.png)" in md and (out / "stackpart-diagnose" / "op_mix.png").stat().st_size > 0
    assert (out / "stackpart-diagnose" / "blocks.png").is_file()
    assert "model.py:10" in md  # the graph break, located (the `if x.mean() > 0` line)
    trace = json.loads((out / "stackpart-diagnose" / "trace.json").read_text())
    assert trace["traceEvents"]
    loaded = load_plan(out / "plan.yaml")
    assert loaded.plan.amortization.restarts == 4
    assert loaded.plan.harness.shapes == [{"batch": 8, "seq": 16}, {"batch": 8, "seq": 12}]
    assert all(a.why for a in loaded.plan.actions)
    assert ("disable", "model.py::route") in {(a.action, a.target) for a in loaded.plan.actions}
    assert plan_rewrite(loaded, src).changes
    # stdout stays clean (the summary goes to stderr)
    assert capsys.readouterr().out == ""


def test_harness_from_an_existing_plan_with_flag_overrides(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(WORKLOADS / "launch_bound", src)
    rc = main(["diagnose", "--harness", str(src / "plan.yaml"), str(src), "-o", str(tmp_path / "plan.yaml"), "--shape", "batch=3",
               "--no-search"])  # the harness section is what is tested: the search adds nothing to it
    assert rc == 0
    plan = load_plan(tmp_path / "plan.yaml").plan
    assert plan.harness.file == "harness.py" and plan.harness.shapes == [{"batch": 3}]
    assert plan.harness.device == "cpu"


def write_harness(src: Path, body: str) -> None:
    src.mkdir(parents=True, exist_ok=True)
    (src / "model.py").write_text(body)
    (src / "harness.py").write_text(NET_HARNESS)


def diagnose_bad(tmp_path, body: str, *extra: str) -> tuple[int, str, Path]:
    src = tmp_path / "src"
    write_harness(src, body)
    out = tmp_path / "out"
    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"), "--device", "cpu", "--shape", "batch=2", *extra])
    return rc, out


#: The caching allocator's OOM message (torch 2.x wording), with the fragmentation workload's
#: numbers (benchmarks/alloc_sim_fragmentation.py at a 2 GiB cap).
OOM = (
    "CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total capacity of 139.72 GiB of which "
    "137.10 GiB is free. Including non-PyTorch memory, this process has 2.52 GiB memory in use. Of the "
    "allocated memory 1.23 GiB is allocated by PyTorch, and {free} is reserved by PyTorch but unallocated. "
    "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation."
)

NET = """\
import time
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
{body}
"""


@pytest.mark.parametrize(
    "forward, expected",
    [
        ("        raise ValueError('boom')", "rung batch_scaling: harness build_model() model forward at {'batch': 2}: raised ValueError: boom (model.py:11)"),
        ("        return 'not a tensor'", "rung batch_scaling: harness build_model() model forward: returned str with no tensors"),
        ("        raise torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')", "rung batch_scaling: harness build_model() model forward at {'batch': 2}: ran out of memory: asked for 2048 MiB (the message gives no reserved-but-unallocated figure) (model.py:11)"),
        ("        raise torch.cuda.OutOfMemoryError(" + repr(OOM.format(free="43.59 MiB")) + ")", "ran out of memory: asked for 448 MiB with 44 MiB reserved but unallocated (< the request), 1260 MiB allocated: a capacity OOM (model.py:11)"),
        ("        while True:\n            time.sleep(0.05)", "rung batch_scaling: harness build_model() model forward at {'batch': 2}: did not finish within 1 s (timeout; hung?)"),
    ],
    ids=["raises", "non-tensor", "oom", "capacity-oom", "hangs"],
)
def test_bad_harness_names_the_rung_and_callable_and_keeps_partial_json(tmp_path, capsys, forward, expected):
    rc, out = diagnose_bad(tmp_path, NET.format(body=forward), "--timeout", "1")
    assert rc == 2
    err = " ".join(capsys.readouterr().err.split())  # the terminal wraps long lines
    said, placed, _ = expected.partition(" (model.py:11)")
    assert said in err
    if placed:  # the error line says the place once, first (error: model.py:11: ...), not again at the end
        assert "error: model.py:11: diagnose stopped at rung batch_scaling: " in err and f"{said}; partial" in err
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    assert report["complete"] is False and expected in report["error"]
    assert not (out / "plan.yaml").exists()


def test_a_fragmentation_oom_plans_the_allocator_and_says_the_ladder_stopped(tmp_path, capsys):
    """An OOM whose reserved-but-unallocated memory covers the request is fragmentation: the plan
    gets the allocator action at --entry (exit 1: written, but the ladder stopped), the memory
    rung says why with the message's numbers, and the rungs after the stop are marked not run."""
    body = "        raise torch.cuda.OutOfMemoryError(" + repr(OOM.format(free="597.33 MiB")) + ")"
    src = tmp_path / "src"
    write_harness(src, NET.format(body=body))
    (src / "train.py").write_text("def main():\n    pass\n")
    rc, out = diagnose_bad(tmp_path, NET.format(body=body), "--entry", "train.py::main")
    assert rc == 1
    plan = load_plan(out / "plan.yaml").plan
    [action] = plan.actions
    assert action.action == "allocator" and action.target == "train.py::main"
    assert "448 MiB with 597 MiB reserved but unallocated" in action.why and "steady state" not in action.why
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    assert report["complete"] is False and "diagnose stopped at rung batch_scaling" in report["error"]
    rungs = {r["name"]: r for r in report["rungs"]}
    assert rungs["batch_scaling"]["status"] == "error"
    assert rungs["memory"]["verdict"].startswith("fragmenting: out of memory in rung batch_scaling")
    assert rungs["memory"]["measurement"]["reserved_unallocated_mib"] == 597.3
    assert rungs["granularity"]["status"] == "skipped" and "stopped at rung batch_scaling" in rungs["granularity"]["reason"]
    assert list(rungs) == [r for r in rungs if r]  # one entry per rung
    assert "run diagnose again" in (out / "stackpart-diagnose" / "report.md").read_text()
    assert "no compile planned: the ladder stopped at rung batch_scaling" in " ".join(report["notes"])
    assert not any("amortization not given" in n for n in report["notes"])  # nothing was amortized


def test_a_fragmentation_oom_in_a_compile_rung_is_the_memory_verdict_and_the_ladder_goes_on(tmp_path, monkeypatch):
    """A compiled variant that runs out of memory with the free memory stranded is evidence too:
    the compile rung records its error, the ladder goes on (exit 0), and the memory verdict and
    the allocator action come from that OOM."""
    from dataclasses import replace

    from rewriter.diagnose.rungs import recompiles
    from rewriter.diagnose.session import HarnessFailure
    from rewriter.diagnose.oom import classify

    def oom_under_compile(ctx):
        raise HarnessFailure("recompiles", "build_model() model forward", "ran out of memory", oom=classify(OOM.format(free="597.33 MiB")))

    monkeypatch.setattr(recompiles, "RUNG", replace(recompiles.RUNG, run=oom_under_compile))
    src = tmp_path / "src"
    write_harness(src, NET.format(body="        return self.fc(x)"))
    (src / "train.py").write_text("def main():\n    pass\n")
    rc, out = diagnose_bad(tmp_path, NET.format(body="        return self.fc(x)"), "--entry", "train.py::main")
    assert rc == 0
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    rungs = {r["name"]: r for r in report["rungs"]}
    assert rungs["recompiles"]["status"] == "error" and rungs["search"]["status"] == "ok"
    assert rungs["memory"]["verdict"].startswith("fragmenting: out of memory in rung recompiles")
    assert report["complete"] is True
    assert ("allocator", "train.py::main") in {(a.action, a.target) for a in load_plan(out / "plan.yaml").plan.actions}


def test_failure_under_the_profiler_keeps_the_rungs_before_it(tmp_path, capsys):
    forward = "        if torch.autograd.profiler._is_profiler_enabled:\n            raise RuntimeError('no profiling here')\n        return self.fc(x)"
    rc, out = diagnose_bad(tmp_path, NET.format(body=forward))
    assert rc == 2
    assert "rung profile: harness build_model() model forward: raised RuntimeError: no profiling here" in capsys.readouterr().err
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    [first] = report["rungs"][:1]
    assert first["name"] == "batch_scaling" and first["status"] == "ok" and first["measurement"]["step_ms"]


def test_inputs_without_tensors_is_an_error_naming_the_inputs_callable(tmp_path, capsys):
    src = tmp_path / "src"
    write_harness(src, NET.format(body="        return self.fc(x)"))
    (src / "harness.py").write_text((src / "harness.py").read_text().replace("return (torch.randn(batch, 8),)", "return (batch, 'x')"))
    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(tmp_path / "plan.yaml"), "--device", "cpu", "--shape", "batch=2"])
    assert rc == 2
    assert "rung setup: harness make_inputs(batch=2): returned no tensors" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--harness", "nope.py"], "nope.py: harness file not found under SRC"),
        (["--harness", "harness.py", "--model", "build_modle"], "--model: harness.py defines no callable 'build_modle' (did you mean 'build_model'?)"),
        (["--harness", "harness.py", "--shape", "btch=2"], "--shape #1 (harness.shapes[0]): make_inputs() has no parameter 'btch' (did you mean 'batch'?)"),
        (["--harness", "harness.py", "--shape", "batch:2"], "Invalid value for '--shape': 'batch:2': 'batch:2' has no '=size'; expected name=int,..."),
    ],
    ids=["missing-file", "bad-callable", "bad-shape-key", "bad-shape-syntax"],
)
def test_bad_harness_spec_exits_2_and_writes_nothing(tmp_path, capsys, args, expected):
    src = tmp_path / "src"
    write_harness(src, NET.format(body="        return self.fc(x)"))
    rc = main(["diagnose", *args, str(src), "-o", str(tmp_path / "plan.yaml"), "--device", "cpu"])
    assert rc == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "plan.yaml").exists() and not (tmp_path / "stackpart-diagnose").exists()


def test_a_bad_harness_field_from_a_plan_is_named_as_the_plans_field_not_a_flag(tmp_path, capsys):
    """The flag is named only where the user typed it: a plan's ``harness:`` section keeps the
    field's name, with the plan's file."""
    src = tmp_path / "src"
    write_harness(src, NET.format(body="        return self.fc(x)"))
    plan = tmp_path / "given.yaml"
    plan.write_text("version: 1\nharness:\n  file: harness.py\n  model: build_modle\n  shapes:\n    - {batch: 2}\nactions: []\n")
    rc = main(["diagnose", "--harness", str(plan), str(src), "-o", str(tmp_path / "plan.yaml"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and "harness.model: harness.py defines no callable 'build_modle'" in err and "--model" not in err, err


@pytest.mark.parametrize(
    "name, kind, parent, category",
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "kernel", None, "gemm"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "kernel", None, "gemm"),
        ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "kernel", "aten::mm", "gemm"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "kernel", None, "attention"),
        ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "kernel", None, "attention"),
        ("triton_poi_fused_add_mul_0", "kernel", "aten::mm", "elementwise"),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1", "kernel", None, "norm"),
        ("triton_per_fused_sum_2", "kernel", None, "reduction"),
        ("triton_tem_fused_mm_3", "kernel", None, "gemm"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "kernel", None, "communication"),
        ("Memcpy DtoH (Device -> Pinned)", "memcpy", None, "copy"),
        ("Memset (Device)", "memset", None, "copy"),
        ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>", "kernel", "aten::topk", "reduction"),
        ("void at::native::vectorized_layer_norm_kernel<float, float>", "kernel", "aten::native_layer_norm", "norm"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", "kernel", "aten::gelu", "elementwise"),
    ],
)
def test_kernels_classified_by_category_then_parent_op_then_name(name, kind, parent, category):
    assert classify_kernel(name, kind, parent) == category


@pytest.mark.parametrize(
    "op, category",
    [("aten::addmm", "gemm"), ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
     ("aten::native_layer_norm", "norm"), ("aten::gelu", "elementwise"), ("aten::mul_", "elementwise"),
     ("aten::topk", "reduction"), ("aten::copy_", "copy"), ("aten::foo_bar", "other")],
)
def test_cpu_ops_classified_by_aten_name(op, category):
    assert classify_cpu_op(op) == category


def test_guard_site_from_the_guard_comment_when_no_user_stack_is_printed():
    """Older torch prints only ``# code  # path:line in func`` after a guard, with the path cut
    from the left; the site is still found under SRC."""
    from rewriter.diagnose.dynamo_log import DynamoLog

    text = (
        "Recompiling function forward in /x/model.py:27\n"
        "    triggered by the following guard failure(s):\n"
        "    - 0/1: self.layer_idx == 0        # if self.layer_idx % 2 == 0:  "
        "# ures/workloads/instance_recompiles/model.py:22 in residual_scale (HINT: ...)"
    )
    site = DynamoLog().guard_site(WORKLOADS / "instance_recompiles", text)
    assert site == ("model.py", 22, "Block.residual_scale")


def test_two_plans_in_one_folder_keep_their_own_reports(tmp_path, capsys):
    """Newcomer pass: diagnose -o p6.yaml with a broken harness replaced report.json of the
    earlier plan.yaml run in the shared stackpart-diagnose/ and left its charts beside it."""
    src = tmp_path / "src"
    shutil.copytree(WORKLOADS / "launch_bound", src)
    flags = ["--device", "cpu", "--shape", "batch=2", "--steps", "1", "--no-search"]  # the report folders are tested
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(tmp_path / "plan.yaml"), *flags]) == 0
    good = (tmp_path / "stackpart-diagnose" / "report.json").read_bytes()
    broken = tmp_path / "src6"  # another tree: this process imported src's model module already
    shutil.copytree(src, broken)
    (broken / "model.py").write_text((src / "model.py").read_text().replace("def forward(self, x):", "def forward(self, x):\n        raise ValueError('boom')", 1))
    assert main(["diagnose", "--harness", "harness.py", str(broken), "-o", str(tmp_path / "p6.yaml"), *flags]) != 0
    assert (tmp_path / "stackpart-diagnose" / "report.json").read_bytes() == good
    failed = tmp_path / "stackpart-diagnose-p6"
    assert json.loads((failed / "report.json").read_text())["error"]
    assert not (failed / "op_mix.png").exists()  # only what this run wrote


def test_validate_report_folder_is_per_plan_name(tmp_path):
    from rewriter.validate.report import default_report_dir

    assert default_report_dir(tmp_path / "plan.yaml") == tmp_path / ".stackpart" / "validation"
    assert default_report_dir(tmp_path / "p6v.yaml") == tmp_path / ".stackpart" / "validation-p6v"


def test_recompile_records_go_to_the_report_not_the_terminal(capfd):
    """Newcomer pass: diagnose's terminal showed torch's own "V1129 ... [__recompiles]" lines."""
    import torch

    from rewriter.diagnose.dynamo_log import capture, reset

    reset()
    f = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
    with capture() as log:
        f(torch.ones(2))
        f(torch.ones(3))
    reset()
    assert len(log.recompiles) == 1
    assert "__recompiles" not in capfd.readouterr().err


def test_a_report_dir_of_the_users_keeps_their_files(tmp_path):
    """--report-dir . must not delete a user's own report.md or charts before the run."""
    from rewriter.diagnose.runner import _ours

    (tmp_path / "report.md").write_text("# my notes\n")
    (tmp_path / "report.json").write_text('{"mine": true}\n')
    assert not _ours(tmp_path)
    (tmp_path / "report.json").write_text('{"version": 1, "rungs": []}\n')
    assert _ours(tmp_path)


def test_a_harness_that_names_no_device_runs_on_the_cpu_without_a_gpu(tmp_path):
    """A harness that names no device runs where `diagnose --help` says, "cuda when available"
    (the CPU on a machine without CUDA), instead of stopping with "harness.device is cuda but
    torch sees no CUDA device"; a harness that names cuda keeps it."""
    import torch

    from rewriter.diagnose.runner import resolve_device
    from rewriter.plan import parse_plan

    unnamed = parse_plan("version: 1\nharness: {file: harness.py}\n").plan.harness
    named = parse_plan("version: 1\nharness: {file: harness.py, device: cuda}\n").plan.harness
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device(unnamed).device == expected
    assert resolve_device(named).device == "cuda"


def test_a_model_that_fails_at_a_scaled_batch_is_named_with_the_shape_it_ran(tmp_path, capsys):
    """A newcomer declared batch 64 and 96 and read the error's 128x100 as a bug of ours: the
    batch-scaling rung's own shapes are named as such."""
    body = "        if x.shape[0] > 2:\n            raise ValueError('batch too large')\n        return self.fc(x)"
    rc, out = diagnose_bad(tmp_path, NET.format(body=body))
    assert rc == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "model forward at {'batch': 4} (2x batch of the reference shape {'batch': 2}, batch scaling): raised ValueError: batch too large" in err


def test_a_harness_outside_src_says_what_to_do(tmp_path, capsys, monkeypatch):
    src = tmp_path / "src"
    write_harness(src, NET.format(body="        return self.fc(x)"))
    (tmp_path / "harness_outside.py").write_text((src / "harness.py").read_text())
    monkeypatch.chdir(tmp_path)  # the file exists where the user stands, not under SRC
    assert main(["diagnose", "--harness", "harness_outside.py", "src", "-o", str(tmp_path / "plan.yaml"), "--device", "cpu"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--harness must lie under SRC" in err and "(move it into" in err, err
    assert not (tmp_path / "plan.yaml").exists()
