"""`--timeout` must be positive: 0 or a negative value used to mean no limit (diagnose's alarm
is disabled by 0, so a hung harness hung forever) or an instant 'did not finish within -1 s'."""

from __future__ import annotations

import pytest

from rewriter.cli import main


@pytest.mark.parametrize("command", ["validate", "diagnose"])
@pytest.mark.parametrize("value", ["0", "-1"])
def test_non_positive_timeout_is_a_usage_error(tmp_path, capsys, command, value):
    (tmp_path / "plan.yaml").write_text("version: 1\nharness:\n  file: harness.py\nactions: []\n")
    flag = "--plan" if command == "validate" else "--harness"
    assert main([command, flag, str(tmp_path / "plan.yaml"), str(tmp_path), "--timeout", value]) == 2
    assert "Invalid value for '--timeout'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"]
