"""plan.yaml, version 1: the schema (:mod:`.schema`) and the loader that reads a plan file into it
with ``file:line:col`` errors (:mod:`.loader`).

The layout, top to bottom: :mod:`.loader` (reading the file, the checks after validation),
:mod:`.yaml_gates` (what the YAML may hold before it is validated), :mod:`.messages` (pydantic's
errors as one-line messages at the plan's lines), :mod:`.schema` (the pydantic models),
:mod:`.values` (how an error quotes a value). This package re-exports the names the rest of
``rewriter`` uses, so ``from ..plan import load_plan, CompileAction`` reads the same wherever the
name lives.
"""

from .loader import MAX_PLAN_BYTES, LoadedPlan, dynamo_config_names, load_plan, parse_plan, report_dir_for
from .schema import (
    ACTION_MODELS,
    ADVISORY_ACTIONS,
    ATTN_IMPLEMENTATIONS,
    CACHE_IMPLEMENTATIONS,
    DISTRIBUTED_SETTINGS,
    DYNAMO_CONFIG_KEYS,
    DYNAMO_CONFIG_SINCE,
    KNOWN_BACKENDS,
    LIBRARY_ACTIONS,
    LIBRARY_TARGET_RE,
    MAX_DIM,
    MAX_SIZE,
    OWN_CALL_DEFAULTS,
    OWN_CALL_KEYS,
    OWN_CALL_MODES,
    TARGET_RE,
    UNSAFE_ACTIONS,
    Action,
    AllocatorAction,
    Amortization,
    AttentionAction,
    BranchlessAction,
    BucketAction,
    CompileAction,
    CompileCacheAction,
    CompileOptions,
    DisableAction,
    DistributedAction,
    DynamoConfigAction,
    DynamoSettings,
    GenerationAction,
    Harness,
    KernelAction,
    MarkDynamicAction,
    OwnCall,
    Plan,
    json_schema,
)
from .yaml_gates import MAX_NUMBER_CHARS, MAX_YAML_DEPTH, yaml12_value

__all__ = [
    "ACTION_MODELS", "ADVISORY_ACTIONS", "ATTN_IMPLEMENTATIONS", "CACHE_IMPLEMENTATIONS", "DISTRIBUTED_SETTINGS",
    "DYNAMO_CONFIG_KEYS", "DYNAMO_CONFIG_SINCE", "KNOWN_BACKENDS", "LIBRARY_ACTIONS", "LIBRARY_TARGET_RE", "MAX_DIM",
    "MAX_NUMBER_CHARS", "MAX_PLAN_BYTES", "MAX_SIZE", "MAX_YAML_DEPTH", "OWN_CALL_DEFAULTS", "OWN_CALL_KEYS",
    "OWN_CALL_MODES", "TARGET_RE", "UNSAFE_ACTIONS", "Action", "AllocatorAction", "Amortization", "AttentionAction",
    "BranchlessAction", "BucketAction", "CompileAction", "CompileCacheAction", "CompileOptions", "DisableAction",
    "DistributedAction", "DynamoConfigAction", "DynamoSettings", "GenerationAction", "Harness", "KernelAction",
    "LoadedPlan", "MarkDynamicAction", "OwnCall", "Plan", "dynamo_config_names", "json_schema", "load_plan",
    "parse_plan", "report_dir_for", "yaml12_value",
]
