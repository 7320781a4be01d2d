"""``stackpart validate``: the gate before a diff is applied.

The pipeline, one module per step::

    materialize.py   copy SRC twice into a temp dir; apply the plan's changes to one copy
    runner.py        run each variant in its own child process (timeout, clean caches)
    child.py         inside the child: build, load the reference state_dict, run the shapes
    variants.py      eager, the plan, whole-model torch.compile, naive regional compile
    watch.py         Dynamo's own counters: graphs, graph breaks, recompiles, recompile limit
    compare.py       outputs / gradients / loss as pytrees, per-dtype tolerances
    timing.py        CUDA events or perf_counter, warm-up, interleaved variants, median/spread
    amortize.py      break-even runs and the regime that pays back
    verdict.py       the reasons a validation fails (exit 1) or errors (exit 2)
    baselines.py     which in-place baselines compiled no graph (ran eager), said and not compared
    report.py        validation.json, validation.md, validation.png bound to the diff's sha256
    command.py       the orchestration behind the CLI command

The gate that reads the report before ``rewrite --apply`` is :mod:`rewriter.rewrite.gate`.
"""
