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
then runs the original once more in float64 (:func:`high_precision_reference`): the ``fp64_ref``
that :mod:`.compare` judges low-precision outputs against, at the cost of one extra forward per
shape in a process that is already up (and one more low-precision forward whose top-k/argmax
decisions, :mod:`.decisions`, are matched with the reference's). Where the original has no float64
or float32 path, its own rounding noise stands in (:func:`rounding_noise`, :mod:`.rounding`).

Then, when the parent asked for it (``cmd_fd``/``reply_fd`` in the job), the child stays up with
its warm model and times calls on request (:func:`serve`): the parent interleaves the variants
across their processes.

The result is written as JSON to ``job["out"]``. Exit codes: 0 done (findings are in the JSON),
2 harness or build error, 3 out of memory, 4 the model raised.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: SGD learning rate of the one optimizer step compared in training mode (small, so the step
#: stays in the linear regime and a correct rewrite reproduces it within tolerance).
TRAIN_LR = 1e-3


def _cpu(tree: Any) -> Any:
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, tree)


def _copied(tree: Any) -> Any:
    """Every tensor in ``tree`` detached and cloned on its own device."""
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, tree)


def _to_device(tree: Any, device: str) -> Any:
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, tree)


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


@contextlib.contextmanager
def _in_tree(tree: Path) -> Iterator[None]:
    """Harness errors name the user's file relative to the tree it was loaded from (SRC's terms,
    :func:`rewriter.harness.load_harness`); here that path is put under ``tree``, as the model's
    own errors are (:func:`_raised`), so the parent relabels it once (validate: ``a/`` original,
    ``b/`` rewritten; the search: SRC's paths)."""
    from ..errors import StackpartError

    try:
        yield
    except StackpartError as exc:
        if exc.path is not None and not Path(exc.path).is_absolute():
            exc.path = str(Path(tree) / exc.path)
        raise


def _identity(x: Any) -> Any:
    return x


def _build(
    job: dict[str, Any], variant: str, ref: Path, channel: "Channel | None" = None
) -> tuple[Any, dict[str, Any]]:
    """Build ``variant``'s model, wait for the parent's go-ahead (when there is a ``channel``),
    load the reference state_dict (or, in the reference, save it and every shape's inputs, then
    say ``weights_saved``), compile as the variant asks; returns (model, info)."""
    import torch

    from ..harness import build_model, load_harness
    from ..plan import Harness
    from .variants import TREE, prepare

    spec = Harness.model_validate(job["harness"])
    tree = Path(job["tree"]) if job.get("tree") else Path(job["trees"][TREE[variant]])
    if job.get("stance"):
        # for the life of the process (the build, the cold phase, the timing): the eager
        # reference of a program that compiles is that program with compilation off
        torch.compiler.set_stance(job["stance"])
    if job.get("force_backend"):
        force_backend(job["force_backend"])  # before the tree's decorators run at import
    if job.get("reautotune"):
        autotune_again()
    with _in_tree(tree):
        h = load_harness(spec, tree)
        torch.manual_seed(job["seed"])
        model, fallback = build_model(h, construct_on=spec.device if job.get("construct_on_device") else None)
    site_ran(tree, spec, job.get("library_modules") or [], job.get("site"))
    import torch._dynamo  # noqa: F401  (imported before the go-ahead by every variant alike)

    if variant != "eager":
        # torch.compile's first use imports its backend (Inductor: compile_fx, 1-4 s): the plan's
        # decorators pay it at import, in the build; the baselines' prepare paid it after the
        # go-ahead, in the measured cold phase. Now every compiled variant pays it here alike.
        torch.compile(_identity, backend=job["backend"])

    info: dict[str, Any] = {}
    if job.get("construct_on_device") and spec.device != "cpu":
        info["constructed_on"] = "cpu" if fallback else spec.device
        if fallback:
            info["construct_fallback"] = fallback
    if channel is not None:
        channel.await_go()
        info["_go_at"] = time.perf_counter()
    sd_path = ref / "state_dict.pt"
    if job.get("reference"):
        torch.save(_cpu(model.state_dict()), sd_path)
        # every shape's inputs too, so a compiled variant may start before this run ends
        _save_inputs(job, h, ref)
        (ref / WEIGHTS_SAVED).touch()
        if channel is not None:
            message: dict[str, Any] = {"weights_saved": True}
            if torch.cuda.is_available() and spec.device.startswith("cuda"):
                free, total = torch.cuda.mem_get_info()
                message.update(allocated=torch.cuda.memory_allocated(), free=free, total=total)
            channel.send(message)
    else:
        if job.get("wait_for_weights"):
            # sent go before the reference saved (the search's anchor started early,
            # rewriter.diagnose.early_reference): wait for it here
            t_wait = time.perf_counter()
            wait_for_reference(ref, marker=WEIGHTS_SAVED)
            info["_waited_for_weights"] = time.perf_counter() - t_wait
        # mmap: the saved file is paged in as it is copied to the device, not read whole first
        reference = torch.load(sd_path, map_location=spec.device, weights_only=False, mmap=True)
        mine = model.state_dict()
        reference = _through_compile(reference, mine)
        missing = sorted(set(reference) - set(mine))
        unexpected = sorted(set(mine) - set(reference))
        if missing or unexpected:
            info["state_dict_error"] = (
                "state_dict keys differ from the original's: "
                + (f"missing {missing[:20]}" if missing else "")
                + ("; " if missing and unexpected else "")
                + (f"unexpected {unexpected[:20]}" if unexpected else "")
            )
            return model, info
        try:
            model.load_state_dict(reference)
        except RuntimeError as exc:
            info["state_dict_error"] = f"loading the original's state_dict failed: {str(exc)[:500]}"
            return model, info
    kind = job["prepare"] if "prepare" in job else variant  # job files of older callers name only the variant
    info.update(prepare(kind or ("eager" if variant == "eager" else "plan"), model, job["backend"]))
    if job.get("stance"):
        info["compiled"] = (f"{info.get('compiled', 'nothing')}; the tree's own torch.compile calls off "
                            f"(torch.compiler.set_stance({job['stance']!r}))")
    if spec.mode == "training":
        rng = random_ops(model)
        if rng:
            same_random_numbers()
            info["rng"] = {
                "sources": rng[:8], "count": len(rng),
                "made_comparable": "the same seed before every step in every variant, and Inductor's "
                "fallback_random=True (compiled code draws from eager's RNG, in eager's order)",
            }
    return model, info


def random_ops(model: Any) -> list[str]:
    """What draws random numbers in ``model``'s training step: active dropout modules
    (``nn.Dropout*`` with ``p > 0``) and float ``*dropout*`` attributes > 0 that modules pass to
    ``F.dropout``/SDPA's ``dropout_p`` (transformers' attention: ``self.attention_dropout``)."""
    import torch

    out: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            if module.p > 0:
                out.append(f"{name or '<model>'} ({type(module).__name__} p={module.p:g})")
            continue
        for attr, value in vars(module).items():
            if "dropout" in attr and isinstance(value, float) and not isinstance(value, bool) and value > 0:
                out.append(f"{name or '<model>'}.{attr}={value:g}")
    return out


def autotune_again() -> None:
    """Make this process benchmark every Triton kernel's configs again instead of loading the
    winners another process stored (a second timed process, :attr:`.options.Options.replica_caches`
    ``reautotune``): Inductor's ``CachingAutotuner`` reads its local autotune cache
    (``*.best_config`` next to each kernel, ``torch._inductor.config.autotune_local_cache``) on a
    kernel's first launch; with it off the launch benchmarks the configs as a cold compile does.
    The parent also leaves the stored winners out of the caches it copies. A torch without the
    option: the copy without the winners does the same."""
    try:
        import torch._inductor.config as inductor_config
    except ImportError:
        return
    if hasattr(inductor_config, "autotune_local_cache"):
        inductor_config.autotune_local_cache = False


def same_random_numbers() -> None:
    """Make compiled code draw dropout masks from eager's generator: Inductor otherwise generates
    its own random numbers (its Philox-based ``inductor_random``), so a correct compile of a model
    with dropout differs from eager in every masked element (GPT-2 in training: 8171 of
    8192 logits). ``torch._inductor.config.fallback_random`` is what PyTorch's own accuracy runs set
    (benchmarks/dynamo/common.py); it costs the compiled step its fused random kernels."""
    try:
        import torch._inductor.config as inductor_config
    except ImportError:  # a torch without Inductor: nothing compiled generates its own numbers
        return
    inductor_config.fallback_random = True


def site_ran(tree: Path, spec: Any, library_modules: list[str], site: dict[str, Any] | None = None) -> None:
    """Check that a plan's library actions were applied while the harness built the model: every
    generated ``_stackpart/library.py`` of the plan (``library_modules``, relative to ``tree``: the
    rewrite's own list, so no child walks the tree) must have been imported and its ``apply`` run
    (its ``APPLIED`` list is not empty). A site the harness never calls would leave the candidate
    measuring the program without the plan.

    ``site``: the plan's ``site:`` and where it is written (``{"target", "path", "line"}``), so the
    error is at that line as the plan's other errors are; for diagnose's candidates, whose plan
    has no file, ``{"target", "option"}``: the command-line option that chose the site
    (``diagnose --site``), which the hint names instead; None where nothing says it.

    Raises:
        StackpartError: a generated library module that never ran, naming the harness function
            (at the plan's ``site:`` line where ``site`` is given).
    """
    from ..errors import StackpartError

    generated = [(Path(tree) / rel).resolve() for rel in library_modules]
    if not generated:
        return
    ran = {Path(getattr(m, "__file__", "") or "").resolve() for m in list(sys.modules.values())
           if getattr(m, "APPLIED", None) and (getattr(m, "__file__", None) or "").endswith("library.py")}
    missing = [p for p in generated if p not in ran]
    if missing:
        rel = missing[0].relative_to(Path(tree).resolve()).as_posix()
        what = f"site ({site['target']})" if site and site.get("target") else "the plan's site"
        option = (site or {}).get("option")
        raise StackpartError(
            f"{what} never ran: harness.model {spec.model}() in {spec.file} built the model without "
            f"calling the function decorated with @apply_plan ({rel}); the plan's library actions were not applied",
            path=(site or {}).get("path"), line=(site or {}).get("line"),
            hint=(f"pass {option} file.py::func naming a function under SRC that harness.model {spec.model}() calls to build the model"
                  if option else "set the plan's site: to the function the harness's model function calls to build the model"),
        )


def force_backend(backend: str) -> None:
    """Make every ``torch.compile`` in this process use ``backend`` (``mode`` and ``options``, which
    only Inductor takes, are dropped): diagnose's search on CPU measures what Dynamo captures, guards
    and recompiles in each candidate without Inductor's codegen (~20 s a compile on CPU), the trees'
    own decorators and the user's calls alike. ``nn.Module.compile`` calls ``torch.compile`` and is
    covered too."""
    import functools

    import torch

    original = getattr(torch.compile, "__wrapped__", torch.compile)

    @functools.wraps(original)
    def compile_with(model=None, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["backend"] = backend
        kwargs.pop("mode", None)
        kwargs.pop("options", None)
        return original(model, **kwargs) if model is not None else original(**kwargs)

    compile_with.__wrapped__ = original  # type: ignore[attr-defined]
    torch.compile = compile_with


#: Written into ``ref`` by the reference once every file the comparisons read is complete.
REFERENCE_DONE = "reference.done"
#: Written into ``ref`` by the reference once its weights and every shape's inputs are saved.
WEIGHTS_SAVED = "weights.saved"


def wait_for_reference(ref: Path, poll_s: float = 0.05, marker: str = REFERENCE_DONE) -> None:
    """Block until the reference child has written every output (``ref/reference.done``), or
    with ``marker=WEIGHTS_SAVED`` its weights and inputs. A reference that fails never writes
    them; the parent then kills the waiting children."""
    while not (ref / marker).exists():
        time.sleep(poll_s)


def _save_inputs(job: dict[str, Any], h: Any, ref: Path) -> None:
    """The reference only: build every shape's inputs (seeded per shape) and save them, so every
    variant runs on the same tensors."""
    import torch

    from ..harness import build_inputs

    for i, shape in enumerate(job["harness"]["shapes"]):
        torch.manual_seed(job["seed"] + 1 + i)
        with _in_tree(h.src):
            inputs = build_inputs(h, shape)
        torch.save(_cpu(inputs), ref / f"inputs_{i}.pt")


def _inputs(job: dict[str, Any], i: int, ref: Path) -> Any:
    """Shape ``i``'s inputs as the reference saved them, on the harness device."""
    import torch

    return _to_device(torch.load(ref / f"inputs_{i}.pt", weights_only=False), job["harness"]["device"])


def _step_fns(model: Any, inputs: Any, training: bool) -> Any:
    import torch

    from ..harness import call_model, scalar_loss

    if not training:

        def infer() -> Any:
            with torch.no_grad():
                return call_model(model, inputs)

        return infer

    def fwd_bwd() -> Any:
        model.zero_grad(set_to_none=True)
        out = call_model(model, inputs)
        loss = scalar_loss(out)
        loss.backward()
        return out, loss

    return fwd_bwd


def _after_step(model: Any, inputs: Any, reference_sd: dict[str, Any], seed: int) -> dict[str, Any]:
    """Training records after a forward+backward: the gradients it left (host copies), then one
    SGD step (lr :data:`TRAIN_LR`) and the loss after it; the weights are restored after."""
    import torch

    from ..harness import call_model, scalar_loss

    out: dict[str, Any] = {
        "grads": {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    }
    torch.optim.SGD(model.parameters(), lr=TRAIN_LR).step()
    torch.manual_seed(seed)
    out["loss_after_step"] = _cpu(scalar_loss(call_model(model, inputs)).detach())
    model.zero_grad(set_to_none=True)
    model.load_state_dict(reference_sd)
    return out


def _block_share(job: dict[str, Any], model: Any, ref: Path, training: bool) -> list[dict[str, Any]]:
    """Per shape, the share of the eager step spent inside the repeated blocks (the regions a
    naive regional compile covers); the rest (embeddings, masks, rotary tables, the head) stays
    eager under it. Forward hooks record CUDA events (or perf_counter on CPU) around each block;
    one warm step per shape. Forward only, also in training mode. The caller runs it with
    compilation off (``torch.compiler.set_stance("force_eager")``), also where the tree compiles
    itself: a hook inside a compiled frame would put its timer into the program's graph (a graph
    break; under ``fullgraph=True`` an error)."""
    import torch

    from ..harness import call_model
    from .variants import repeated_blocks

    blocks = [b for _, children in repeated_blocks(model) for b in children]
    if not blocks:
        return []
    cuda = job["harness"]["device"].startswith("cuda")
    marks: list[tuple[Any, Any]] = []

    def stamp() -> Any:
        if cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    starts: list[Any] = []
    handles = []
    for block in blocks:
        handles.append(block.register_forward_pre_hook(lambda *_: starts.append(stamp())))
        handles.append(block.register_forward_hook(lambda *_: marks.append((starts.pop(), stamp()))))
    out = []
    try:
        for i, shape in enumerate(job["harness"]["shapes"]):
            inputs = _inputs(job, i, ref)
            with torch.no_grad():
                call_model(model, inputs)  # warm
                marks.clear()
                begin = stamp()
                call_model(model, inputs)
                end = stamp()
            if cuda:
                torch.cuda.synchronize()
                total = begin.elapsed_time(end) / 1e3
                inside = sum(a.elapsed_time(b) for a, b in marks) / 1e3
            else:
                total, inside = end - begin, sum(b - a for a, b in marks)
            out.append({"shape": shape, "step_s": total, "in_blocks_s": inside,
                        "share": inside / total if total > 0 else None, "block_calls": len(marks)})
    finally:
        for handle in handles:
            handle.remove()
    return out


#: Dtypes tried, in order, for the high-precision run of the original (float32 when float64 is
#: unsupported on the device or by an op the model calls).
HIGH_PRECISION = ("float64", "float32")


def _upcast(tree: Any, dtype: Any) -> Any:
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map(
        lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x, tree
    )


def high_precision_reference(job: dict[str, Any], model: Any, ref: Path, training: bool) -> dict[str, Any]:
    """Run the original model once more per shape in float64 (float32 when float64 raises), from
    the same weights (a copy of ``model``) and the saved inputs (floating ones upcast), and save
    each shape's record (``output``; training: ``loss``, ``grads``, ``loss_after_step``; stored in
    float32) as ``ref/high_precision_{i}.pt``: the ``fp64_ref`` of :mod:`.compare`. Only the eager reference
    child calls this, after its own cold phase: one extra forward (training: forward, backward,
    SGD step, forward) per shape, no extra process.

    The discrete decisions (:mod:`.decisions`) of one more low-precision forward per shape are
    matched with the high-precision run's and saved beside the record (``decisions``). When
    neither dtype runs, the original runs once more in its own precision with a perturbed
    reduction order (:mod:`.rounding`) and that record is saved instead (``kind: "noise"``):
    eager's own rounding noise, the bound :mod:`.compare` then uses.

    Returns ``{"dtype", "seconds", "tried", "decisions"}`` (``dtype`` None when every dtype failed;
    ``tried`` holds why; ``decisions``: :func:`.decisions.match`'s counts summed over the shapes),
    with ``noise`` (``{"perturbed_products", "error"?}``) when the noise run stood in. The caller runs it with
    compilation off: a high-precision reference is an eager run."""
    import copy

    import torch

    from . import decisions

    started = time.perf_counter()
    tried: list[str] = []
    shapes = job["harness"]["shapes"]
    low_decisions: list[list[dict[str, Any]] | None] = []
    for i in range(len(shapes)):
        try:
            with decisions.record() as calls:
                torch.manual_seed(job["seed"])
                _step_fns(model, _inputs(job, i, ref), training)()
            low_decisions.append(calls)
        except Exception:  # noqa: BLE001 - a model that will not run under the recorder: no decisions judged
            low_decisions.append(None)
    for name in HIGH_PRECISION:
        dtype = getattr(torch, name)
        hp = None
        matched: list[dict[str, Any]] = []
        try:
            hp = copy.deepcopy(model).to(dtype)
            reference_sd = {k: v.detach().clone() for k, v in hp.state_dict().items()} if training else None
            for i, _shape in enumerate(shapes):
                inputs = _upcast(_inputs(job, i, ref), dtype)
                torch.manual_seed(job["seed"])
                with decisions.record() as calls:
                    out = _step_fns(hp, inputs, training)()
                record: dict[str, Any] = {"output": _cpu(out[0] if training else out)}
                if training:
                    record["loss"] = _cpu(out[1].detach())
                    record.update(_after_step(hp, inputs, reference_sd, job["seed"]))
                judged = decisions.match(low_decisions[i], calls) if low_decisions[i] is not None else None
                if judged is not None:
                    matched.append(judged)
                # stored as float32: its rounding (2**-24 relative) is 65,000x below bf16's
                # (2**-8) and it halves the bytes every comparing child reads
                torch.save({"dtype": name, "record": _upcast(record, torch.float32), "decisions": judged},
                           ref / f"high_precision_{i}.pt")
                del record, out
            return {"dtype": name, "seconds": time.perf_counter() - started, "tried": tried,
                    "decisions": _decision_totals(matched)}
        except torch.cuda.OutOfMemoryError as exc:
            tried.append(f"{name}: out of memory: {str(exc).splitlines()[0][:200]}")
        except Exception as exc:
            tried.append(f"{name}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}")
        finally:
            del hp
            if job["harness"]["device"].startswith("cuda"):
                torch.cuda.empty_cache()
        for stale in ref.glob("high_precision_*.pt"):
            stale.unlink()
    noise = rounding_noise(job, model, ref, training, low_decisions)
    return {"dtype": None, "seconds": time.perf_counter() - started, "tried": tried,
            "decisions": noise.pop("decisions"), "noise": noise}


def rounding_noise(job: dict[str, Any], model: Any, ref: Path, training: bool,
                   low_decisions: list[list[dict[str, Any]] | None]) -> dict[str, Any]:
    """Eager's own rounding noise, where no high-precision run is possible: the original runs once
    more per shape in its low precision under :func:`.rounding.perturbed_reduction_order`; each
    shape's record is saved as ``ref/high_precision_{i}.pt`` with ``kind: "noise"`` (and the
    decisions matched against eager's). Returns ``{"perturbed_products", "decisions"}``, with
    ``error`` (and nothing saved) when that run raised."""
    import torch

    from . import decisions
    from .rounding import perturbed_reduction_order

    matched: list[dict[str, Any]] = []
    products = 0
    reference_sd = {k: v.detach().clone() for k, v in model.state_dict().items()} if training else None
    try:
        for i, _shape in enumerate(job["harness"]["shapes"]):
            inputs = _inputs(job, i, ref)
            torch.manual_seed(job["seed"])
            with perturbed_reduction_order() as count, decisions.record() as calls:
                out = _step_fns(model, inputs, training)()
                record: dict[str, Any] = {"output": _cpu(out[0] if training else out)}
                if training:
                    record["loss"] = _cpu(out[1].detach())
                    record.update(_after_step(model, inputs, reference_sd, job["seed"]))
            products += count["perturbed"]
            judged = decisions.match(low_decisions[i], calls) if low_decisions[i] is not None else None
            if judged is not None:
                matched.append(judged)
            torch.save({"dtype": None, "kind": "noise", "record": record, "decisions": judged},
                       ref / f"high_precision_{i}.pt")
            del record, out
    except Exception as exc:  # noqa: BLE001 - said in the report; the fixed-RMSE fallback judges then
        for stale in ref.glob("high_precision_*.pt"):
            stale.unlink()
        return {"perturbed_products": products, "decisions": None,
                "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"}
    return {"perturbed_products": products, "decisions": _decision_totals(matched)}


def _decision_totals(matched: list[dict[str, Any]]) -> dict[str, Any] | None:
    """:func:`.decisions.match`'s counts summed over the shapes (None when none was matched)."""
    if not matched:
        return None
    return {k: sum(m[k] for m in matched) for k in ("calls", "rows", "flipped", "near_ties")} | {
        "comparable": all(m["comparable"] for m in matched)}


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
            result["runtime_compiles"] = _runtime_reading(watch, model, job)
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
    inputs = _inputs(job, i, Path(job["ref"]))
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
    """The variant's model built (:func:`_build`) and the payload started: its build info and the
    seconds of the build and of loading the weights after ``go``."""
    variant = job["variants"][0]
    t_build = time.perf_counter()
    model, info = _build(job, variant, Path(job["ref"]), channel)
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
    inputs = _inputs(job, i, Path(job["ref"]))  # saved by the reference at go
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
    first_s, steady_s, out = _first_calls(job, _step_fns(model, inputs, training), i)
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
        out = _copied(out)
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
    record: dict[str, Any] = {"output": _cpu(out[0] if training else out)}
    tokens = None if training else generated_tokens(out)
    generator = generator_of(model) if tokens is not None else None
    if generator is not None and job.get("reference"):
        # the logits that chose the reference's tokens (engine.generation)
        record[TEACHER_FORCED] = _cpu(teacher_forced_logits(generator, tokens))
    if training:
        record["loss"] = _cpu(out[1])
        # the first call's gradients (fn zeroes them on entry; recompute for this record)
        model.load_state_dict(reference_sd)
        torch.manual_seed(job["seed"])
        _step_fns(model, inputs, True)()
        record.update(_after_step(model, inputs, reference_sd, job["seed"]))
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
    mine = {k: _to_device(v, device) for k, v in record.items()}
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


def _runtime_reading(watch: Any, model: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Which code compiled in the program as it is (:func:`runtime_compiles`), read only for the
    reference (the search's as-is row): a walk of sys.modules and the frame log in every other
    process would be work nobody reads. A report-only reading: its failure is recorded, never the
    variant's."""
    try:
        return runtime_compiles(watch, model, job, job["variants"][0])
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
        result["block_share"] = _block_share(job, model, ref, training)
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
                _step_fns(model, _inputs(job, i, ref), training)()
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as exc:
        stance["ok"] = False
        stance["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
    return stance


def _through_compile(reference: dict[str, Any], mine: dict[str, Any]) -> dict[str, Any]:
    """``reference`` keyed as ``mine`` where the two differ only by ``torch.compile(module)``'s
    ``_orig_mod.`` hops (an ``OptimizedModule`` wraps its module under ``_orig_mod``; a plan that
    turns the program's whole-model call into ``module.compile()`` per block drops the hop: the
    same weights). Otherwise ``reference`` unchanged."""
    if set(reference) == set(mine):
        return reference

    def bare(key: str) -> str:
        return ".".join(p for p in key.split(".") if p != "_orig_mod")

    by_bare = {bare(k): k for k in mine}
    if len(by_bare) != len(mine) or {bare(k) for k in reference} != set(by_bare) or len(reference) != len(mine):
        return reference
    return {by_bare[bare(k)]: v for k, v in reference.items()}


def runtime_compiles(watch: Any, model: Any, job: dict[str, Any], variant: str) -> dict[str, Any]:
    """Which code compiled in the cold phase (the program's own compiles, seen at run
    time): ``frames`` (:meth:`.watch.FrameLog.frames`: the frames Dynamo compiled, with graphs,
    recompiles, fullgraph and the entry the program compiled), ``modules``
    (:func:`.watch.compiled_modules`: the model's compiled modules) and ``src_imported`` (the tree's
    files the harness imported, relative to the tree: a compile in a file not among them cannot
    have run). Read from what the run left behind: no extra model run."""
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

    from .timing import burst_calls, time_burst, time_call

    ref = Path(job["ref"])
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
                fns[i] = _step_fns(model, _inputs(job, i, ref), training)
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
        channel.send(reply)
        if "error" in reply:
            break


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

        from ..errors import StackpartError

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
