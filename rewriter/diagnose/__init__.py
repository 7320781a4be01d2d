"""diagnose: the diagnostic ladder, from a running model to findings and a plan.

The pipeline, one module per step (docs/design.md, "The diagnostic ladder"):

``session`` (build the model from the harness, one step, timing, timeouts) → the rungs, one
module each in ``rungs/`` (``batch_scaling``, ``profile``: one torch.profiler run shared by the
profiler rungs, ``device_time``, ``op_mix`` with ``classify``, ``top_ops``, ``gaps``,
``graph_breaks``, ``recompiles``, ``instance_recompiles``, ``memory``, ``granularity``), what they
measure once kept in ``evidence`` → the search over candidate plans (``search``) or ``planner``
(verdicts → plan actions with ``why:``) → ``report`` (terminal, report.md, report.json, charts)
— driven by ``runner``.
"""
