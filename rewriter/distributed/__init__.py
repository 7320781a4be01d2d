"""Diagnose (and validate) across several processes: collectives on the critical path.

Rung 5 of the ladder (docs/design.md) for multi-GPU runs. The pipeline, one module per step:

* :mod:`.launch`: ``run_distributed`` runs the harness under torchrun and merges the results;
* :mod:`.worker`: the per-rank entry (build, wrap in DDP/FSDP2, warm up, time, profile);
* :mod:`.classify`: NCCL kernel names and c10d/gloo op names -> the collective;
* :mod:`.intervals`: union / intersect / subtract on time intervals;
* :mod:`.trace`: one rank's trace -> per-step compute, communication, exposed time, gaps;
* :mod:`.findings`: ranks merged -> stragglers, the dominant collective, the verdict;
* :mod:`.advise`: findings -> ``distributed`` plan entries with ``why:`` evidence;
* :mod:`.report`: findings -> Markdown and terminal lines.
"""

from .findings import DistributedFindings
from .launch import run_distributed

__all__ = ["DistributedFindings", "run_distributed"]
