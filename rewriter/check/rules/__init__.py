"""The rules of ``stackpart check``, one module each; :data:`ALL_RULES` in code order."""

from __future__ import annotations

from ..rule import Rule
from .sp101_whole_model_compile import WholeModelCompile
from .sp102_compile_wraps_module import CompileWrapsModule
from .sp103_graph_break_call import GraphBreakCall
from .sp104_data_dependent_branch import DataDependentBranch
from .sp105_mark_dynamic_in_compiled import MarkDynamicInCompiled
from .sp106_mark_dynamic_min import MarkDynamicMin
from .sp107_compile_per_call import CompilePerCall
from .sp108_disable_in_fullgraph import DisableInFullgraph
from .sp109_reduce_overhead_small_region import ReduceOverheadSmallRegion
from .sp110_fullgraph_scalar_branch import FullgraphScalarBranch
from .sp111_fullgraph_scalar_loop_bound import FullgraphScalarLoopBound
from .sp112_logging_in_compiled import LoggingInCompiled

ALL_RULES: list[type[Rule]] = [
    WholeModelCompile,
    CompileWrapsModule,
    GraphBreakCall,
    DataDependentBranch,
    MarkDynamicInCompiled,
    MarkDynamicMin,
    CompilePerCall,
    DisableInFullgraph,
    ReduceOverheadSmallRegion,
    FullgraphScalarBranch,
    FullgraphScalarLoopBound,
    LoggingInCompiled,
]
