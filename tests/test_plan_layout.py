"""rewriter/plan/ keeps the schema apart from its loader (docs/design.md, "plan.yaml (version 1)"):
the schema is pydantic models only, read by the loader, never reading YAML or the loader back."""

from __future__ import annotations

import ast
from pathlib import Path

PLAN = Path(__file__).resolve().parent.parent / "rewriter" / "plan"


def _imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_schema_reads_no_yaml_and_imports_no_loader_module():
    imported = _imported(PLAN / "schema.py")
    assert not {"yaml", ".loader", ".messages", ".yaml_gates"} & imported, imported


def test_the_package_exports_the_loader_and_the_schema_by_name():
    import rewriter.plan as plan
    from rewriter.plan import loader, schema

    assert plan.parse_plan is loader.parse_plan and plan.load_plan is loader.load_plan
    assert plan.Plan is schema.Plan and plan.CompileAction is schema.CompileAction
    assert all(hasattr(plan, name) for name in plan.__all__)
