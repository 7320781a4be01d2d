"""A recompile whose guard names no user line (a shape guard on the frame's own argument) is
located at the recompiled frame's ``def`` under SRC, not left without a line."""

from __future__ import annotations

from types import SimpleNamespace

from rewriter.diagnose.dynamo_log import DynamoLog, Recompile
from rewriter.diagnose.rungs.recompiles import _recompile_findings


def test_a_shape_recompile_is_located_at_the_recompiled_frame(tmp_path):
    (tmp_path / "model.py").write_text("import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, idx):\n        return idx\n")
    rc = Recompile("forward", str(tmp_path / "model.py"), 5,
                   ["tensor 'idx' size mismatch at index 1. expected 32, actual 48"], "Recompiling function forward")
    ctx = SimpleNamespace(session=SimpleNamespace(src=tmp_path))
    [finding], by_value = _recompile_findings(ctx, DynamoLog(recompiles=[rc]))
    assert (finding.file, finding.line) == ("model.py", 5), finding
    assert by_value == []
    outside = Recompile("forward", "/usr/lib/python3/site-packages/x.py", 9, ["tensor 'x' size mismatch"], "")
    [finding], _ = _recompile_findings(ctx, DynamoLog(recompiles=[outside]))
    assert finding.file is None


def test_a_guard_two_cache_entries_failed_alike_is_written_once(tmp_path):
    """After an automatic-dynamic recompile, a new batch size fails the same size guard in both
    cache entries (the static one and the dynamic one): the finding says it once."""
    (tmp_path / "model.py").write_text("import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, idx):\n        return idx\n")
    same = "tensor 'idx' size mismatch at index 0. expected 8, actual 3"
    rc = Recompile("forward", str(tmp_path / "model.py"), 5, [same, same], "Recompiling function forward")
    ctx = SimpleNamespace(session=SimpleNamespace(src=tmp_path))
    [finding], _ = _recompile_findings(ctx, DynamoLog(recompiles=[rc]))
    assert finding.message == f"recompiled forward: {same}", finding
    other = "tensor 'idx' size mismatch at index 1. expected 64, actual 17"
    rc = Recompile("forward", str(tmp_path / "model.py"), 5, [same, same, other], "Recompiling function forward")
    [finding], _ = _recompile_findings(ctx, DynamoLog(recompiles=[rc]))
    assert finding.message == f"recompiled forward: {same}; {other}", finding
