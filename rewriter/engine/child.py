"""Inside one validation child process: ``python -m rewriter.engine.child JOB.json``.

``cold`` phase (one variant per process, empty compile caches): build the model from the
variant's tree, load the reference state_dict (the ``eager`` reference saves it, and the inputs
of every shape), compile as the variant asks, then per shape time the first call (cold compile),
record Dynamo's counters, compare outputs (training: also the loss, the gradients and the loss
after one SGD step) with the reference, and finally re-run every shape under
``torch.compiler.set_stance("fail_on_recompile")``. A job's ``stance`` is set for the whole process
(validate's eager reference: ``force_eager``, the original with its own compile calls off). The
eager measurements of the original (the blocks' share of the step, the high-precision run) run with
compilation off in every case. For a bf16/fp16 harness the eager reference
then runs the original once more in float64 (:func:`.reference.high_precision_reference`): the ``fp64_ref``
that :mod:`.compare` judges low-precision outputs against, at the cost of one extra forward per
shape in a process that is already up (and one more low-precision forward whose top-k/argmax
decisions, :mod:`.decisions`, are matched with the reference's). Where the original has no float64
or float32 path, its own rounding noise stands in (:func:`.reference.rounding_noise`, :mod:`.rounding`).

Then, when the parent asked for it (``cmd_fd``/``reply_fd`` in the job), the child stays up with
its warm model and times calls on request (:func:`serve`): the parent interleaves the variants
across their processes.

The result is written as JSON to ``job["out"]``. Exit codes: 0 done (findings are in the JSON),
2 harness or build error, 3 out of memory, 4 the model raised.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .build import build_variant
from .reference import block_share, high_precision_reference
from .steps import (REFERENCE_DONE, after_step, copied, cpu, harness_call, saved_inputs, step_fn, to_device,
                    wait_for_reference)


def exit_message(exc: SystemExit, job: dict[str, Any]) -> str:
    """What a child says when the user's code called ``sys.exit`` (a program's own ``argparse``
    ``parse_args()`` in ``build_model`` reads the child's command line and exits 2): the call and
    the deepest frame under one of the job's trees (``file:line``, relabelled to SRC by the
    parent), where there is one."""
    from ..tracebacks import user_site

    where = ""
    for root in [Path(p) for p in [job.get("tree"), *(job.get("trees") or {}).values()] if p]:
        rel, line, _ = user_site(exc, root)
        if rel is not None:
            where = f" at {root / rel}:{line}"
            break
    return (f"SystemExit: the program called sys.exit({exc.code!r}){where}; stackpart calls the harness without "
            "the program's command line (argparse's parse_args() exits on an unknown argument)")


class Stopped(Exception):
    """The parent asked this child to exit before its cold phase began."""


class Channel:
    """The private command/reply pipes to the parent (one JSON object per line)."""

    def __init__(self, cmd_fd: int, reply_fd: int) -> None:
        import os

        self.commands = os.fdopen(cmd_fd, "r")
        self.replies = os.fdopen(reply_fd, "w")

    def send(self, message: dict[str, Any]) -> None:
        self.replies.write(json.dumps(message) + "\n")
        self.replies.flush()

    def receive(self) -> dict[str, Any] | None:
        line = self.commands.readline()
        return json.loads(line) if line else None

    def await_go(self) -> None:
        """Say the model is built, then wait for the parent's ``go`` (it starts this child's
        imports and build while the previous variant compiles, and its measured cold phase only
        once that one is done). Raises :class:`Stopped` on anything else."""
        self.send({"built": True})
        message = self.receive()
        if not message or message.get("op") != "go":
            raise Stopped()


class ModelRaised(Exception):
    """The model (not the harness) raised during a run.

    ``str()`` is one line (:func:`_raised`); ``detail`` is the exception's whole message (the
    verdict's constraint hints read its violation lines)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


def _raised(exc: BaseException, shape: dict[str, Any], job: dict[str, Any], variant: str) -> str:
    """What a model that raised says: ``shape {..}: Type: first full line (<tree>/model.py:12)``
    (the user's line where torch points: :func:`rewriter.tracebacks.user_site`); one line."""
    from ..tracebacks import headline, user_site
    from .variants import TREE

    tree = Path(job["tree"]) if job.get("tree") else Path(job["trees"][TREE[variant]])
    path, line, note = user_site(exc, tree)
    # the tree's own path: the parent relabels it (validate: a/ original, b/ rewritten, whose
    # lines are the rewritten file's; the search: SRC's paths; engine.measure.relabel)
    where = f" ({tree / path}:{line}{', ' + note if note else ''})" if path else ""
    return f"shape {shape}: {headline(exc)}{where}"


def run_cold(job: dict[str, Any], channel: Channel | None = None) -> dict[str, Any]:
    """The cold phase for one variant (see the module docstring): build, then per shape the first
    calls under Dynamo's counters and the outputs recorded (the reference) or compared (every
    other variant), then what only the reference records and the ``fail_on_recompile`` pass.
    Returns the JSON payload (plus ``_phases``, the seconds of each step: build, weights, first
    calls, the reference's extras, the ``fail_on_recompile`` pass; and the warm model under ``_serve``).

    Raises:
        ModelRaised: the model raised at a shape.
        torch.cuda.OutOfMemoryError: as raised (the caller reports it).
    """
    import torch

    from .watch import CompileWatch

    model, result = _built(job, channel)
    calls = result["info"].pop("_compile_calls", None)  # the reference's: read with runtime_compiles
    if "state_dict_error" in result["info"]:
        return result
    spec = job["harness"]
    training = spec["mode"] == "training"
    if job.get("warm_shape") is not None:
        return _warm(job, model, result, training)
    reference_sd = {k: v.detach().clone() for k, v in model.state_dict().items()} if training else None
    phases = result["_phases"]
    with CompileWatch() as watch:
        t = time.perf_counter()
        waits = None
        for i in range(len(spec["shapes"])):
            if i == 1 and job.get("warmers"):
                # the shape warmers are waited for at most as long as this process's first shape
                # took to compile, all together (engine.warmers.WarmWaits)
                from .warmers import WarmWaits

                waits = WarmWaits(result["shapes"][0]["compile_s"])
            result["shapes"].append(_cold_shape(job, model, watch, i, reference_sd, waits))
        result["compile"] = watch.stats().to_json()
        phases["first_calls"], t = time.perf_counter() - t, time.perf_counter()
        if job.get("reference"):
            result["runtime_compiles"] = _runtime_reading(watch, model, job, calls)
            phases["runtime_reading"], t = time.perf_counter() - t, time.perf_counter()
        if job["variants"][0] == "eager" and not job.get("replica"):
            _eager_extras(job, model, result, training)
            phases["reference_extras"], t = time.perf_counter() - t, time.perf_counter()
        result["fail_on_recompile"] = _fail_on_recompile(job, model, training)
        phases["fail_on_recompile"] = time.perf_counter() - t
    if spec["device"].startswith("cuda"):
        result["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated()
    result["_serve"] = model
    return result


def _warm(job: dict[str, Any], model: Any, result: dict[str, Any], training: bool) -> dict[str, Any]:
    """A shape warmer's whole cold phase (:mod:`.warmers`): the first calls at shape
    ``job["warm_shape"]`` only, which compile it into its own cache folder (the variant's child
    copies it once this process has ended); no outputs compared
    (the variant's own call there is). The payload has no ``_serve``: the warmer then exits."""
    from .watch import CompileWatch

    import torch

    i = int(job["warm_shape"])
    inputs = saved_inputs(job, i, Path(job["ref"]))
    # the backend's first-compile costs (its worker pool, the device's compiler toolchain; in
    # training the backward's too) paid on a throwaway function first: a restart pays them once,
    # in its first shape's compile, so they are no part of this shape's seconds
    warm_up = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2, backend=job["backend"])
    y = warm_up(torch.ones(64, device=job["harness"]["device"], requires_grad=training))
    if training:
        y.sum().backward()
    with CompileWatch() as watch:
        t = time.perf_counter()
        entry, out = _first_call_entry(job, model, inputs, watch, i, training)
        del out
        result["shapes"].append(entry)
        result["compile"] = watch.stats().to_json()
        result["_phases"]["first_calls"] = time.perf_counter() - t
    return result


def _built(job: dict[str, Any], channel: Channel | None) -> tuple[Any, dict[str, Any]]:
    """The variant's model built (:func:`build_variant`) and the payload started: its build info and the
    seconds of the build and of loading the weights after ``go``."""
    variant = job["variants"][0]
    t_build = time.perf_counter()
    model, info = build_variant(job, variant, Path(job["ref"]), channel)
    go_at = info.pop("_go_at", t_build)
    waited = info.pop("_waited_for_weights", None)
    result: dict[str, Any] = {"variant": variant, "info": info, "shapes": []}
    result["_phases"] = {
        "build": go_at - t_build if channel else None,
        "load_weights_and_prepare": time.perf_counter() - go_at - (waited or 0.0),
    }
    if waited is not None:  # sent go before the reference saved (job wait_for_weights)
        result["_phases"]["waited_for_weights"] = waited
    return model, result


def _cold_shape(job: dict[str, Any], model: Any, watch: Any, i: int, reference_sd: dict[str, Any] | None,
                waits: Any = None) -> dict[str, Any]:
    """Shape ``i``'s entry: the first call (its compile) and the steady one, the graphs and
    recompiles it added, and (not for a replica) its outputs saved as the reference's or compared
    with them under ``compare``. Where a shape warmer compiles shape ``i`` (:mod:`.warmers`) it is
    waited for first, within ``waits`` (:class:`.warmers.WarmWaits`)."""
    inputs = saved_inputs(job, i, Path(job["ref"]))  # saved by the reference at go
    warmer = (job.get("warmers") or {}).get(str(i))
    if warmer is None:
        entry, out = _first_call_entry(job, model, inputs, watch, i, reference_sd is not None)
    else:  # run_cold made ``waits`` at shape 1, before any warmed shape
        from . import warmers

        warmed = waits.wait(warmer)
        cache = warmers.cache_counts()
        entry, out = _first_call_entry(job, model, inputs, watch, i, reference_sd is not None)
        after = warmers.cache_counts()
        warmers.credit(entry, warmed, after["hits"] - cache["hits"], after["compiled"] - cache["compiled"])
    if job.get("replica"):
        # a second timed process (engine.replicas.Replicas): its first process was
        # judged, so no outputs are recorded or compared here
        return entry
    record, generator, tokens = _outputs(job, model, inputs, out, reference_sd)
    del out
    if job.get("reference"):
        import torch

        torch.save(record, Path(job["ref"]) / f"outputs_{i}.pt")
    else:
        entry["compare"] = _compared(job, i, record, inputs, generator, tokens)
    return entry


def _first_call_entry(job: dict[str, Any], model: Any, inputs: Any, watch: Any, i: int,
                      training: bool) -> tuple[dict[str, Any], Any]:
    """Shape ``i``'s first calls (:func:`_first_calls`) as its entry: the first call's and the
    steady call's seconds, the compile (their difference) and the graphs and recompiles they added
    under ``watch``; and the first call's outputs."""
    before = watch.stats()
    first_s, steady_s, out = _first_calls(job, step_fn(model, inputs, training, harness_call(job)), i)
    after = watch.stats()
    return {
        "shape": job["harness"]["shapes"][i],
        "first_call_s": first_s,
        "steady_s": steady_s,
        "compile_s": max(0.0, first_s - steady_s),
        "new_graphs": after.unique_graphs - before.unique_graphs,
        "new_recompiles": after.recompiles - before.recompiles,
    }, out


def _first_calls(job: dict[str, Any], fn: Any, i: int) -> tuple[float, float, Any]:
    """The first call's wall seconds (the compile this shape costs), the faster of two steady
    calls', and the first call's outputs (a copy: under CUDA graphs, ``mode="reduce-overhead"``,
    the next replay overwrites the static output buffers: "accessing tensor output of CUDAGraphs
    that has been overwritten by a subsequent run").

    Raises:
        ModelRaised: the model raised (an out-of-memory error is re-raised as it is).
    """
    import torch

    from .timing import wall_call

    spec = job["harness"]
    device = spec["device"]
    torch.manual_seed(job["seed"])
    try:
        first_s, out = wall_call(fn, device)
        out = copied(out)
        steady = []
        for _ in range(2):
            torch.manual_seed(job["seed"])
            steady.append(wall_call(fn, device)[0])
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as exc:
        raise ModelRaised(_raised(exc, spec["shapes"][i], job, job["variants"][0]), f"{type(exc).__name__}: {exc}") from exc
    return first_s, min(steady), out


def _outputs(job: dict[str, Any], model: Any, inputs: Any, out: Any,
             reference_sd: dict[str, Any] | None) -> tuple[dict[str, Any], Any, Any]:
    """What is compared of one call: its output (host copies), the reference's teacher-forced
    logits for generated tokens (:mod:`.generation`), and in training the loss, the gradients and
    the loss after one SGD step (recomputed from the reference weights). Returns the record, the
    model's generator (or None) and the generated tokens (or None)."""
    import torch

    from .generation import TEACHER_FORCED, generated_tokens, generator_of, teacher_forced_logits

    training = reference_sd is not None
    record: dict[str, Any] = {"output": cpu(out[0] if training else out)}
    tokens = None if training else generated_tokens(out)
    generator = generator_of(model) if tokens is not None else None
    if generator is not None and job.get("reference"):
        # the logits that chose the reference's tokens (engine.generation)
        record[TEACHER_FORCED] = cpu(teacher_forced_logits(generator, tokens))
    if training:
        record["loss"] = cpu(out[1])
        # the first call's gradients (fn zeroes them on entry; recompute for this record)
        model.load_state_dict(reference_sd)
        torch.manual_seed(job["seed"])
        step_fn(model, inputs, True, harness_call(job))()
        record.update(after_step(model, inputs, reference_sd, job["seed"], harness_call(job)))
    return record, generator, tokens


def _compared(job: dict[str, Any], i: int, record: dict[str, Any], inputs: Any, generator: Any, tokens: Any) -> dict[str, Any]:
    """Shape ``i``'s ``record`` compared with the reference's saved one, quantity by quantity
    (:func:`.compare.compare_trees`, against the high-precision run or eager's rounding noise
    where the reference saved one); generated tokens judged by the logits that chose them."""
    import torch

    from .compare import compare_trees
    from .generation import TEACHER_FORCED, generated_tokens, judge_tokens, teacher_forced_logits

    ref, spec = Path(job["ref"]), job["harness"]
    device = spec["device"]
    if i == 0:  # after the first (measured) call: the reference may still be running
        wait_for_reference(ref)
    # compared on the device: no float64 copies of large logits on the host
    # our own files (outputs may be ModelOutput objects); mmap: paged straight from
    # the page cache to the device, no host copy of every logits tensor first
    expected = torch.load(ref / f"outputs_{i}.pt", map_location=device, weights_only=False, mmap=True)
    hp_path = ref / f"high_precision_{i}.pt"
    hp = torch.load(hp_path, map_location=device, weights_only=False, mmap=True) if hp_path.exists() else {}
    hp_record, hp_dtype = hp.get("record", {}), hp.get("dtype")
    # no float64/float32 run: eager's own rounding noise stands in (.rounding)
    noise_run = hp.get("kind") == "noise"
    mine = {k: to_device(v, device) for k, v in record.items()}
    ref_tokens = generated_tokens(expected["output"]) if generator is not None and TEACHER_FORCED in expected else None
    if ref_tokens is not None:
        mine[TEACHER_FORCED] = teacher_forced_logits(generator, ref_tokens)
    compared = {
        k: compare_trees(mine[k], expected[k], None if noise_run else hp_record.get(k), hp_dtype, spec["dtype"],
                         noise=hp_record.get(k) if noise_run else None,
                         decisions=hp.get("decisions")).to_json()
        for k in expected if k in mine
    }
    if ref_tokens is not None:
        prompt = inputs.get("input_ids") if isinstance(inputs, dict) else None
        compared = judge_tokens(compared, tokens, ref_tokens,
                                prompt.shape[1] if hasattr(prompt, "shape") and prompt.dim() == 2 else None)
    del expected, mine, hp
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # the float64 comparison copies are not kept reserved
    return compared


def _runtime_reading(watch: Any, model: Any, job: dict[str, Any], calls: list[Any] | None = None) -> dict[str, Any]:
    """Which code compiled in the program as it is (:func:`runtime_compiles`), read only for the
    reference (the search's as-is row): a walk of sys.modules and the frame log in every other
    process would be work nobody reads. ``calls``: :attr:`.watch.CompileCalls.sites` of its build
    and cold phase. A report-only reading: its failure is recorded, never the variant's."""
    try:
        out = runtime_compiles(watch, model, job, job["variants"][0])
        if calls is not None:
            out["calls"] = [list(site) for site in calls]
        return out
    except Exception as exc:  # noqa: BLE001 - a report-only reading never fails the variant
        return {"frames": [], "modules": [], "src_imported": [], "error": f"{type(exc).__name__}: {str(exc)[:200]}"}


def _eager_extras(job: dict[str, Any], model: Any, result: dict[str, Any], training: bool) -> None:
    """The eager measurements of the original, with its own torch.compile calls off: the blocks'
    share of the step, and (the reference of a low-precision harness) the high-precision run; then
    the reference marks itself done for the variants waiting on it."""
    import torch

    from .compare import LOW_PRECISION

    ref = Path(job["ref"])
    phases = result.setdefault("_phases", {})
    with torch.compiler.set_stance("force_eager"):
        t = time.perf_counter()
        result["block_share"] = block_share(job, model, ref, training)
        phases["block_share"] = time.perf_counter() - t
        if job.get("reference") and job["harness"]["dtype"] in LOW_PRECISION:
            t = time.perf_counter()
            result["high_precision"] = high_precision_reference(job, model, ref, training)
            phases["high_precision"] = time.perf_counter() - t
    if job.get("reference"):
        (ref / REFERENCE_DONE).touch()


def _fail_on_recompile(job: dict[str, Any], model: Any, training: bool) -> dict[str, Any]:
    """Every shape once more under ``torch.compiler.set_stance("fail_on_recompile")`` (a compiled
    variant's first process only): ``{"supported"[, "ok"[, "error"]]}``."""
    import torch

    from .watch import fail_on_recompile_supported

    stance: dict[str, Any] = {"supported": fail_on_recompile_supported()}
    if not stance["supported"] or job["variants"][0] == "eager" or job.get("replica"):
        return stance
    stance["ok"] = True
    ref = Path(job["ref"])
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            for i in range(len(job["harness"]["shapes"])):
                step_fn(model, saved_inputs(job, i, ref), training, harness_call(job))()
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as exc:
        stance["ok"] = False
        stance["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
    return stance


def runtime_compiles(watch: Any, model: Any, job: dict[str, Any], variant: str) -> dict[str, Any]:
    """Which code compiled in the cold phase (the program's own compiles, seen at run
    time): ``frames`` (:meth:`.watch.FrameLog.frames`: the frames Dynamo compiled, with graphs,
    recompiles, fullgraph and the entry the program compiled), ``modules``
    (:func:`.watch.compiled_modules`: the model's compiled modules) and ``src_imported`` (the tree's
    files the harness imported, relative to the tree: a compile in a file not among them cannot
    have run); the reference adds ``calls`` (:class:`.watch.CompileCalls`: ``[path, line]`` of each
    ``torch.compile``/``module.compile()`` call the program made). Read from what the run left
    behind: no extra model run."""
    from .variants import TREE
    from .watch import compiled_modules

    tree = (Path(job["tree"]) if job.get("tree") else Path(job["trees"][TREE[variant]])).resolve()
    imported = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        try:
            imported.add(Path(file).resolve().relative_to(tree).as_posix())
        except (ValueError, OSError):
            continue
    harness = (tree / job["harness"]["file"]).resolve()  # imported by file location, not kept in sys.modules
    if harness.is_relative_to(tree):
        imported.add(harness.relative_to(tree).as_posix())
    out: dict[str, Any] = {"frames": [], "modules": [], "src_imported": []}
    try:
        out["frames"] = watch.frames(model)[:100]
        out["modules"] = compiled_modules(model)
    except Exception as exc:  # noqa: BLE001 - a reading that fails is reported, never fatal
        out["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    # a file whose code ran compiled was loaded, even when not kept in sys.modules (exec, runpy)
    for item in out["frames"] + out["modules"]:
        for file in (item.get("file"), (item.get("entry") or {}).get("file")):
            try:
                imported.add(Path(file).resolve().relative_to(tree).as_posix())
            except (TypeError, ValueError, OSError):
                continue
    out["src_imported"] = sorted(imported)
    return out


def serve(job: dict[str, Any], channel: Channel, model: Any) -> None:
    """After the cold phase, keep the warm model and time calls on the parent's request.

    Protocol (one JSON object per line; commands on fd ``job["cmd_fd"]``, replies on
    ``job["reply_fd"]``, so the model's own prints cannot corrupt it):
    ``{"op": "time", "shape": i, "warmup": w, "n": n, "burst_ms": b, "pin": cpu}`` ->
    ``{"samples": [seconds, ...], "calls": k, "pinned": cpu or None}``;
    ``{"op": "exit"}`` or EOF -> return. The parent sends one ``time`` per variant in turn, so
    the variants run interleaved on one device while each stays in its own process (no shared
    Dynamo caches, no re-compilation for timing). With ``burst_ms`` > 0 a sample is one
    :func:`.timing.time_burst` block (a lead-in call, then ``k`` back-to-back calls, ``k`` sized
    once per shape after the warm-up from one timed call so the block lasts ``burst_ms``); else
    one :func:`.timing.time_call`. ``pin`` (a CPU index, sent once) pins this process's main
    thread, the one that launches the kernels, to that core (``os.sched_setaffinity``; threads
    started afterwards inherit it): a pinned timing loop does not migrate between cores or share
    one with another process's, as ``taskset``/``numactl`` pinning does for a benchmark.
    """
    import os

    import torch

    from .host_state import Probe
    from .timing import burst_calls, time_burst, time_call

    ref = Path(job["ref"])
    # inert unless STACKPART_HOST_STATE is set
    probe = Probe((job.get("variants") or ["variant"])[0] + ("#2" if job.get("replica") else ""), on_sigterm=True)
    spec = job["harness"]
    device = spec["device"]
    training = spec["mode"] == "training"
    fns: dict[int, Any] = {}
    calls: dict[int, int] = {}
    pinned = None
    channel.send({"ready": True})
    while True:
        request = channel.receive()
        if not request or request.get("op") != "time":
            break
        if request.get("pin") is not None and pinned is None:
            try:
                os.sched_setaffinity(0, {int(request["pin"])})
                pinned = int(request["pin"])
            except (AttributeError, OSError, ValueError):
                pinned = -1  # not pinnable here: said once in the reply, not retried
        i = int(request["shape"])
        burst_ms = float(request.get("burst_ms") or 0.0)
        try:
            if i not in fns:
                fns[i] = step_fn(model, saved_inputs(job, i, ref), training, harness_call(job))
            probe.start(model, pinned if pinned is not None and pinned >= 0 else None, fns[i])
            probe.before()
            for _ in range(int(request.get("warmup", 0))):
                fns[i]()
            if burst_ms > 0 and i not in calls:
                calls[i] = burst_calls(time_call(fns[i], device), burst_ms)
            n = int(request.get("n", 1))
            if burst_ms > 0:
                samples = [time_burst(fns[i], device, calls[i]) for _ in range(n)]
            else:
                samples = [time_call(fns[i], device) for _ in range(n)]
            reply: dict[str, Any] = {"samples": samples, "calls": calls.get(i, 1),
                                     "pinned": pinned if pinned is not None and pinned >= 0 else None}
        except torch.cuda.OutOfMemoryError as exc:
            reply = {"error": {"kind": "oom", "message": str(exc).splitlines()[0]}}
        except Exception as exc:
            reply = {"error": {"kind": "raised", "message": f"{type(exc).__name__}: {exc}"[:1000]}}
        probe.after(request, reply.get("samples") or [])
        channel.send(reply)
        if "error" in reply:
            break
    probe.stop(model)


def main(argv: list[str] | None = None) -> int:
    """Run the job file named in ``argv[0]``; write its JSON result; return the exit code."""
    import os

    t0 = time.perf_counter()
    args = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(args[0]).read_text())
    out = Path(job["out"])
    payload: dict[str, Any]
    served = None
    channel = None
    code = 0
    try:
        import torch

        from ..errors import ConfigError, StackpartError

        t_import = time.perf_counter()
        channel = Channel(job["cmd_fd"], job["reply_fd"]) if job.get("cmd_fd") is not None else None
        try:
            payload = run_cold(job, channel)
            served = payload.pop("_serve", None)
            payload["torch"] = torch.__version__
            payload["pid"] = os.getpid()
            # where the child's time went (validate's own overhead vs the work it measures)
            payload["phases_s"] = {
                "import_torch": t_import - t0,
                "run": time.perf_counter() - t_import,
                **payload.pop("_phases", {}),
            }
        except Stopped:
            return 0
        except ConfigError as exc:  # bad input (harness.call), not the user's code failing: the caller writes nothing
            payload, code = {"error": {"kind": "config", "message": str(exc),
                                       "config": {"message": exc.message, "field": exc.field,
                                                  "hint": exc.hint}}}, 2
        except StackpartError as exc:
            payload, code = {"error": {"kind": "harness", "message": str(exc)}}, 2
        except torch.cuda.OutOfMemoryError as exc:
            payload, code = {"error": {"kind": "oom", "message": str(exc).splitlines()[0]}}, 3
        except ModelRaised as exc:
            cause = exc.__cause__ or exc
            kind = "oom" if "out of memory" in str(cause).lower() else "raised"
            payload = {
                "error": {
                    "kind": kind,
                    "message": str(exc)[:1000],
                    "detail": exc.detail[:4000],
                    "traceback": "".join(traceback.format_exception(cause))[-4000:],
                }
            }
            code = 3 if kind == "oom" else 4
        except SystemExit as exc:  # the user's code called sys.exit: said as such, not "exited with code N"
            payload, code = {"error": {"kind": "raised", "message": exit_message(exc, job)}}, 4
    except Exception as exc:  # anything else is an error of the harness/build step
        payload = {
            "error": {
                "kind": "crash",
                "message": f"{type(exc).__name__}: {str(exc)[:1000]}",
                "traceback": traceback.format_exc()[-4000:],
            }
        }
        code = 2
    # whole or not at all: a shape warmer's result is read by another child as soon as it exists
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(payload, indent=1, default=str))
    os.replace(partial, out)
    if code == 0 and channel is not None:
        if served is not None and "state_dict_error" not in payload.get("info", {}):
            serve(job, channel, served)
    return code


if __name__ == "__main__":
    sys.exit(main())
