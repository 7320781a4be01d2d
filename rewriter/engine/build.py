"""Building a variant's model inside its child (:mod:`.child`): the tree's harness loaded, the
model built and seeded, the plan's library site checked (:func:`site_ran`), the reference's
weights saved or loaded, and the variant's compile prepared (:func:`.variants.prepare`), with the
process-wide settings a job asks for (a forced backend, autotuning again, eager's random numbers
in compiled code)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .steps import WEIGHTS_SAVED, cpu, wait_for_reference


@contextlib.contextmanager
def in_tree(tree: Path) -> Iterator[None]:
    """Harness errors name the user's file relative to the tree it was loaded from (SRC's terms,
    :func:`rewriter.harness.load_harness`); here that path is put under ``tree``, as the model's
    own errors are (:func:`.child._raised`), so the parent relabels it once (validate: ``a/`` original,
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


def build_variant(
    job: dict[str, Any], variant: str, ref: Path, channel: Any = None
) -> tuple[Any, dict[str, Any]]:
    """Build ``variant``'s model, wait for the parent's go-ahead (when there is a ``channel``, the
    child's :class:`.child.Channel`), load the reference's state_dict (or, in the reference, save
    it and every shape's inputs, then say ``weights_saved``), and compile as the variant asks.
    Returns ``(model, info)``; ``info["state_dict_error"]`` says why the weights did not load, and
    the model is then returned unprepared."""
    import torch

    from ..harness import build_model, load_harness
    from ..plan import Harness
    from .variants import TREE, plain_model, prepare

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
    calls = None
    if job.get("reference"):  # which of the program's compile calls run (engine.child.runtime_compiles)
        from .watch import CompileCalls

        calls = CompileCalls(tree)
        calls.install()
    with in_tree(tree):
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
    if calls is not None:
        info["_compile_calls"] = calls.sites  # filled on while the model runs; taken off the payload by the child
    if job.get("construct_on_device") and spec.device != "cpu":
        info["constructed_on"] = "cpu" if fallback else spec.device
        if fallback:
            info["construct_fallback"] = fallback
    if channel is not None:
        channel.await_go()
        info["_go_at"] = time.perf_counter()
    error = _save_weights(job, model, h, ref, channel) if job.get("reference") else _load_weights(job, model, ref, info)
    if error:
        info["state_dict_error"] = error
        return model, info
    kind = job["prepare"] if "prepare" in job else variant  # job files of older callers name only the variant
    taken: list[str] = []
    if kind in ("whole", "regional"):  # a baseline compiles the model plainly: the program's own compile off first
        model, taken = plain_model(model)
    info.update(prepare(kind or ("eager" if variant == "eager" else "plan"), model, job["backend"], job["harness"].get("call")))
    if taken:
        info["compiled"] += f"; the program's own compile taken off first ({', '.join(taken)})"
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


def _save_weights(job: dict[str, Any], model: Any, h: Any, ref: Path, channel: Any) -> None:
    """The reference only: save its state_dict and every shape's inputs into ``ref`` (so a compiled
    variant may start before its run ends), mark them saved, and tell the parent with the device's
    memory figures (bytes) on CUDA."""
    import torch

    torch.save(cpu(model.state_dict()), ref / "state_dict.pt")
    _save_inputs(job, h, ref)
    (ref / WEIGHTS_SAVED).touch()
    if channel is not None:
        message: dict[str, Any] = {"weights_saved": True}
        if torch.cuda.is_available() and str(job["harness"]["device"]).startswith("cuda"):
            free, total = torch.cuda.mem_get_info()
            message.update(allocated=torch.cuda.memory_allocated(), free=free, total=total)
        channel.send(message)


def _load_weights(job: dict[str, Any], model: Any, ref: Path, info: dict[str, Any]) -> str | None:
    """Load the reference's state_dict into ``model`` (keys matched through ``torch.compile``'s
    ``_orig_mod.`` hops, :func:`_through_compile`); where the job was sent go before the reference
    saved (the search's anchor started early, :mod:`rewriter.diagnose.early_reference`), wait for
    it first (``info["_waited_for_weights"]``, seconds). Returns why the weights do not load, or
    None."""
    import torch

    if job.get("wait_for_weights"):
        t_wait = time.perf_counter()
        wait_for_reference(ref, marker=WEIGHTS_SAVED)
        info["_waited_for_weights"] = time.perf_counter() - t_wait
    # mmap: the saved file is paged in as it is copied to the device, not read whole first
    reference = torch.load(ref / "state_dict.pt", map_location=job["harness"]["device"], weights_only=False, mmap=True)
    mine = model.state_dict()
    reference = _through_compile(reference, mine)
    missing = sorted(set(reference) - set(mine))
    unexpected = sorted(set(mine) - set(reference))
    if missing or unexpected:
        return ("state_dict keys differ from the original's: "
                + (f"missing {missing[:20]}" if missing else "")
                + ("; " if missing and unexpected else "")
                + (f"unexpected {unexpected[:20]}" if unexpected else ""))
    try:
        model.load_state_dict(reference)
    except RuntimeError as exc:
        return f"loading the original's state_dict failed: {str(exc)[:500]}"
    return None


def _save_inputs(job: dict[str, Any], h: Any, ref: Path) -> None:
    """The reference only: build every shape's inputs (seeded per shape) and save them, so every
    variant runs on the same tensors."""
    import torch

    from ..harness import build_inputs

    for i, shape in enumerate(job["harness"]["shapes"]):
        torch.manual_seed(job["seed"] + 1 + i)
        with in_tree(h.src):
            inputs = build_inputs(h, shape)
        torch.save(cpu(inputs), ref / f"inputs_{i}.pt")


def _through_compile(reference: dict[str, Any], mine: dict[str, Any]) -> dict[str, Any]:
    """``reference`` keyed as ``mine`` where the two differ only by ``torch.compile(module)``'s
    ``_orig_mod.`` hops (an ``OptimizedModule`` wraps its module under ``_orig_mod``; a plan that
    turns the program's whole-model call into ``module.compile()`` per block drops the hop: the
    same weights). Otherwise ``reference`` unchanged."""
    from .watch import without_compile_hops as bare

    if set(reference) == set(mine):
        return reference

    by_bare = {bare(k): k for k in mine}
    if len(by_bare) != len(mine) or {bare(k) for k in reference} != set(by_bare) or len(reference) != len(mine):
        return reference
    return {by_bare[bare(k)]: v for k, v in reference.items()}


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
