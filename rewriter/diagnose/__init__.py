"""diagnose: the diagnostic ladder, from a running model to findings and a plan.

The pipeline, one module per step (docs/design.md, "The diagnostic ladder"):

``session`` (build the model from the harness, one step, timing, timeouts) →
``profile`` (one torch.profiler run shared by the profiler rungs) → the rungs
(``batch_scaling``, ``device_time``, ``op_mix`` with ``classify``, ``top_ops``, ``gaps``,
``graph_breaks``, ``recompiles``, ``instance_recompiles``, ``memory``, ``granularity``,
``amortization``) → ``planner`` (verdicts → plan actions with ``why:``) → ``report``
(terminal, report.md, report.json, charts) — driven by ``runner``.
"""
